// Job pools (PROTOCOL.md, "Job pools") through parse -> ingress -> Reducer,
// with messages written byte by byte from PROTOCOL.md's tables here: ALLOC
// and ALLOCATED, the binding JOINs, LIVE, LEAVE and LEFT, the release and
// reuse of an id, idle reclaim, and every refusal with its reason, its NACK
// (to the source, rate-limited) and no accumulator touched. The sums are of
// small integers in fp32, exact in any order: checked against plain addition.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "pool_util.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

using namespace prism::test;

TEST(Pool, AllocBindLiveLeaveRelease) {
  Node n;
  EXPECT_EQ(n.pool().free_ids(), 2u);
  ASSERT_TRUE(n.feed(host(1), 0, alloc(1000, 0xA1, 3)).admitted());
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].dst.ip, host(1).ip);  // to the asker
  EXPECT_EQ(outs[0].port, 0);
  const uint32_t job = allocated_job(outs[0], 0xA1, 3);
  EXPECT_TRUE(job == 1000u || job == 1001u) << job;  // one of the pool's ids (which one is not predictable: F9)
  EXPECT_EQ(n.state(job), PoolJobState::ALLOCATED);
  // The same ALLOC again (its ALLOCATED was lost), past the rate limit: the same id.
  n.feed(host(1), 0, alloc(1000, 0xA1, 3), 200 * kMs);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(allocated_job(outs[0], 0xA1, 3), job);
  EXPECT_EQ(n.pool().counters().allocated.load(), 1u);
  // Ranks 0..2 join from their addresses: the first JOIN binds each.
  for (uint16_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(n.feed(host(uint8_t(1 + r)), 0, join(job, r, 3, 0x100 + r)).admitted());
    outs = n.cap.take();
    ASSERT_EQ(outs.size(), r < 2 ? 1u : 3u);
    EXPECT_EQ(outs[0].h.kind, wire::Kind::JOINED);
    EXPECT_EQ(n.state(job), r < 2 ? PoolJobState::JOINING : PoolJobState::LIVE);
  }
  for (const Out& o : outs) EXPECT_EQ(o.h.status & 1, 1) << "COMPLETE";  // to each bound address
  EXPECT_EQ(outs[2].dst.ip, host(3).ip);
  // The session's first op, the same to each rank: one past the ops the job opened (none: 0), plus
  // a random offset below 2^24 (PROTOCOL.md, Joining).
  const uint32_t first = outs[0].h.chunk;
  EXPECT_LT(first, 1u << 24);
  for (const Out& o : outs) EXPECT_EQ(o.h.chunk, first);
  // An allreduce: each rank's CONTRIB admitted from its bound address; RESULT to the three.
  for (uint16_t r = 0; r < 3; ++r)
    ASSERT_TRUE(n.feed(host(uint8_t(1 + r)), 0, contrib(job, first, r, 3, float(r + 1))).admitted());
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 3u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(outs[k].h.kind, wire::Kind::RESULT);
    float sum;
    std::memcpy(&sum, outs[k].body->data(), 4);
    EXPECT_EQ(sum, 6.0f);
    EXPECT_EQ(outs[k].dst.ip, host(uint8_t(1 + k)).ip);
  }
  // LEAVE: LEFT with the ranks still bound; the last releases the id.
  for (uint16_t r = 0; r < 3; ++r) {
    ASSERT_TRUE(n.feed(host(uint8_t(1 + r)), 0, leave(job, r, 0x100 + r)).admitted());
    outs = n.cap.take();
    ASSERT_EQ(outs.size(), 1u);
    EXPECT_EQ(outs[0].h.kind, wire::Kind::LEFT);
    EXPECT_EQ(outs[0].h.terms, 2 - r);
    EXPECT_EQ(outs[0].h.group, 3);
    EXPECT_EQ(outs[0].h.op, 0x100u + r);
    EXPECT_EQ(outs[0].dst.ip, host(uint8_t(1 + r)).ip);
  }
  EXPECT_EQ(n.state(job), PoolJobState::FREE);
  EXPECT_EQ(n.pool().counters().released.load(), 1u);
  EXPECT_EQ(n.pool().free_ids(), 2u);
  // A repeated LEAVE (its LEFT was lost) is answered again, and changes nothing.
  n.feed(host(3), 0, leave(job, 2, 0x102), 500 * kMs);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].h.kind, wire::Kind::LEFT);
  EXPECT_EQ(outs[0].h.terms, 0);
  // A JOIN to the id now free: UNKNOWN_JOB, to the source.
  EXPECT_EQ(n.feed(host(1), 0, join(job, 0, 3, 0x77)).drop, Drop::UNKNOWN_JOB);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  expect_nack(outs[0], wire::NackReason::UNKNOWN_JOB, host(1), job, 0x77, 0);
}

TEST(Pool, TwoAllocsGetTwoIdsAndAFullPoolIsRefused) {
  Node n;
  n.feed(host(1), 0, alloc(1000, 0xB1, 2));
  n.feed(host(5), 0, alloc(1000, 0xB2, 2));
  n.feed(host(1), 0, alloc(1000, 0xB3, 2));  // same source, another nonce: another job, but none is left
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 3u);
  const uint32_t a = allocated_job(outs[0], 0xB1, 2), b = allocated_job(outs[1], 0xB2, 2);
  EXPECT_EQ(std::min(a, b), 1000u);
  EXPECT_EQ(std::max(a, b), 1001u);
  expect_nack(outs[2], wire::NackReason::POOL_FULL, host(1), 1000, 0xB3, 0);
  EXPECT_EQ(outs[2].h.group, 2);
  EXPECT_EQ(n.dropped(Drop::POOL_FULL), 1u);
  EXPECT_EQ(n.pool().counters().refused[size_t(Drop::POOL_FULL)].load(), 1u);
  // Again within 100 ms: counted, not answered; after, answered.
  n.feed(host(1), 0, alloc(1000, 0xB4, 2), 50 * kMs);
  EXPECT_TRUE(n.cap.take().empty());
  EXPECT_EQ(n.pool().counters().nacks_limited.load(), 1u);
  n.feed(host(1), 0, alloc(1000, 0xB4, 2), 150 * kMs);
  ASSERT_EQ(n.cap.outs.size(), 1u);
  EXPECT_EQ(n.dropped(Drop::POOL_FULL), 3u);
}

TEST(Pool, RefusalsNameTheirReasonAndTouchNoAccumulator) {
  Node n;
  uint32_t first = 0;  // the session's first op
  const uint32_t job = live_job(n, 2, 0xC1, 0, &first);
  // A source outside the ranges.
  const wire::Endpoint outsider = host(7, 20562, 5);  // 10.0.5.7
  EXPECT_EQ(n.feed(outsider, 0, alloc(1000, 0xC2, 2), 0).drop, Drop::OUT_OF_POOL);
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  expect_nack(outs[0], wire::NackReason::OUT_OF_POOL, outsider, 1000, 0xC2, 0);
  // In range but on a port the pool does not list (and no pool lists): counted, never answered.
  EXPECT_EQ(n.feed(host(8), 1, alloc(1000, 0xC3, 2), 0).drop, Drop::OUT_OF_POOL);
  EXPECT_TRUE(n.cap.take().empty());
  // A group above max_group.
  EXPECT_EQ(n.feed(host(9), 0, alloc(1000, 0xC4, 5), 0).drop, Drop::GROUP_TOO_LARGE);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  expect_nack(outs[0], wire::NackReason::GROUP_TOO_LARGE, host(9), 1000, 0xC4, 0);
  EXPECT_EQ(outs[0].h.group, 5);
  // A second JOIN for bound rank 1 from another address: RANK_TAKEN, to that address.
  const wire::Endpoint spoof = host(2, 30000);  // rank 1's IP, another UDP port
  EXPECT_EQ(n.feed(spoof, 0, join(job, 1, 2, 0xD1), 0).drop, Drop::RANK_TAKEN);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  expect_nack(outs[0], wire::NackReason::RANK_TAKEN, spoof, job, 0xD1, 1);
  // Its CONTRIB is dropped unanswered; so is a LEAVE from it (RANK_TAKEN, answered, nothing unbound).
  EXPECT_EQ(n.feed(spoof, 0, contrib(job, first, 1, 2, 1000.0f), 200 * kMs).drop, Drop::RANK_TAKEN);
  EXPECT_TRUE(n.cap.take().empty());
  EXPECT_EQ(n.feed(spoof, 0, leave(job, 1, 0x101), 300 * kMs).drop, Drop::RANK_TAKEN);
  EXPECT_EQ(n.cap.take().size(), 1u);
  EXPECT_EQ(n.state(job), PoolJobState::LIVE);
  // A JOIN with another group: MALFORMED, to the source.
  EXPECT_EQ(n.feed(host(3), 0, join(job, 0, 3, 0xD2), 0).drop, Drop::MALFORMED);
  EXPECT_EQ(n.cap.take().size(), 1u);
  // An ALLOC naming no pool: UNKNOWN_JOB.
  EXPECT_EQ(n.feed(host(4), 0, alloc(1001, 0xD3, 2), 0).drop, Drop::UNKNOWN_JOB);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  expect_nack(outs[0], wire::NackReason::UNKNOWN_JOB, host(4), 1001, 0xD3, 0);
  EXPECT_EQ(n.elements(), 0u) << "a refused packet reached an accumulator";
  // The job is untouched: its two ranks reduce exactly.
  n.feed(host(1), 0, contrib(job, first, 0, 2, 2.0f), 0);
  n.feed(host(2), 0, contrib(job, first, 1, 2, 3.0f), 0);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u);
  float sum;
  std::memcpy(&sum, outs[0].body->data(), 4);
  EXPECT_EQ(sum, 5.0f);
  EXPECT_EQ(n.elements(), 2u);
  const auto& c = n.pool().counters();
  EXPECT_EQ(c.refused[size_t(Drop::OUT_OF_POOL)].load(), 2u);
  EXPECT_EQ(c.refused[size_t(Drop::GROUP_TOO_LARGE)].load(), 1u);
  EXPECT_EQ(c.refused[size_t(Drop::RANK_TAKEN)].load(), 3u);
}

TEST(Pool, AnIdleJobIsReclaimedAndItsIdReusedPastItsOps) {
  Node n;
  uint32_t first = 0;  // the session's first op
  const uint32_t job = live_job(n, 2, 0xE1, 0, &first);
  // Its ops first .. first + 4 complete; op first + 5 opens (rank 0 only) and the job dies without LEAVE.
  for (uint32_t op = first; op < first + 5; ++op) {
    n.feed(host(1), 0, contrib(job, op, 0, 2, 1.0f), 10 * kMs);
    n.feed(host(2), 0, contrib(job, op, 1, 2, 1.0f), 10 * kMs);
  }
  n.feed(host(1), 0, contrib(job, first + 5, 0, 2, 1.0f), 10 * kMs);
  n.cap.take();
  n.tick(500 * kMs);  // not idle long enough
  EXPECT_EQ(n.state(job), PoolJobState::LIVE);
  n.tick(1100 * kMs);
  EXPECT_EQ(n.state(job), PoolJobState::FREE);
  EXPECT_EQ(n.pool().counters().reclaimed.load(), 1u);
  n.tick(1300 * kMs);  // the shards give up the released job's open op: nobody is told
  EXPECT_TRUE(n.cap.take().empty());
  size_t open = 0;
  for (const auto& r : n.red) open += r->open_slots().size();
  EXPECT_EQ(open, 0u);
  // Its old ranks are members no more.
  EXPECT_EQ(n.feed(host(2), 0, contrib(job, 5, 1, 2, 1.0f), 1300 * kMs).drop, Drop::UNKNOWN_SOURCE);
  // The id is reused (ALLOCs until one takes it: the other id is as likely); the new
  // session's first op lies past the old ops: in [first + 6, first + 6 + 2^24), the same to both ranks.
  uint32_t got = 0;
  for (uint32_t k = 0; k < 2 && got != job; ++k) {
    n.feed(host(uint8_t(20 + k)), 0, alloc(1000, 0xE2 + k, 2), 1400 * kMs);
    const auto a = n.cap.take();
    ASSERT_EQ(a.size(), 1u);
    got = allocated_job(a[0], 0xE2 + k, 2);
  }
  ASSERT_EQ(got, job);
  std::vector<Out> outs;
  n.feed(host(3), 0, join(job, 0, 2, 0x300), 1400 * kMs);
  n.feed(host(4), 0, join(job, 1, 2, 0x301), 1400 * kMs);
  outs = n.cap.take();
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[1].h.status & 1, 1);
  EXPECT_EQ(outs[2].h.status & 1, 1);
  EXPECT_LT(uint32_t(outs[1].h.chunk - (first + 6)), 1u << 24) << "the first op of the new session";
  EXPECT_EQ(outs[2].h.chunk, outs[1].h.chunk);
  EXPECT_EQ(n.state(job), PoolJobState::LIVE);
}

TEST(Pool, AStaticJobBesideThePoolIsUnchanged) {
  Node n;
  live_job(n, 2, 0xF1);
  const wire::Endpoint r0{{2, 0, 0, 0, 9, 0}, 0x0A000901, 20562}, r1{{2, 0, 0, 0, 9, 1}, 0x0A000902, 20562};
  n.feed(r0, 1, contrib(7, 3, 0, 2, 1.5f));
  n.feed(r1, 1, contrib(7, 3, 1, 2, 2.5f));
  const auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u);
  float sum;
  std::memcpy(&sum, outs[0].body->data(), 4);
  EXPECT_EQ(sum, 4.0f);
  // A LEAVE to a declared job is malformed (NACKed to the registered member, as any bad packet is).
  EXPECT_EQ(n.feed(r0, 1, leave(7, 0, 5)).drop, Drop::MALFORMED);
}

// Ingress on one thread reads a rank's binding while the job's shard binds it
// to one address, unbinds it and binds it to another, over and over: a CONTRIB
// is admitted only from an address that was bound, never from a mix of the
// two (the MAC of one with the UDP port of the other), which a torn read of
// the member entry would admit.
TEST(Pool, BindingsReadOnAnotherLcoreAreNeverTorn) {
  Node n(R"(
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
pools:
  - {jobs: {first: 50, count: 1}, max_group: 1, ranges: [10.0.0.0/24], idle_timeout_ms: 100000}
)");
  const wire::Endpoint a = host(1), b = wire::Endpoint{{2, 0, 0, 0, 0, 2}, a.ip, 40000};
  const wire::Endpoint mix1{a.mac, a.ip, b.port}, mix2{b.mac, a.ip, a.port};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> admitted{0}, torn{0}, passes{0};
  std::thread reader([&] {
    const auto msg = contrib(50, 0, 0, 1, 1.0f);
    for (; !stop.load(); ++passes) {
      for (const wire::Endpoint& src : {a, b, mix1, mix2}) {
        wire::Parsed p;
        wire::parse_message(msg, &p);
        p.src = src;
        p.dst = n.dir.self(0);  // addressed to port 0, as RX would see it
        const Verdict v = ingress(n.dir, wire::Refusal::OK, p, 0);
        if (!v.admitted()) continue;
        ++admitted;
        if (&src == &mix1 || &src == &mix2) ++torn;
      }
    }
  });
  for (uint32_t k = 0; k < 3000; ++k) {
    const wire::Endpoint& src = k % 2 ? b : a;
    const uint64_t now = uint64_t(k) * 300 * kMs;  // past the NACK limit each time
    n.feed(src, 0, alloc(50, 1000 + k, 1), now);
    n.feed(src, 0, join(50, 0, 1, 5000 + k), now);
    for (const uint64_t at = passes.load(); passes.load() < at + 2;) std::this_thread::yield();  // let it read
    n.feed(src, 0, leave(50, 0, 5000 + k), now);
    n.cap.take();
  }
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0u);
  EXPECT_GT(admitted.load(), 0u);
  EXPECT_EQ(n.dir.pool(50)->counters().released.load(), 3000u);
}

}  // namespace
