// The job-pool harness of the switch's unit tests: a Node (a Directory and its
// reducer shards, fed datagrams through parse -> ingress -> Reducer as the RX
// stage does) and pool messages written byte by byte from PROTOCOL.md's
// tables (wire_bytes.hpp), not by the code under test.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "switch/reducer.hpp"
#include "wire_bytes.hpp"

namespace prism::test {

using namespace prism::sw;

// Two shards: pool 1000's ALLOCs go to shard 0, job 1001's JOINs to shard 1.
inline const char* kPools = R"(
switch: {id: 9, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.9.254}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 1, mac: "02:00:00:00:09:00", ip: 10.0.9.1}
      - {rank: 1, port: 1, mac: "02:00:00:00:09:01", ip: 10.0.9.2}
pools:
  - jobs: {first: 1000, count: 2}
    max_group: 4
    ranges: [10.0.0.0/24]
    ports: [0]
    slot_quota: 8
    idle_timeout_ms: 1000
reducers: {shards: 2}
op_timeout_ms: 0
)";

inline constexpr uint64_t kMs = 1000000;

struct Capture : Sink {
  std::vector<Out> outs;
  void send(Out&& o) override { outs.push_back(std::move(o)); }
  std::vector<Out> take() { return std::exchange(outs, {}); }
};

inline std::vector<uint8_t> header(uint8_t kind, uint32_t job, uint32_t op, uint32_t chunk, uint16_t sender,
                                   uint16_t group, uint16_t terms) {
  return test::session_bytes(kind, job, op, chunk, sender, group, terms);
}
// With its 8 bytes of padding (PROTOCOL.md, Job pools: as large as the ALLOCATED it asks for).
inline std::vector<uint8_t> alloc(uint32_t pool, uint32_t nonce, uint16_t group) {
  std::vector<uint8_t> m = header(7, pool, nonce, 0, 0, group, 0);
  m.resize(m.size() + 8, 0);
  return m;
}
inline std::vector<uint8_t> join(uint32_t job, uint16_t rank, uint16_t group, uint32_t nonce) {
  return header(5, job, nonce, 0, rank, group, 0);
}
inline std::vector<uint8_t> leave(uint32_t job, uint16_t rank, uint32_t nonce) {
  return header(9, job, nonce, 0, rank, 0, 0);
}
// One fp32 element, KULISCH_FIXED, LAST_CHUNK.
inline std::vector<uint8_t> contrib(uint32_t job, uint32_t op, uint16_t rank, uint16_t group, float x) {
  std::vector<uint8_t> h = header(1, job, op, 0, rank, group, 1);
  h[23] = 1;          // count
  h[24] = h[25] = 1;  // fp32 in and out
  h[26] = 2;          // KULISCH_FIXED
  h[27] = 1;          // elements in dtype
  h[28] = 2;          // KULISCH transport
  h[29] = 1;          // IEEE
  h[30] = 2;          // LAST_CHUNK
  h.resize(36);
  std::memcpy(h.data() + 32, &x, 4);  // little-endian
  return h;
}

inline wire::Endpoint host(uint8_t last, uint16_t port = 20562, uint8_t net = 0) {
  return wire::Endpoint{{2, 0, 0, 0, net, last}, 0x0A000000u | uint32_t(net) << 8 | last, port};
}

struct Node {
  SwitchConfig cfg;
  Directory dir;
  std::vector<std::unique_ptr<Reducer>> red;
  Capture cap;
  NackLimiter limit;
  uint64_t drops[size_t(Drop::kCount)] = {};
  // `result_mtu`: the ports' IP MTU, which a RESULT must fit.
  explicit Node(const char* yaml = kPools, size_t result_mtu = 9000) : cfg(parse_config(yaml)), dir(cfg) {
    for (uint32_t s = 0; s < cfg.reducer_shards; ++s)
      red.push_back(std::make_unique<Reducer>(dir, 64, 1500, s, result_mtu));
  }
  // A datagram from `src` on switch port `port` at time `now`: RX's path.
  Verdict feed(const wire::Endpoint& src, uint16_t port, const std::vector<uint8_t>& msg, uint64_t now = 0) {
    wire::Parsed p;
    const wire::Refusal r = wire::parse_message(msg, &p);
    p.src = src;
    p.dst = dir.self(port);
    const Verdict v = ingress(dir, r, p, port);
    if (v.admitted())
      red[wire::shard_of(p.h, cfg.reducer_shards)]->on_packet(p, v, now, cap);
    else {
      ++drops[size_t(*v.drop)];
      if (v.pool) v.pool->counters().refused[size_t(*v.drop)].fetch_add(1);  // as RX counts them
      answer(dir, v, p, cap, &limit, now);
    }
    return v;
  }
  void tick(uint64_t now) {
    for (auto& r : red) r->tick(now, cap);
  }
  uint64_t dropped(Drop d) const {
    uint64_t n = drops[size_t(d)];
    for (const auto& r : red) n += r->stats().drops[size_t(d)];
    return n;
  }
  uint64_t elements() const {
    uint64_t n = 0;
    for (const auto& r : red) n += r->stats().elements;
    return n;
  }
  const Pool& pool() const { return *dir.pool(1000); }
  PoolJobState state(uint32_t job) const { return dir.job(job)->pooled->state(); }
};

// One reply: its kind, where it went, and its fields.
inline void expect_nack(const Out& o, wire::NackReason why, const wire::Endpoint& to, uint32_t job, uint32_t nonce,
                        uint16_t sender) {
  EXPECT_EQ(o.h.kind, wire::Kind::NACK);
  EXPECT_EQ(o.h.status, uint8_t(why)) << wire::name(wire::NackReason(o.h.status));
  EXPECT_EQ(o.dst.ip, to.ip);
  EXPECT_EQ(o.dst.port, to.port);
  EXPECT_EQ(o.h.job, job);
  EXPECT_EQ(o.h.op, nonce);
  EXPECT_EQ(o.h.sender, sender);
  EXPECT_EQ(uint8_t(o.h.dtype), 0);  // no descriptor: a pool message's echo
  EXPECT_EQ(o.body_size(), 0u);
}

inline uint32_t allocated_job(const Out& o, uint32_t nonce, uint16_t group) {
  EXPECT_EQ(o.h.kind, wire::Kind::ALLOCATED);
  EXPECT_EQ(o.h.op, nonce);
  EXPECT_EQ(o.h.chunk, 1000u);  // the pool id
  EXPECT_EQ(o.h.sender, 9);     // the switch id
  EXPECT_EQ(o.h.group, group);
  EXPECT_EQ(o.h.terms, 2);  // the switch's shards
  EXPECT_EQ(o.h.count, 0);
  // slot_quota 8, idle_timeout_ms 1000, big-endian u32 each.
  EXPECT_EQ(*o.body, (std::vector<uint8_t>{0, 0, 0, 8, 0, 0, 0x03, 0xE8}));
  return o.h.job;
}

// Allocates a job of `group` ranks asked by rank 0 at host(1); binds ranks
// 0..group-1 (host(1 + r)) with nonces 100 + r; returns the job id, and in
// `first_op` the session's first op, which every rank's JOINED COMPLETE names.
inline uint32_t live_job(Node& n, uint16_t group, uint32_t nonce, uint64_t now = 0, uint32_t* first_op = nullptr) {
  n.feed(host(1), 0, alloc(1000, nonce, group), now);
  auto outs = n.cap.take();
  EXPECT_EQ(outs.size(), 1u);
  const uint32_t job = allocated_job(outs.at(0), nonce, group);
  for (uint16_t r = 0; r < group; ++r)
    EXPECT_TRUE(n.feed(host(uint8_t(1 + r)), 0, join(job, r, group, 100 + r), now).admitted());
  EXPECT_EQ(n.state(job), PoolJobState::LIVE);
  outs = n.cap.take();
  std::vector<uint32_t> firsts;  // by rank
  for (const Out& o : outs)
    if (o.h.kind == wire::Kind::JOINED && (o.h.status & 1)) firsts.push_back(o.h.chunk);
  EXPECT_EQ(firsts.size(), size_t(group)) << "JOINED COMPLETE to each rank";
  for (const uint32_t f : firsts) EXPECT_EQ(f, firsts.at(0)) << "the ranks of one session told different first ops";
  if (first_op && !firsts.empty()) *first_op = firsts[0];
  return job;
}

}  // namespace prism::test
