// One rank's connection to one peer, after setup: the framing (each message
// a 64-bit little-endian length and the sender's call tag, links.hpp's
// CallTag, then its bytes) and the queue of whole messages that came before
// anyone asked for them. links.cpp waits on every pair at once and moves
// each one along with read() and write().
//
// What a peer can make this rank hold (docs/LINKS.md): a message that comes
// before its recv is kept when it is at most kMaxUnexpected bytes and the
// queue stays within kQueueBudget; otherwise the pair holds it back, its
// header read and nothing allocated, and reads no more from that peer until
// a recv attaches (the peer's send waits meanwhile: backpressure).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "coll/links.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll {

inline constexpr uint64_t kMaxMessage = uint64_t(1) << 40;  // a longer length prefix means a corrupt stream
inline constexpr size_t kHeader = 8 + CallTag::kBytes;      // a message's length, then its call tag
inline constexpr size_t kStage = 64 << 10;                  // read size when messages are small (several per read)
inline constexpr size_t kPumpBudget = 8 << 20;              // bytes read from one pair before looking at the others
// The longest message kept before its recv, and the most bytes kept so per peer: above any one
// message of the host collectives (a ring or RHD step of kMaxLaneBytes lanes is some 13 MiB at
// most), and room for a few 16 MiB sends crossed before either side receives.
inline constexpr uint64_t kMaxUnexpected = 64 << 20;
inline constexpr uint64_t kQueueBudget = 64 << 20;

// A message being sent: its header (length and call tag), then its bytes (the caller's).
struct SendJob {
  SendJob(int p, const void* d, size_t n, const CallTag& tag = {})
      : peer(p), data(static_cast<const uint8_t*>(d)), len(n) {
    for (int i = 0; i < 8; ++i) hdr[i] = uint8_t(uint64_t(n) >> (8 * i));
    stamp(tag);
  }
  void stamp(const CallTag& tag) { tag.store(hdr + 8); }  // before anything is sent
  int peer;
  uint8_t hdr[kHeader];
  const uint8_t* data;
  size_t len;
  size_t sent = 0;  // of kHeader + len
  bool done() const { return sent == kHeader + len; }
};

// A recv() waiting: the next message from `peer` of this rank's call into the caller's buffer.
struct RecvJob {
  int peer;
  uint8_t* data;
  size_t cap;
  size_t len = 0;
  bool done = false;
  uint64_t refused = 0;  // the length of a message longer than cap
  bool other = false;    // a message of another call came instead: its tag
  CallTag got;
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
  // `stage` for small messages; whether anything came. `now` is this rank's
  // call: a message of an earlier one is dropped as it comes. It stops once
  // a waiting recv has its message (the rest can wait in the socket), and
  // while a message is held back.
  bool read(std::vector<uint8_t>& stage, RecvJob* waiting, const CallTag& now);
  // Sends as much of s as the socket takes now; whether any went.
  bool write(SendJob& s);
  // Gives r the next message of call `now`, from the queue or the one now
  // arriving or held back (its rest then goes straight into r's buffer);
  // drops earlier calls' messages on the way; r is done with `other` set
  // when the next one is of another call.
  void attach(RecvJob& r, const CallTag& now);
  // After a recv that threw: a message half received into its buffer goes
  // on into one of our own.
  void detach(RecvJob& r);
  // Whether a message waits in the socket for a recv (too long to keep, or the queue full).
  bool held() const { return in_body_ && sink_ == Sink::HELD; }

 private:
  enum class Sink { OWNED, USER, DISCARD, HELD };
  struct Message {
    CallTag tag;
    std::vector<uint8_t> bytes;
  };
  void lose(std::string why);
  void start_body(RecvJob* waiting, const CallTag& now);
  void keep();
  void finish_body();
  // Takes up to n bytes of the stream; how many it took (it stops at a message held back).
  size_t consume(const uint8_t* src, size_t n, RecvJob* waiting, const CallTag& now);

  Fd fd_;
  std::string gone_;
  uint8_t hdr_[kHeader];
  size_t hdr_got_ = 0;
  bool in_body_ = false;
  uint64_t len_ = 0, got_ = 0;
  CallTag tag_;  // the arriving message's
  Sink sink_ = Sink::OWNED;
  uint8_t* dst_ = nullptr;
  RecvJob* user_ = nullptr;  // whose buffer dst_ is, with Sink::USER
  std::vector<uint8_t> owned_;
  std::deque<Message> done_;    // whole messages not yet received
  uint64_t queued_ = 0;         // bytes in done_ and owned_ (at most kQueueBudget)
  std::vector<uint8_t> spill_;  // bytes read past the header of a message held back (less than kStage)
};

}  // namespace prism::coll
