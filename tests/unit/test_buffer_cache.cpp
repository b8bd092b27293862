// The per-thread spare vectors (coll/buffer_cache.hpp): a Reused<T> gets the
// spare its thread gave back last (its capacity kept), the spares stay under
// kBufferCacheBytes, and each thread has its own.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "coll/buffer_cache.hpp"

namespace {

using namespace prism::coll;

TEST(BufferCache, ReusedGetsTheLastSpare) {
  buffer_cache::clear<uint8_t>();
  const uint8_t* was = nullptr;
  {
    Reused<uint8_t> b;
    EXPECT_TRUE(b.empty()) << "no spare yet";
    b.resize(1 << 20);
    was = b.data();
  }
  EXPECT_EQ(buffer_cache::count<uint8_t>(), 1u);
  EXPECT_EQ(buffer_cache::bytes<uint8_t>(), size_t(1) << 20);
  {
    Reused<uint8_t> b;
    EXPECT_EQ(b.data(), was);
    EXPECT_GE(b.capacity(), size_t(1) << 20);
    EXPECT_EQ(buffer_cache::count<uint8_t>(), 0u);
    Reused<uint8_t> c;  // none left: a new, empty one
    EXPECT_EQ(c.capacity(), 0u);
  }
  EXPECT_EQ(buffer_cache::count<uint8_t>(), 1u) << "an empty vector is not kept";
  EXPECT_EQ(buffer_cache::count<prism::LaneExact>(), 0u) << "each element type has its own spares";
  buffer_cache::clear<uint8_t>();
}

TEST(BufferCache, ByteBound) {
  buffer_cache::clear<uint8_t>();
  const size_t each = size_t(10) << 20;
  const int n = int(kBufferCacheBytes / each) + 3;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> v;
    v.reserve(each);
    buffer_cache::give_back(std::move(v));
    EXPECT_LE(buffer_cache::bytes<uint8_t>(), kBufferCacheBytes);
  }
  EXPECT_EQ(buffer_cache::count<uint8_t>(), kBufferCacheBytes / each);
  std::vector<uint8_t> big;
  big.reserve(kBufferCacheBytes + 1);
  buffer_cache::clear<uint8_t>();
  buffer_cache::give_back(std::move(big));
  EXPECT_EQ(buffer_cache::count<uint8_t>(), 0u) << "one over the bound is never kept";
}

TEST(BufferCache, PerThread) {
  buffer_cache::clear<uint8_t>();
  { Reused<uint8_t>().resize(4096); }
  size_t other = 99;
  std::thread t([&] { other = buffer_cache::count<uint8_t>(); });
  t.join();
  EXPECT_EQ(other, 0u);
  EXPECT_EQ(buffer_cache::count<uint8_t>(), 1u);
  buffer_cache::clear<uint8_t>();
}

}  // namespace
