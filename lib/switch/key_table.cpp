#include "switch/key_table.hpp"

#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

namespace prism::sw {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t fresh_seed() {
  uint64_t s = 0;
  if (getrandom(&s, sizeof s, 0) == ssize_t(sizeof s)) return s;
  static std::atomic<uint64_t> n{0};
  s = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ (n.fetch_add(1) << 48);
  return splitmix64(s);
}

namespace {

// Seeds a put tries before it lets runs grow longer than kMaxProbe (which
// only keys colliding under every seed could make it do).
constexpr int kReseedTries = 4;

}  // namespace

SlotKeyHash::SlotKeyHash(uint64_t seed) {
  for (uint64_t& w : w_) w = splitmix64(seed);
  w_[1] |= uint64_t(1) << 63;  // the chunk's side of the first multiply is never small
  w_[3] |= 1;
}

KeyTable::KeyTable(size_t capacity) : KeyTable(capacity, fresh_seed()) {}

KeyTable::KeyTable(size_t capacity, uint64_t seed) : hash_(seed) {
  size_t n = 16, bits = 4;
  while (n < 2 * capacity) n <<= 1, ++bits;  // at most half full
  table_.assign(n, Entry{});
  unplaced_.assign(n / 64 + 1, 0);
  mask_ = n - 1;
  shift_ = 64 - bits;
}

// Cost: one hash, then a compare per entry read (1.5 on average at half load).
long KeyTable::find(const SlotKey& k) const {
  size_t i = home(k);
  for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_) {
    if (!table_[i].value) return -1;
    if (table_[i].key == k) return long(i);
  }
  return -1;  // every key sits within limit_ of its home
}

size_t KeyTable::probes(const SlotKey& k) const {
  size_t i = home(k), n = 1;
  for (; n <= limit_ && table_[i].value && !(table_[i].key == k); i = (i + 1) & mask_) ++n;
  return n;
}

void KeyTable::put(const SlotKey& k, uint32_t value) {
  size_t i = home(k);
  for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_) {
    if (!table_[i].value) {
      table_[i] = Entry{k, value};
      ++count_;
      return;
    }
    if (table_[i].key == k) {
      table_[i].value = value;
      return;
    }
  }
  put_far(k, value);
}

// k would sit more than limit_ past its home (k is not in the table): new
// seeds, then, should k collide under every one (no two keys do), longer runs.
void KeyTable::put_far(const SlotKey& k, uint32_t value) {
  for (int tries = 0; tries < kReseedTries; ++tries) {
    reseed();
    size_t i = home(k);
    for (size_t d = 0; d <= limit_; ++d, i = (i + 1) & mask_)
      if (!table_[i].value) {
        table_[i] = Entry{k, value};
        ++count_;
        return;
      }
  }
  size_t i = home(k), d = 0;  // lookups stay exact, only longer
  for (; table_[i].value; i = (i + 1) & mask_) ++d;
  table_[i] = Entry{k, value};
  ++count_;
  limit_ = std::max(limit_, d);
}

bool KeyTable::erase(const SlotKey& k) {
  const long at = find(k);
  if (at < 0) return false;
  erase_at(size_t(at));
  --count_;
  return true;
}

// Backward-shift deletion: later keys of the same probe run move up, so a
// lookup never stops early at the hole (and no key moves further from home).
void KeyTable::erase_at(size_t i) {
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (!table_[j].value) break;
    const size_t h = home(table_[j].key);
    // table_[j] may fill the hole at i unless its home lies in (i, j] (cyclically).
    const bool in_between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (in_between) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i].value = 0;
}

// A fresh seed and every key placed again, until none sits more than
// kMaxProbe past its home (a few tries at most; else runs may be longer).
void KeyTable::reseed() {
  for (int t = 0; t < kReseedTries; ++t) {
    hash_ = SlotKeyHash(fresh_seed());
    ++reseeds_;
    const size_t longest = rehash();
    limit_ = std::max(kMaxProbe, longest);
    if (longest <= kMaxProbe) return;
  }
}

// Places every key again under the current hash, in place (Abseil's
// rehash-in-place for linear probing): a key not yet placed goes to the
// first entry from its new home that is empty (it moves there) or holds
// another key not yet placed (they swap, and that key is placed next).
// Placed entries never move again, so no run has a hole. O(table); returns
// the longest distance a key ended up from its home.
size_t KeyTable::rehash() {
  const auto unplaced = [&](size_t i) { return unplaced_[i / 64] >> (i % 64) & 1; };
  const auto placed = [&](size_t i) { unplaced_[i / 64] &= ~(uint64_t(1) << (i % 64)); };
  std::fill(unplaced_.begin(), unplaced_.end(), 0);
  for (size_t i = 0; i < table_.size(); ++i)
    if (table_[i].value) unplaced_[i / 64] |= uint64_t(1) << (i % 64);
  size_t longest = 0;
  for (size_t i = 0; i < table_.size(); ++i)
    while (unplaced(i)) {
      const size_t h = home(table_[i].key);
      size_t j = h;
      while (table_[j].value && !unplaced(j)) j = (j + 1) & mask_;
      longest = std::max(longest, (j - h) & mask_);
      if (j == i) {
        placed(i);
      } else if (!table_[j].value) {
        table_[j] = table_[i];
        table_[i].value = 0;
        placed(i);  // now empty
      } else {
        std::swap(table_[i], table_[j]);
        placed(j);
      }
    }
  return longest;
}

}  // namespace prism::sw
