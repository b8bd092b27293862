// The spare vectors (coll/buffer_cache.hpp), one cache per group's links: a
// Reused<T> gets the spare its cache was given back last (its capacity
// kept), the spares stay under kBufferCacheBytes, and each cache is its own.
#include <gtest/gtest.h>

#include <vector>

#include "coll/buffer_cache.hpp"

namespace {

using namespace prism::coll;

TEST(BufferCache, ReusedGetsTheLastSpare) {
  BufferCache cache;
  const uint8_t* was = nullptr;
  {
    Reused<uint8_t> b(cache);
    EXPECT_TRUE(b.empty()) << "no spare yet";
    b.resize(1 << 20);
    was = b.data();
  }
  EXPECT_EQ(cache.count<uint8_t>(), 1u);
  EXPECT_EQ(cache.bytes<uint8_t>(), size_t(1) << 20);
  {
    Reused<uint8_t> b(cache);
    EXPECT_EQ(b.data(), was);
    EXPECT_GE(b.capacity(), size_t(1) << 20);
    EXPECT_EQ(cache.count<uint8_t>(), 0u);
    Reused<uint8_t> c(cache);  // none left: a new, empty one
    EXPECT_EQ(c.capacity(), 0u);
  }
  EXPECT_EQ(cache.count<uint8_t>(), 1u) << "an empty vector is not kept";
  EXPECT_EQ(cache.count<prism::LaneExact>(), 0u) << "each element type has its own spares";
}

TEST(BufferCache, ByteBound) {
  BufferCache cache;
  const size_t each = size_t(10) << 20;
  const int n = int(kBufferCacheBytes / each) + 3;
  for (int i = 0; i < n; ++i) {
    std::vector<uint8_t> v;
    v.reserve(each);
    cache.give_back(std::move(v));
    EXPECT_LE(cache.bytes<uint8_t>(), kBufferCacheBytes);
  }
  EXPECT_EQ(cache.count<uint8_t>(), kBufferCacheBytes / each);
  std::vector<uint8_t> big;
  big.reserve(kBufferCacheBytes + 1);
  cache.clear<uint8_t>();
  cache.give_back(std::move(big));
  EXPECT_EQ(cache.count<uint8_t>(), 0u) << "one over the bound is never kept";
}

TEST(BufferCache, PerCache) {
  // Two groups' caches never share a spare: no global or per-thread state.
  BufferCache mine, other;
  { Reused<uint8_t>(mine).resize(4096); }
  EXPECT_EQ(other.count<uint8_t>(), 0u);
  EXPECT_EQ(mine.count<uint8_t>(), 1u);
}

}  // namespace
