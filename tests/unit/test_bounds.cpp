// What one packet can make the switch hold or send, bounded when its chunk
// opens (SECURITY-REVIEW F12, F13), and an allocation that fails anywhere on
// the receive path: the packet is refused, the switch runs on, and nothing
// accepted is lost or counted twice. Messages are written byte by byte from
// PROTOCOL.md (wire_bytes.hpp); sums are of small integers, exact in any order.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "pool_util.hpp"

// Allocation failure on demand: the `fail_in`-th allocation from now throws
// std::bad_alloc (0: none fails). Every operator new of this program (the
// switch's code is linked in) goes through here.
namespace {
std::atomic<long> fail_in{0};
}  // namespace

void* operator new(std::size_t n) {
  const long k = fail_in.load(std::memory_order_relaxed);
  if (k > 0 && fail_in.fetch_sub(1, std::memory_order_relaxed) == 1) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace prism;
using namespace prism::sw;

namespace {

using namespace prism::test;

// A declared job of two ranks on port 0; a child switch (2 ranks) of job 8
// on port 1; a pool of one id admitting 4096 ranks.
const char* kBounds = R"(
switch: {id: 9, role: root}
ports:
  - {id: 0, mac: "02:00:00:00:ff:00", ip: 10.0.0.254}
  - {id: 1, mac: "02:00:00:00:ff:01", ip: 10.0.9.254}
jobs:
  - id: 7
    members:
      - {rank: 0, port: 0, mac: "02:00:00:00:00:01", ip: 10.0.0.1}
      - {rank: 1, port: 0, mac: "02:00:00:00:00:02", ip: 10.0.0.2}
  - id: 8
    group: 2
    children:
      - {id: 3, port: 1, mac: "02:00:00:00:09:03", ip: 10.0.9.3, ranks: 2}
pools:
  - jobs: {first: 1000, count: 1}
    max_group: 4096
    ranges: [10.0.0.0/24]
    ports: [0]
reducers: {shards: 1}
op_timeout_ms: 0
)";

const wire::Endpoint kRank0{{2, 0, 0, 0, 0, 1}, 0x0A000001, 20562};
const wire::Endpoint kRank1{{2, 0, 0, 0, 0, 2}, 0x0A000002, 20562};
const wire::Endpoint kChild{{2, 0, 0, 0, 9, 3}, 0x0A000903, 20562};

// A CONTRIB of `count` elements in `dtype` (little-endian `value` each,
// for fp32; byte `value` for one-byte formats), to `out`, under `policy`.
std::vector<uint8_t> contrib_of(uint32_t job, uint32_t op, uint16_t rank, uint16_t group, uint8_t dtype, uint8_t out,
                                uint8_t policy, uint16_t count, float value) {
  std::vector<uint8_t> h = test::session_bytes(1, job, op, 0, rank, group, 1);
  h[22] = uint8_t(count >> 8);
  h[23] = uint8_t(count);
  h[24] = dtype;
  h[25] = out;
  h[26] = policy;
  h[27] = 1;  // elements in dtype
  h[28] = 2;  // KULISCH transport
  h[29] = 1;  // IEEE
  h[30] = 2;  // LAST_CHUNK
  const size_t w = dtype == 1 ? 4 : 1;
  h.resize(32 + count * w);
  for (uint16_t i = 0; i < count; ++i) {
    if (w == 4)
      std::memcpy(h.data() + 32 + 4 * i, &value, 4);
    else
      h[32 + i] = uint8_t(value);
  }
  return h;
}

size_t open_slots(const Node& n) {
  size_t k = 0;
  for (const auto& r : n.red) k += r->open_slots().size();
  return k;
}

void expect_only_nack(Node& n, wire::NackReason why, const wire::Endpoint& to) {
  const auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].h.kind, wire::Kind::NACK);
  EXPECT_EQ(outs[0].h.status, uint8_t(why)) << wire::name(wire::NackReason(outs[0].h.status));
  EXPECT_EQ(outs[0].dst.ip, to.ip);
}

// F13: e4m3fn in, fp32 out, 1440 elements: a 1514-byte CONTRIB whose RESULT
// (5760 bytes and a 1440-byte sideband) no 1500-byte port carries. Refused
// when it would open, NACK CHUNK_TOO_LARGE; nothing is held. 288 elements
// (what PROTOCOL.md's Sizes give) complete; on 9000-byte ports the limit is
// 1788 (8940 / 5), checked on both sides.
TEST(Bounds, AChunkWhoseResultFitsNoFrameIsRefusedWhenItOpens) {
  Node n(kBounds, 1500);
  n.feed(kRank0, 0, contrib_of(7, 1, 0, 2, 4, 1, 2, 1440, 0x38));  // 0x38 = 1.0 in e4m3fn
  expect_only_nack(n, wire::NackReason::CHUNK_TOO_LARGE, kRank0);
  EXPECT_EQ(n.dropped(Drop::TOO_LARGE), 1u);
  EXPECT_EQ(open_slots(n), 0u);
  EXPECT_EQ(n.elements(), 0u);
  n.feed(kRank0, 0, contrib_of(7, 2, 0, 2, 4, 1, 2, 288, 0x38));
  n.feed(kRank1, 0, contrib_of(7, 2, 1, 2, 4, 1, 2, 288, 0x38));
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].h.kind, wire::Kind::RESULT);
  EXPECT_EQ(outs[0].body->size(), 288u * 4);
  float x;
  std::memcpy(&x, outs[0].body->data() + 4 * 287, 4);
  EXPECT_EQ(x, 2.0f);

  Node jumbo(kBounds, 9000);
  jumbo.feed(kRank0, 0, contrib_of(7, 1, 0, 2, 4, 1, 2, 1789, 0x38));
  expect_only_nack(jumbo, wire::NackReason::CHUNK_TOO_LARGE, kRank0);
  jumbo.feed(kRank0, 0, contrib_of(7, 2, 0, 2, 4, 1, 2, 1788, 0x38));
  EXPECT_TRUE(jumbo.cap.take().empty()) << "1788 x 5 = 8940 bytes: fits";
  EXPECT_EQ(open_slots(jumbo), 1u);
}

// F12: a child's Kulisch fragment header claims 65535 lanes in the chunk
// (4 bytes of header and one lane record): the slot it would open holds
// 65535 accumulator lanes and its RESULT fits no frame. Refused at once.
TEST(Bounds, AFragmentHeaderCannotOpenAHugeChunk) {
  Node n(kBounds);
  std::vector<uint8_t> m = test::session_bytes(2, 8, 1, 0, 3, 2, 2);  // PARTIAL from child 3, terms 2
  m[22] = 0;
  m[23] = 1;  // count: one lane in this fragment
  m[24] = m[25] = 1;
  m[26] = 2;  // KULISCH_FIXED
  m[27] = 3;  // Kulisch partial
  m[28] = 2;
  m[29] = 1;
  m[30] = 2;
  for (uint8_t b : {0x00, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00}) m.push_back(b);
  const Verdict v = n.feed(kChild, 1, m);
  if (v.admitted()) {
    expect_only_nack(n, wire::NackReason::CHUNK_TOO_LARGE, kChild);
  } else {
    EXPECT_EQ(*v.drop, Drop::MALFORMED);  // the parser's own refusal of the lane record is as good
  }
  EXPECT_EQ(open_slots(n), 0u);
  EXPECT_LE(n.red[0]->bytes_per_slot_estimate(), size_t(1) << 20);
}

// F12: FP32_BINOMIAL keeps 4 bytes per rank and lane. A pooled job of 4096
// ranks with one bound rank asks for 1788 e4m3 lanes under it: 29 MB for
// one slot. Refused when it would open (CHUNK_TOO_LARGE); the same chunk
// under KULISCH_FIXED (which does not grow with the ranks) opens.
TEST(Bounds, ABinomialChunkIsBoundedByItsRanksTimesLanes) {
  Node n(kBounds);
  const wire::Endpoint asker = host(50);
  n.feed(asker, 0, alloc(1000, 0x51, 4096));
  auto outs = n.cap.take();
  ASSERT_EQ(outs.size(), 1u);
  ASSERT_EQ(outs[0].h.kind, wire::Kind::ALLOCATED);
  const uint32_t job = outs[0].h.job;
  ASSERT_TRUE(n.feed(asker, 0, join(job, 0, 4096, 0x52)).admitted());
  n.cap.take();
  n.feed(asker, 0, contrib_of(job, 0, 0, 4096, 4, 1, 3, 1788, 0x38));
  expect_only_nack(n, wire::NackReason::CHUNK_TOO_LARGE, asker);
  EXPECT_EQ(open_slots(n), 0u);
  n.feed(asker, 0, contrib_of(job, 1, 0, 4096, 4, 1, 2, 1788, 0x38));
  EXPECT_TRUE(n.cap.take().empty());
  EXPECT_EQ(open_slots(n), 1u);
}

// Every allocation on the path of an op, made to fail in turn: the k-th
// allocation after the first CONTRIB starts fails, for every k until none
// is left to fail. Each time the switch runs on: the failed packet is
// refused (no_memory) or was already taken, no slot is left half open, and
// when both ranks send again (as their timers would: RETRANSMIT) the op
// completes with the exact sum 3, each contribution counted once; a second
// op then completes as if nothing had happened.
TEST(Bounds, AnAllocationThatFailsAnywhereRefusesThePacketAndTheSwitchRunsOn) {
  bool reached_the_end = false;
  for (long k = 1; k < 200 && !reached_the_end; ++k) {
    Node n(kBounds);
    const auto c0 = contrib_of(7, 1, 0, 2, 1, 1, 2, 100, 1.0f), c1 = contrib_of(7, 1, 1, 2, 1, 1, 2, 100, 2.0f);
    n.cap.outs.reserve(64);  // the test's own capture is not what fails
    fail_in = k;             // only the switch's code runs until it is reset
    n.feed(kRank0, 0, c0);
    n.feed(kRank1, 0, c1);
    reached_the_end = fail_in.exchange(0) > 0;  // nothing failed: every allocation was tried
    const uint64_t no_memory = n.dropped(Drop::NO_MEMORY);
    EXPECT_EQ(no_memory, reached_the_end ? 0u : 1u) << "k = " << k;
    EXPECT_EQ(open_slots(n), n.red[0]->stats().slots_in_use) << "k = " << k;
    // Each packet counted once: accepted (its contribution kept, even when the completion after it
    // failed), or dropped (NO_MEMORY: nothing of it kept).
    const ReducerStats st = n.red[0]->stats();
    EXPECT_EQ(st.packets, st.accepted + st.dropped) << "k = " << k;
    EXPECT_EQ(st.packets, 2u) << "k = " << k;
    // The ranks send again until they have their RESULT.
    auto has_result = [&](const wire::Endpoint& who) {
      for (const Out& o : n.cap.outs)
        if (o.h.kind == wire::Kind::RESULT && o.dst.ip == who.ip && o.h.op == 1) return true;
      return false;
    };
    for (int round = 0; round < 3; ++round) {
      if (!has_result(kRank0)) n.feed(kRank0, 0, contrib_of(7, 1, 0, 2, 1, 1, 2, 100, 1.0f), 0);
      auto rt = contrib_of(7, 1, 1, 2, 1, 1, 2, 100, 2.0f);
      rt[30] |= 1;  // RETRANSMIT: the RESULT again if it completed
      if (!has_result(kRank1)) n.feed(kRank1, 0, rt);
      auto r0 = contrib_of(7, 1, 0, 2, 1, 1, 2, 100, 1.0f);
      r0[30] |= 1;
      if (!has_result(kRank0)) n.feed(kRank0, 0, r0);
    }
    for (const wire::Endpoint& who : {kRank0, kRank1}) {
      const Out* got = nullptr;
      for (const Out& o : n.cap.outs)
        if (o.h.kind == wire::Kind::RESULT && o.dst.ip == who.ip && o.h.op == 1) got = &o;
      ASSERT_NE(got, nullptr) << "k = " << k << ": rank at " << who.ip << " never got its RESULT";
      float x;
      for (int i = 0; i < 100; ++i) {
        std::memcpy(&x, got->body->data() + 4 * i, 4);
        ASSERT_EQ(x, 3.0f) << "k = " << k << ": a contribution counted twice or lost";
      }
    }
    EXPECT_EQ(open_slots(n), 0u) << "k = " << k;
    n.cap.take();
    n.feed(kRank0, 0, contrib_of(7, 2, 0, 2, 1, 1, 2, 100, 5.0f));
    n.feed(kRank1, 0, contrib_of(7, 2, 1, 2, 1, 1, 2, 100, 6.0f));
    const auto outs = n.cap.take();
    ASSERT_EQ(outs.size(), 2u) << "k = " << k;
    float x;
    std::memcpy(&x, outs[1].body->data(), 4);
    EXPECT_EQ(x, 11.0f);
  }
  EXPECT_TRUE(reached_the_end) << "some allocation kept failing past 200";
}

}  // namespace
