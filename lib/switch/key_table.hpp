// Op-chunk keys and the flat table a reducer shard remembers them in.
//
// KeyTable maps a key (job, op, chunk) to a 32-bit value in one flat
// open-addressed table: linear probing from a multiplicative hash,
// backward-shift deletion, at most half full, so a lookup reads one cache
// line (two when its run crosses one) and nothing allocates after
// construction. The result log (result_log.hpp) keeps what a shard
// remembers of its chunks in one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace prism::sw {

struct SlotKey {
  uint32_t job, op, chunk;
  bool operator==(const SlotKey& o) const { return job == o.job && op == o.op && chunk == o.chunk; }
};
struct SlotKeyHash {
  size_t operator()(const SlotKey& k) const {
    uint64_t h = (uint64_t(k.job) << 32 | k.op) * 0x9E3779B97F4A7C15ull;
    return size_t(h ^ (uint64_t(k.chunk) * 0xC2B2AE3D27D4EB4Full) ^ (h >> 29));
  }
};

class KeyTable {
 public:
  // Room for `capacity` keys at once (the caller never puts more).
  explicit KeyTable(size_t capacity);
  // The key's value; 0 when it is absent (0 is never stored).
  uint32_t get(const SlotKey& k) const {
    const long i = find(k);
    return i < 0 ? 0 : table_[size_t(i)].value;
  }
  // Inserts the key, or replaces its value. `value` is not 0.
  void put(const SlotKey& k, uint32_t value);
  // Removes the key; false when it was absent.
  bool erase(const SlotKey& k);
  size_t size() const { return count_; }
  // Starts fetching the line a lookup of `k` reads first: a table of
  // megabytes probed at a random place misses the caches.
  void prefetch(const SlotKey& k) const { __builtin_prefetch(&table_[home(k)]); }

 private:
  // Key and value side by side (16 bytes): a probe reads one cache line, not two.
  struct Entry {
    SlotKey key;
    uint32_t value;  // 0: empty
  };
  size_t home(const SlotKey& k) const { return (SlotKeyHash{}(k)*0x9E3779B97F4A7C15ull) >> shift_; }
  long find(const SlotKey& k) const;
  void erase_at(size_t i);
  std::vector<Entry> table_;
  size_t mask_, shift_, count_ = 0;
};

}  // namespace prism::sw
