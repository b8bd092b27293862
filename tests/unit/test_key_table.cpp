// The flat key table under a reducer shard's slots and result log
// (switch/key_table.hpp) against keys a tenant chose to collide (review
// F20): op and chunk numbers are the tenant's, so with a hash anyone can
// compute, one tenant could pile its keys into one probe run that every
// lookup near it then scans. The attacker here works offline with the hash
// as it was (fixed constants), or with a seed it somehow learned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "switch/key_table.hpp"

using prism::sw::KeyTable;
using prism::sw::SlotKey;

namespace {

// KeyTable's home slot before it was keyed: SlotKeyHash's fixed constants,
// then the top `bits` bits of a Fibonacci multiply.
size_t fixed_home(const SlotKey& k, unsigned bits) {
  const uint64_t h = (uint64_t(k.job) << 32 | k.op) * 0x9E3779B97F4A7C15ull;
  const uint64_t s = h ^ (uint64_t(k.chunk) * 0xC2B2AE3D27D4EB4Full) ^ (h >> 29);
  return size_t((s * 0x9E3779B97F4A7C15ull) >> (64 - bits));
}

// `n` keys of `job` (chunks 0..3) whose home under `home` lies in
// [at, at + window): about n * slots / window tries.
template <class Home>
std::vector<SlotKey> colliding(uint32_t job, size_t n, size_t at, size_t window, Home home) {
  std::vector<SlotKey> v;
  for (uint32_t op = 0; v.size() < n; ++op) {
    const SlotKey k{job, op, op & 3};
    if (const size_t h = home(k); h >= at && h < at + window) v.push_back(k);
  }
  return v;
}

// 20 000 keys (a table of 2^16 entries) whose fixed-hash homes fall in one
// window of 1000 entries: before the hash was keyed they made one run of
// 20 000 entries, and a lookup that started in it, of a key there or not,
// read thousands. Now each key, and each absent key homing in that window,
// is found or missed within a few entries, and every value is right.
TEST(KeyTable, KeysChosenToCollideUnderTheFixedHashStayApart) {
  constexpr size_t kKeys = 20000, kAt = 5000, kWindow = 1000;
  constexpr unsigned kBits = 16;  // 2 x 20000 keys round up to 2^16 entries
  const auto fixed = [](const SlotKey& k) { return fixed_home(k, kBits); };
  const std::vector<SlotKey> keys = colliding(9, kKeys, kAt, kWindow, fixed);
  const std::vector<SlotKey> absent = colliding(10, 500, kAt, kWindow, fixed);
  KeyTable t(kKeys);
  for (size_t i = 0; i < keys.size(); ++i) t.put(keys[i], uint32_t(i + 1));
  ASSERT_EQ(t.size(), kKeys);
  size_t longest = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(t.get(keys[i]), uint32_t(i + 1));
    longest = std::max(longest, t.probes(keys[i]));
  }
  for (const SlotKey& k : absent) {
    ASSERT_EQ(t.get(k), 0u);
    longest = std::max(longest, t.probes(k));
  }
  // A random hash at this load (0.31) keeps every run well under 64 entries.
  EXPECT_LE(longest, 64u) << "a lookup read " << longest << " entries";
  for (size_t i = 0; i < keys.size(); i += 2) ASSERT_TRUE(t.erase(keys[i]));
  for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(t.get(keys[i]), i % 2 ? uint32_t(i + 1) : 0u);
}

// Were the seed known (leaked, or guessed), keys could again be chosen to
// share a home. A put that would sit more than kMaxProbe entries past its
// home draws a new seed instead and places every key again, in place: no
// lookup reads more than kMaxProbe + 1 entries, and the table stays an exact
// map (checked against std::map through puts and erases after the reseed).
TEST(KeyTable, KeysChosenForAKnownSeedMakeItDrawANewOne) {
  constexpr size_t kKeys = 20000;
  constexpr uint64_t kSeed = 0x5EED;
  const KeyTable oracle(kKeys, kSeed);  // the attacker's copy of the hash
  const std::vector<SlotKey> keys = colliding(9, kKeys, 5000, 1000, [&](const SlotKey& k) { return oracle.home(k); });
  KeyTable t(kKeys, kSeed);
  std::map<std::tuple<uint32_t, uint32_t, uint32_t>, uint32_t> ref;
  for (size_t i = 0; i < keys.size(); ++i) {
    t.put(keys[i], uint32_t(i + 1));
    ref[{keys[i].job, keys[i].op, keys[i].chunk}] = uint32_t(i + 1);
    if (i == KeyTable::kMaxProbe) {
      ASSERT_EQ(t.reseeds(), 0u) << "no new seed while the keys' runs are short";
    }
  }
  EXPECT_GE(t.reseeds(), 1u);
  std::mt19937_64 rng(3);
  for (int it = 0; it < 40000; ++it) {  // erases and puts (new values, and keys back) after the reseed
    const SlotKey& k = keys[rng() % keys.size()];
    const auto key = std::make_tuple(k.job, k.op, k.chunk);
    if (rng() % 2) {
      EXPECT_EQ(t.erase(k), ref.erase(key) == 1);
    } else {
      const uint32_t v = uint32_t(1 + rng() % 1000);
      t.put(k, v);
      ref[key] = v;
    }
  }
  ASSERT_EQ(t.size(), ref.size());
  size_t longest = 0;
  for (const SlotKey& k : keys) {
    const auto it = ref.find({k.job, k.op, k.chunk});
    ASSERT_EQ(t.get(k), it == ref.end() ? 0u : it->second);
    longest = std::max(longest, t.probes(k));
  }
  for (const SlotKey& k : colliding(10, 500, 5000, 1000, [&](const SlotKey& k) { return oracle.home(k); })) {
    ASSERT_EQ(t.get(k), 0u);
    longest = std::max(longest, t.probes(k));
  }
  EXPECT_LE(longest, 64u) << "a lookup read " << longest << " entries";
}

// Each table draws a seed of its own: the same keys start at unrelated
// entries in two tables (by chance, 1 key in 2048 at the same one). A given
// seed is the same hash.
TEST(KeyTable, EachTableDrawsItsOwnSeed) {
  const KeyTable a(1000), b(1000), c(1000, 7), d(1000, 7);  // 2048 entries each
  size_t same = 0;
  for (uint32_t op = 0; op < 1000; ++op) {
    const SlotKey k{1, op, op % 5};
    same += a.home(k) == b.home(k);
    ASSERT_EQ(c.home(k), d.home(k));
  }
  EXPECT_LT(same, 20u);
}

}  // namespace
