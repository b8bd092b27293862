// Floods a tenant (or whoever spoofs one) can aim at a shared switch, and
// what each must not cost the others or reflect (SECURITY-REVIEW F9, F10,
// F11, F18): pool refusals bounded per source IP whatever ports it rotates,
// and never more bytes than it sent; ALLOCs rate-limited per IP and ids not
// predictable; ids nobody joins given back after join_timeout_ms; one job
// cannot take every slot of a shard. Messages are written byte by byte from
// PROTOCOL.md (wire_bytes.hpp).
#include <gtest/gtest.h>

#include <set>

#include "pool_util.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

using namespace prism::test;

constexpr size_t kHeaders = 74;

size_t bytes_to(const std::vector<Out>& outs, uint32_t ip) {
  size_t b = 0;
  for (const Out& o : outs)
    if (o.dst.ip == ip) b += kHeaders + o.body_size();
  return b;
}

// F18: malformed ALLOCs from one IP outside the pool's ranges, from 1,000
// source ports, 1,000 a second for 2 s: at most one refusal per 100 ms goes
// to that IP (20 in 2 s, not one per port), and never more bytes than it sent.
TEST(Floods, RefusalsToOneIpAreBoundedWhateverPortsItRotates) {
  Node n;
  const uint32_t victim = 0xC0000201;  // 192.0.2.1
  size_t sent = 0;
  for (uint32_t k = 0; k < 2000; ++k) {
    const wire::Endpoint src{{2, 0, 0, 0, 0x77, 1}, victim, uint16_t(1 + k % 1000)};
    auto m = alloc(1000, 0x100 + k, 2);
    m[30] = 0x80;  // malformed flags
    n.feed(src, 0, m, uint64_t(k) * kMs);
    sent += kHeaders + m.size() - 32;
  }
  const auto outs = n.cap.take();
  EXPECT_LE(outs.size(), 21u) << "one refusal per 100 ms at most";
  EXPECT_GE(outs.size(), 10u) << "an honest source is still told, at that pace";
  EXPECT_LE(bytes_to(outs, victim), sent);
  EXPECT_GT(n.pool().counters().nacks_limited.load(), 1900u);
}

// F9, F10: one in-range IP sends 1,000 well-formed ALLOCs from rotating
// ports within 100 ms: at most a burst of 8 are taken (the rest dropped as
// rate_limited before any id is looked at), so one source cannot empty the
// pool; and the ids it got are not simply the lowest.
TEST(Floods, AllocsFromOneIpAreRateLimitedAndIdsAreNotPredictable) {
  Node n(R"(
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
pools:
  - {jobs: {first: 5000, count: 64}, max_group: 2, ranges: [10.0.0.0/24], ports: [0]}
)");
  std::set<uint32_t> ids;
  for (uint32_t k = 0; k < 1000; ++k) {
    n.feed(host(1, uint16_t(2000 + k)), 0, alloc(5000, 0x1000 + k, 2), k * 100000);  // 0.1 ms apart
    for (const Out& o : n.cap.take())
      if (o.h.kind == wire::Kind::ALLOCATED) ids.insert(o.h.job);
  }
  EXPECT_LE(ids.size(), 8u);
  EXPECT_GE(ids.size(), 1u);
  EXPECT_GE(n.dropped(Drop::RATE_LIMITED), 990u);
  EXPECT_GE(n.dir.pool(5000)->free_ids(), 56u);
  // Lowest-first would have given 5000..5007.
  EXPECT_NE(ids, (std::set<uint32_t>{5000, 5001, 5002, 5003, 5004, 5005, 5006, 5007}));
  // Spread over the pool: 8 random ids of 64 all below 5008 has odds 1 in 4.4e9.
  EXPECT_GT(*ids.rbegin(), 5007u);
}

// F9: an ALLOC whose asker never joins (a spoofed source cannot: it never
// sees the id) holds it join_timeout_ms, not idle_timeout_ms.
TEST(Floods, AnIdNobodyJoinsIsGivenBackAfterTheJoinTimeout) {
  Node n(R"(
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
pools:
  - {jobs: {first: 5000, count: 1}, max_group: 2, ranges: [10.0.0.0/24], idle_timeout_ms: 60000,
     join_timeout_ms: 2000}
)");
  n.feed(host(1), 0, alloc(5000, 0xA, 2), 0);
  ASSERT_EQ(n.cap.take().size(), 1u);
  EXPECT_EQ(n.dir.pool(5000)->free_ids(), 0u);
  n.tick(1000 * kMs);
  EXPECT_EQ(n.state(5000), PoolJobState::ALLOCATED);
  n.tick(2100 * kMs);
  EXPECT_EQ(n.state(5000), PoolJobState::FREE);
  EXPECT_EQ(n.dir.pool(5000)->free_ids(), 1u);
  // A joined job is held for idle_timeout_ms, as before.
  n.feed(host(2), 0, alloc(5000, 0xB, 2), 2200 * kMs);
  n.feed(host(2), 0, join(5000, 0, 2, 0x55), 2200 * kMs);
  n.tick(5000 * kMs);
  EXPECT_EQ(n.state(5000), PoolJobState::JOINING);
}

// F11: job A's member sends one CONTRIB for each of 4,096 ops that will
// never complete; job B, on the same shard, still gets slots: A stops at its
// default quota (a fair share of the table), not at the table's end.
TEST(Floods, OneJobCannotTakeEverySlot) {
  Node n(R"(
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.2}
  - id: 8
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:03", ip: 10.0.0.3}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:04", ip: 10.0.0.4}
reducers: {shards: 1, slots: 64}
op_timeout_ms: 0
)");
  ASSERT_EQ(n.cfg.jobs[0].slot_quota, 32u) << "64 slots between two jobs";
  const wire::Endpoint a0{{2, 0, 0, 0, 0, 1}, 0x0A000001, 20562};
  const wire::Endpoint b0{{2, 0, 0, 0, 0, 3}, 0x0A000003, 20562}, b1{{2, 0, 0, 0, 0, 4}, 0x0A000004, 20562};
  for (uint32_t op = 0; op < 4096; ++op) n.feed(a0, 0, contrib(7, op, 0, 2, 1.0f));
  n.cap.take();
  EXPECT_EQ(n.red[0]->job_stats().at(7).in_flight, 32u);
  n.feed(b0, 0, contrib(8, 0, 0, 2, 1.0f));
  n.feed(b1, 0, contrib(8, 0, 1, 2, 2.0f));
  const auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u) << "job B's op completes";
  EXPECT_EQ(outs[0].h.kind, wire::Kind::RESULT);
}

}  // namespace
