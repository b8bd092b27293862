// One pool id, two tenants: what the first leaves behind (open slots, retained
// results, tombstones) is never the second's to touch or read, however fast
// the id is released and taken again (SECURITY-REVIEW F1, F2). Messages are
// written byte by byte from PROTOCOL.md (wire_bytes.hpp); sums are of small
// integers in fp32, exact in any order, checked against plain addition.
#include <gtest/gtest.h>

#include <cstring>

#include "pool_util.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

using namespace prism::test;

// One id, up to 128 ranks, one shard: the previous tenant's slots and
// results live in the very shard the next tenant's packets reach.
const char* kWide = R"(
switch: {id: 9, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
pools:
  - jobs: {first: 1000, count: 1}
    max_group: 128
    ranges: [10.0.0.0/24]
    ports: [0]
reducers: {shards: 1}
op_timeout_ms: 0
)";

// A QUERY: the CONTRIB's header without its element (PROTOCOL.md, Queries).
std::vector<uint8_t> query(uint32_t job, uint32_t op, uint16_t rank, uint16_t group) {
  std::vector<uint8_t> q = contrib(job, op, rank, group, 0.0f);
  q[3] = 11;  // QUERY
  q[23] = 0;  // count 0
  q[30] = 0;  // flags 0
  q.resize(32);
  return q;
}

std::vector<uint8_t> retransmit(uint32_t job, uint32_t op, uint16_t rank, uint16_t group, float x) {
  std::vector<uint8_t> c = contrib(job, op, rank, group, x);
  c[30] |= 1;  // RETRANSMIT
  return c;
}

// ALLOC `group` ranks from `asker`; the id the ALLOCATED names.
uint32_t take(Node& n, const wire::Endpoint& asker, uint32_t nonce, uint16_t group, uint64_t now = 0) {
  n.cap.take();
  n.feed(asker, 0, alloc(1000, nonce, group), now);
  const auto outs = n.cap.take();
  EXPECT_EQ(outs.size(), 1u);
  if (outs.empty()) return 0;
  EXPECT_EQ(outs[0].h.kind, wire::Kind::ALLOCATED);
  return outs[0].h.job;
}

// Binds ranks [0, group) of `job` at host(base + r), nonces 0x100 + r.
void bind_all(Node& n, uint32_t job, uint16_t group, uint8_t base, uint64_t now = 0) {
  for (uint16_t r = 0; r < group; ++r)
    EXPECT_TRUE(n.feed(host(uint8_t(base + r)), 0, join(job, r, group, 0x100 + r), now).admitted());
}

void leave_all(Node& n, uint32_t job, uint16_t group, uint8_t base, uint64_t now = 0) {
  for (uint16_t r = 0; r < group; ++r) n.feed(host(uint8_t(base + r)), 0, leave(job, r, 0x100 + r), now);
}

// F1: tenant A (R = 2) opens op 42 and leaves at once; tenant B takes the
// same id with R = 128 before any sweep. B's rank 127 contributes to, and
// queries, (job, 42, 0) with group 2: the stale slot's bitmaps were sized
// for two ranks. Nothing of A's slot may be touched (under ASan a write past
// its bitmap is a heap-buffer-overflow), no RESULT goes out, and B's own op
// 42 (group 128) is its own.
TEST(Tenancy, ANewTenantNeverReachesThePreviousTenantsOpenSlot) {
  Node n(kWide);
  const uint32_t job = take(n, host(1), 0xA1, 2);
  ASSERT_EQ(job, 1000u);
  bind_all(n, job, 2, 1);
  n.cap.take();
  ASSERT_TRUE(n.feed(host(1), 0, contrib(job, 42, 0, 2, 1.0f)).admitted());  // opens (1000, 42, 0)
  leave_all(n, job, 2, 1);
  ASSERT_EQ(n.state(job), PoolJobState::FREE);
  n.cap.take();
  // No tick: the stale slot is still there when B arrives.
  ASSERT_EQ(take(n, host(9), 0xB1, 128), job) << "the same id again";
  ASSERT_TRUE(n.feed(host(10), 0, join(job, 127, 128, 0x77)).admitted());
  n.cap.take();
  const uint64_t elements = n.elements();
  n.feed(host(10), 0, query(job, 42, 127, 2));
  n.feed(host(10), 0, contrib(job, 42, 127, 2, 5.0f));
  for (const Out& o : n.cap.take()) {
    EXPECT_NE(o.h.kind, wire::Kind::RESULT) << "a RESULT from the previous tenant's slot";
    EXPECT_EQ(o.dst.ip, host(10).ip) << "only the asking rank hears anything";
    if (o.h.kind == wire::Kind::STATUS) {
      EXPECT_EQ(o.h.terms, 0) << "the status of A's slot, which holds A's contribution";
    }
  }
  EXPECT_EQ(n.elements(), elements) << "B's contribution reached A's accumulator";
  // B's own op 42, with B's group, is a chunk of its own: nothing of A's in it.
  size_t open = 0;
  for (const auto& r : n.red) open += r->open_slots().size();
  EXPECT_LE(open, 1u);
}

// F2: tenant A completes op 0 (its RESULT retained for retention_ms) and
// leaves; tenant B takes the id, binds, and asks for (job, 0, 0) by QUERY and
// by RETRANSMIT within retention_ms. B never gets A's result.
TEST(Tenancy, ANewTenantNeverReadsThePreviousTenantsResults) {
  Node n(kWide);
  const uint32_t job = take(n, host(1), 0xA1, 2);
  bind_all(n, job, 2, 1);
  n.cap.take();
  n.feed(host(1), 0, contrib(job, 0, 0, 2, 1234.0f));
  n.feed(host(2), 0, contrib(job, 0, 1, 2, 4321.0f));
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u);
  ASSERT_EQ(outs[0].h.kind, wire::Kind::RESULT);
  leave_all(n, job, 2, 1, 1 * kMs);
  ASSERT_EQ(n.state(job), PoolJobState::FREE);
  n.tick(2 * kMs);
  ASSERT_EQ(take(n, host(5), 0xB1, 1, 3 * kMs), job);
  ASSERT_TRUE(n.feed(host(5), 0, join(job, 0, 1, 0x99), 3 * kMs).admitted());
  n.cap.take();
  n.feed(host(5), 0, query(job, 0, 0, 1), 4 * kMs);
  n.feed(host(5), 0, query(job, 0, 0, 2), 4 * kMs);  // A's group
  n.feed(host(5), 0, retransmit(job, 0, 0, 2, 0.0f), 5 * kMs);
  for (const Out& o : n.cap.take()) {
    EXPECT_NE(o.h.kind, wire::Kind::RESULT) << "the previous tenant's RESULT, to the next tenant";
    if (o.body && o.body->size() >= 4) {
      float x;
      std::memcpy(&x, o.body->data(), 4);
      EXPECT_NE(x, 5555.0f) << "A's sum in a reply to B";
    }
  }
  // B's own op 0 (group 1) completes with B's value alone.
  n.feed(host(5), 0, contrib(job, 0, 0, 1, 7.0f), 6 * kMs);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_EQ(outs[0].h.kind, wire::Kind::RESULT);
  float x;
  std::memcpy(&x, outs[0].body->data(), 4);
  EXPECT_EQ(x, 7.0f);
  // And B's result, retained, is B's to recall.
  n.feed(host(5), 0, query(job, 0, 0, 1), 7 * kMs);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].h.kind, wire::Kind::RESULT);
  std::memcpy(&x, outs[0].body->data(), 4);
  EXPECT_EQ(x, 7.0f);
}

// F1's completion path: A's stale slot with one contribution in; B (same R)
// contributes the missing rank under B's binding before any sweep. The slot
// must not complete with A's contribution in it and send it to B.
TEST(Tenancy, APreviousTenantsContributionNeverCompletesInTheNextTenantsResult) {
  Node n(kWide);
  const uint32_t job = take(n, host(1), 0xA1, 2);
  bind_all(n, job, 2, 1);
  n.cap.take();
  n.feed(host(1), 0, contrib(job, 42, 0, 2, 1000.0f));
  leave_all(n, job, 2, 1);
  ASSERT_EQ(take(n, host(20), 0xB1, 2), job);
  bind_all(n, job, 2, 20);
  n.cap.take();
  n.feed(host(21), 0, contrib(job, 42, 1, 2, 2.0f));
  for (const Out& o : n.cap.take()) EXPECT_NE(o.h.kind, wire::Kind::RESULT) << "A's 1000 + B's 2";
  n.feed(host(20), 0, contrib(job, 42, 0, 2, 3.0f));
  const auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u) << "B's op 42 completes with B's two contributions";
  for (const Out& o : outs) {
    ASSERT_EQ(o.h.kind, wire::Kind::RESULT);
    float x;
    std::memcpy(&x, o.body->data(), 4);
    EXPECT_EQ(x, 5.0f);
  }
}

}  // namespace
