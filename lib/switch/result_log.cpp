#include "switch/result_log.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace prism::sw {
namespace {
constexpr size_t kBytesPerRecord = 512;  // what the key table is sized for, on average

// Copies `len` bytes to `dst` (64-byte aligned) without reading dst's lines
// into the cache first. The same core reads them back in order (a
// retransmission), so no fence is needed; nothing else reads the log.
// Cost: about ten instructions a line.
void stream_copy(uint8_t* dst, const uint8_t* src, size_t len) {
#if defined(__x86_64__)
  const auto load = [&](size_t at) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + at)); };
  const auto store = [&](size_t at, __m128i v) { _mm_stream_si128(reinterpret_cast<__m128i*>(dst + at), v); };
  size_t i = 0;
  for (; i + 64 <= len; i += 64) {  // a whole line at a time: the write-combining buffer fills and goes
    const __m128i a = load(i), b = load(i + 16), c = load(i + 32), d = load(i + 48);
    store(i, a), store(i + 16, b), store(i + 32, c), store(i + 48, d);
  }
  for (; i + 16 <= len; i += 16) store(i, load(i));
  if (i < len) std::memcpy(dst + i, src + i, len - i);
#else
  std::memcpy(dst, src, len);
#endif
}
}  // namespace

ResultLog::ResultLog(size_t bytes, size_t tombstones)
    : cap_(bytes / kLine),
      max_records_(bytes / kBytesPerRecord),
      ring_(cap_ ? new Line[cap_] : nullptr),
      tomb_(tombstones),
      line_base_(uint32_t(tombstones) + 1),
      table_(max_records_ + tombstones) {}

bool ResultLog::has_room(size_t len) const {
  if (records_ >= max_records_) return false;
  const size_t need = lines_for(len);
  const size_t pad = tail_ + need > cap_ ? cap_ - tail_ : 0;  // a record never wraps
  return cap_ - used_ >= pad + need;
}

void ResultLog::push(const SlotKey& k, uint32_t job_index, const wire::Header& h, const uint8_t* body, size_t len,
                     uint64_t now_ns, uint32_t gen) {
  const size_t need = lines_for(len);
  if (tail_ + need > cap_) {  // the rest of the ring is padding; the record starts at line 0
    put_record(tail_, Record{0, 0, 0, uint32_t(cap_ - tail_), kPad, 0, wire::Header{}});
    used_ += cap_ - tail_;
    tail_ = 0;
  }
  const size_t line = tail_;
  Record r{uint32_t(len), gen, now_ns, uint32_t(need), job_index, 0, h};
  r.h.job = k.job;
  r.h.op = k.op;
  r.h.chunk = k.chunk;
  put_record(line, r);
  stream_copy(reinterpret_cast<uint8_t*>(&ring_[line + 1]), body, len);
  table_.put(k, uint32_t(line + line_base_));
  tail_ += need;
  if (tail_ == cap_) tail_ = 0;
  used_ += need;
  ++records_;
}

// The ring's lines are arrays of bytes: a Record (an aggregate, an
// implicit-lifetime type) lives in one once its bytes are written there.
void ResultLog::put_record(size_t line, const Record& r) {
  stream_copy(ring_[line].b, reinterpret_cast<const uint8_t*>(&r), sizeof r);
}

// Cost: the key's table line (fetched one pop earlier) rewritten in place,
// and a tombstone.
void ResultLog::pop_oldest() {
  const Record& r = at(head_);
  const SlotKey key = r.key();
  const uint32_t gen = r.gen;
  const bool newest = table_.get(key) == head_ + line_base_;  // else a newer generation's entry holds the key
  used_ -= r.lines;
  head_ += r.lines;
  if (head_ == cap_) head_ = 0;
  --records_;
  skip_padding();
  if (newest) tombstone(key, Known::EXPIRED, gen);  // its table entry changes in place
  // The next pop reads the next record (fetched one pop ago, so its key is
  // at hand now) and that key's table line: start both on their way.
  if (records_) {
    const Record& next = at(head_);
    table_.prefetch(next.key());
    size_t after = head_ + next.lines;
    __builtin_prefetch(&ring_[after < cap_ ? after : 0]);
  }
}

void ResultLog::tombstone(const SlotKey& k, Known why, uint32_t gen) {
  if (tomb_.empty()) {  // no tombstones kept: forgotten at once
    table_.erase(k);
    return;
  }
  if (tomb_count_ == tomb_.size()) {  // full: forget the oldest, unless its key was remembered again since
    const SlotKey& old = tomb_[tomb_head_].key;
    if (table_.get(old) == tomb_head_ + 1) table_.erase(old);
    tomb_head_ = tomb_at(tomb_head_ + 1);
    --tomb_count_;
    table_.prefetch(tomb_[tomb_head_].key);  // the next tombstone forgets this one
  }
  const size_t at = tomb_at(tomb_head_ + tomb_count_);
  tomb_[at] = Tomb{k, why, gen};
  table_.put(k, uint32_t(at + 1));
  ++tomb_count_;
}

// Padding at the head is nobody's record: it goes with the record before it.
// An empty log starts again at line 0, so it needs no padding soon.
void ResultLog::skip_padding() {
  if (records_ == 0) {
    head_ = tail_ = used_ = 0;
    return;
  }
  const Record& r = at(head_);
  if (r.job_index != kPad) return;
  used_ -= r.lines;
  head_ = 0;
}

}  // namespace prism::sw
