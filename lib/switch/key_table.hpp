// Op-chunk keys and the flat table a reducer shard remembers them in.
//
// KeyTable maps a key (job, op, chunk) to a 32-bit value in one flat
// open-addressed table: linear probing from a keyed hash, backward-shift
// deletion, at most half full, so a lookup reads one cache line (two when
// its run crosses one) and nothing allocates after construction. The
// result log (result_log.hpp) keeps what a shard remembers of its chunks in
// one.
//
// Keys come off the network: a tenant picks its op and chunk numbers. So
// the hash is keyed with a seed drawn for each table (getrandom) that no
// one outside sees: which keys share a home cannot be worked out offline
// (review F20). And no key sits more than kMaxProbe entries past its home:
// a put that would go further draws a new seed and places every key again,
// in place. By chance that happens far less than once in 10^12 puts at
// half load; keys can force it only by knowing the seed, and then only until
// it changes. So a lookup, found or not, reads at most kMaxProbe + 1 entries.
// The keyed hash and the bound cost the switch 3-4 instructions per
// contribution (callgrind, 1 KiB fp32, R = 8: 2484 -> 2487).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace prism::sw {

struct SlotKey {
  uint32_t job, op, chunk;
  bool operator==(const SlotKey& o) const { return job == o.job && op == o.op && chunk == o.chunk; }
};

// A keyed hash of the 96-bit key: two folded 64 x 64 -> 128-bit multiplies
// (wyhash's and foldhash's mix), about 10 cycles. The four words come from
// one 64-bit seed; they are the secret.
class SlotKeyHash {
 public:
  explicit SlotKeyHash(uint64_t seed);
  uint64_t operator()(const SlotKey& k) const {
    return fold(fold((uint64_t(k.job) << 32 | k.op) ^ w_[0], k.chunk ^ w_[1]) ^ w_[2], w_[3]);
  }

 private:
  static uint64_t fold(uint64_t a, uint64_t b) {
    const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
    return uint64_t(p) ^ uint64_t(p >> 64);
  }
  uint64_t w_[4];
};

// 64 bits from the kernel's CSPRNG (getrandom). Without it (not expected past
// early boot) the clock and a counter: still a seed of its own per call and run.
uint64_t fresh_seed();

class KeyTable {
 public:
  // The most entries past its home a key is put: a lookup reads at most one
  // more (2 KiB). A random hash at half load goes past 40 about once in
  // 10^6 puts (simulated); the tail falls about 5x for every 8 entries more.
  static constexpr size_t kMaxProbe = 128;
  // Room for `capacity` keys at once (the caller never puts more), hashed
  // with a fresh random seed.
  explicit KeyTable(size_t capacity);
  // The same with a given seed (tests: keys can then be chosen to collide).
  KeyTable(size_t capacity, uint64_t seed);
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
  // Where a lookup of `k` starts, and how many entries it reads, found or
  // not; how many times the table drew a new seed (tests).
  size_t home(const SlotKey& k) const { return hash_(k) >> shift_; }
  size_t probes(const SlotKey& k) const;
  uint64_t reseeds() const { return reseeds_; }

 private:
  // Key and value side by side (16 bytes): a probe reads one cache line, not two.
  struct Entry {
    SlotKey key;
    uint32_t value;  // 0: empty
  };
  long find(const SlotKey& k) const;
  void erase_at(size_t i);
  [[gnu::noinline, gnu::cold]] void put_far(const SlotKey& k, uint32_t value);
  void reseed();
  size_t rehash();
  SlotKeyHash hash_;
  std::vector<Entry> table_;
  std::vector<uint64_t> unplaced_;  // rehash(): a bit per entry, its key not yet placed again
  size_t mask_, shift_, count_ = 0;
  size_t limit_ = kMaxProbe;  // no key sits further past its home (more only if reseeding fails)
  uint64_t reseeds_ = 0;
};

}  // namespace prism::sw
