// The switch's logic without DPDK: frames built by the codec go through
// parse -> ingress -> Reducer (the RX stage's path), and what it emits is parsed back. Results are
// checked against a separate accumulator fed the same inputs in another
// order (exactness itself is checked against independent references in
// test_accumulator and tests/py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "arith/accumulator.hpp"
#include "config/config.hpp"
#include "switch/reducer.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

const char* kRoot = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.4}
retention_ms: 100
)";

struct Capture : Sink {
  std::vector<Out> outs;
  void send(Out&& o) override { outs.push_back(std::move(o)); }
};

// One switch: frames in, parsed frames out.
struct Switch {
  SwitchConfig cfg;
  Directory dir;
  Reducer red;
  Capture cap;
  std::map<Drop, uint64_t> refused;  // at ingress (the RX stage's counters)
  explicit Switch(const std::string& yaml) : cfg(parse_config(yaml)), dir(cfg), red(dir, 64) {}

  void feed(const std::vector<uint8_t>& frame, uint16_t in_port = 0, uint64_t now = 0) {
    wire::Parsed p;
    const auto r = wire::parse(frame, cfg.udp_port, &p);
    const Verdict v = ingress(dir, r, p, in_port);
    if (!v.admitted()) {
      ++refused[*v.drop];
      answer(dir, v, p, cap);
      return;
    }
    red.on_packet(p, v, now, cap);
  }
  uint64_t drops(Drop d) const {
    const auto it = refused.find(d);
    return red.stats().drops[size_t(d)] + (it == refused.end() ? 0 : it->second);
  }
};

std::vector<uint8_t> frame_of(const Out& o) {
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), o.src, o.dst, o.h,
                       o.body ? std::span<const uint8_t>(*o.body) : std::span<const uint8_t>()));
  return f;
}

wire::Endpoint member_ep(const SwitchConfig& c, uint16_t rank) { return c.jobs[0].member(rank)->addr; }

std::vector<uint8_t> contrib(const SwitchConfig& c, uint16_t rank, uint32_t op, const std::vector<float>& v,
                             uint8_t flags = 0, Policy pol = Policy::KULISCH_FIXED, uint16_t sender = 0xFFFF) {
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.op = op;
  h.chunk = 0;
  h.sender = sender == 0xFFFF ? rank : sender;
  h.group = 4;
  h.terms = 1;
  h.count = uint16_t(v.size());
  h.policy = pol;
  h.flags = flags;
  wire::Endpoint sw{c.ports[0].mac, c.ports[0].ip, c.udp_port};
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), member_ep(c, rank), sw, h,
                       {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4}));
  return f;
}

std::vector<std::vector<float>> inputs(int ranks, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> v(ranks, std::vector<float>(n));
  for (auto& r : v)
    for (auto& x : r) x = std::ldexp(nd(rng), int(rng() % 40) - 20);
  return v;
}

std::vector<uint8_t> reference(const std::vector<std::vector<float>>& in, Policy pol) {
  OpDesc d;
  d.policy = pol;
  d.group = uint32_t(in.size());
  d.lanes = uint32_t(in[0].size());
  auto acc = make_accumulator(d);
  for (size_t r = in.size(); r-- > 0;) acc->add(reinterpret_cast<const uint8_t*>(in[r].data()), uint32_t(r));
  std::vector<uint8_t> out(d.lanes * 4);
  acc->finalize(out.data(), nullptr);
  return out;
}

}  // namespace

TEST(Switch, EveryMemberGetsTheExactResultOnce) {
  Switch sw(kRoot);
  const auto in = inputs(4, 100, 1);
  for (uint16_t r : {2, 0, 3, 1}) sw.feed(contrib(sw.cfg, r, 5, in[r]));
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  const auto want = reference(in, Policy::KULISCH_FIXED);
  std::set<uint32_t> dsts;
  for (const auto& o : sw.cap.outs) {
    wire::Parsed p;
    const auto f = frame_of(o);
    ASSERT_EQ(wire::parse(f, o.dst.port, &p), wire::Refusal::OK);
    EXPECT_EQ(p.h.kind, wire::Kind::RESULT);
    EXPECT_EQ(p.h.terms, 4);
    EXPECT_EQ(p.h.sender, 1);
    EXPECT_EQ(std::vector<uint8_t>(p.payload, p.payload + p.payload_len), want);
    dsts.insert(o.dst.ip);
  }
  EXPECT_EQ(dsts.size(), 4u);
  // The result is retained, not the slot: the slot is free at once.
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.stats().results_retained, 1u);
}

TEST(Switch, DuplicatesCountOnceAndSpoofsNeverTouchTheSum) {
  Switch sw(kRoot);
  const auto in = inputs(4, 64, 2);
  sw.feed(contrib(sw.cfg, 0, 1, in[0]));
  sw.feed(contrib(sw.cfg, 0, 1, in[0]));                               // duplicate
  sw.feed(contrib(sw.cfg, 1, 1, in[2], 0, Policy::KULISCH_FIXED, 2));  // rank 1's address claims rank 2
  EXPECT_EQ(sw.drops(Drop::DUPLICATE), 1u);
  EXPECT_EQ(sw.drops(Drop::SPOOFED), 1u);
  // The spoof got no answer (PROTOCOL.md: spoofed ids are never reflected) and changed nothing.
  EXPECT_TRUE(sw.cap.outs.empty());
  for (uint16_t r : {1, 2, 3}) sw.feed(contrib(sw.cfg, r, 1, in[r]));
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  const auto want = reference(in, Policy::KULISCH_FIXED);
  EXPECT_EQ(std::vector<uint8_t>(sw.cap.outs[0].body->begin(), sw.cap.outs[0].body->end()), want);
}

// A retransmission after completion gets the RESULT again, to that rank
// only, from the result log: the bits a separate accumulator gives for the
// same inputs, with the sideband of the lane that overflowed (3e38 * 4 is
// past fp32's largest), the same status and flags plus RETRANSMIT. After
// retention_ms it is let go: NACK RESULT_EXPIRED, and nothing reopens.
TEST(Switch, RetransmitAfterCompletionResendsToThatRankOnlyThenExpires) {
  Switch sw(kRoot);
  auto in = inputs(4, 16, 3);
  for (auto& r : in) r[5] = 3e38f;
  for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, 9, in[r]), 0, 1000);
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  sw.feed(contrib(sw.cfg, 2, 9, in[2], wire::hflag::RETRANSMIT), 0, 2000);
  ASSERT_EQ(sw.cap.outs.size(), 5u);
  const Out& again = sw.cap.outs[4];
  EXPECT_EQ(again.dst.ip, member_ep(sw.cfg, 2).ip);
  EXPECT_EQ(again.h.kind, wire::Kind::RESULT);
  EXPECT_EQ(again.h.flags, wire::hflag::RETRANSMIT | wire::hflag::SIDEBAND);
  EXPECT_EQ(again.h.status, flag::OVERFLOW);
  // An independent finalize of the same inputs: elements, then one status byte per element.
  OpDesc d;
  d.group = 4;
  d.lanes = 16;
  auto acc = make_accumulator(d);
  for (uint16_t r = 0; r < 4; ++r) acc->add(reinterpret_cast<const uint8_t*>(in[3 - r].data()), 3 - r);
  std::vector<uint8_t> want(16 * 4 + 16);
  acc->finalize(want.data(), want.data() + 16 * 4);
  EXPECT_EQ(want[16 * 4 + 5], flag::OVERFLOW);
  EXPECT_EQ(*again.body, want);
  EXPECT_EQ(*again.body, *sw.cap.outs[0].body);
  wire::Header sent = sw.cap.outs[0].h;
  sent.flags |= wire::hflag::RETRANSMIT;
  EXPECT_EQ(std::memcmp(&sent, &again.h, sizeof sent), 0) << "the header as sent, RETRANSMIT set";
  // A contribution (not a retransmission) for the completed op: a duplicate, not counted, not answered.
  sw.feed(contrib(sw.cfg, 1, 9, in[1]), 0, 3000);
  EXPECT_EQ(sw.cap.outs.size(), 5u);
  EXPECT_EQ(sw.drops(Drop::DUPLICATE), 1u);
  sw.red.tick(50'000'000, sw.cap);  // within retention_ms = 100
  EXPECT_EQ(sw.red.stats().results_retained, 1u);
  sw.red.tick(200'000'000, sw.cap);  // past it
  EXPECT_EQ(sw.red.stats().results_retained, 0u);
  EXPECT_EQ(sw.red.stats().evicted_for_room, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).expired, 1u);
  sw.feed(contrib(sw.cfg, 2, 9, in[2], wire::hflag::RETRANSMIT), 0, 300'000'000);
  ASSERT_EQ(sw.cap.outs.size(), 6u);
  EXPECT_EQ(sw.cap.outs[5].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[5].h.status, uint8_t(wire::NackReason::RESULT_EXPIRED));
  sw.feed(contrib(sw.cfg, 3, 9, in[3]), 0, 300'000'000);  // late, not a retransmission: dropped
  EXPECT_EQ(sw.cap.outs.size(), 6u);
  EXPECT_EQ(sw.drops(Drop::LATE), 1u);
  EXPECT_EQ(sw.red.job_stats().at(7).opened, 1u);
  EXPECT_EQ(sw.red.stats().elements, 4u * 16u) << "nothing counted twice";
}

// Retention does not hold slots: 3000 ops through a table of 64 slots in
// one millisecond (the old scheme kept each slot for retention_ms and
// refused the 65th op). retention_mib 1 holds 1 MiB / 512 B = 2048 results
// (the log's count bound: 16-element fp32 results take 128 B of ring each);
// the 952 oldest were let go early, for room. The oldest retained and the
// newest are resent bit for bit; the one just before the oldest is
// RESULT_EXPIRED; a late contribution for either is dropped.
TEST(Switch, RetentionByRoomKeepsTheNewestResultsAndNeverHoldsASlot) {
  Switch sw(std::string(kRoot) + "retention_mib: 1\n");
  const auto in = inputs(4, 16, 8);
  for (uint32_t op = 0; op < 3000; ++op)
    for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, op, in[r]), 0, 1'000'000 + op);
  EXPECT_EQ(sw.drops(Drop::NO_FREE_SLOT), 0u);
  EXPECT_EQ(sw.red.stats().slots_high, 1u);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.stats().results_retained, 2048u);
  EXPECT_EQ(sw.red.stats().evicted_for_room, 3000u - 2048u);
  EXPECT_EQ(sw.red.job_stats().at(7).expired, 3000u - 2048u);
  EXPECT_EQ(sw.red.job_stats().at(7).completed, 3000u);
  ASSERT_EQ(sw.cap.outs.size(), 4u * 3000u);
  const auto want = reference(in, Policy::KULISCH_FIXED);
  sw.cap.outs.clear();
  for (uint32_t op : {951u, 952u, 2999u}) sw.feed(contrib(sw.cfg, 0, op, in[0], wire::hflag::RETRANSMIT), 0, 5'000'000);
  ASSERT_EQ(sw.cap.outs.size(), 3u);
  EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::RESULT_EXPIRED));
  for (size_t i : {1, 2}) {
    EXPECT_EQ(sw.cap.outs[i].h.kind, wire::Kind::RESULT);
    EXPECT_EQ(sw.cap.outs[i].h.op, i == 1 ? 952u : 2999u);
    EXPECT_EQ(*sw.cap.outs[i].body, want);
  }
  sw.feed(contrib(sw.cfg, 1, 100, in[1]), 0, 5'000'000);   // let go: late
  sw.feed(contrib(sw.cfg, 1, 2000, in[1]), 0, 5'000'000);  // retained: a duplicate
  EXPECT_EQ(sw.cap.outs.size(), 3u);
  EXPECT_EQ(sw.drops(Drop::LATE), 1u);
  EXPECT_EQ(sw.drops(Drop::DUPLICATE), 1u);
  EXPECT_EQ(sw.red.job_stats().at(7).opened, 3000u);
}

// Results of 360 fp32 elements take 24 lines of the ring (a record line and
// 1440 bytes): 1 MiB holds 682 of them, and a ring that wraps leaves the
// lines past the last whole record as padding. Every retained result is
// still intact after 2000 ops have wrapped the ring many times.
TEST(Switch, RetainedResultsSurviveTheRingWrapping) {
  Switch sw(std::string(kRoot) + "retention_mib: 1\n");
  const auto in = inputs(4, 360, 9);
  const auto want = reference(in, Policy::KULISCH_FIXED);
  for (uint32_t op = 0; op < 2000; ++op)
    for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, op, in[r]), 0, 1'000'000);
  EXPECT_EQ(sw.red.stats().results_retained, (1u << 20) / 64 / 24);
  EXPECT_EQ(sw.red.stats().results_retained + sw.red.stats().evicted_for_room, 2000u);
  sw.cap.outs.clear();
  const uint32_t oldest = 2000 - uint32_t(sw.red.stats().results_retained);
  for (uint32_t op = oldest - 1; op < 2000; ++op) sw.feed(contrib(sw.cfg, 3, op, in[3], wire::hflag::RETRANSMIT));
  ASSERT_EQ(sw.cap.outs.size(), 2000u - oldest + 1);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::RESULT_EXPIRED));
  for (size_t i = 1; i < sw.cap.outs.size(); ++i) {
    ASSERT_EQ(sw.cap.outs[i].h.kind, wire::Kind::RESULT) << i;
    EXPECT_EQ(sw.cap.outs[i].h.op, oldest - 1 + i);
    ASSERT_EQ(*sw.cap.outs[i].body, want) << "op " << oldest - 1 + i;
  }
}

// retention_mib 0: nothing is retained; a retransmission right after the
// RESULT is RESULT_EXPIRED, and the slot was never held.
TEST(Switch, RetentionOfZeroRetainsNothing) {
  Switch sw(std::string(kRoot) + "retention_mib: 0\n");
  const auto in = inputs(4, 8, 10);
  for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, 1, in[r]));
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  EXPECT_EQ(sw.red.stats().results_retained, 0u);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  sw.feed(contrib(sw.cfg, 0, 1, in[0], wire::hflag::RETRANSMIT));
  ASSERT_EQ(sw.cap.outs.size(), 5u);
  EXPECT_EQ(sw.cap.outs[4].h.status, uint8_t(wire::NackReason::RESULT_EXPIRED));
}

TEST(Switch, UnknownSourcesAreDroppedWithoutReply) {
  Switch sw(kRoot);
  auto f = contrib(sw.cfg, 0, 1, {1.0f});
  f[26] = 198;  // source IP -> 198.x.x.x: nobody registered; fix the IP checksum
  f[24] = f[25] = 0;
  const uint16_t cs = wire::ipv4_checksum(f.data() + 14, 20);
  f[24] = uint8_t(cs >> 8), f[25] = uint8_t(cs);
  f[40] = f[41] = 0;  // UDP checksum off
  sw.feed(f);
  EXPECT_EQ(sw.drops(Drop::UNKNOWN_SOURCE), 1u);
  EXPECT_TRUE(sw.cap.outs.empty());
}

// The three shapes of a CONTRIB whose source is not the member it claims:
// none is answered, none touches a slot, each is counted once. Two switch
// ports, rank 0 behind port 0.
const char* kTwoPorts = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 1, mac: "02:00:00:00:00:02", ip: 10.0.1.3}
      - {rank: 3, port: 1, mac: "02:00:00:00:00:03", ip: 10.0.1.4}
)";

// Addressed to switch port `to` (the one it is fed on: a frame for another
// port's address is not the switch's, F19).
std::vector<uint8_t> contrib_from(const SwitchConfig& c, const wire::Endpoint& src, uint16_t sender, uint8_t flags = 0,
                                  uint16_t to = 0) {
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.sender = sender;
  h.group = 4;
  h.count = 1;
  h.flags = flags;
  const float x = 1.0f;
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), src, {c.ports[to].mac, c.ports[to].ip, c.udp_port}, h,
                       {reinterpret_cast<const uint8_t*>(&x), 4}));
  return f;
}

TEST(Ingress, SpoofedSendersAreCountedAndNeverAnswered) {
  Switch sw(kTwoPorts);
  const wire::Endpoint rank0 = member_ep(sw.cfg, 0);
  wire::Endpoint stranger = rank0;  // rank 0's IP and UDP port, an unregistered MAC
  stranger.mac[5] = 0x77;
  struct Shape {
    const char* what;
    wire::Endpoint src;
    uint16_t sender, in_port;
  } shapes[] = {
      {"an unregistered MAC with a member's IP and UDP port", stranger, 0, 0},
      {"another member's address claiming a different rank", member_ep(sw.cfg, 1), 0, 0},
      {"a member's address on a switch port it is not registered on", rank0, 0, 1},
  };
  uint64_t n = 0;
  for (const Shape& s : shapes) {
    const auto f = contrib_from(sw.cfg, s.src, s.sender, 0, s.in_port);
    wire::Parsed p;
    ASSERT_EQ(wire::parse(f, sw.cfg.udp_port, &p), wire::Refusal::OK) << s.what;
    const Verdict v = ingress(sw.dir, wire::Refusal::OK, p, s.in_port);
    EXPECT_FALSE(v.admitted()) << s.what;
    EXPECT_EQ(v.drop, Drop::SPOOFED) << s.what;
    EXPECT_FALSE(v.nack()) << s.what;
    sw.feed(f, s.in_port);
    EXPECT_EQ(sw.drops(Drop::SPOOFED), ++n) << s.what;
    EXPECT_TRUE(sw.cap.outs.empty()) << s.what << ": answered";
  }
  EXPECT_EQ(sw.red.stats().packets, 0u) << "a spoof reached the reducer";
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  // The genuine rank 0, on its own port, is admitted.
  wire::Parsed p;
  const auto f = contrib_from(sw.cfg, rank0, 0);
  ASSERT_EQ(wire::parse(f, sw.cfg.udp_port, &p), wire::Refusal::OK);
  const Verdict v = ingress(sw.dir, wire::Refusal::OK, p, 0);
  EXPECT_TRUE(v.admitted());
  EXPECT_EQ(v.member, &sw.dir.job(7)->members[0]);
}

// A NACK goes only to a registered member's own address and port: an
// unknown job or sender id from a registered source is answered there; the
// same from an unregistered MAC, or the right address on the wrong port, is not.
TEST(Ingress, NacksGoOnlyToTheRegisteredAddress) {
  Switch sw(kTwoPorts);
  const wire::Endpoint rank2 = member_ep(sw.cfg, 2);
  // Each addressed to the port it comes in on.
  const auto unknown_job_to = [&](uint16_t port) {
    auto f = contrib_from(sw.cfg, rank2, 2, 0, port);
    f[wire::kFrameOverhead - wire::kHeaderSize + 7] = 9;  // job 7 -> 9 (low byte, big-endian)
    f[14 + 20 + 6] = f[14 + 20 + 7] = 0;                  // UDP checksum off
    return f;
  };
  const auto unknown_job = unknown_job_to(1), not_member = contrib_from(sw.cfg, rank2, 40, 0, 1);
  for (const auto* f : {&unknown_job, &not_member}) {
    sw.cap.outs.clear();
    sw.feed(f == &unknown_job ? unknown_job_to(0) : contrib_from(sw.cfg, rank2, 40, 0, 0), 0);  // the wrong port
    EXPECT_TRUE(sw.cap.outs.empty());
    sw.feed(*f, 1);
    ASSERT_EQ(sw.cap.outs.size(), 1u);
    const Out& o = sw.cap.outs[0];
    EXPECT_EQ(o.h.kind, wire::Kind::NACK);
    EXPECT_EQ(o.port, 1);
    EXPECT_EQ(o.dst.ip, rank2.ip);
    EXPECT_EQ(o.dst.port, rank2.port);
    EXPECT_TRUE(wire::same_mac(o.dst.mac, rank2.mac));
    EXPECT_EQ(o.src.ip, sw.cfg.ports[1].ip);
    EXPECT_EQ(o.h.status, uint8_t(f == &unknown_job ? wire::NackReason::UNKNOWN_JOB : wire::NackReason::NOT_A_MEMBER));
    wire::Endpoint stranger = rank2;
    stranger.mac[0] = 0x06;
    wire::Parsed p;
    ASSERT_EQ(wire::parse(*f, sw.cfg.udp_port, &p), wire::Refusal::OK);
    p.src = stranger;
    EXPECT_FALSE(ingress(sw.dir, wire::Refusal::OK, p, 1).nack());
  }
  EXPECT_EQ(sw.drops(Drop::UNKNOWN_JOB), 1u);
  EXPECT_EQ(sw.drops(Drop::NOT_A_MEMBER), 1u);
  EXPECT_EQ(sw.drops(Drop::UNKNOWN_SOURCE), 2u);  // the same two on the wrong port
}

// A contribution without a UDP checksum (0) is refused, with a NACK, unless its
// job says udp_checksum: optional; one with a checksum is admitted either way.
TEST(Ingress, NoUdpChecksumOnlyWhereTheJobAcceptsIt) {
  for (const bool optional : {false, true}) {
    std::string yaml = kRoot;
    if (optional) yaml.replace(yaml.find("  - id: 7\n"), 10, "  - id: 7\n    udp_checksum: optional\n");
    Switch sw(yaml);
    ASSERT_EQ(sw.cfg.jobs[0].udp_checksum_optional, optional);
    auto bare = contrib(sw.cfg, 1, 5, {1.5f, -2.0f});
    bare[14 + 20 + 6] = bare[14 + 20 + 7] = 0;  // RFC 768: no checksum
    wire::Parsed p;
    ASSERT_EQ(wire::parse(bare, sw.cfg.udp_port, &p), wire::Refusal::OK);
    EXPECT_TRUE(p.no_checksum);
    const Verdict v = ingress(sw.dir, wire::Refusal::OK, p, 0);
    EXPECT_EQ(v.admitted(), optional);
    if (!optional) {
      EXPECT_EQ(v.drop, Drop::NO_CHECKSUM);
      sw.feed(bare, 0);
      ASSERT_EQ(sw.cap.outs.size(), 1u);
      EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::NACK);
      EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::MALFORMED));
      EXPECT_EQ(sw.cap.outs[0].dst.ip, member_ep(sw.cfg, 1).ip);
    }
    const auto summed = contrib(sw.cfg, 1, 6, {1.5f, -2.0f});
    ASSERT_EQ(wire::parse(summed, sw.cfg.udp_port, &p), wire::Refusal::OK);
    EXPECT_FALSE(p.no_checksum);
    EXPECT_TRUE(ingress(sw.dir, wire::Refusal::OK, p, 0).admitted());
  }
  try {
    parse_config(
        std::string(kRoot).replace(std::string(kRoot).find("  - id: 7\n"), 10, "  - id: 7\n    udp_checksum: maybe\n"));
    ADD_FAILURE() << "udp_checksum: maybe was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("required, optional"), std::string::npos) << e.what();
  }
}

// Every drop reason maps to at most one NACK, and the ones a sender cannot
// act on (or that would reflect traffic) to none: PROTOCOL.md's table.
TEST(Ingress, DropToNackMappingIsProtocols) {
  using R = wire::NackReason;
  const std::map<Drop, R> want = {
      {Drop::MALFORMED, R::MALFORMED},
      {Drop::BAD_PARTIAL, R::MALFORMED},
      {Drop::UNKNOWN_JOB, R::UNKNOWN_JOB},
      {Drop::NOT_A_MEMBER, R::NOT_A_MEMBER},
      {Drop::NOT_ALLOWED, R::DESCRIPTOR_MISMATCH},
      {Drop::DESCRIPTOR_MISMATCH, R::DESCRIPTOR_MISMATCH},
      {Drop::TOO_NARROW, R::ACCUMULATOR_TOO_NARROW},
      {Drop::NO_FREE_SLOT, R::NO_FREE_SLOT},
      {Drop::RESULT_EXPIRED, R::RESULT_EXPIRED},
      {Drop::ABANDONED, R::OP_ABANDONED},
      {Drop::NO_CHECKSUM, R::MALFORMED},
      {Drop::OVERSIZE, R::MALFORMED},
      {Drop::POOL_FULL, R::POOL_FULL},
      {Drop::GROUP_TOO_LARGE, R::GROUP_TOO_LARGE},
      {Drop::OUT_OF_POOL, R::OUT_OF_POOL},
      {Drop::RANK_TAKEN, R::RANK_TAKEN},
      {Drop::TOO_LARGE, R::CHUNK_TOO_LARGE},
      {Drop::NO_MEMORY, R::NO_FREE_SLOT},
      {Drop::STOPPING, R::SWITCH_STOPPING},
  };
  for (size_t i = 0; i < size_t(Drop::kCount); ++i) {
    const Drop d = Drop(i);
    const auto it = want.find(d);
    if (it == want.end())
      EXPECT_FALSE(nack_for(d)) << name(d);
    else
      EXPECT_EQ(nack_for(d), it->second) << name(d);
  }
}

// Parser refusals: below the UDP checks the source is not trusted (never
// answered); broken PRISM headers past them are NACKed MALFORMED to a
// registered member only.
TEST(Ingress, ParserRefusalsAnsweredOnlyPastTheUdpChecks) {
  Switch sw(kTwoPorts);
  auto bad_magic = contrib_from(sw.cfg, member_ep(sw.cfg, 0), 0);
  bad_magic[wire::kFrameOverhead - wire::kHeaderSize] ^= 0xFF;
  bad_magic[14 + 20 + 6] = bad_magic[14 + 20 + 7] = 0;  // UDP checksum off
  sw.feed(bad_magic, 0);
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::MALFORMED));
  auto bad_sum = contrib_from(sw.cfg, member_ep(sw.cfg, 0), 0);
  bad_sum[14 + 20 + 6] ^= 0x5A;  // a wrong UDP checksum
  sw.feed(bad_sum, 0);
  EXPECT_EQ(sw.cap.outs.size(), 1u) << "a frame with a bad UDP checksum was answered";
  EXPECT_EQ(sw.drops(Drop::MALFORMED), 2u);
  EXPECT_EQ(classify(wire::Refusal::WRONG_PORT).drop, Drop::NOT_FOR_US);
  EXPECT_FALSE(classify(wire::Refusal::UDP_BAD_CHECKSUM).source_checked);
  EXPECT_TRUE(classify(wire::Refusal::SHORT_HEADER).source_checked);
}

TEST(Switch, DescriptorMismatchIsRefused) {
  Switch sw(kRoot);
  sw.feed(contrib(sw.cfg, 0, 1, {1.0f, 2.0f}));
  sw.feed(contrib(sw.cfg, 1, 1, {1.0f, 2.0f}, 0, Policy::FP32_ARRIVAL));
  EXPECT_EQ(sw.drops(Drop::DESCRIPTOR_MISMATCH), 1u);
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::DESCRIPTOR_MISMATCH));
}

// SECURITY-REVIEW F6: ranks whose vectors differ by whole chunks agree on
// every common chunk but the shorter one's last, which it marks LAST_CHUNK
// and the others do not. LAST_CHUNK is part of the slot's agreement: the
// disagreeing packet is refused DESCRIPTOR_MISMATCH, the chunk never
// completes (so no rank succeeds with the common prefix), and the ranks that
// did contribute are told OP_ABANDONED when it times out: an error on every
// rank, never a silent success on some.
TEST(Switch, RanksThatDisagreeOnTheLastChunkAllFail) {
  Switch sw(kRoot);
  const std::vector<float> x(4, 1.0f);
  sw.feed(contrib(sw.cfg, 0, 1, x, wire::hflag::LAST_CHUNK), 0, 1'000'000);  // rank 0: its last chunk
  sw.feed(contrib(sw.cfg, 1, 1, x, 0), 0, 1'000'000);                        // rank 1: more to come
  EXPECT_EQ(sw.drops(Drop::DESCRIPTOR_MISMATCH), 1u);
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::DESCRIPTOR_MISMATCH));
  EXPECT_EQ(sw.cap.outs[0].dst.ip, member_ep(sw.cfg, 1).ip);
  sw.feed(contrib(sw.cfg, 2, 1, x, wire::hflag::LAST_CHUNK), 0, 1'000'000);
  sw.feed(contrib(sw.cfg, 3, 1, x, wire::hflag::LAST_CHUNK), 0, 1'000'000);
  for (const Out& o : sw.cap.outs) EXPECT_NE(o.h.kind, wire::Kind::RESULT) << "a RESULT without rank 1";
  sw.cap.outs.clear();
  sw.red.tick(4'100'000'000, sw.cap);  // op_timeout_ms (3 s) later
  ASSERT_EQ(sw.cap.outs.size(), 3u);
  for (const Out& o : sw.cap.outs) EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
}

// A configuration made as a value (not read from YAML, which refuses this)
// with a Kulisch width too narrow for fp32 at R = 4 (280 bits): the reducer
// still refuses each such op with NACK ACCUMULATOR_TOO_NARROW to its sender,
// and opens no slot.
TEST(Switch, AnOpWiderThanTheConfiguredWidthIsRefused) {
  SwitchConfig cfg = parse_config(kRoot);
  cfg.kulisch_width = 100;
  const Directory dir(cfg);
  Reducer red(dir, 8);
  Capture cap;
  const auto f = contrib(cfg, 1, 3, {1.0f, 2.0f});
  wire::Parsed p;
  ASSERT_EQ(wire::parse(f, cfg.udp_port, &p), wire::Refusal::OK);
  const Verdict v = ingress(dir, wire::Refusal::OK, p, 0);
  ASSERT_TRUE(v.admitted());
  red.on_packet(p, v, 0, cap);
  EXPECT_EQ(red.stats().drops[size_t(Drop::TOO_NARROW)], 1u);
  EXPECT_EQ(red.stats().slots_in_use, 0u);
  ASSERT_EQ(cap.outs.size(), 1u);
  EXPECT_EQ(cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(cap.outs[0].h.status, uint8_t(wire::NackReason::ACCUMULATOR_TOO_NARROW));
  EXPECT_EQ(cap.outs[0].dst.ip, member_ep(cfg, 1).ip);
}

// Two leaves (ranks 0,1 and 2,3) under a root: KULISCH and AUTO transport give
// the single switch's bits; AUTO sends fewer bytes when the partials are exact
// out_dtype values.
class Tree : public ::testing::TestWithParam<PartialTransport> {};

TEST_P(Tree, TwoLevelsGiveTheSingleSwitchBits) {
  const char* leaf_t = R"(
switch: {id: %d, role: leaf, parent: {port: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f%d:00", ip: 10.%d.0.254}
  - {id: 1, mac: "02:00:00:00:f%d:01", ip: 10.9.0.%d}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: %d, port: 0, mac: "02:00:00:00:00:0%d", ip: 10.%d.0.1}
      - {rank: %d, port: 0, mac: "02:00:00:00:00:0%d", ip: 10.%d.0.2}
)";
  char buf[2][1024];
  for (int l = 0; l < 2; ++l)
    std::snprintf(buf[l], sizeof buf[l], leaf_t, 2 + l, l, l, l, 2 + l, 2 * l, 2 * l, l, 2 * l + 1, 2 * l + 1, l);
  const char* root = R"(
switch: {id: 1, role: root}
ports:
  - {id: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}
jobs:
  - id: 7
    group: 4
    children:
      - {id: 2, port: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2, ranks: 2}
      - {id: 3, port: 1, mac: "02:00:00:00:f1:01", ip: 10.9.0.3, ranks: 2}
)";
  Switch leaf[2] = {Switch(buf[0]), Switch(buf[1])};
  Switch top(root);
  const PartialTransport tr = GetParam();
  // Values that are exact fp32 sums in pairs make AUTO's rounded encoding lossless.
  auto in = inputs(4, 200, 4);
  if (tr == PartialTransport::AUTO)  // small integers: every pair sum is an fp32 value
    for (auto& r : in)
      for (auto& x : r) x = std::round(std::clamp(x, -1e6f, 1e6f));
  size_t upstream_bytes = 0;
  for (uint16_t r = 0; r < 4; ++r) {
    Switch& L = leaf[r / 2];
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.sender = r;
    h.group = 4;
    h.count = 200;
    h.transport = tr;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), L.cfg.jobs[0].member(r)->addr,
                         {L.cfg.ports[0].mac, L.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(in[r].data()), 800}));
    L.feed(f);
  }
  for (auto& L : leaf) {
    ASSERT_GE(L.cap.outs.size(), 1u);
    for (const auto& o : L.cap.outs) {
      EXPECT_EQ(o.h.kind, wire::Kind::PARTIAL);
      upstream_bytes += o.body->size();
      top.feed(frame_of(o), 1);
    }
  }
  ASSERT_EQ(top.cap.outs.size(), 2u) << "a RESULT to each leaf";
  const auto want = reference(in, Policy::KULISCH_FIXED);
  for (const auto& o : top.cap.outs) {
    EXPECT_EQ(std::vector<uint8_t>(o.body->begin(), o.body->end()), want);
    // The leaf forwards the root's RESULT to its own ranks.
    Switch& L = leaf[o.dst.ip == 0x0A090002 ? 0 : 1];
    L.cap.outs.clear();
    L.feed(frame_of(o), 1);
    ASSERT_EQ(L.cap.outs.size(), 2u);
    for (const auto& fwd : L.cap.outs) EXPECT_EQ(std::vector<uint8_t>(fwd.body->begin(), fwd.body->end()), want);
  }
  if (tr == PartialTransport::AUTO) {
    EXPECT_LE(upstream_bytes, 2u * 800u) << "AUTO sent the rounded encoding";
  } else {
    EXPECT_GT(upstream_bytes, 2u * 800u);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Tree, ::testing::Values(PartialTransport::KULISCH, PartialTransport::AUTO));

// A leaf whose parent's RESULT is late sends its PARTIAL again with
// RETRANSMIT; a root that already completed the op answers with the RESULT.
TEST(Switch, LeafResendsALatePartialAndTheRootAnswers) {
  const char* leaf_yaml = R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f0:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.4}
partial_retry_ms: 50
)";
  const char* root_yaml = R"(
switch: {id: 1, role: root}
ports:
  - {id: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}
jobs:
  - id: 7
    group: 4
    children:
      - {id: 2, port: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2, ranks: 4}
)";
  Switch leaf(leaf_yaml), root(root_yaml);
  const auto in = inputs(4, 32, 5);
  for (uint16_t r = 0; r < 4; ++r) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.sender = r;
    h.group = 4;
    h.count = 32;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), leaf.cfg.jobs[0].member(r)->addr,
                         {leaf.cfg.ports[0].mac, leaf.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(in[r].data()), 128}));
    leaf.feed(f, 0, 1'000'000);
  }
  ASSERT_EQ(leaf.cap.outs.size(), 1u);
  // The leaf keeps its slot (and accumulator) while it waits: it may have to send its PARTIAL again.
  EXPECT_EQ(leaf.red.stats().slots_in_use, 1u);
  root.feed(frame_of(leaf.cap.outs[0]), 1, 1'000'000);  // the root completes; its RESULT is lost
  ASSERT_EQ(root.cap.outs.size(), 1u);
  EXPECT_EQ(root.red.stats().slots_in_use, 0u);
  EXPECT_EQ(root.red.stats().results_retained, 1u);
  leaf.red.tick(20'000'000, leaf.cap);  // not late yet
  EXPECT_EQ(leaf.cap.outs.size(), 1u);
  leaf.red.tick(60'000'000, leaf.cap);  // late: the PARTIAL again
  ASSERT_EQ(leaf.cap.outs.size(), 2u);
  EXPECT_EQ(leaf.cap.outs[1].h.kind, wire::Kind::PARTIAL);
  EXPECT_TRUE(leaf.cap.outs[1].h.flags & wire::hflag::RETRANSMIT);
  root.feed(frame_of(leaf.cap.outs[1]), 1, 61'000'000);
  ASSERT_EQ(root.cap.outs.size(), 2u);
  EXPECT_EQ(root.cap.outs[1].h.kind, wire::Kind::RESULT);
  EXPECT_EQ(root.cap.outs[1].h.flags & wire::hflag::RETRANSMIT, wire::hflag::RETRANSMIT);
  leaf.feed(frame_of(root.cap.outs[1]), 1, 62'000'000);
  EXPECT_EQ(leaf.cap.outs.size(), 2u + 4u);  // forwarded to the four ranks
  const auto want = reference(in, Policy::KULISCH_FIXED);
  EXPECT_EQ(std::vector<uint8_t>(leaf.cap.outs.back().body->begin(), leaf.cap.outs.back().body->end()), want);
  EXPECT_FALSE(leaf.cap.outs.back().h.flags & wire::hflag::RETRANSMIT) << "forwarded as a fresh RESULT";
  // Now the leaf lets its slot go and retains the forwarded RESULT: a rank that lost it gets it again.
  EXPECT_EQ(leaf.red.stats().slots_in_use, 0u);
  EXPECT_EQ(leaf.red.stats().results_retained, 1u);
  leaf.feed(frame_of(root.cap.outs[1]), 1, 63'000'000);  // the parent's RESULT again: a duplicate
  EXPECT_EQ(leaf.drops(Drop::DUPLICATE), 1u);
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.sender = 1;
  h.group = 4;
  h.count = 32;
  h.flags = wire::hflag::RETRANSMIT;
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), leaf.cfg.jobs[0].member(1)->addr,
                       {leaf.cfg.ports[0].mac, leaf.cfg.ports[0].ip, 20562}, h,
                       {reinterpret_cast<const uint8_t*>(in[1].data()), 128}));
  leaf.feed(f, 0, 64'000'000);
  ASSERT_EQ(leaf.cap.outs.size(), 2u + 4u + 1u);
  const Out& again = leaf.cap.outs.back();
  EXPECT_EQ(again.dst.ip, leaf.cfg.jobs[0].member(1)->addr.ip);
  EXPECT_EQ(again.h.sender, 2) << "from the leaf";
  EXPECT_TRUE(again.h.flags & wire::hflag::RETRANSMIT);
  EXPECT_EQ(*again.body, want);
}

// op_timeout_ms (3000 by default): R = 4, ranks 0, 1 and 2 contribute, rank
// 3 never does. At 3 s after the chunk opened, exactly the three that are
// waiting get NACK OP_ABANDONED echoing the op, with terms 3 and a one-byte
// bitmap naming rank 3 (bit 3 of byte 0: 0x08); the slot is free. Rank 3's
// late contribution and rank 0's retransmission get NACK OP_ABANDONED with
// terms 0 and no body, open nothing and count nothing.
TEST(Switch, AnAbandonedChunkNacksItsContributorsWithTheMissingRanks) {
  Switch sw(kRoot);
  EXPECT_EQ(sw.cfg.op_timeout_ms, 3000u);
  const auto in = inputs(4, 10, 11);
  for (uint16_t r = 0; r < 3; ++r) sw.feed(contrib(sw.cfg, r, 5, in[r]), 0, 1'000'000);
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  sw.red.tick(3'000'999'999, sw.cap);  // not yet
  EXPECT_TRUE(sw.cap.outs.empty());
  sw.red.tick(3'001'000'000, sw.cap);
  ASSERT_EQ(sw.cap.outs.size(), 3u);
  std::set<uint32_t> to;
  for (const Out& o : sw.cap.outs) {
    EXPECT_EQ(o.h.kind, wire::Kind::NACK);
    EXPECT_EQ(o.h.status, 8);
    EXPECT_EQ(o.h.terms, 3);
    EXPECT_EQ(o.h.count, 0);
    EXPECT_EQ(o.h.sender, 1);
    EXPECT_EQ(o.h.group, 4);
    EXPECT_EQ(std::make_tuple(o.h.job, o.h.op, o.h.chunk), std::make_tuple(7u, 5u, 0u));
    EXPECT_EQ(o.h.policy, Policy::KULISCH_FIXED);
    EXPECT_EQ(o.h.dtype, Format::FP32);
    ASSERT_TRUE(o.body);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x08});
    // On the wire, and back through the parser a rank uses.
    const auto f = frame_of(o);
    wire::Parsed p;
    ASSERT_EQ(wire::parse(f, o.dst.port, &p), wire::Refusal::OK);
    EXPECT_EQ(std::vector<uint8_t>(p.payload, p.payload + p.payload_len), std::vector<uint8_t>{0x08});
    to.insert(o.dst.ip);
  }
  EXPECT_EQ(to, (std::set<uint32_t>{member_ep(sw.cfg, 0).ip, member_ep(sw.cfg, 1).ip, member_ep(sw.cfg, 2).ip}));
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).timed_out, 1u);
  EXPECT_EQ(sw.red.job_stats().at(7).in_flight, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).completed, 0u);
  sw.red.tick(3'500'000'000, sw.cap);
  EXPECT_EQ(sw.cap.outs.size(), 3u) << "abandoned once";
  // Late: rank 3's first contribution, rank 0's retransmission.
  sw.cap.outs.clear();
  sw.feed(contrib(sw.cfg, 3, 5, in[3]), 0, 3'600'000'000);
  sw.feed(contrib(sw.cfg, 0, 5, in[0], wire::hflag::RETRANSMIT), 0, 3'700'000'000);
  ASSERT_EQ(sw.cap.outs.size(), 2u);
  EXPECT_EQ(sw.cap.outs[0].dst.ip, member_ep(sw.cfg, 3).ip);
  EXPECT_EQ(sw.cap.outs[1].dst.ip, member_ep(sw.cfg, 0).ip);
  for (const Out& o : sw.cap.outs) {
    EXPECT_EQ(o.h.kind, wire::Kind::NACK);
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
    EXPECT_EQ(o.h.terms, 0);
    EXPECT_EQ(o.body_size(), 0u);
    wire::Parsed p;
    EXPECT_EQ(wire::parse(frame_of(o), o.dst.port, &p), wire::Refusal::OK);
  }
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).opened, 1u);
  EXPECT_EQ(sw.red.job_stats().at(7).timed_out, 1u);
  EXPECT_EQ(sw.drops(Drop::ABANDONED), 2u);
  EXPECT_EQ(sw.red.stats().nacks_sent, 5u);
  EXPECT_EQ(sw.red.stats().elements, 3u * 10u) << "nothing counted after the abandonment";
}

// Chunks time out in the order they opened, each op_timeout_ms after its own
// opening, and the bitmap is ceil(group / 8) bytes: R = 12, op 1 has ranks
// 0, 5 and 9 (missing 1-4, 6-8, 10, 11: 0xDE 0x0D), op 2 opened 2 s later
// has ranks 3 and 4 (missing the rest: 0xE7 0x0F).
TEST(Switch, ChunksTimeOutInTheOrderTheyOpened) {
  std::string yaml =
      "switch: {id: 1, role: root}\nports:\n  - {id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}\n"
      "jobs:\n  - id: 7\n    members:\n";
  for (int r = 0; r < 12; ++r) {
    char m[120];
    std::snprintf(m, sizeof m, "      - {rank: %d, port: 0, mac: \"02:00:00:00:00:%02x\", ip: 10.0.0.%d}\n", r, r,
                  r + 1);
    yaml += m;
  }
  Switch sw(yaml);
  const auto send = [&](uint16_t r, uint32_t op, uint64_t now) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.op = op;
    h.sender = r;
    h.group = 12;
    h.count = 1;
    const float x = 1.0f;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), member_ep(sw.cfg, r), {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(&x), 4}));
    sw.feed(f, 0, now);
  };
  for (uint16_t r : {0, 5, 9}) send(r, 1, 0);
  for (uint16_t r : {3, 4}) send(r, 2, 2'000'000'000);
  const auto nacked = [&](uint32_t op) {
    std::map<uint16_t, std::vector<uint8_t>> by_rank;  // rank (its IP's last byte - 1) -> bitmap
    for (const Out& o : sw.cap.outs) {
      EXPECT_EQ(o.h.op, op);
      EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
      by_rank[uint16_t((o.dst.ip & 0xFF) - 1)] = *o.body;
    }
    sw.cap.outs.clear();
    return by_rank;
  };
  sw.red.tick(1'000'000'000, sw.cap);
  EXPECT_TRUE(sw.cap.outs.empty());
  sw.red.tick(3'000'000'000, sw.cap);
  const std::vector<uint8_t> first{0xDE, 0x0D}, second{0xE7, 0x0F};
  EXPECT_EQ(nacked(1), (std::map<uint16_t, std::vector<uint8_t>>{{0, first}, {5, first}, {9, first}}));
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  sw.red.tick(4'999'999'999, sw.cap);
  EXPECT_TRUE(sw.cap.outs.empty());
  sw.red.tick(5'000'000'000, sw.cap);
  EXPECT_EQ(nacked(2), (std::map<uint16_t, std::vector<uint8_t>>{{3, second}, {4, second}}));
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).timed_out, 2u);
}

// Only this switch's members can be named: a root with ranks 0 and 1 and a
// child switch folding ranks 2 and 3. Rank 0 contributes, nothing else does:
// rank 0 alone is told, terms 1, bitmap 0x02 (rank 1); the child's two
// contributions are group - terms - popcount = 4 - 1 - 1. The child, which
// sent nothing, gets nothing.
TEST(Switch, AnAbandonedChunkNamesOnlyThisSwitchsMembers) {
  Switch sw(R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
    children:
      - {id: 2, port: 0, mac: "02:00:00:00:f0:01", ip: 10.0.0.9, ranks: 2}
op_timeout_ms: 50
)");
  sw.feed(contrib(sw.cfg, 0, 4, {1.0f, 2.0f}), 0, 0);
  sw.red.tick(50'000'000, sw.cap);
  ASSERT_EQ(sw.cap.outs.size(), 2u);  // rank 0, and the child (which may hold the chunk too)
  for (const Out& o : sw.cap.outs) {
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
    EXPECT_EQ(o.h.terms, 1);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x02});
  }
  EXPECT_EQ(sw.cap.outs[0].dst.ip, member_ep(sw.cfg, 0).ip);
  EXPECT_EQ(sw.cap.outs[1].dst.ip, sw.cfg.jobs[0].children[0].addr.ip);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
}

// A root whose own members have all contributed and that waits only for a
// child's PARTIAL leaves the chunk to the child past op_timeout_ms (the child
// may be stalled or restarting) and gives it up at peer_timeout_ms; a chunk
// that also lacks one of its own members goes at op_timeout_ms, in opening
// order, the other list or not.
TEST(Switch, ARootWaitsForAChildUntilPeerTimeoutButNotForItsOwnMembers) {
  Switch sw(R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
    children:
      - {id: 2, port: 0, mac: "02:00:00:00:f0:01", ip: 10.0.0.9, ranks: 2}
op_timeout_ms: 50
peer_timeout_ms: 400
)");
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.group = 4;
  h.count = 1;
  const float x = 1.0f;
  const auto send = [&](uint32_t op, uint16_t r, uint64_t now) {
    h.op = op;
    h.sender = r;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), member_ep(sw.cfg, r), {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(&x), 4}));
    sw.feed(f, 0, now);
  };
  send(1, 0, 0);  // op 1: both members in, the child's PARTIAL missing
  send(1, 1, 0);
  send(2, 0, 10'000'000);  // op 2: member 1 missing too
  sw.red.tick(100'000'000, sw.cap);
  ASSERT_EQ(sw.cap.outs.size(), 2u);  // op 2 only, to its one contributor and the child
  for (const Out& o : sw.cap.outs) {
    EXPECT_EQ(o.h.op, 2u);
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
  }
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  sw.cap.outs.clear();
  sw.red.tick(399'999'999, sw.cap);
  EXPECT_TRUE(sw.cap.outs.empty());
  sw.red.tick(400'000'000, sw.cap);
  ASSERT_EQ(sw.cap.outs.size(), 3u);  // op 1, to both members and the child, naming no member of this switch
  for (const Out& o : sw.cap.outs) {
    EXPECT_EQ(o.h.op, 1u);
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
    EXPECT_EQ(o.h.terms, 2);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x00});
  }
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
}

// A leaf whose parent never answers gives up peer_timeout_ms after the chunk
// opened: its four ranks all contributed, so all four are told, terms 4 and a
// bitmap with no rank missing here (0x00).
TEST(Switch, ALeafAbandonsAChunkItsParentNeverAnswered) {
  Switch leaf(R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f0:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2}
jobs:
  - id: 7
    group: 8
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.4}
op_timeout_ms: 1000
partial_retry_ms: 0
)");
  for (uint16_t r = 0; r < 4; ++r) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.op = 3;
    h.sender = r;
    h.group = 8;
    h.count = 1;
    const float x = 2.0f;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), leaf.cfg.jobs[0].member(r)->addr,
                         {leaf.cfg.ports[0].mac, leaf.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(&x), 4}));
    leaf.feed(f, 0, 10);
  }
  ASSERT_EQ(leaf.cap.outs.size(), 1u);  // the PARTIAL
  leaf.cap.outs.clear();
  // Its own members are all in: past op_timeout_ms the chunk waits on (the parent judges it, and
  // may be stalled or restarting), until peer_timeout_ms (by default 15 000 ms, at least op_timeout_ms).
  leaf.red.tick(1'000'000'010, leaf.cap);
  leaf.red.tick(14'999'999'999, leaf.cap);
  EXPECT_TRUE(leaf.cap.outs.empty());
  EXPECT_EQ(leaf.red.stats().slots_in_use, 1u);
  leaf.red.tick(15'000'000'010, leaf.cap);
  ASSERT_EQ(leaf.cap.outs.size(), 5u);  // its four ranks, and the parent (at its shard's port)
  for (const Out& o : leaf.cap.outs) {
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
    EXPECT_EQ(o.h.terms, 4);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x00});
  }
  EXPECT_EQ(leaf.cap.outs[4].dst.ip, leaf.cfg.parent->addr.ip);
  EXPECT_EQ(leaf.cap.outs[4].port, leaf.cfg.parent->port);
  EXPECT_EQ(leaf.red.stats().slots_in_use, 0u);
}

// A tree gives a chunk up as one: the switch that gives it up tells the
// other (PROTOCOL.md, "The switch stalls"), which gives it up at once, its
// members told with both switches' missing ranks. A root told by its child
// does not tell that child again; a leaf told by its parent does not answer
// it. Nobody else can say so: an OP_ABANDONED from a member, a stranger, or
// the parent's address on another port abandons nothing.
TEST(Switch, AnAbandonedChunkIsAbandonedByTheWholeTreeAtOnce) {
  const std::string root_yaml = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.9.0.1}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
    children:
      - {id: 2, port: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2, ranks: 2}
op_timeout_ms: 50
)";
  const std::string leaf_yaml = R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:ff:01", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f0:00", ip: 10.1.0.254}
  - {id: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.1.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.1.0.4}
op_timeout_ms: 50
)";
  const auto send = [](Switch& sw, uint16_t rank, uint32_t op, uint64_t now) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.op = op;
    h.sender = rank;
    h.group = 4;
    h.count = 1;
    const float x = 1.0f;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), sw.cfg.jobs[0].member(rank)->addr,
                         {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(&x), 4}));
    sw.feed(f, 0, now);
  };
  const auto only = [](Capture& cap, wire::Kind k) {
    std::vector<Out> v;
    for (const Out& o : cap.outs)
      if (o.h.kind == k) v.push_back(o);
    cap.outs.clear();
    return v;
  };
  // Rank 3 (behind the leaf) never sends: the leaf gives op 5 up at 50 ms and tells the root,
  // which gives it up too, naming rank 3, without telling the leaf again.
  Switch root(root_yaml), leaf(leaf_yaml);
  send(root, 0, 5, 0);
  send(root, 1, 5, 0);
  send(leaf, 2, 5, 0);
  leaf.red.tick(50'000'000, leaf.cap);
  std::vector<Out> up = only(leaf.cap, wire::Kind::NACK);
  ASSERT_EQ(up.size(), 2u);  // rank 2, and the parent
  EXPECT_EQ(*up[0].body, std::vector<uint8_t>{0x08});
  ASSERT_EQ(up[1].dst.ip, root.cfg.ports[1].ip);
  root.feed(frame_of(up[1]), 1, 60'000'000);
  std::vector<Out> down = only(root.cap, wire::Kind::NACK);
  ASSERT_EQ(down.size(), 2u);  // ranks 0 and 1; not the child that said so
  for (const Out& o : down) {
    EXPECT_EQ(o.h.op, 5u);
    EXPECT_EQ(o.h.status, uint8_t(wire::NackReason::OP_ABANDONED));
    EXPECT_EQ(o.h.terms, 2);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x08});  // rank 3, from the leaf's bitmap
    EXPECT_EQ(o.port, 0);
  }
  EXPECT_EQ(root.red.stats().slots_in_use, 0u);
  EXPECT_EQ(root.red.job_stats().at(7).timed_out, 1u);
  // Rank 1 (at the root) never sends: the root gives op 6 up at op_timeout_ms and tells the
  // leaf, whose chunk waits for the parent; the leaf gives it up, naming rank 1, and does not
  // answer its parent.
  send(root, 0, 6, 100'000'000);
  send(leaf, 2, 6, 100'000'000);
  send(leaf, 3, 6, 100'000'000);
  ASSERT_EQ(only(leaf.cap, wire::Kind::PARTIAL).size(), 1u);
  root.red.tick(150'000'000, root.cap);
  down = only(root.cap, wire::Kind::NACK);
  ASSERT_EQ(down.size(), 2u);  // rank 0, and the child
  EXPECT_EQ(down[1].dst.ip, leaf.cfg.ports[1].ip);
  EXPECT_EQ(*down[1].body, std::vector<uint8_t>{0x02});
  leaf.feed(frame_of(down[1]), 1, 151'000'000);
  std::vector<Out> told = only(leaf.cap, wire::Kind::NACK);
  ASSERT_EQ(told.size(), 2u);  // ranks 2 and 3; not the parent
  for (const Out& o : told) {
    EXPECT_EQ(o.h.op, 6u);
    EXPECT_EQ(*o.body, std::vector<uint8_t>{0x02});
    EXPECT_EQ(o.port, 0);
  }
  EXPECT_EQ(leaf.red.stats().slots_in_use, 0u);
  // A second notice for a chunk given up already changes nothing.
  leaf.feed(frame_of(down[1]), 1, 152'000'000);
  EXPECT_TRUE(leaf.cap.outs.empty());
  EXPECT_EQ(leaf.red.stats().drops[size_t(Drop::STALE_RESULT)], 1u);
  // Nobody else gives a chunk up for the tree: the parent's NACK on the members' port, a rank's
  // own OP_ABANDONED, and a stranger's are refused before the reducer and answered with nothing.
  send(leaf, 2, 7, 200'000'000);
  Out forged = down[1];
  forged.h.op = 7;
  forged.dst = {leaf.cfg.ports[0].mac, leaf.cfg.ports[0].ip, 20562};
  leaf.feed(frame_of(forged), 0, 201'000'000);
  EXPECT_EQ(leaf.drops(Drop::SPOOFED), 1u);
  forged.src = leaf.cfg.jobs[0].member(3)->addr;
  leaf.feed(frame_of(forged), 0, 202'000'000);
  forged.src.ip = 0x0a010063;
  leaf.feed(frame_of(forged), 0, 203'000'000);
  EXPECT_EQ(leaf.drops(Drop::WRONG_KIND), 2u);
  EXPECT_TRUE(leaf.cap.outs.empty());
  EXPECT_EQ(leaf.red.stats().slots_in_use, 1u);  // op 7 still open
}

// The log's tombstones are exact and forget the oldest first: checked
// against std::map and a std::deque over random keys (with many collisions
// in a small table and many evictions), with no retained results.
TEST(ResultLog, TombstonesMatchAMapWithFifoEviction) {
  using Known = prism::sw::ResultLog::Known;
  for (size_t cap : {0, 1, 2, 3, 16, 100, 1000}) {
    prism::sw::ResultLog log(0, cap);
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, Known> ref;
    std::deque<std::tuple<uint32_t, uint32_t, uint32_t>> order;
    std::mt19937_64 rng(cap);
    for (int it = 0; it < 20000; ++it) {
      const prism::sw::SlotKey k{uint32_t(rng() % 3), uint32_t(rng() % (4 * cap + 7)), uint32_t(rng() % 2)};
      const auto t = std::make_tuple(k.job, k.op, k.chunk);
      if (rng() % 3 && !ref.count(t)) {  // the reducer tombstones a key only when the log knows nothing of it
        const Known why = rng() % 2 ? Known::EXPIRED : Known::ABANDONED;
        if (cap) {
          if (order.size() == cap) {
            ref.erase(order.front());
            order.pop_front();
          }
          ref[t] = why;
          order.push_back(t);
        }
        log.tombstone(k, why);
      }
      const auto m = log.recall(k);
      ASSERT_EQ(m.known, ref.count(t) ? ref[t] : Known::NOTHING) << "capacity " << cap << " step " << it;
      ASSERT_EQ(m.record, nullptr);
      ASSERT_EQ(log.tombstones(), ref.size());
    }
    for (const auto& [t, why] : ref) ASSERT_EQ(log.recall({std::get<0>(t), std::get<1>(t), std::get<2>(t)}).known, why);
  }
}

// The flat table under the result log: an exact map,
// checked against std::map over random puts (new keys and replacements) and
// erases in a small table with many collisions.
TEST(KeyTable, MatchesAMap) {
  for (size_t cap : {1, 5, 64, 700}) {
    prism::sw::KeyTable t(cap);
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> ref;
    std::mt19937_64 rng(cap + 100);
    for (int it = 0; it < 30000; ++it) {
      const prism::sw::SlotKey k{uint32_t(rng() % 2), uint32_t(rng() % (2 * cap + 3)), uint32_t(rng() % 3)};
      const auto key = std::make_tuple(k.job, k.op, k.chunk);
      const int what = int(rng() % 3);
      if (what == 0 && (ref.size() < cap || ref.count(key))) {
        const uint32_t v = uint32_t(1 + rng() % 1000);
        t.put(k, v);
        ref[key] = v;
      } else if (what == 1) {
        EXPECT_EQ(t.erase(k), ref.erase(key) == 1);
      }
      const auto it2 = ref.find(key);
      ASSERT_EQ(t.get(k), it2 == ref.end() ? 0u : it2->second) << "capacity " << cap << " step " << it;
      ASSERT_EQ(t.size(), ref.size());
    }
    for (const auto& [key, v] : ref) ASSERT_EQ(t.get({std::get<0>(key), std::get<1>(key), std::get<2>(key)}), v);
  }
}

// The result log against a model: a deque of (key, body) in push order,
// evicting the oldest until has_room() holds, over bodies of random sizes
// (1 byte to 9 KiB) in rings of a few pages, so records wrap and leave
// padding thousands of times. Every retained record is found by its key,
// with its header and every byte of its body intact; nothing else is found,
// and the last 300 let go are tombstones (EXPIRED); the ring never holds
// more lines than it has.
TEST(ResultLog, KeepsTheNewestRecordsIntactInItsRing) {
  for (size_t bytes : {size_t(0), size_t(600), size_t(20000), size_t(1) << 16, size_t(1) << 20}) {
    prism::sw::ResultLog log(bytes, 300);
    std::deque<std::pair<prism::sw::SlotKey, std::vector<uint8_t>>> model;
    std::mt19937_64 rng(bytes + 7);
    const auto body_of = [&](uint32_t op, size_t len) {
      std::vector<uint8_t> b(len);
      for (size_t i = 0; i < len; ++i) b[i] = uint8_t((op * 2654435761u + i * 40503u) >> 7);
      return b;
    };
    uint64_t refused = 0;
    std::deque<uint32_t> gone;  // the last 300 ops let go: the log's tombstones
    for (uint32_t op = 0; op < 5000; ++op) {
      const size_t len = rng() % 4 ? 1 + rng() % 1500 : 1 + rng() % 9216;
      const prism::sw::SlotKey k{3, op, op % 5};
      if (!log.fits(len)) {
        ++refused;
        EXPECT_TRUE(1 + (len + 63) / 64 > bytes / 64 || bytes < 512) << len;  // more lines than the ring has
        continue;
      }
      while (!log.has_room(len)) {
        ASSERT_FALSE(model.empty());
        ASSERT_EQ(log.oldest()->key(), model.front().first);
        log.pop_oldest();
        gone.push_back(model.front().first.op);
        if (gone.size() > 300) gone.pop_front();
        model.pop_front();
      }
      wire::Header h;
      h.op = op;
      h.count = uint16_t(len);
      const auto b = body_of(op, len);
      log.push(k, op % 7, h, b.data(), len, op);
      model.emplace_back(k, b);
      ASSERT_EQ(log.size(), model.size());
      ASSERT_LE(log.lines_used(), log.capacity_lines());
      if (op % 97 == 0 || op > 4900)
        for (const auto& [mk, mb] : model) {
          const auto* r = log.recall(mk).record;
          ASSERT_NE(r, nullptr) << "op " << mk.op << " lost at step " << op;
          ASSERT_EQ(r->h.op, mk.op);
          ASSERT_EQ(r->len, mb.size());
          ASSERT_EQ(r->job_index, mk.op % 7);
          ASSERT_EQ(r->t_done, mk.op);
          ASSERT_EQ(std::memcmp(r->body(), mb.data(), mb.size()), 0) << "op " << mk.op << " overwritten";
        }
    }
    // What was let go is not found; the last 300 let go are tombstones, older ones forgotten.
    for (uint32_t op = 0; op < 5000; ++op) {
      const bool kept = std::any_of(model.begin(), model.end(), [&](const auto& m) { return m.first.op == op; });
      const bool tomb = std::find(gone.begin(), gone.end(), op) != gone.end();
      const auto m = log.recall({3, op, op % 5});
      ASSERT_EQ(m.record != nullptr, kept) << op;
      ASSERT_EQ(m.known, kept   ? prism::sw::ResultLog::Known::RETAINED
                         : tomb ? prism::sw::ResultLog::Known::EXPIRED
                                : prism::sw::ResultLog::Known::NOTHING)
          << op;
    }
    EXPECT_EQ(log.tombstones(), gone.size());
    if (bytes == 0) {
      EXPECT_EQ(refused, 5000u);
    } else if (bytes >= 20000) {
      EXPECT_EQ(refused, 0u);
    }
    while (log.oldest()) log.pop_oldest();
    EXPECT_EQ(log.lines_used(), 0u);
  }
}

// The directory finds each job by id through its own open-addressed table:
// checked against std::map over job counts that fill the table to different
// loads, with ids chosen to collide (multiples of a large power of two), and
// ids that are absent answer null. Each job's dense index is its own.
TEST(Directory, FindsEveryJobByIdAndNoOther) {
  for (int jobs : {1, 2, 3, 5, 16, 33}) {
    std::mt19937_64 rng{uint64_t(jobs)};
    std::string yaml =
        "switch: {id: 1, role: root}\nports:\n  - {id: 0, mac: \"02:00:00:00:ff:00\", ip: 10.0.0.254}\njobs:\n";
    std::map<uint32_t, int> ref;  // id -> position in the config
    while (int(ref.size()) < jobs) {
      const uint32_t id = (ref.size() % 2) ? uint32_t(rng()) : uint32_t(ref.size() + 1) << 24;
      if (ref.count(id)) continue;
      ref[id] = int(ref.size());
      char member[160];
      std::snprintf(
          member, sizeof member,
          "  - id: %u\n    members:\n      - {rank: 0, port: 0, mac: \"02:00:00:00:01:%02x\", ip: 10.0.%zu.1}\n", id,
          unsigned(ref.size()), ref.size());
      yaml += member;
    }
    const SwitchConfig cfg = parse_config(yaml);
    const Directory dir(cfg);
    ASSERT_EQ(dir.jobs(), size_t(jobs));
    std::set<uint32_t> indices;
    for (const auto& [id, at] : ref) {
      const Job* j = dir.job(id);
      ASSERT_NE(j, nullptr) << "job " << id << " of " << jobs;
      EXPECT_EQ(j->cfg->id, id);
      EXPECT_EQ(j->cfg, &cfg.jobs[size_t(at)]);
      EXPECT_LT(j->index, uint32_t(jobs));
      indices.insert(j->index);
    }
    EXPECT_EQ(indices.size(), size_t(jobs));
    for (int k = 0; k < 2000; ++k) {
      const uint32_t id = k < 64 ? uint32_t(k) << 24 : uint32_t(rng());
      if (!ref.count(id)) {
        EXPECT_EQ(dir.job(id), nullptr) << "absent id " << id;
      }
    }
  }
}

// ---------------------------------------------------------------- queries
// PROTOCOL.md, Queries: a rank's QUERY gets a STATUS (HELD or MISSING, the
// terms received, the bitmap of the members lacking) while the chunk is
// open or unknown, its RESULT again once complete and retained, and the
// NACK a RETRANSMIT would get once the result is let go or the chunk
// abandoned. It never opens a slot and never counts as a contribution.
namespace {

// Rank `rank`'s QUERY for chunk 0 of `op` (job 7, group 4, fp32 KULISCH_FIXED):
// the CONTRIB's header with kind QUERY, terms 1, count 0, no body.
std::vector<uint8_t> query(const SwitchConfig& c, uint16_t rank, uint32_t op, uint16_t sender = 0xFFFF,
                           Policy pol = Policy::KULISCH_FIXED, size_t body = 0) {
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.op = op;
  h.sender = sender == 0xFFFF ? rank : sender;
  h.group = 4;
  h.count = 16;
  h.policy = pol;
  const wire::Header q = wire::query_header(h);
  wire::Endpoint sw{c.ports[0].mac, c.ports[0].ip, c.udp_port};
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), member_ep(c, rank), sw, q, std::vector<uint8_t>(body, 0)));
  return f;
}

// The frame `o` on the wire, parsed as a rank would.
wire::Parsed on_wire(const Out& o, std::vector<uint8_t>& keep) {
  keep = frame_of(o);
  wire::Parsed p;
  EXPECT_EQ(wire::parse(keep, o.dst.port, &p), wire::Refusal::OK);
  return p;
}

// A STATUS to rank `rank` for chunk 0 of `op`: its shape, field by field.
void expect_status(const Switch& sw, const Out& o, uint16_t rank, uint32_t op, uint8_t status, uint16_t terms,
                   const std::vector<uint8_t>& bitmap) {
  std::vector<uint8_t> f;
  const wire::Parsed p = on_wire(o, f);
  EXPECT_EQ(o.dst.ip, member_ep(sw.cfg, rank).ip);
  EXPECT_EQ(o.dst.port, member_ep(sw.cfg, rank).port);
  EXPECT_EQ(p.h.kind, wire::Kind::STATUS);
  EXPECT_EQ(p.h.job, 7u);
  EXPECT_EQ(p.h.op, op);
  EXPECT_EQ(p.h.chunk, 0u);
  EXPECT_EQ(p.h.sender, sw.cfg.id);
  EXPECT_EQ(p.h.group, 4);
  EXPECT_EQ(p.h.count, 0);
  EXPECT_EQ(p.h.flags, 0);
  EXPECT_EQ(p.h.status, status);
  EXPECT_EQ(p.h.terms, terms);
  EXPECT_EQ(p.h.dtype, Format::FP32);
  EXPECT_EQ(p.h.policy, Policy::KULISCH_FIXED);
  EXPECT_EQ(p.h.encoding, wire::Encoding::DTYPE);
  EXPECT_EQ(std::vector<uint8_t>(p.payload, p.payload + p.payload_len), bitmap);
}

}  // namespace

TEST(Query, BeforeAnyContributionIsMissingAndOpensNothing) {
  Switch sw(kRoot);
  for (int i = 0; i < 3; ++i) sw.feed(query(sw.cfg, 0, 5), 0, 1000);
  ASSERT_EQ(sw.cap.outs.size(), 3u);
  for (const Out& o : sw.cap.outs) expect_status(sw, o, 0, 5, wire::qstatus::MISSING, 0, {});
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.job_stats().at(7).opened, 0u);
  EXPECT_EQ(sw.red.stats().queries, 3u);
  EXPECT_EQ(sw.red.stats().statuses_sent, 3u);
  EXPECT_EQ(sw.red.stats().contribs, 0u);
  // Nothing was remembered either: the chunk opens and completes as if never asked about.
  const auto in = inputs(4, 16, 21);
  sw.cap.outs.clear();
  for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, 5, in[r]), 0, 2000);
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::RESULT);
  EXPECT_EQ(*sw.cap.outs[0].body, reference(in, Policy::KULISCH_FIXED));
}

TEST(Query, HeldForAContributorMissingForTheOthersThenTheResultAgain) {
  Switch sw(kRoot);
  const auto in = inputs(4, 16, 22);
  sw.feed(contrib(sw.cfg, 0, 5, in[0]), 0, 1000);
  ASSERT_TRUE(sw.cap.outs.empty());
  sw.feed(query(sw.cfg, 0, 5), 0, 2000);
  sw.feed(query(sw.cfg, 1, 5), 0, 2000);
  ASSERT_EQ(sw.cap.outs.size(), 2u);
  // Group 4 in one byte: ranks 1, 2 and 3 lack (bits 1-3).
  expect_status(sw, sw.cap.outs[0], 0, 5, wire::qstatus::HELD, 1, {0x0E});
  expect_status(sw, sw.cap.outs[1], 1, 5, wire::qstatus::MISSING, 1, {0x0E});
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  EXPECT_EQ(sw.red.stats().elements, 16u) << "a QUERY is no contribution";
  sw.feed(contrib(sw.cfg, 2, 5, in[2]), 0, 3000);
  sw.feed(query(sw.cfg, 2, 5), 0, 3000);
  ASSERT_EQ(sw.cap.outs.size(), 3u);
  expect_status(sw, sw.cap.outs[2], 2, 5, wire::qstatus::HELD, 2, {0x0A});  // ranks 1 and 3
  sw.feed(contrib(sw.cfg, 1, 5, in[1]), 0, 4000);
  sw.feed(contrib(sw.cfg, 3, 5, in[3]), 0, 4000);
  ASSERT_EQ(sw.cap.outs.size(), 3u + 4u);
  const Out& result = sw.cap.outs[3];
  EXPECT_EQ(*result.body, reference(in, Policy::KULISCH_FIXED)) << "the queries changed nothing";
  // Complete and retained: the RESULT's very bytes again, to the asker only, RETRANSMIT set.
  sw.feed(query(sw.cfg, 1, 5), 0, 5000);
  ASSERT_EQ(sw.cap.outs.size(), 8u);
  const Out& again = sw.cap.outs[7];
  EXPECT_EQ(again.dst.ip, member_ep(sw.cfg, 1).ip);
  EXPECT_EQ(again.h.kind, wire::Kind::RESULT);
  EXPECT_EQ(*again.body, *result.body);
  wire::Header sent = result.h;
  sent.flags |= wire::hflag::RETRANSMIT;
  EXPECT_EQ(std::memcmp(&sent, &again.h, sizeof sent), 0) << "the header as sent, RETRANSMIT set";
  EXPECT_EQ(sw.red.stats().statuses_sent, 3u);
  EXPECT_EQ(sw.red.stats().queries, 4u);
  EXPECT_EQ(sw.red.stats().resent, 1u);
  EXPECT_EQ(sw.red.job_stats().at(7).opened, 1u);
  EXPECT_EQ(sw.red.stats().elements, 4u * 16u);
}

TEST(Query, AfterExpiryResultExpiredAfterAbandonOpAbandoned) {
  Switch sw(kRoot);
  const auto in = inputs(4, 16, 23);
  for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib(sw.cfg, r, 5, in[r]), 0, 1000);
  sw.red.tick(200'000'000, sw.cap);  // past retention_ms = 100
  sw.cap.outs.clear();
  sw.feed(query(sw.cfg, 0, 5), 0, 200'000'000);
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::RESULT_EXPIRED));
  EXPECT_EQ(sw.cap.outs[0].dst.ip, member_ep(sw.cfg, 0).ip);
  // Op 6: ranks 0 and 1 contribute, the chunk times out (op_timeout_ms 3000).
  for (uint16_t r = 0; r < 2; ++r) sw.feed(contrib(sw.cfg, r, 6, in[r]), 0, 300'000'000);
  sw.red.tick(3'400'000'000, sw.cap);
  ASSERT_EQ(sw.cap.outs.size(), 3u);  // the two contributors' OP_ABANDONED
  sw.feed(query(sw.cfg, 3, 6), 0, 3'500'000'000);
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  EXPECT_EQ(sw.cap.outs[3].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[3].h.status, uint8_t(wire::NackReason::OP_ABANDONED));
  EXPECT_EQ(sw.cap.outs[3].dst.ip, member_ep(sw.cfg, 3).ip);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  EXPECT_EQ(sw.red.stats().statuses_sent, 0u);
}

TEST(Query, FromANonMemberOrASpoofIsDroppedUnanswered) {
  Switch sw(kRoot);
  const auto in = inputs(4, 16, 24);
  sw.feed(contrib(sw.cfg, 0, 5, in[0]));
  sw.feed(query(sw.cfg, 1, 5, 2));  // rank 1's address claims rank 2
  EXPECT_EQ(sw.drops(Drop::SPOOFED), 1u);
  // An address no member has.
  wire::Header h;
  h.kind = wire::Kind::CONTRIB;
  h.job = 7;
  h.op = 5;
  h.sender = 0;
  h.group = 4;
  h.count = 16;
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), {{2, 0, 0, 0, 0, 0x77}, 0x0A000077, 20562},
                       {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, sw.cfg.udp_port}, wire::query_header(h), {}));
  sw.feed(f);
  EXPECT_EQ(sw.drops(Drop::UNKNOWN_SOURCE), 1u);
  // Rank 0's own address on another switch port.
  sw.feed(query(sw.cfg, 0, 5), 1);
  EXPECT_TRUE(sw.cap.outs.empty()) << "a spoof is never answered";
  EXPECT_EQ(sw.red.stats().queries, 0u);
  // A STATUS sent to the switch is what a switch sends: dropped, never answered.
  wire::Parsed p;
  const auto q = query(sw.cfg, 0, 5);
  ASSERT_EQ(wire::parse(q, sw.cfg.udp_port, &p), wire::Refusal::OK);
  f.assign(wire::kMaxFrame, 0);
  f.resize(wire::build(f.data(), f.size(), p.src, p.dst, wire::status_header(p.h, 0, true, 1), {}));
  sw.feed(f);
  EXPECT_EQ(sw.drops(Drop::WRONG_KIND), 1u);
  EXPECT_TRUE(sw.cap.outs.empty());
  // A member's malformed QUERY (a body) is refused with NACK MALFORMED, to it.
  sw.feed(query(sw.cfg, 0, 5, 0xFFFF, Policy::KULISCH_FIXED, 4));
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::MALFORMED));
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  EXPECT_EQ(sw.red.stats().elements, 16u);
}

TEST(Query, WithAnotherDescriptorThanTheSlotsIsRefused) {
  Switch sw(kRoot);
  const auto in = inputs(4, 16, 25);
  sw.feed(contrib(sw.cfg, 0, 5, in[0]));
  sw.feed(query(sw.cfg, 1, 5, 0xFFFF, Policy::FP32_ARRIVAL));
  ASSERT_EQ(sw.cap.outs.size(), 1u);
  EXPECT_EQ(sw.cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(sw.cap.outs[0].h.status, uint8_t(wire::NackReason::DESCRIPTOR_MISMATCH));
}

// A leaf that sent its PARTIAL and waits for the parent's RESULT holds its
// members' contributions: HELD, with every contribution it folded in terms
// and, of its own members, nobody lacking.
TEST(Query, ALeafWaitingForItsParentAnswersHeld) {
  Switch leaf(R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f0:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.4}
partial_retry_ms: 0
)");
  const auto in = inputs(4, 16, 26);
  for (uint16_t r = 0; r < 4; ++r) leaf.feed(contrib(leaf.cfg, r, 5, in[r]), 0, 10);
  ASSERT_EQ(leaf.cap.outs.size(), 1u);
  EXPECT_EQ(leaf.cap.outs[0].h.kind, wire::Kind::PARTIAL);
  leaf.feed(query(leaf.cfg, 2, 5), 0, 20);
  ASSERT_EQ(leaf.cap.outs.size(), 2u);
  expect_status(leaf, leaf.cap.outs[1], 2, 5, wire::qstatus::HELD, 4, {0x00});
  EXPECT_EQ(leaf.cap.outs[1].h.sender, 2);
  EXPECT_EQ(leaf.red.stats().slots_in_use, 1u);
}

namespace {

// SECURITY-REVIEW F3: a leaf's parent is bound to its switch port as a member
// is. A host behind a member port that sends a RESULT with the parent's MAC,
// IP and UDP port for a chunk waiting for the parent is a spoof: counted,
// never forwarded, never answered; the parent's own RESULT on its port then
// completes the chunk with the parent's bits.
TEST(Ingress, AParentsResultOnAMembersPortIsSpoofed) {
  Switch leaf(R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:fe:00", ip: 10.9.0.1}}
ports:
  - {id: 0, mac: "02:00:00:00:f0:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:f0:01", ip: 10.9.0.2}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.3}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.4}
partial_retry_ms: 0
)");
  const auto in = inputs(4, 16, 27);
  for (uint16_t r = 0; r < 4; ++r) leaf.feed(contrib(leaf.cfg, r, 5, in[r]), 0, 10);
  ASSERT_EQ(leaf.cap.outs.size(), 1u);
  ASSERT_EQ(leaf.cap.outs[0].h.kind, wire::Kind::PARTIAL);
  leaf.cap.outs.clear();
  // The RESULT the parent would send, but with made-up values.
  wire::Header h;
  h.kind = wire::Kind::RESULT;
  h.job = 7;
  h.op = 5;
  h.chunk = 0;
  h.sender = 1;
  h.group = 4;
  h.terms = 4;
  h.count = 16;
  h.encoding = wire::Encoding::OUT_DTYPE;
  const std::vector<float> forged(16, 666.0f);
  const wire::Endpoint parent = leaf.cfg.parent->addr;
  const wire::Endpoint self0{leaf.cfg.ports[0].mac, leaf.cfg.ports[0].ip, 20562};
  std::vector<uint8_t> f(wire::kMaxFrame);
  f.resize(wire::build(f.data(), f.size(), parent, self0, h, {reinterpret_cast<const uint8_t*>(forged.data()), 64}));
  leaf.feed(f, 0, 20);  // the parent's address, on the members' port
  EXPECT_TRUE(leaf.cap.outs.empty()) << "a forged RESULT forwarded to the members";
  EXPECT_EQ(leaf.drops(Drop::SPOOFED), 1u);
  EXPECT_EQ(leaf.red.stats().slots_in_use, 1u) << "the chunk still waits for its parent";
  // The parent's RESULT on the parent's port: forwarded to the four ranks.
  const auto want = reference(in, Policy::KULISCH_FIXED);
  std::vector<uint8_t> g(wire::kMaxFrame);
  const wire::Endpoint self1{leaf.cfg.ports[1].mac, leaf.cfg.ports[1].ip, 20562};
  g.resize(wire::build(g.data(), g.size(), parent, self1, h, want));
  leaf.feed(g, 1, 30);
  ASSERT_EQ(leaf.cap.outs.size(), 4u);
  for (const Out& o : leaf.cap.outs) EXPECT_EQ(*o.body, want);
}

}  // namespace

namespace {

// SECURITY-REVIEW F19: ports are promiscuous, so a member's CONTRIB sent to
// another station (broadcast MAC, or another IP on the segment) reaches the
// switch too. It is not the switch's: counted not_for_us, never summed or
// answered, even though its source is exactly registered; the same frame
// addressed to the port completes the op.
TEST(Ingress, AFrameForAnotherStationIsNotTheSwitchs) {
  Switch sw(kRoot);
  const auto in = inputs(4, 8, 31);
  const wire::Endpoint port0{sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562};
  const auto contrib_to = [&](uint16_t rank, const wire::Endpoint& dst) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.op = 3;
    h.sender = rank;
    h.group = 4;
    h.count = 8;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), member_ep(sw.cfg, rank), dst, h,
                         {reinterpret_cast<const uint8_t*>(in[rank].data()), 32}));
    return f;
  };
  wire::Endpoint bcast = port0, other_ip = port0;
  bcast.mac = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  other_ip.ip = 0x0A000063;  // 10.0.0.99
  for (uint16_t r = 0; r < 4; ++r) {
    sw.feed(contrib_to(r, bcast));
    sw.feed(contrib_to(r, other_ip));
  }
  EXPECT_EQ(sw.drops(Drop::NOT_FOR_US), 8u);
  EXPECT_TRUE(sw.cap.outs.empty());
  EXPECT_EQ(sw.red.stats().elements, 0u);
  for (uint16_t r = 0; r < 4; ++r) sw.feed(contrib_to(r, port0));
  ASSERT_EQ(sw.cap.outs.size(), 4u);
  EXPECT_EQ(*sw.cap.outs[0].body, reference(in, Policy::KULISCH_FIXED));
}

}  // namespace

// A graceful stop (PROTOCOL.md, "The switch stops"): once drained, the
// reducer still opens, completes and retransmits the chunks of the ops in
// flight (any op not newer than the newest opened), and refuses a newer op and
// a JOIN with NACK SWITCH_STOPPING; abandon_all() then gives up what is open.
TEST(Switch, AStoppingSwitchFinishesTheOpsInFlightAndTakesNoNewOne) {
  Switch sw(R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
jobs:
  - id: 7
    group: 2
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
)");
  const auto send = [&](uint16_t r, uint32_t op, uint32_t chunk) {
    wire::Header h;
    h.kind = wire::Kind::CONTRIB;
    h.job = 7;
    h.op = op;
    h.chunk = chunk;
    h.sender = r;
    h.group = 2;
    h.count = 1;
    const float x = 1.0f;
    std::vector<uint8_t> f(wire::kMaxFrame);
    f.resize(wire::build(f.data(), f.size(), member_ep(sw.cfg, r), {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562}, h,
                         {reinterpret_cast<const uint8_t*>(&x), 4}));
    sw.feed(f, 0, 0);
  };
  const auto nack_reasons = [&] {
    std::vector<uint8_t> v;
    for (const Out& o : sw.cap.outs)
      if (o.h.kind == wire::Kind::NACK) v.push_back(o.h.status);
    sw.cap.outs.clear();
    return v;
  };
  send(0, 5, 0);  // op 5 in flight
  sw.red.drain();
  EXPECT_TRUE(sw.red.draining());
  send(1, 5, 0);  // completes: its RESULT to both ranks
  EXPECT_EQ(sw.red.stats().results_sent, 2u);
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
  send(0, 5, 1);  // a chunk of op 5 not seen yet: op 5 is in flight, it opens
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  EXPECT_TRUE(nack_reasons().empty());
  send(0, 6, 0);  // a new op
  EXPECT_EQ(nack_reasons(), std::vector<uint8_t>{uint8_t(wire::NackReason::SWITCH_STOPPING)});
  EXPECT_EQ(sw.red.stats().drops[size_t(Drop::STOPPING)], 1u);
  EXPECT_EQ(sw.red.stats().slots_in_use, 1u);
  wire::Header jh = wire::session_header(wire::Kind::JOIN, 7, 2);
  jh.op = 1234;  // its nonce
  jh.sender = 0;
  std::vector<uint8_t> join(wire::kMaxFrame);
  join.resize(wire::build(join.data(), join.size(), member_ep(sw.cfg, 0),
                          {sw.cfg.ports[0].mac, sw.cfg.ports[0].ip, 20562}, jh, {}));
  {
    wire::Parsed p;
    ASSERT_EQ(wire::parse(join, sw.cfg.udp_port, &p), wire::Refusal::OK);
  }
  sw.feed(join, 0, 0);
  EXPECT_EQ(nack_reasons(), std::vector<uint8_t>{uint8_t(wire::NackReason::SWITCH_STOPPING)});
  EXPECT_EQ(sw.red.stats().drops[size_t(Drop::STOPPING)], 2u);
  sw.red.abandon_all(sw.cap);  // stop_timeout_ms passed: op 5 chunk 1 is given up
  EXPECT_EQ(nack_reasons(), std::vector<uint8_t>{uint8_t(wire::NackReason::OP_ABANDONED)});
  EXPECT_EQ(sw.red.stats().slots_in_use, 0u);
}
