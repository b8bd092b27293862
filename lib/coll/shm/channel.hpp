// One direction of a pair of ranks over shared memory (shm.hpp): the
// producer's Outbound writes messages into the ring that lives in the
// consumer's segment, the consumer's Inbound reads them out, each message a
// 64-bit little-endian length, the sender's call tag (links.hpp's CallTag)
// and its bytes, streamed through the ring as room allows (the ring is a
// pipe: a message may be longer than it).
//
// Single copy (as Open MPI's vader with CMA): a message of at least
// kSingleCopyMin bytes, where the consumer showed at setup that it can read
// the producer's memory (process_vm_readv), travels as its length with bit
// 63 set and the address of its bytes; the consumer reads them straight into
// place and counts it in `copied`; the producer's send ends when it sees the
// count (its buffer must stay until then). One copy instead of two, and no
// ring to stream through.
//
// What a peer can make this rank hold (as tcp/pair.hpp's): a message that
// comes before its recv is kept when it is at most kMaxUnexpected bytes and
// the queue stays within kQueueBudget; otherwise the Inbound holds it back,
// its header read and nothing allocated, and reads no more of that ring
// until a recv attaches (the producer waits for room, or for its single
// copy to be taken: backpressure).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "coll/links.hpp"
#include "coll/shm/segment.hpp"

namespace prism::coll::shm {

inline constexpr uint64_t kSingleCopyFlag = uint64_t(1) << 63;
inline constexpr uint64_t kMaxMessage = uint64_t(1) << 40;  // a longer length means a corrupt ring
inline constexpr size_t kChunk = 256 << 10;  // bytes moved before the counter is published (the other side starts)
inline constexpr size_t kSingleCopyMin = 64 << 10;
inline constexpr size_t kReadBudget = 8 << 20;          // bytes read from one ring before looking at the others
inline constexpr size_t kHeader = 8 + CallTag::kBytes;  // length (bit 63: single copy), call tag; then the address
inline constexpr uint64_t kMaxUnexpected = 64 << 20;    // the longest message kept before its recv (tcp/pair.hpp's)
inline constexpr uint64_t kQueueBudget = 64 << 20;      // the most bytes kept so per peer

// The rank at the other end: its segment's header (its doorbell, whether it
// closed) and its process.
struct Peer {
  Header* header = nullptr;
  pid_t pid = 0;
  bool same_process = false;  // ranks as threads: single copy is a memcpy
};

// A message being sent: its header (length, call tag, and the address for
// single copy), then its bytes (the caller's).
struct SendJob {
  SendJob(int p, const void* d, size_t n, const CallTag& t = {})
      : peer(p), data(static_cast<const uint8_t*>(d)), len(n), tag(t) {}
  int peer;
  const uint8_t* data;
  size_t len;
  CallTag tag;  // framed with it (set before the first write)
  uint8_t hdr[kHeader + 8];
  size_t hdr_len = 0;   // 0 until the Outbound frames it
  size_t stream = 0;    // bytes it puts into the ring: hdr_len, plus len unless single copy
  size_t sent = 0;      // of stream
  uint64_t ticket = 0;  // single copy: the consumer's `copied` count that says it is read
  bool done = false;
};

// A recv() waiting: the next message from `peer` into the caller's buffer.
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

class Outbound {
 public:
  Outbound() = default;
  // The ring in the consumer's segment `to`, from rank `from`.
  Outbound(const Segment& to, int from, Peer consumer);
  // Moves s along: its header and bytes into the ring as room allows, or
  // the single copy's end seen; whether anything happened.
  bool write(SendJob& s);
  // A send that threw with a single copy outstanding: its buffer is going,
  // the consumer must not use what it reads from there.
  void abandon(const SendJob& s);
  const Peer& peer() const { return to_; }
  const std::string& lost() const { return lost_; }
  void lose(std::string why) {
    if (lost_.empty()) lost_ = std::move(why);
  }

 private:
  RingHeader* h_ = nullptr;
  uint8_t* ring_ = nullptr;
  uint64_t mask_ = 0, head_ = 0, posted_ = 0;
  bool single_copy_ = false;
  Peer to_;
  std::string lost_;
};

class Inbound {
 public:
  Inbound() = default;
  // The ring in this rank's segment `mine` from rank `from`.
  Inbound(const Segment& mine, int from, Peer producer);
  // Reads what the producer has written, up to kReadBudget, into `waiting`'s
  // buffer (the recv now waiting on this peer, if any) or the queue;
  // whether anything came. `now` is this rank's call (tcp/pair.hpp's rules:
  // an earlier call's message is dropped as it comes, a later call's kept).
  bool read(RecvJob* waiting, const CallTag& now);
  // Gives r the next message of call `now`, from the queue or the one now
  // arriving or held back; drops earlier calls' messages on the way; r is
  // done with `other` set when the next one is of another call.
  void attach(RecvJob& r, const CallTag& now);
  // After a recv that threw: a message half received into its buffer goes on into one of our own.
  void detach(RecvJob& r);
  // Whether the producer wrote something not yet read.
  bool pending() const { return h_->head.load(std::memory_order_acquire) != tail_; }
  bool mid_message() const { return in_body_ || hdr_got_ != 0; }
  // Whether a message waits, unread, for a recv (too long to keep, or the queue full).
  bool held() const { return in_body_ && sink_ == Sink::HELD; }
  const Peer& peer() const { return from_; }
  const std::string& lost() const { return lost_; }
  void lose(std::string why) {
    if (lost_.empty()) lost_ = std::move(why);
  }

 private:
  enum class Sink { OWNED, USER, DISCARD, HELD };
  struct Message {
    CallTag tag;
    std::vector<uint8_t> bytes;
  };
  // Takes up to n bytes of the stream; how many it took (it stops after `waiting`'s message, and
  // at a message held back).
  size_t consume(const uint8_t* src, size_t n, RecvJob* waiting, const CallTag& now);
  // Where the message whose header came goes (tcp/pair.cpp's start_body).
  void start_body(RecvJob* waiting, const CallTag& now);
  void keep();
  // A single-copy message's bytes into dst_ (none when null), and the producer told.
  void single_copy();
  void finish_body();

  RingHeader* h_ = nullptr;
  const uint8_t* ring_ = nullptr;
  uint64_t mask_ = 0, tail_ = 0;
  Peer from_;
  std::string lost_;
  uint8_t hdr_[kHeader + 8];
  size_t hdr_got_ = 0;
  bool in_body_ = false;
  bool single_ = false;  // the arriving message is a single copy from addr_
  uint64_t len_ = 0, got_ = 0, addr_ = 0;
  CallTag tag_;
  Sink sink_ = Sink::OWNED;
  uint8_t* dst_ = nullptr;
  RecvJob* user_ = nullptr;
  std::vector<uint8_t> owned_;
  std::deque<Message> done_;
  uint64_t queued_ = 0;  // bytes in done_ and owned_ (at most kQueueBudget)
};

// Whether this process can read `bytes` at `addr` in process `pid` (single copy), and reads them.
bool read_remote(pid_t pid, uint64_t addr, void* dst, size_t bytes);

}  // namespace prism::coll::shm
