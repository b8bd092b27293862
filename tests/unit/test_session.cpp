// Job sessions (PROTOCOL.md, "Sessions") through parse -> ingress ->
// Reducer, with frames built by hand from the header table (JOIN, kind 5;
// JOINED, kind 6): who is answered, with what counts and bitmap, when the
// session completes and with which first op (one past the ops the tree
// remembers, plus a random offset below 2^24: review F4), how a restart
// starts a new one, and how a leaf and a root share one.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "config/config.hpp"
#include "proto/fragment.hpp"
#include "switch/reducer.hpp"
#include "wire_bytes.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

const char* kRoot = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.2}
    children:
      - {id: 2, port: 1, mac: "02:00:00:00:fe:02", ip: 10.0.1.2, ranks: 2}
)";

const char* kLeaf = R"(
switch: {id: 2, role: leaf, parent: {port: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}}
ports:
  - {id: 0, mac: "02:00:00:00:fe:00", ip: 10.0.2.254}
  - {id: 1, mac: "02:00:00:00:fe:02", ip: 10.0.1.2}
jobs:
  - id: 7
    group: 4
    members:
      - {rank: 2, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.2.1}
      - {rank: 3, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.2.2}
)";

struct Capture : Sink {
  std::vector<Out> outs;
  void send(Out&& o) override { outs.push_back(std::move(o)); }
};

// The 32 header bytes of PROTOCOL.md's table, written field by field here.
std::vector<uint8_t> header(uint8_t kind, uint32_t job, uint32_t op, uint32_t chunk, uint16_t sender, uint16_t group,
                            uint16_t terms, uint8_t status) {
  return test::session_bytes(kind, job, op, chunk, sender, group, terms, status);
}

struct Node {
  SwitchConfig cfg;
  Directory dir;
  Reducer red;
  Capture cap;
  explicit Node(const char* yaml) : cfg(parse_config(yaml)), dir(cfg), red(dir, 16) {}
  // A datagram from `src` (a member's or child's address) on switch port `port`.
  Verdict feed(const wire::Endpoint& src, uint16_t port, const std::vector<uint8_t>& msg, uint64_t now = 0) {
    wire::Parsed p;
    EXPECT_EQ(wire::parse_message(msg, &p), wire::Refusal::OK);
    p.src = src;
    p.dst = dir.self(port);
    const Verdict v = ingress(dir, wire::Refusal::OK, p, port);
    if (v.admitted()) red.on_packet(p, v, now, cap);
    return v;
  }
  wire::Endpoint member(uint16_t rank) const { return cfg.jobs[0].member(rank)->addr; }
};

std::vector<uint8_t> join(uint16_t rank, uint32_t nonce, uint32_t hint = 0) {
  return header(5, 7, nonce, hint, rank, 4, 0, 0);
}

struct Joined {
  uint32_t nonce, first_op;
  uint16_t rank, terms;
  bool complete;
  uint8_t bitmap;
  wire::Endpoint to;
};
Joined joined(const Out& o) {
  EXPECT_EQ(o.h.kind, wire::Kind::JOINED);
  EXPECT_EQ(o.body_size(), 1u);  // ceil(4 / 8)
  return {o.h.op, o.h.chunk, o.h.sender, o.h.terms, (o.h.status & 1) != 0, o.body ? (*o.body)[0] : uint8_t(0), o.dst};
}

// PROTOCOL.md, Joining: a session's first op lies in [base, base + 2^24) in
// serial order, base being one past the highest op number the tree
// remembers (0 if none): written out here, not taken from Sessions.
constexpr uint32_t kSpread = 1u << 24;
::testing::AssertionResult first_op_past(uint32_t first_op, uint32_t base) {
  if (uint32_t(first_op - base) < kSpread) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "first op " << first_op << " is not in [" << base << ", " << base
                                       << " + 2^24)";
}

// The last JOIN's answers: COMPLETE to each of the 4 ranks, every one with the same first op, returned.
uint32_t completed(const std::vector<Out>& outs) {
  EXPECT_EQ(outs.size(), 4u);
  std::map<uint16_t, uint32_t> first;
  for (const Out& o : outs) {
    EXPECT_TRUE(joined(o).complete);
    first[joined(o).rank] = joined(o).first_op;
  }
  EXPECT_EQ(first.size(), 4u) << "a rank was told twice, another never";
  for (const auto& [rank, op] : first) EXPECT_EQ(op, first.begin()->second) << "rank " << rank << "'s first op";
  return first.empty() ? 0 : first.begin()->second;
}

TEST(Session, CompletesWhenEveryRankJoinedAndStartsPastTheOpsSeen) {
  Node root(kRoot);
  const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
  // Rank 0 joins: one of four; it is told so, nothing more.
  ASSERT_TRUE(root.feed(root.member(0), 0, join(0, 0xA0)).admitted());
  ASSERT_EQ(root.cap.outs.size(), 1u);
  Joined j = joined(root.cap.outs[0]);
  EXPECT_EQ(j.nonce, 0xA0u);
  EXPECT_EQ(j.rank, 0);
  EXPECT_EQ(j.terms, 1);
  EXPECT_FALSE(j.complete);
  EXPECT_EQ(j.bitmap, 0x01);
  // A repeat of the same JOIN changes nothing.
  root.feed(root.member(0), 0, join(0, 0xA0));
  EXPECT_EQ(joined(root.cap.outs[1]).terms, 1);
  // Ranks 2 and 3 come through the child, which says op 41 and below were used under it.
  root.feed(child, 1, join(2, 0xC2, 42));
  root.feed(child, 1, join(3, 0xC3, 0));
  EXPECT_EQ(joined(root.cap.outs[3]).terms, 3);
  EXPECT_EQ(joined(root.cap.outs[3]).bitmap, 0x0D);
  EXPECT_EQ(joined(root.cap.outs[3]).to.ip, child.ip);  // answered through the child
  root.cap.outs.clear();
  // The last rank: every rank gets COMPLETE and the same first op, past the child's 41.
  root.feed(root.member(1), 0, join(1, 0xB1));
  ASSERT_EQ(root.cap.outs.size(), 4u);
  std::map<uint16_t, Joined> by_rank;
  for (const Out& o : root.cap.outs) by_rank[joined(o).rank] = joined(o);
  const uint32_t first = by_rank[0].first_op;
  EXPECT_TRUE(first_op_past(first, 42));
  for (uint16_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(by_rank[r].complete);
    EXPECT_EQ(by_rank[r].first_op, first) << "rank " << r;
    EXPECT_EQ(by_rank[r].terms, 4);
    EXPECT_EQ(by_rank[r].bitmap, 0x0F);
  }
  EXPECT_EQ(by_rank[0].nonce, 0xA0u);
  EXPECT_EQ(by_rank[3].nonce, 0xC3u);
  EXPECT_EQ(by_rank[1].to.ip, root.member(1).ip);
  EXPECT_EQ(by_rank[2].to.ip, child.ip);
  EXPECT_EQ(root.red.stats().session_packets, 5u);
  EXPECT_EQ(root.red.stats().slots_in_use, 0u);  // a session takes no slot
  // A repeat of a JOIN of the complete session (its COMPLETE was lost) is told the same first op,
  // through the child too, whatever hint it now carries.
  root.cap.outs.clear();
  root.feed(root.member(0), 0, join(0, 0xA0));
  root.feed(child, 1, join(3, 0xC3, 5000));
  ASSERT_EQ(root.cap.outs.size(), 2u);
  for (const Out& o : root.cap.outs) {
    EXPECT_TRUE(joined(o).complete);
    EXPECT_EQ(joined(o).first_op, first);
  }
}

TEST(Session, ARankThatJoinsAgainWithAnotherNonceStartsANewSession) {
  Node root(kRoot);
  const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
  for (uint16_t r : {0, 1}) root.feed(root.member(r), 0, join(r, 100 + r));
  root.feed(child, 1, join(2, 102));
  root.cap.outs.clear();
  root.feed(child, 1, join(3, 103));
  const uint32_t first = completed(root.cap.outs);
  EXPECT_TRUE(first_op_past(first, 0));  // nothing was ever opened
  // The job runs its ops first .. first + 9 (a contribution opens each op's slot), then restarts.
  Directory& d = root.dir;
  d.note_op(*d.job(7), first + 9);
  d.note_op(*d.job(7), first + 3);  // an older op opened late does not lower it
  root.cap.outs.clear();
  root.feed(root.member(1), 0, join(1, 201));
  EXPECT_EQ(joined(root.cap.outs.back()).terms, 1);  // a new session: only rank 1 so far
  EXPECT_FALSE(joined(root.cap.outs.back()).complete);
  root.feed(root.member(0), 0, join(0, 200));
  root.feed(child, 1, join(2, 202));
  root.cap.outs.clear();
  root.feed(child, 1, join(3, 203));
  EXPECT_TRUE(first_op_past(completed(root.cap.outs), first + 10));  // past the first session's ops
}

// A JOIN counts only while its rank repeats it (PROTOCOL.md: at least every
// second until COMPLETE; the switch drops one not heard for 3 s when the
// session would complete). Rank 3 of an earlier attempt joined alone and
// died; the job started again 10 s later: its ranks 0-2 do not complete a
// session with the dead rank's JOIN (they would run ops it never joins and
// fail), and the new rank 3 joining completes it, with its own nonce.
TEST(Session, AJoinNoLongerRepeatedDoesNotCompleteASession) {
  Node root(kRoot);
  const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
  constexpr uint64_t s = 1'000'000'000;
  root.feed(child, 1, join(3, 300), 1 * s);
  root.feed(child, 1, join(3, 300), 2 * s);  // repeated for a while, then the process died
  root.feed(root.member(0), 0, join(0, 100), 10 * s);
  root.feed(root.member(1), 0, join(1, 101), 10 * s);
  root.feed(child, 1, join(2, 102), 10 * s);
  for (const Out& o : root.cap.outs) EXPECT_FALSE(joined(o).complete);
  EXPECT_EQ(joined(root.cap.outs.back()).terms, 3);  // rank 3's stale JOIN dropped
  EXPECT_EQ(joined(root.cap.outs.back()).bitmap, 0x07);
  root.cap.outs.clear();
  root.feed(child, 1, join(3, 301), 10 * s + 400'000'000);
  completed(root.cap.outs);
  for (const Out& o : root.cap.outs)
    if (joined(o).rank == 3) EXPECT_EQ(joined(o).nonce, 301u);
  // A rank that repeats its JOIN within the window stays in: ranks joined over 10 s, each
  // repeating every second, complete a session.
  Node again(kRoot);
  for (uint64_t t = 0; t <= 10; ++t) again.feed(again.member(0), 0, join(0, 500), t * s);
  for (uint64_t t = 5; t <= 10; ++t) again.feed(again.member(1), 0, join(1, 501), t * s);
  again.feed(child, 1, join(2, 502), 10 * s);
  again.cap.outs.clear();
  again.feed(child, 1, join(3, 503), 10 * s + 900'000'000);
  completed(again.cap.outs);
}

// Review F4: op numbers are not predictable off the path. Switches given
// the same JOINs (nothing opened before: base 0) start their sessions at
// first ops drawn afresh, each in [0, 2^24): with 64 of them, not all are
// equal and both halves of the range are hit, but for a chance of 2^-63.
// Past a base, across the wrap of op numbers, the rule holds the same.
TEST(Session, TheFirstOpIsDrawnAtRandomPastTheBase) {
  std::set<uint32_t> seen;
  bool low = false, high = false;
  for (int k = 0; k < 64; ++k) {
    Node root(kRoot);
    const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
    for (uint16_t r : {0, 1}) root.feed(root.member(r), 0, join(r, 100 + r));
    root.feed(child, 1, join(2, 102));
    root.cap.outs.clear();
    root.feed(child, 1, join(3, 103));
    const uint32_t first = completed(root.cap.outs);
    EXPECT_TRUE(first_op_past(first, 0));
    seen.insert(first);
    (first < kSpread / 2 ? low : high) = true;
  }
  EXPECT_GT(seen.size(), 1u) << "64 switches started their sessions at the same op";
  EXPECT_TRUE(low && high) << "64 first ops all in one half of [0, 2^24)";
  for (const uint32_t last : {uint32_t(999), uint32_t(0xFFFFFFFEu)}) {  // ops opened up to `last`
    Node root(kRoot);
    const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
    root.dir.note_op(*root.dir.job(7), last);
    for (uint16_t r : {0, 1}) root.feed(root.member(r), 0, join(r, 100 + r));
    root.feed(child, 1, join(2, 102));
    root.cap.outs.clear();
    root.feed(child, 1, join(3, 103));
    EXPECT_TRUE(first_op_past(completed(root.cap.outs), last + 1)) << "ops opened up to " << last;
  }
}

// Each shard notes the ops it opens on its own line; a session starts past
// the latest of them all, in serial order (op numbers wrap).
TEST(Session, FirstFreshOpIsPastTheLatestOpOfEveryShard) {
  const SwitchConfig cfg = parse_config(std::string(kRoot) + "reducers: {shards: 3}\n");
  Directory d(cfg);
  const Job& j = *d.job(7);
  EXPECT_FALSE(d.first_fresh_op(j));
  d.note_op(j, 9, 0);
  d.note_op(j, 12, 2);
  d.note_op(j, 10, 1);
  d.note_op(j, 4, 2);  // older: shard 2 stays at 12
  EXPECT_EQ(d.first_fresh_op(j), 13u);
  Directory w(cfg);  // across the wrap
  const Job& k = *w.job(7);
  w.note_op(k, 0xFFFFFFF0u, 0);
  w.note_op(k, 0xFFFFFFFEu, 2);
  w.note_op(k, 5, 1);  // 7 past 0xFFFFFFFE
  EXPECT_EQ(w.first_fresh_op(k), 6u);
}

TEST(Session, ALeafForwardsJoinsUpWithItsFreshOpAndJoinedsDown) {
  Node leaf(kLeaf);
  leaf.dir.note_op(*leaf.dir.job(7), 99);
  ASSERT_TRUE(leaf.feed(leaf.member(2), 0, join(2, 0x22)).admitted());
  ASSERT_EQ(leaf.cap.outs.size(), 1u);
  const Out& up = leaf.cap.outs[0];
  EXPECT_EQ(up.h.kind, wire::Kind::JOIN);
  EXPECT_EQ(up.h.chunk, 100u);  // the first op fresh at the leaf
  EXPECT_EQ(up.h.sender, 2);
  EXPECT_EQ(up.h.op, 0x22u);
  EXPECT_EQ(up.dst.ip, leaf.cfg.parent->addr.ip);
  // The parent's JOINED for rank 3 goes down to rank 3.
  std::vector<uint8_t> msg = header(6, 7, 0x33, 100, 3, 4, 4, 1);
  msg.push_back(0x0F);
  const Verdict v = leaf.feed(leaf.cfg.parent->addr, 1, msg);
  ASSERT_TRUE(v.admitted() && v.from_parent);
  ASSERT_EQ(leaf.cap.outs.size(), 2u);
  const Out& down = leaf.cap.outs[1];
  EXPECT_EQ(down.h.kind, wire::Kind::JOINED);
  EXPECT_EQ(down.dst.ip, leaf.member(3).ip);
  EXPECT_EQ(down.h.chunk, 100u);
  ASSERT_EQ(down.body_size(), 1u);
  EXPECT_EQ((*down.body)[0], 0x0F);
}

TEST(Session, JoinsFromStrangersOrWithNonceZeroAreRefused) {
  Node root(kRoot);
  // A JOIN claiming rank 1 from rank 0's address: a spoof, never answered.
  EXPECT_EQ(root.feed(root.member(0), 0, join(1, 5)).drop, Drop::SPOOFED);
  // Nonce 0 from a member: malformed, and told so.
  root.feed(root.member(0), 0, join(0, 0));
  ASSERT_EQ(root.cap.outs.size(), 1u);
  EXPECT_EQ(root.cap.outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(root.cap.outs[0].h.status, uint8_t(wire::NackReason::MALFORMED));
  // A JOINED at a root (it has no parent): from nobody it takes.
  EXPECT_FALSE(root.feed(root.member(0), 0, header(6, 7, 1, 0, 0, 4, 0, 0)).admitted());
}

TEST(Session, TheParserTakesOnlyTheDocumentedShapes) {
  wire::Parsed p;
  EXPECT_EQ(wire::parse_message(join(0, 1), &p), wire::Refusal::OK);
  auto with = [](std::vector<uint8_t> m, size_t at, uint8_t v) {
    m[at] = v;
    return m;
  };
  EXPECT_EQ(wire::parse_message(with(join(0, 1), 24, 1), &p), wire::Refusal::BAD_DTYPE);  // a descriptor
  EXPECT_EQ(wire::parse_message(with(join(0, 1), 30, 1), &p), wire::Refusal::BAD_FLAGS);
  EXPECT_EQ(wire::parse_message(with(join(0, 1), 21, 1), &p), wire::Refusal::BAD_TERMS);  // JOIN: terms 0
  EXPECT_EQ(wire::parse_message(with(join(0, 1), 23, 1), &p), wire::Refusal::BAD_COUNT);
  EXPECT_EQ(wire::parse_message(with(join(0, 1), 31, 1), &p), wire::Refusal::BAD_STATUS);
  std::vector<uint8_t> body = join(0, 1);
  body.push_back(0);
  EXPECT_EQ(wire::parse_message(body, &p), wire::Refusal::PAYLOAD_LENGTH);  // JOIN: no body
  std::vector<uint8_t> j = header(6, 7, 1, 0, 0, 9, 9, 1);
  EXPECT_EQ(wire::parse_message(j, &p), wire::Refusal::OK);  // JOINED without its bitmap
  j.insert(j.end(), {0xFF, 0x01});                           // ceil(9 / 8) = 2 bytes
  EXPECT_EQ(wire::parse_message(j, &p), wire::Refusal::OK);
  EXPECT_EQ(p.payload_len, 2u);
  j.push_back(0);
  EXPECT_EQ(wire::parse_message(j, &p), wire::Refusal::PAYLOAD_LENGTH);
  EXPECT_EQ(wire::parse_message(header(6, 7, 1, 0, 0, 9, 10, 1), &p), wire::Refusal::BAD_TERMS);  // > group
  EXPECT_EQ(wire::parse_message(header(6, 7, 1, 0, 0, 9, 9, 2), &p), wire::Refusal::BAD_STATUS);
}

// A pooled job (PROTOCOL.md, Job pools) has room for max_group ranks (16
// here) but its session is of the R it was allocated with (3): JOINEDs carry
// group 3, a bitmap of ceil(3 / 8) = 1 byte, and COMPLETE comes with the
// third rank; a LEAVE takes the rank out of the session (no longer complete),
// and a JOIN again (a new process: a new nonce) completes a session again.
TEST(Session, APooledJobsSessionIsOfItsR) {
  Node root(R"(
switch: {id: 1}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
pools:
  - {jobs: {first: 500, count: 1}, max_group: 16, ranges: [10.0.0.0/24]}
)");
  const auto from = [](uint8_t r) { return wire::Endpoint{{2, 0, 0, 0, 0, r}, 0x0A000001u + r, 20562}; };
  auto alloc = header(7, 500, 0xAB, 0, 0, 3, 0, 0);  // ALLOC: pool 500, R = 3
  alloc.resize(alloc.size() + 8, 0);                 // padded to its ALLOCATED's size (PROTOCOL.md, Job pools)
  root.feed(from(0), 0, alloc);
  ASSERT_EQ(root.cap.outs.size(), 1u);
  ASSERT_EQ(root.cap.outs[0].h.kind, wire::Kind::ALLOCATED);
  root.cap.outs.clear();
  for (uint16_t r = 0; r < 3; ++r) root.feed(from(uint8_t(r)), 0, header(5, 500, 0x10 + r, 0, r, 3, 0, 0));
  ASSERT_EQ(root.cap.outs.size(), 5u);  // JOINED to rank 0, to rank 1, then COMPLETE to all three
  for (const Out& o : root.cap.outs) {
    EXPECT_EQ(o.h.kind, wire::Kind::JOINED);
    EXPECT_EQ(o.h.group, 3);
    EXPECT_EQ(o.body_size(), 1u);
  }
  const Out& done = root.cap.outs.back();
  EXPECT_EQ(done.h.status & 1, 1);
  EXPECT_EQ(done.h.terms, 3);
  EXPECT_EQ((*done.body)[0], 0x07);
  root.cap.outs.clear();
  // Rank 1 leaves (LEFT: 2 still bound); a new process for rank 1 joins from the same address.
  root.feed(from(1), 0, header(9, 500, 0x11, 0, 1, 0, 0, 0));
  ASSERT_EQ(root.cap.outs.size(), 1u);
  EXPECT_EQ(root.cap.outs[0].h.kind, wire::Kind::LEFT);
  EXPECT_EQ(root.cap.outs[0].h.terms, 2);
  root.cap.outs.clear();
  root.feed(from(1), 0, header(5, 500, 0x21, 0, 1, 3, 0, 0));
  ASSERT_EQ(root.cap.outs.size(), 3u);  // the session is complete again: COMPLETE to the three
  EXPECT_EQ(root.cap.outs[0].h.status & 1, 1);
  EXPECT_EQ(root.cap.outs[1].h.op, 0x21u);  // rank 1's new nonce
}

// A JOINED's bitmap (ceil(R / 8) bytes) is sent only where it fits one
// frame's body (wire::max_body of the reducer's 1500-byte MTU: 1440 bytes,
// R up to 11520); past that every JOINED goes without one (PROTOCOL.md: a
// receiver accepts JOINED with no body), so the session still completes.
// Rank 0 joins here, the other R - 1 through the child.
TEST(Session, AGroupWhoseBitmapOutgrowsAFrameCompletesWithoutOne) {
  ASSERT_EQ(wire::max_body(1500), 1440u);
  for (const uint16_t R : {uint16_t(11520), uint16_t(11521)}) {
    const std::string yaml = R"(
switch: {id: 1, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.1.254}
jobs:
  - id: 7
    group: )" + std::to_string(R) +
                             R"(
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:00", ip: 10.0.0.1}
    children:
      - {id: 2, port: 1, mac: "02:00:00:00:fe:02", ip: 10.0.1.2, ranks: )" +
                             std::to_string(R - 1) + "}\n";
    Node root(yaml.c_str());
    const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
    const size_t bitmap = R <= 11520 ? size_t(1440) : 0;  // bytes in every JOINED
    for (uint16_t r = 0; r < R; ++r) {
      root.cap.outs.clear();
      const auto msg = header(5, 7, 1000u + r, 0, r, R, 0, 0);
      ASSERT_TRUE((r == 0 ? root.feed(root.member(0), 0, msg) : root.feed(child, 1, msg)).admitted()) << r;
      ASSERT_EQ(root.cap.outs.size(), r + 1u < R ? 1u : size_t(R)) << "R " << R << ", rank " << r;
      for (const Out& o : root.cap.outs) {
        ASSERT_EQ(o.h.kind, wire::Kind::JOINED);
        ASSERT_EQ(o.body_size(), bitmap) << "R " << R << ", after rank " << r << " joined";
      }
    }
    // The last JOIN: COMPLETE to each of the R ranks, with every rank's bit where a bitmap is sent.
    std::vector<bool> told(R, false);
    for (const Out& o : root.cap.outs) {
      EXPECT_EQ(o.h.status & 1, 1);
      EXPECT_EQ(o.h.terms, R);
      EXPECT_EQ(o.h.op, 1000u + o.h.sender);
      ASSERT_LT(o.h.sender, R);
      told[o.h.sender] = true;
      if (bitmap) {
        for (uint16_t r = 0; r < R; ++r) ASSERT_TRUE((*o.body)[r / 8] >> (r % 8) & 1) << r;
      }
    }
    EXPECT_EQ(std::count(told.begin(), told.end(), true), R);
  }
}

// Completing a session answers each of its R ranks with one and the same
// bitmap: it is built once and shared by the R JOINEDs (Out::body), not
// built R times (R x R bits at R = 65535). So is a repeat JOIN's answer
// while nothing changed; a change (a rank restarting) builds a new one.
TEST(Session, CompletionBuildsTheBitmapOnceForEveryRank) {
  Node root(kRoot);
  const wire::Endpoint child = root.cfg.jobs[0].children[0].addr;
  for (uint16_t r : {0, 1}) root.feed(root.member(r), 0, join(r, 100 + r));
  root.feed(child, 1, join(2, 102));
  root.cap.outs.clear();
  root.feed(child, 1, join(3, 103));  // the last: COMPLETE to all four
  ASSERT_EQ(root.cap.outs.size(), 4u);
  const auto shared = root.cap.outs[0].body;
  ASSERT_TRUE(shared);
  for (const Out& o : root.cap.outs) {
    EXPECT_TRUE(joined(o).complete);
    EXPECT_EQ(joined(o).bitmap, 0x0F);
    EXPECT_EQ(o.body.get(), shared.get()) << "rank " << o.h.sender << "'s JOINED has a bitmap of its own";
  }
  root.feed(root.member(0), 0, join(0, 100));  // a repeat: nothing changed
  EXPECT_EQ(root.cap.outs.back().body.get(), shared.get());
  root.feed(root.member(1), 0, join(1, 201));  // rank 1 restarted: a new session of one
  EXPECT_EQ(joined(root.cap.outs.back()).bitmap, 0x02);
  EXPECT_EQ(joined(root.cap.outs[0]).bitmap, 0x0F) << "a JOINED sent is never changed";
}

}  // namespace
