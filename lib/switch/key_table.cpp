#include "switch/key_table.hpp"

namespace prism::sw {

KeyTable::KeyTable(size_t capacity) {
  size_t n = 16, bits = 4;
  while (n < 2 * capacity) n <<= 1, ++bits;  // at most half full
  table_.assign(n, Entry{});
  mask_ = n - 1;
  shift_ = 64 - bits;
}

long KeyTable::find(const SlotKey& k) const {
  for (size_t i = home(k);; i = (i + 1) & mask_) {
    if (!table_[i].value) return -1;
    if (table_[i].key == k) return long(i);
  }
}

void KeyTable::put(const SlotKey& k, uint32_t value) {
  size_t i = home(k);
  for (; table_[i].value; i = (i + 1) & mask_)
    if (table_[i].key == k) {
      table_[i].value = value;
      return;
    }
  table_[i] = Entry{k, value};
  ++count_;
}

bool KeyTable::erase(const SlotKey& k) {
  const long at = find(k);
  if (at < 0) return false;
  erase_at(size_t(at));
  --count_;
  return true;
}

// Backward-shift deletion: later keys of the same probe run move up, so a
// lookup never stops early at the hole.
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

}  // namespace prism::sw
