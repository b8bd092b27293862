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

void Pair::start_body(RecvJob* waiting) {
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= uint64_t(hdr_[i]) << (8 * i);
  hdr_got_ = 0;
  if (len > kMaxMessage) {
    lose("its stream is corrupt (a message of " + std::to_string(len) + " bytes)");
    return;
  }
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

void Pair::finish_body() {
  in_body_ = false;
  if (sink_ == Sink::USER) {
    user_->len = len_, user_->done = true;
  } else if (sink_ == Sink::OWNED) {
    done_.push_back(std::move(owned_));
    owned_ = {};
  }
  dst_ = nullptr, user_ = nullptr;
}

void Pair::consume(const uint8_t* src, size_t n, RecvJob* waiting) {
  while (n && fd_) {
    if (!in_body_) {
      const size_t k = std::min(8 - hdr_got_, n);
      std::memcpy(hdr_ + hdr_got_, src, k);
      hdr_got_ += k, src += k, n -= k;
      if (hdr_got_ == 8) start_body(waiting);
      continue;
    }
    const size_t k = size_t(std::min<uint64_t>(len_ - got_, n));
    if (sink_ != Sink::DISCARD) std::memcpy(dst_ + got_, src, k);
    got_ += k, src += k, n -= k;
    if (got_ == len_) finish_body();
  }
}

// Once `waiting` has its message, what follows stays in the socket for the next recv: read now,
// it would go into a buffer of our own (allocated, faulted in, copied again on attach).
bool Pair::read(std::vector<uint8_t>& stage, RecvJob* waiting) {
  const bool serving = waiting && !waiting->done;
  size_t total = 0;
  while (fd_ && total < kPumpBudget && !(serving && waiting->done && !in_body_ && hdr_got_ == 0)) {
    ssize_t r;
    if (in_body_ && sink_ != Sink::DISCARD && len_ - got_ >= kStage) {  // large: straight into place
      r = ::recv(fd_.get(), dst_ + got_, size_t(len_ - got_), 0);
      if (r > 0) {
        got_ += uint64_t(r);
        if (got_ == len_) finish_body();
      }
    } else {
      r = ::recv(fd_.get(), stage.data(), stage.size(), 0);
      if (r > 0) consume(stage.data(), size_t(r), waiting);
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
  return total > 0;
}

bool Pair::write(SendJob& s) {
  bool progress = false;
  while (!s.done() && fd_) {
    iovec iov[2];
    int k = 0;
    if (s.sent < 8) iov[k++] = {s.hdr + s.sent, 8 - s.sent};
    const size_t body = s.sent < 8 ? 0 : s.sent - 8;
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

void Pair::attach(RecvJob& r) {
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

void Pair::detach(RecvJob& r) {
  if (in_body_ && sink_ == Sink::USER && user_ == &r) {
    owned_.resize(len_);
    std::memcpy(owned_.data(), r.data, size_t(got_));
    sink_ = Sink::OWNED, dst_ = owned_.data(), user_ = nullptr;
  }
}

}  // namespace prism::coll
