// One rank's connection to one peer, after setup: the framing (each message
// a 64-bit little-endian length, then its bytes) and the queue of whole
// messages that came before anyone asked for them. links.cpp waits on every
// pair at once and moves each one along with read() and write().
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "coll/tcp/fd.hpp"

namespace prism::coll {

inline constexpr uint64_t kMaxMessage = uint64_t(1) << 40;  // a longer length prefix means a corrupt stream
inline constexpr size_t kStage = 64 << 10;                  // read size when messages are small (several per read)
inline constexpr size_t kPumpBudget = 8 << 20;              // bytes read from one pair before looking at the others

// A message being sent: its length prefix, then its bytes (the caller's).
struct SendJob {
  SendJob(int p, const void* d, size_t n) : peer(p), data(static_cast<const uint8_t*>(d)), len(n) {
    for (int i = 0; i < 8; ++i) hdr[i] = uint8_t(uint64_t(n) >> (8 * i));
  }
  int peer;
  uint8_t hdr[8];
  const uint8_t* data;
  size_t len;
  size_t sent = 0;  // of 8 + len
  bool done() const { return sent == 8 + len; }
};

// A recv() waiting: the next message from `peer` into the caller's buffer.
struct RecvJob {
  int peer;
  uint8_t* data;
  size_t cap;
  size_t len = 0;
  bool done = false;
  uint64_t refused = 0;  // the length of a message longer than cap
};

class Pair {
 public:
  Pair() = default;
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;
  // Shuts the sending side down first, so the peer reads a clean end.
  ~Pair();

  void adopt(Fd fd) { fd_ = std::move(fd); }
  bool open() const { return bool(fd_); }
  int fd() const { return fd_.get(); }
  const std::string& gone() const { return gone_; }  // why the connection closed

  // Reads what the peer has sent, up to kPumpBudget, into `waiting`'s buffer
  // (the recv now waiting on this pair, if any) or the queue, through
  // `stage` for small messages; whether anything came. It stops once a
  // waiting recv has its message (the rest can wait in the socket).
  bool read(std::vector<uint8_t>& stage, RecvJob* waiting);
  // Sends as much of s as the socket takes now; whether any went.
  bool write(SendJob& s);
  // Gives r a whole message from the queue, or the one now arriving (its
  // rest then goes straight into r's buffer).
  void attach(RecvJob& r);
  // After a recv that threw: a message half received into its buffer goes
  // on into one of our own.
  void detach(RecvJob& r);

 private:
  enum class Sink { OWNED, USER, DISCARD };
  void lose(std::string why);
  void start_body(RecvJob* waiting);
  void finish_body();
  void consume(const uint8_t* src, size_t n, RecvJob* waiting);

  Fd fd_;
  std::string gone_;
  uint8_t hdr_[8];
  size_t hdr_got_ = 0;
  bool in_body_ = false;
  uint64_t len_ = 0, got_ = 0;
  Sink sink_ = Sink::OWNED;
  uint8_t* dst_ = nullptr;
  RecvJob* user_ = nullptr;  // whose buffer dst_ is, with Sink::USER
  std::vector<uint8_t> owned_;
  std::deque<std::vector<uint8_t>> done_;  // whole messages not yet received
};

}  // namespace prism::coll
