#include "coll/shm/channel.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coll/shm/doorbell.hpp"

namespace prism::coll::shm {

namespace {

void put_le(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint64_t get_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace

bool read_remote(pid_t pid, uint64_t addr, void* dst, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    const iovec local{static_cast<uint8_t*>(dst) + done, bytes - done};
    const iovec remote{reinterpret_cast<void*>(addr + done), bytes - done};
    const ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += size_t(r);
  }
  return true;
}

Outbound::Outbound(const Segment& to, int from, Peer consumer)
    : h_(to.ring_header(from)),
      ring_(to.ring(from)),
      mask_(to.header()->ring_bytes - 1),
      head_(h_->head.load(std::memory_order_relaxed)),
      single_copy_(h_->single_copy.load(std::memory_order_acquire) != 0),
      to_(consumer) {}

// Per byte: one memcpy into the ring (the consumer's copy out is the second);
// per kChunk, a release store and a doorbell ring.
bool Outbound::write(SendJob& s) {
  if (!lost_.empty() || s.done) return false;
  if (s.hdr_len == 0) {
    const bool single = single_copy_ && s.len >= kSingleCopyMin;
    put_le(s.hdr, uint64_t(s.len) | (single ? kSingleCopyFlag : 0));
    s.tag.store(s.hdr + 8);
    s.hdr_len = kHeader, s.stream = kHeader + s.len;
    if (single) {
      put_le(s.hdr + kHeader, uint64_t(reinterpret_cast<uintptr_t>(s.data)));
      s.hdr_len = kHeader + 8, s.stream = kHeader + 8, s.ticket = ++posted_;
    }
  }
  const auto finished = [&] {
    return s.sent == s.stream && (s.ticket == 0 || h_->copied.load(std::memory_order_acquire) >= s.ticket);
  };
  if (finished()) return s.done = true;  // a consumer that read it and then closed has it
  if (to_.header->closed.load(std::memory_order_acquire)) {
    lose("it closed its links (it exited, or destroyed them)");
    return false;
  }
  const uint64_t cap = mask_ + 1;
  bool progress = false;
  while (s.sent < s.stream) {
    const uint64_t room = cap - (head_ - h_->tail.load(std::memory_order_acquire));
    if (room == 0) break;
    size_t n = size_t(std::min<uint64_t>({room, s.stream - s.sent, kChunk}));
    while (n) {  // from the header, then the body, into the ring (wrapping)
      const uint8_t* src = s.sent < s.hdr_len ? s.hdr + s.sent : s.data + (s.sent - s.hdr_len);
      const size_t span = s.sent < s.hdr_len ? s.hdr_len - s.sent : s.stream - s.sent;
      const size_t at = size_t(head_ & mask_);
      const size_t k = std::min({n, span, size_t(cap) - at});
      std::memcpy(ring_ + at, src, k);
      head_ += k, s.sent += k, n -= k;
    }
    h_->head.store(head_, std::memory_order_release);
    ring(to_.header);
    progress = true;
  }
  if (finished()) s.done = progress = true;
  return progress;
}

void Outbound::abandon(const SendJob& s) {
  if (s.ticket && !s.done) h_->abandoned.store(s.ticket, std::memory_order_release);
}

Inbound::Inbound(const Segment& mine, int from, Peer producer)
    : h_(mine.ring_header(from)),
      ring_(mine.ring(from)),
      mask_(mine.header()->ring_bytes - 1),
      tail_(h_->tail.load(std::memory_order_relaxed)),
      from_(producer) {}

// Per byte: one memcpy out of the ring, into the waiting recv's buffer when
// there is one; per kChunk, a release store and a doorbell ring.
// It stops once `waiting` has its message: what follows is left for the next recv, not copied
// into a buffer of our own first (measured: a stream of 8 MiB messages by single copy went at
// 0.5 GB/s when each next one was pulled into a fresh buffer, page faults and all).
bool Inbound::read(RecvJob* waiting, const CallTag& now) {
  if (waiting && waiting->done) waiting = nullptr;
  size_t total = 0;
  while (lost_.empty() && !held() && total < kReadBudget && !(waiting && waiting->done && !mid_message())) {
    const uint64_t head = h_->head.load(std::memory_order_acquire);
    if (head == tail_) break;
    const size_t at = size_t(tail_ & mask_);
    const size_t n = size_t(std::min<uint64_t>({head - tail_, mask_ + 1 - at, kChunk}));
    const size_t used = consume(ring_ + at, n, waiting, now);
    tail_ += used, total += used;
    h_->tail.store(tail_, std::memory_order_release);
    ring(from_.header);
  }
  return total > 0;
}

size_t Inbound::consume(const uint8_t* src, size_t n, RecvJob* waiting, const CallTag& now) {
  const size_t given = n;
  while (n && lost_.empty() && !held()) {
    if (waiting && waiting->done && !mid_message()) break;
    if (!in_body_) {
      const size_t want = hdr_got_ < 8 ? 8 : get_le(hdr_) & kSingleCopyFlag ? kHeader + 8 : kHeader;
      const size_t k = std::min(want - hdr_got_, n);
      std::memcpy(hdr_ + hdr_got_, src, k);
      hdr_got_ += k, src += k, n -= k;
      if (hdr_got_ == want && want > 8) start_body(waiting, now);
      continue;
    }
    const size_t k = size_t(std::min<uint64_t>(len_ - got_, n));
    if (sink_ != Sink::DISCARD) std::memcpy(dst_ + got_, src, k);
    got_ += k, src += k, n -= k;
    if (got_ == len_) finish_body();
  }
  return given - n;
}

// As tcp/pair.cpp's: into the waiting recv's buffer, nowhere, or kept (held back past the limits).
void Inbound::start_body(RecvJob* waiting, const CallTag& now) {
  const uint64_t word = get_le(hdr_);
  single_ = (word & kSingleCopyFlag) != 0;
  const uint64_t len = word & ~kSingleCopyFlag;
  tag_ = CallTag::load(hdr_ + 8);
  addr_ = single_ ? get_le(hdr_ + kHeader) : 0;
  hdr_got_ = 0;
  if (len > kMaxMessage) return lose("its ring is corrupt (a message of " + std::to_string(len) + " bytes)");
  in_body_ = true, len_ = len, got_ = 0;
  dst_ = nullptr, user_ = nullptr, sink_ = Sink::DISCARD;
  const CallOrder order = call_order(tag_, now);
  const bool serving = waiting && !waiting->done;
  if (order == CallOrder::EARLIER) {
    // a call that failed part way left it: nobody's
  } else if (serving && order == CallOrder::OTHER) {
    waiting->other = true, waiting->got = tag_, waiting->done = true;
  } else if (serving && order == CallOrder::SAME) {
    if (len > waiting->cap)
      waiting->refused = len, waiting->done = true;
    else
      sink_ = Sink::USER, dst_ = waiting->data, user_ = waiting;
  } else {
    if (serving) waiting->other = true, waiting->got = tag_, waiting->done = true;  // a later call's: kept for it
    keep();
  }
  if (sink_ == Sink::HELD) return;
  if (single_) return single_copy();
  if (len == 0) finish_body();
}

void Inbound::keep() {
  if (len_ > kMaxUnexpected || queued_ + len_ > kQueueBudget) {
    sink_ = Sink::HELD;
    return;
  }
  owned_.resize(len_);
  queued_ += len_;
  sink_ = Sink::OWNED, dst_ = owned_.data();
}

void Inbound::finish_body() {
  in_body_ = false;
  if (sink_ == Sink::USER) {
    user_->len = len_, user_->done = true;
  } else if (sink_ == Sink::OWNED) {
    done_.push_back({tag_, std::move(owned_)});
    owned_ = {};
  }
  dst_ = nullptr, user_ = nullptr;
}

// The message's bytes straight from the producer's memory into dst_ (the
// waiting recv's buffer, one of our own, or nowhere): one copy, by this side alone.
void Inbound::single_copy() {
  const uint64_t ticket = h_->copied.load(std::memory_order_relaxed) + 1;
  const auto given_up = [&] { return h_->abandoned.load(std::memory_order_acquire) == ticket; };
  if (dst_ && len_ && !given_up()) {
    if (from_.same_process) {
      std::memcpy(dst_, reinterpret_cast<const void*>(uintptr_t(addr_)), len_);
    } else if (!read_remote(from_.pid, addr_, dst_, len_)) {
      return lose("reading its message of " + std::to_string(len_) +
                  " bytes from its memory (process_vm_readv): " + std::strerror(errno));
    }
  }
  if (given_up()) return lose("it gave up sending a message of " + std::to_string(len_) + " bytes (its send failed)");
  h_->copied.store(ticket, std::memory_order_release);
  ring(from_.header);
  got_ = len_;
  finish_body();
}

void Inbound::attach(RecvJob& r, const CallTag& now) {
  while (!r.done && !done_.empty()) {
    Message& m = done_.front();
    const CallOrder order = call_order(m.tag, now);
    if (order == CallOrder::LATER) {  // stays queued for its call
      r.other = true, r.got = m.tag, r.done = true;
      return;
    }
    if (order == CallOrder::SAME) {
      r.done = true;
      if (m.bytes.size() > r.cap) {
        r.refused = m.bytes.size();
      } else {
        if (!m.bytes.empty()) std::memcpy(r.data, m.bytes.data(), m.bytes.size());
        r.len = m.bytes.size();
      }
    } else if (order == CallOrder::OTHER) {
      r.other = true, r.got = m.tag, r.done = true;
    }  // EARLIER: dropped
    queued_ -= m.bytes.size();
    done_.pop_front();
  }
  if (r.done || !in_body_ || (sink_ != Sink::OWNED && sink_ != Sink::HELD)) return;
  const CallOrder order = call_order(tag_, now);
  if (order == CallOrder::LATER) {
    r.other = true, r.got = tag_, r.done = true;
    return;
  }
  if (sink_ == Sink::OWNED) queued_ -= len_;
  if (order == CallOrder::SAME && len_ <= r.cap) {
    if (got_) std::memcpy(r.data, owned_.data(), size_t(got_));
    sink_ = Sink::USER, dst_ = r.data, user_ = &r;
  } else {
    if (order == CallOrder::SAME) r.refused = len_, r.done = true;
    if (order == CallOrder::OTHER) r.other = true, r.got = tag_, r.done = true;
    sink_ = Sink::DISCARD, dst_ = nullptr;
  }
  owned_ = {};
  if (single_) single_copy();  // a single copy held back: taken (or dropped) now
}

void Inbound::detach(RecvJob& r) {
  if (in_body_ && sink_ == Sink::USER && user_ == &r) {
    owned_.resize(len_);  // at most what the recv was ready to take
    queued_ += len_;
    std::memcpy(owned_.data(), r.data, size_t(got_));
    sink_ = Sink::OWNED, dst_ = owned_.data(), user_ = nullptr;
  }
}

}  // namespace prism::coll::shm
