#include "coll/tcp/pair.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace prism::coll {

namespace {
constexpr const char* kClosed = "it closed the connection (it exited, or destroyed its transport)";
}

Pair::~Pair() {
  if (fd_) shutdown(fd_.get(), SHUT_WR);
}

void Pair::lose(std::string why) {
  fd_.reset();
  gone_ = std::move(why);
}

// Where the message whose header just came goes: into the waiting recv's
// buffer (this call's, and it fits), nowhere (an earlier call's, or one the
// recv refuses), or kept for a later recv (no recv waits, or it is a later
// call's): in a buffer of our own within the limits, else held back.
void Pair::start_body(RecvJob* waiting, const CallTag& now) {
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(hdr_[i]) << (8 * i);
  hdr_got_ = 0;
  if (len > kMaxMessage) {
    lose("its stream is corrupt (a message of " + std::to_string(len) + " bytes)");
    return;
  }
  in_body_ = true, len_ = len, got_ = 0, tag_ = CallTag::load(hdr_ + 8);
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
  if (len == 0 && sink_ != Sink::HELD) finish_body();
}

void Pair::keep() {
  if (len_ > kMaxUnexpected || queued_ + len_ > kQueueBudget) {
    sink_ = Sink::HELD;
    return;
  }
  owned_.resize(len_);
  queued_ += len_;
  sink_ = Sink::OWNED, dst_ = owned_.data();
}

void Pair::finish_body() {
  in_body_ = false;
  if (sink_ == Sink::USER) {
    user_->len = len_, user_->done = true;
  } else if (sink_ == Sink::OWNED) {
    done_.push_back({tag_, std::move(owned_)});
    owned_ = {};
  }
  dst_ = nullptr, user_ = nullptr;
}

size_t Pair::consume(const uint8_t* src, size_t n, RecvJob* waiting, const CallTag& now) {
  const size_t given = n;
  while (n && fd_ && !held()) {
    if (!in_body_) {
      const size_t k = std::min(kHeader - hdr_got_, n);
      std::memcpy(hdr_ + hdr_got_, src, k);
      hdr_got_ += k, src += k, n -= k;
      if (hdr_got_ == kHeader) start_body(waiting, now);
      continue;
    }
    const size_t k = size_t(std::min<uint64_t>(len_ - got_, n));
    if (sink_ != Sink::DISCARD) std::memcpy(dst_ + got_, src, k);
    got_ += k, src += k, n -= k;
    if (got_ == len_) finish_body();
  }
  return given - n;
}

// Once `waiting` has its message, what follows stays in the socket for the next recv: read now,
// it would go into a buffer of our own (allocated, faulted in, copied again on attach).
bool Pair::read(std::vector<uint8_t>& stage, RecvJob* waiting, const CallTag& now) {
  const bool serving = waiting && !waiting->done;
  bool progress = false;
  if (!spill_.empty() && !held()) {  // what was read past a header held back, before the socket's
    const size_t used = consume(spill_.data(), spill_.size(), waiting, now);
    spill_.erase(spill_.begin(), spill_.begin() + std::ptrdiff_t(used));
    progress = used > 0;
  }
  size_t total = 0;
  while (fd_ && spill_.empty() && !held() && total < kPumpBudget &&
         !(serving && waiting->done && !in_body_ && hdr_got_ == 0)) {
    ssize_t r;
    if (in_body_ && sink_ != Sink::DISCARD && len_ - got_ >= kStage) {  // large: straight into place
      r = ::recv(fd_.get(), dst_ + got_, size_t(len_ - got_), 0);
      if (r > 0) {
        got_ += uint64_t(r);
        if (got_ == len_) finish_body();
      }
    } else {
      r = ::recv(fd_.get(), stage.data(), stage.size(), 0);
      if (r > 0) {
        const size_t used = consume(stage.data(), size_t(r), waiting, now);
        if (used < size_t(r) && fd_) spill_.assign(stage.data() + used, stage.data() + r);
      }
    }
    if (r > 0) {
      total += size_t(r);
    } else if (r == 0) {
      lose(in_body_ || hdr_got_ ? "it closed the connection in the middle of a message" : kClosed);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      lose(std::strerror(errno));
    }
  }
  return progress || total > 0;
}

bool Pair::write(SendJob& s) {
  bool progress = false;
  while (!s.done() && fd_) {
    iovec iov[2];
    int k = 0;
    if (s.sent < kHeader) iov[k++] = {s.hdr + s.sent, kHeader - s.sent};
    const size_t body = s.sent < kHeader ? 0 : s.sent - kHeader;
    if (body < s.len) iov[k++] = {const_cast<uint8_t*>(s.data) + body, s.len - body};
    msghdr m{};
    m.msg_iov = iov, m.msg_iovlen = size_t(k);
    const ssize_t r = sendmsg(fd_.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      s.sent += size_t(r), progress = true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else if (errno != EINTR) {
      lose(errno == EPIPE ? kClosed : std::strerror(errno));
    }
  }
  return progress;
}

void Pair::attach(RecvJob& r, const CallTag& now) {
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
}

void Pair::detach(RecvJob& r) {
  if (in_body_ && sink_ == Sink::USER && user_ == &r) {
    owned_.resize(len_);  // at most what the recv was ready to take
    queued_ += len_;
    std::memcpy(owned_.data(), r.data, size_t(got_));
    sink_ = Sink::OWNED, dst_ = owned_.data(), user_ = nullptr;
  }
}

}  // namespace prism::coll
