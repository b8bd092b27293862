// Ranks that call a host collective with different counts (review F7): the
// mismatch is an error on the rank that receives the other's message, naming
// both calls, never a success that leaves messages queued for the next call;
// and the next call, made alike on every rank, gets exactly the right result
// (a stale message of the failed call is dropped, never merged). Two ranks of
// a prism::Group as threads, over TCP and over shared memory, for every host
// algorithm whose blocks or segments let counts a whole block apart look
// alike message by message: binomial reduce and broadcast, the chain's
// reduce with equal segment sizes, the ring's and RHD's allreduce, RHD's
// broadcast; and a rank that goes on to its next call while the other still
// waits in the last (a root with nothing to broadcast). The second call's
// inputs are small integers, so every policy's
// sum is exact and the expected result is computed independently in double.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "prism/group.hpp"
#include "rendezvous/file_store.hpp"

namespace prism {
namespace {

std::string store_path() {
  static int n = 0;
  return (std::filesystem::temp_directory_path() /
          ("prism_test_mismatch_" + std::to_string(getpid()) + "_" + std::to_string(n++)))
      .string();
}

// One rank's story: the error of its first (mismatched) call, if any, and the result of its
// second (matched) call, or that call's error.
struct Story {
  std::string first_error;
  std::string second_error;
  std::vector<float> second;
};

// What a rank does: its first call (may throw Error), then its second, returning the result.
using FirstCall = std::function<void(Group&)>;
using SecondCall = std::function<std::vector<float>(Group&)>;

// Two ranks of one group over `links` ("tcp" or "shm"), each running first then second.
std::vector<Story> run_two(const std::string& links, Algorithm algo, const std::vector<FirstCall>& first,
                           const SecondCall& second) {
  setenv("PRISM_LINKS", links.c_str(), 1);
  const std::string path = store_path();
  GroupOptions o;
  o.algorithm = algo;
  o.host_ip = "127.0.0.1";
  o.connect_timeout_ms = 20000;
  o.recv_timeout_ms = 5000;  // a rank left waiting for a message that never comes fails in 5 s
  std::vector<Story> s(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        Group g = Group::from_store(std::make_shared<rdv::FileStore>(path), r, 2, o);
        try {
          first[size_t(r)](g);
        } catch (const std::exception& e) {
          s[size_t(r)].first_error = e.what();
        }
        s[size_t(r)].second = second(g);
      } catch (const std::exception& e) {
        s[size_t(r)].second_error = e.what();
      }
    });
  for (auto& t : th) t.join();
  std::filesystem::remove(path);
  unsetenv("PRISM_LINKS");
  return s;
}

// The first call's data (large values, so that a stale message merged into the second call shows).
std::vector<float> loud(size_t n, int r) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(100000 + 1000 * r + int(i % 13));
  return v;
}
// The second call's: small integers, exact in any order of fp32 additions.
std::vector<float> quiet(size_t n, int r) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i % 251) + 7 * r);
  return v;
}
std::vector<float> quiet_sum(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(double(i % 251) * 2 + 7);
  return v;
}

size_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  return bad;
}

// The rank that must see the mismatch did, naming both counts; nothing failed in the second call.
void expect_refused(const std::vector<Story>& s, int who, size_t count_a, size_t count_b) {
  const std::string& e = s[size_t(who)].first_error;
  ::testing::Test::RecordProperty("error", e);
  EXPECT_NE(e, "") << "rank " << who << " took a call of " << count_b << " elements for one of " << count_a
                   << " without an error";
  EXPECT_NE(e.find(std::to_string(count_a)), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(count_b)), std::string::npos) << e;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(s[size_t(r)].second_error, "") << "rank " << r;
}

FirstCall reduce_of(size_t n, int r, size_t segments = 0) {
  return [=](Group& g) {
    const std::vector<float> in = loud(n, r);
    std::vector<float> out(n);
    CollOptions o;
    o.segments = segments;
    g.reduce(in.data(), out.data(), n, Format::FP32, o);
  };
}
FirstCall allreduce_of(size_t n, int r) {
  return [=](Group& g) {
    const std::vector<float> in = loud(n, r);
    std::vector<float> out(n);
    g.allreduce(in.data(), out.data(), n, Format::FP32);
  };
}
FirstCall broadcast_of(size_t n, int r) {
  return [=](Group& g) {
    std::vector<float> buf = loud(n, r);
    g.broadcast(buf.data(), buf.data(), n, Format::FP32);
  };
}

// The second call: a reduce (or allreduce) of `n` quiet elements to rank 0; rank 0's result, or
// every rank's for allreduce.
SecondCall quiet_reduce(size_t n, bool all = false) {
  return [=](Group& g) {
    const std::vector<float> in = quiet(n, g.rank());
    std::vector<float> out(n);
    if (all)
      g.allreduce(in.data(), out.data(), n, Format::FP32);
    else
      g.reduce(in.data(), out.data(), n, Format::FP32);
    return all || g.rank() == 0 ? out : quiet_sum(n);
  };
}
SecondCall quiet_broadcast(size_t n) {
  return [=](Group& g) {
    std::vector<float> buf = g.rank() == 0 ? quiet(n, 0) : std::vector<float>(n, -1.0f);
    g.broadcast(buf.data(), buf.data(), n, Format::FP32);
    return buf;
  };
}

class Mismatch : public ::testing::TestWithParam<std::string> {};

// The review's case: counts 8192 and 12288 (two and three binomial blocks). Before, rank 0 returned
// the first two blocks' sum and the third block's partial was merged into the next reduce.
TEST_P(Mismatch, BinomialReduceCountsABlockApart) {
  const auto s =
      run_two(GetParam(), Algorithm::BINOMIAL, {reduce_of(8192, 0), reduce_of(12288, 1)}, quiet_reduce(8192));
  expect_refused(s, 0, 8192, 12288);
  EXPECT_EQ(mismatches(s[0].second, quiet_sum(8192)), 0u) << "the next reduce took a stale message";
}

// The same the other way round: the root has more blocks than its child sends.
TEST_P(Mismatch, BinomialReduceRootWithMoreBlocks) {
  const auto s =
      run_two(GetParam(), Algorithm::BINOMIAL, {reduce_of(12288, 0), reduce_of(8192, 1)}, quiet_reduce(8192));
  expect_refused(s, 0, 12288, 8192);
  EXPECT_EQ(mismatches(s[0].second, quiet_sum(8192)), 0u);
}

// A root with more segments than its receiver: the receiver used to return the first segments and
// leave the last for the next broadcast; a root with fewer left it waiting.
TEST_P(Mismatch, BinomialBroadcastCountsASegmentApart) {
  for (const auto& [root_n, other_n] : {std::pair<size_t, size_t>{12288, 8192}, {8192, 12288}}) {
    SCOPED_TRACE("root " + std::to_string(root_n) + ", other " + std::to_string(other_n));
    const auto s = run_two(GetParam(), Algorithm::BINOMIAL, {broadcast_of(root_n, 0), broadcast_of(other_n, 1)},
                           quiet_broadcast(8192));
    expect_refused(s, 1, root_n, other_n);
    EXPECT_EQ(mismatches(s[1].second, quiet(8192, 0)), 0u) << "the next broadcast took a stale segment";
  }
}

// The chain with equal segment sizes (8 x 1024 and 12 x 1024): the messages alike but for their number.
TEST_P(Mismatch, ChainReduceEqualSegmentsDifferentCounts) {
  const auto s =
      run_two(GetParam(), Algorithm::CHAIN, {reduce_of(8192, 0, 8), reduce_of(12288, 1, 12)}, quiet_reduce(8192));
  expect_refused(s, 0, 8192, 12288);
  EXPECT_EQ(mismatches(s[0].second, quiet_sum(8192)), 0u);
}

// The ring and RHD at p = 2 go in blocks of 65536 elements: 65536 against 131072 elements used to
// finish on the shorter rank while the longer one took the next call's messages as its second block.
TEST_P(Mismatch, RingAllreduceCountsABlockApart) {
  const auto s = run_two(GetParam(), Algorithm::RING, {allreduce_of(65536, 0), allreduce_of(131072, 1)},
                         quiet_reduce(65536, true));
  expect_refused(s, 1, 131072, 65536);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(mismatches(s[size_t(r)].second, quiet_sum(65536)), 0u) << "rank " << r;
}

TEST_P(Mismatch, RhdAllreduceCountsABlockApart) {
  const auto s =
      run_two(GetParam(), Algorithm::RHD, {allreduce_of(65536, 0), allreduce_of(131072, 1)}, quiet_reduce(65536, true));
  expect_refused(s, 1, 131072, 65536);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(mismatches(s[size_t(r)].second, quiet_sum(65536)), 0u) << "rank " << r;
}

// RHD's broadcast goes in segments of 256 KiB (65536 fp32).
TEST_P(Mismatch, RhdBroadcastCountsASegmentApart) {
  const auto s =
      run_two(GetParam(), Algorithm::RHD, {broadcast_of(131072, 0), broadcast_of(65536, 1)}, quiet_broadcast(65536));
  expect_refused(s, 1, 131072, 65536);
  EXPECT_EQ(mismatches(s[1].second, quiet(65536, 0)), 0u);
}

// A root with nothing to broadcast sends nothing and goes on to the next call; its first message
// there reaches a rank still waiting for the broadcast's segment. That rank fails naming both
// calls, and the message stays queued for its own next call.
TEST_P(Mismatch, RhdBroadcastRootWithNothingThenAllreduce) {
  const auto s =
      run_two(GetParam(), Algorithm::RHD, {broadcast_of(0, 0), broadcast_of(65536, 1)}, quiet_reduce(65536, true));
  expect_refused(s, 1, 0, 65536);
  EXPECT_NE(s[1].first_error.find("has gone on to call 2 (allreduce by rhd, 65536 elements)"), std::string::npos)
      << s[1].first_error;
  for (int r = 0; r < 2; ++r) EXPECT_EQ(mismatches(s[size_t(r)].second, quiet_sum(65536)), 0u) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Links, Mismatch, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace prism
