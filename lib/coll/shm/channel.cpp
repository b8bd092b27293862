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
    s.hdr_len = 8, s.stream = 8 + s.len;
    if (single) {
      put_le(s.hdr + 8, uint64_t(reinterpret_cast<uintptr_t>(s.data)));
      s.hdr_len = 16, s.stream = 16, s.ticket = ++posted_;
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
bool Inbound::read(RecvJob* waiting) {
  if (waiting && waiting->done) waiting = nullptr;
  size_t total = 0;
  while (lost_.empty() && total < kReadBudget && !(waiting && waiting->done && !mid_message())) {
    const uint64_t head = h_->head.load(std::memory_order_acquire);
    if (head == tail_) break;
    const size_t at = size_t(tail_ & mask_);
    const size_t n = size_t(std::min<uint64_t>({head - tail_, mask_ + 1 - at, kChunk}));
    const size_t used = consume(ring_ + at, n, waiting);
    tail_ += used, total += used;
    h_->tail.store(tail_, std::memory_order_release);
    ring(from_.header);
  }
  return total > 0;
}

size_t Inbound::consume(const uint8_t* src, size_t n, RecvJob* waiting) {
  const size_t given = n;
  while (n && lost_.empty()) {
    if (waiting && waiting->done && !mid_message()) break;
    if (!in_body_) {
      const size_t want = hdr_got_ < 8 ? 8 : 16;
      const size_t k = std::min(want - hdr_got_, n);
      std::memcpy(hdr_ + hdr_got_, src, k);
      hdr_got_ += k, src += k, n -= k;
      if (hdr_got_ == 8 && !(get_le(hdr_) & kSingleCopyFlag)) {
        start_body(waiting);
      } else if (hdr_got_ == 16) {
        len_ = get_le(hdr_) & ~kSingleCopyFlag;
        if (len_ > kMaxMessage) {
          lose("its ring is corrupt (a message of " + std::to_string(len_) + " bytes)");
          break;
        }
        user_ = waiting && !waiting->done ? waiting : nullptr;
        single_copy(get_le(hdr_ + 8));
      }
      continue;
    }
    const size_t k = size_t(std::min<uint64_t>(len_ - got_, n));
    if (sink_ != Sink::DISCARD) std::memcpy(dst_ + got_, src, k);
    got_ += k, src += k, n -= k;
    if (got_ == len_) finish_body();
  }
  return given - n;
}

void Inbound::start_body(RecvJob* waiting) {
  const uint64_t len = get_le(hdr_);
  hdr_got_ = 0;
  if (len > kMaxMessage) return lose("its ring is corrupt (a message of " + std::to_string(len) + " bytes)");
  in_body_ = true, len_ = len, got_ = 0;
  if (waiting && !waiting->done) {
    if (len > waiting->cap) {
      waiting->refused = len, waiting->done = true;
      sink_ = Sink::DISCARD, dst_ = nullptr;
    } else {
      sink_ = Sink::USER, dst_ = waiting->data, user_ = waiting;
    }
  } else {
    owned_.resize(len);
    sink_ = Sink::OWNED, dst_ = owned_.data();
  }
  if (len == 0) finish_body();
}

void Inbound::finish_body() {
  in_body_ = false;
  if (sink_ == Sink::USER) {
    user_->len = len_, user_->done = true;
  } else if (sink_ == Sink::OWNED) {
    done_.push_back(std::move(owned_));
    owned_ = {};
  }
  dst_ = nullptr, user_ = nullptr;
}

// The message's bytes straight from the producer's memory into the waiting
// recv's buffer (or one of our own): one copy, by this side alone.
void Inbound::single_copy(uint64_t addr) {
  hdr_got_ = 0;
  const uint64_t ticket = h_->copied.load(std::memory_order_relaxed) + 1;
  uint8_t* dst = nullptr;
  if (user_ && len_ > user_->cap) {
    user_->refused = len_, user_->done = true, user_ = nullptr;  // nothing to read
  } else if (user_) {
    dst = user_->data;
  } else {
    owned_.resize(len_);
    dst = owned_.data();
  }
  const auto given_up = [&] { return h_->abandoned.load(std::memory_order_acquire) == ticket; };
  if (dst && len_ && !given_up()) {
    if (from_.same_process) {
      std::memcpy(dst, reinterpret_cast<const void*>(uintptr_t(addr)), len_);
    } else if (!read_remote(from_.pid, addr, dst, len_)) {
      return lose("reading its message of " + std::to_string(len_) +
                  " bytes from its memory (process_vm_readv): " + std::strerror(errno));
    }
  }
  if (given_up()) return lose("it gave up sending a message of " + std::to_string(len_) + " bytes (its send failed)");
  h_->copied.store(ticket, std::memory_order_release);
  ring(from_.header);
  if (user_) {
    user_->len = len_, user_->done = true, user_ = nullptr;
  } else if (dst) {
    done_.push_back(std::move(owned_));
    owned_ = {};
  }
}

void Inbound::attach(RecvJob& r) {
  if (!done_.empty()) {
    std::vector<uint8_t> m = std::move(done_.front());
    done_.pop_front();
    r.done = true;
    if (m.size() > r.cap) {
      r.refused = m.size();
    } else {
      if (!m.empty()) std::memcpy(r.data, m.data(), m.size());
      r.len = m.size();
    }
  } else if (in_body_ && sink_ == Sink::OWNED) {
    if (len_ > r.cap) {
      r.refused = len_, r.done = true;
      sink_ = Sink::DISCARD, owned_ = {}, dst_ = nullptr;
    } else {
      std::memcpy(r.data, owned_.data(), size_t(got_));
      owned_ = {};
      sink_ = Sink::USER, dst_ = r.data, user_ = &r;
    }
  }
}

void Inbound::detach(RecvJob& r) {
  if (in_body_ && sink_ == Sink::USER && user_ == &r) {
    owned_.resize(len_);
    std::memcpy(owned_.data(), r.data, size_t(got_));
    sink_ = Sink::OWNED, dst_ = owned_.data(), user_ = nullptr;
  }
}

}  // namespace prism::coll::shm
