#include "switch/result_log.hpp"

#include <new>

namespace prism::sw {
namespace {
constexpr size_t kBytesPerRecord = 512;  // what the key table is sized for, on average
}

ResultLog::ResultLog(size_t bytes)
    : cap_(bytes / kLine),
      max_records_(bytes / kBytesPerRecord),
      ring_(cap_ ? new Line[cap_] : nullptr),
      table_(max_records_) {}

bool ResultLog::has_room(size_t len) const {
  if (records_ >= max_records_) return false;
  const size_t need = lines_for(len);
  const size_t pad = tail_ + need > cap_ ? cap_ - tail_ : 0;  // a record never wraps
  return cap_ - used_ >= pad + need;
}

uint8_t* ResultLog::push(const SlotKey& k, uint32_t job_index, const wire::Header& h, size_t len, uint64_t now_ns) {
  const size_t need = lines_for(len);
  if (tail_ + need > cap_) {  // the rest of the ring is padding; the record starts at line 0
    new (&ring_[tail_]) Record{SlotKey{}, 0, 0, uint32_t(cap_ - tail_), kPad, wire::Header{}};
    used_ += cap_ - tail_;
    tail_ = 0;
  }
  const size_t line = tail_;
  new (&ring_[line]) Record{k, uint32_t(len), now_ns, uint32_t(need), job_index, h};
  table_.put(k, uint32_t(line + 1));
  tail_ += need;
  if (tail_ == cap_) tail_ = 0;
  used_ += need;
  ++records_;
  return reinterpret_cast<uint8_t*>(&ring_[line + 1]);
}

void ResultLog::pop_oldest() {
  const Record& r = at(head_);
  table_.erase(r.key);
  used_ -= r.lines;
  head_ += r.lines;
  if (head_ == cap_) head_ = 0;
  --records_;
  skip_padding();
  if (records_) __builtin_prefetch(&ring_[head_]);  // the next eviction reads it
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
