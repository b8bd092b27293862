// What a member, or whoever spoofs one, can get back from the switch
// (SECURITY-REVIEW F8): never more bytes than it sends, beyond each op's one
// RESULT; a RETRANSMIT gets only what it asks for; a pool neither binds nor
// answers a broadcast or multicast source, nor the switch's own addresses.
// And what that must not cost: a rank that really lost its RESULTs gets every
// one back. Messages are written byte by byte from PROTOCOL.md
// (wire_bytes.hpp); bytes are counted as whole frames (74 bytes of headers
// and the body).
#include <gtest/gtest.h>

#include <cstring>

#include "pool_util.hpp"

using namespace prism;
using namespace prism::sw;

namespace {

using namespace prism::test;

const wire::Endpoint kRank0{{2, 0, 0, 0, 9, 0}, 0x0A000901, 20562};  // job 7 of kPools, on port 1
const wire::Endpoint kRank1{{2, 0, 0, 0, 9, 1}, 0x0A000902, 20562};
constexpr size_t kHeaders = 74;

// A CONTRIB of `n` fp32 elements (KULISCH_FIXED, LAST_CHUNK), each `x`.
std::vector<uint8_t> contrib_n(uint32_t job, uint32_t op, uint16_t rank, uint16_t group, uint16_t n, float x,
                               uint8_t flags = 2) {
  std::vector<uint8_t> h = contrib(job, op, rank, group, x);
  h[22] = uint8_t(n >> 8);
  h[23] = uint8_t(n);
  h[30] = flags;
  h.resize(32 + 4 * size_t(n));
  for (uint16_t i = 0; i < n; ++i) std::memcpy(h.data() + 32 + 4 * i, &x, 4);
  return h;
}

std::vector<uint8_t> query_of(uint32_t job, uint32_t op, uint16_t rank, uint16_t group) {
  std::vector<uint8_t> q = contrib(job, op, rank, group, 0.0f);
  q[3] = 11;  // QUERY: the CONTRIB's header, count 0, flags 0, no body
  q[23] = 0;
  q[30] = 0;
  q.resize(32);
  return q;
}

size_t frame_bytes(const std::vector<uint8_t>& msg) { return kHeaders - 32 + msg.size(); }

// What went to `to`, in frame bytes, and how many RESULTs among them.
struct Tally {
  size_t bytes = 0, results = 0;
};
Tally to(const std::vector<Out>& outs, const wire::Endpoint& who) {
  Tally t;
  for (const Out& o : outs)
    if (o.dst.ip == who.ip && o.dst.port == who.port) {
      t.bytes += kHeaders + o.body_size();
      t.results += o.h.kind == wire::Kind::RESULT;
    }
  return t;
}

// A member of a completed job floods QUERYs for its 100 completed ops, 200
// each (20,000 QUERYs of 74 bytes): past each op's one RESULT, what comes
// back is at most what it sent (its CONTRIBs and QUERYs). Today's fix must
// not cost recovery: the first QUERY for each op, as a rank that lost the
// RESULT sends, gets the RESULT back.
TEST(Reflection, AQueryFloodGetsBackNoMoreBytesThanItSends) {
  Node n;
  size_t sent = 0;
  for (uint32_t op = 0; op < 100; ++op) {
    const auto c0 = contrib_n(7, op, 0, 2, 360, 1.0f), c1 = contrib_n(7, op, 1, 2, 360, 2.0f);
    n.feed(kRank0, 1, c0);
    n.feed(kRank1, 1, c1);
    sent += frame_bytes(c0);
  }
  const Tally first = to(n.cap.take(), kRank0);
  ASSERT_EQ(first.results, 100u);
  // The rank lost every RESULT: one QUERY each gets it back.
  for (uint32_t op = 0; op < 100; ++op) {
    const auto q = query_of(7, op, 0, 2);
    n.feed(kRank0, 1, q);
    sent += frame_bytes(q);
  }
  const Tally recovered = to(n.cap.take(), kRank0);
  EXPECT_EQ(recovered.results, 100u) << "a rank that lost its RESULTs gets each one again";
  // Then the flood.
  size_t flood = 0;
  for (int k = 0; k < 200; ++k)
    for (uint32_t op = 0; op < 100; ++op) {
      const auto q = query_of(7, op, 0, 2);
      n.feed(kRank0, 1, q);
      flood += frame_bytes(q);
    }
  sent += flood;
  const Tally back = to(n.cap.take(), kRank0);
  EXPECT_LE(recovered.bytes + back.bytes, sent) << "bytes back beyond each op's first RESULT";
  EXPECT_LE(back.bytes, flood + 100 * (kHeaders + 1440)) << "the flood is not amplified";
  EXPECT_GT(n.dropped(Drop::OVER_BUDGET), 0u);
  // The other rank, which did not flood, still recovers in one QUERY.
  n.feed(kRank1, 1, query_of(7, 99, 1, 2));
  EXPECT_EQ(to(n.cap.take(), kRank1).results, 1u);
}

// RETRANSMITs of one element for a retained 360-element RESULT: refused
// (DESCRIPTOR_MISMATCH, a NACK of the request's size), never the RESULT.
TEST(Reflection, ARetransmitGetsOnlyWhatItAsksFor) {
  Node n;
  n.feed(kRank0, 1, contrib_n(7, 5, 0, 2, 360, 1.0f));
  n.feed(kRank1, 1, contrib_n(7, 5, 1, 2, 360, 2.0f));
  n.cap.take();
  size_t sent = 0;
  for (int k = 0; k < 1000; ++k) {
    const auto r = contrib_n(7, 5, 0, 2, 1, 1.0f, 3);  // RETRANSMIT | LAST_CHUNK, count 1
    n.feed(kRank0, 1, r);
    sent += frame_bytes(r);
  }
  const auto outs = n.cap.take();
  const Tally back = to(outs, kRank0);
  EXPECT_EQ(back.results, 0u);
  EXPECT_LE(back.bytes, sent);
  ASSERT_FALSE(outs.empty());
  EXPECT_EQ(outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(outs[0].h.status, uint8_t(wire::NackReason::DESCRIPTOR_MISMATCH));
  // The same with the right count is the RESULT again.
  n.feed(kRank0, 1, contrib_n(7, 5, 0, 2, 360, 1.0f, 3));
  EXPECT_EQ(to(n.cap.take(), kRank0).results, 1u);
}

// A pool never binds or answers a broadcast or multicast source, nor one
// with the switch's own MAC or IP: a tenant cannot aim RESULTs or refusals
// at a whole segment or at the switch.
TEST(Reflection, APoolNeitherBindsNorAnswersABroadcastSource) {
  Node n;
  const uint32_t job = live_job(n, 1, 0x61);  // rank 0 at host(1)
  const wire::Endpoint bcast{{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, host(2).ip, 20562};
  const wire::Endpoint mcast{{0x01, 0x00, 0x5E, 0x00, 0x00, 0x01}, host(3).ip, 20562};
  const wire::Endpoint own_mac{{2, 0, 0, 0, 0xFF, 0}, host(4).ip, 20562};  // port 0's MAC
  const wire::Endpoint own_ip{{2, 0, 0, 0, 0, 5}, 0x0A0000FE, 20562};      // port 0's IP
  for (const wire::Endpoint& e : {bcast, mcast, own_mac, own_ip}) {
    EXPECT_FALSE(n.feed(e, 0, alloc(1000, 0x62, 2)).admitted());
    EXPECT_FALSE(n.feed(e, 0, join(job, 0, 1, 0x63)).admitted());
    EXPECT_FALSE(n.feed(e, 0, leave(job, 0, 0x64)).admitted());
    auto bad = alloc(1000, 0x65, 2);
    bad[30] = 0x80;  // malformed: flags
    EXPECT_FALSE(n.feed(e, 0, bad).admitted());
  }
  EXPECT_TRUE(n.cap.take().empty()) << "an answer to a broadcast, multicast or the switch's own address";
  EXPECT_EQ(n.state(job), PoolJobState::LIVE);
  // The honest tenant is untouched.
  n.feed(host(1), 0, contrib(job, 0, 0, 1, 4.0f));
  const auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].h.kind, wire::Kind::RESULT);
}

}  // namespace

namespace {

size_t count_kind(const std::vector<Out>& outs, const wire::Endpoint& who, wire::Kind k) {
  size_t n = 0;
  for (const Out& o : outs) n += o.dst.ip == who.ip && o.dst.port == who.port && o.h.kind == k;
  return n;
}

}  // namespace

// A member floods whole-chunk RETRANSMITs of a completed op (each earns the
// bytes of the RESULT it asks for, so the byte budget alone would answer every
// one) and CONTRIBs with a wrong descriptor (each would get a NACK): what the
// shard sends back is bounded in frames, not only in bytes. 256 answers and
// 256 NACKs at once, then one of each a millisecond, and one more answer per
// contribution the member makes. A rank that really lost a RESULT still gets
// it at its next try, and the other rank's answers are its own.
TEST(Reflection, ARequestFloodDrawsAtMostTheReplyBudgetInFrames) {
  Node n;
  // The budget is a shard's (each shard an lcore's work): the mismatched ops are op 5's shard's.
  const uint32_t shards = n.cfg.reducer_shards, home = wire::shard_of(7, 5, 0, shards);
  std::vector<uint32_t> ops;
  for (uint32_t op = 1000; ops.size() < 2100; ++op)
    if (wire::shard_of(7, op, 0, shards) == home) ops.push_back(op);
  n.feed(kRank0, 1, contrib_n(7, 5, 0, 2, 360, 1.0f));
  n.feed(kRank1, 1, contrib_n(7, 5, 1, 2, 360, 2.0f));
  ASSERT_EQ(to(n.cap.take(), kRank0).results, 1u);
  for (int k = 0; k < 2000; ++k) {
    n.feed(kRank0, 1, contrib_n(7, 5, 0, 2, 360, 1.0f, 3));                // RETRANSMIT | LAST_CHUNK
    n.feed(kRank0, 1, contrib_n(7, ops[size_t(k)], 0, 3, 360, 1.0f));  // group 3: a mismatch
  }
  auto outs = n.cap.take();
  // The budget: 256 at the start, and one for the contribution to op 5.
  EXPECT_EQ(count_kind(outs, kRank0, wire::Kind::RESULT), 257u);
  EXPECT_EQ(count_kind(outs, kRank0, wire::Kind::NACK), 256u);
  EXPECT_EQ(n.dropped(Drop::OVER_BUDGET), 2000u - 257u);
  EXPECT_EQ(n.dropped(Drop::DESCRIPTOR_MISMATCH), 2000u) << "each refusal counted, answered or not";
  // Ten milliseconds later: ten more of each.
  for (int k = 0; k < 100; ++k) {
    n.feed(kRank0, 1, contrib_n(7, 5, 0, 2, 360, 1.0f, 3), 10 * 1000000);
    n.feed(kRank0, 1, contrib_n(7, ops[2000 + size_t(k)], 0, 3, 360, 1.0f), 10 * 1000000);
  }
  outs = n.cap.take();
  EXPECT_EQ(count_kind(outs, kRank0, wire::Kind::RESULT), 10u);
  EXPECT_EQ(count_kind(outs, kRank0, wire::Kind::NACK), 10u);
  // The other rank, which did not flood, gets its lost RESULT at once.
  n.feed(kRank1, 1, contrib_n(7, 5, 1, 2, 360, 2.0f, 3), 10 * 1000000);
  EXPECT_EQ(to(n.cap.take(), kRank1).results, 1u);
  // Contributions earn answers: ten ops of both ranks, then ten RESULTs again for rank 0 at once.
  for (uint32_t op = 10; op < 20; ++op) {
    n.feed(kRank0, 1, contrib_n(7, op, 0, 2, 360, 1.0f), 10 * 1000000);
    n.feed(kRank1, 1, contrib_n(7, op, 1, 2, 360, 2.0f), 10 * 1000000);
  }
  n.cap.take();
  for (uint32_t op = 10; op < 20; ++op) n.feed(kRank0, 1, contrib_n(7, op, 0, 2, 360, 1.0f, 3), 10 * 1000000);
  EXPECT_EQ(to(n.cap.take(), kRank0).results, 10u) << "a rank that lost its RESULTs gets each one again";
}
