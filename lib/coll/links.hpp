// A rank's links to the other ranks of its group: point-to-point messages for
// the host collectives (binomial tree, pipelined chain, RHD, ring), reliable
// and in order between each pair of ranks, as TCP is. ("Links", not
// "transport": PartialTransport is how a partial sum is encoded.) An
// interface, so a faster kind of link can be added; inproc.hpp runs a group as threads of one
// process (for tests, with an observer that sees every message), tcp.hpp
// between processes (as Gloo does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "coll/acc_cache.hpp"
#include "coll/buffer_cache.hpp"

namespace prism::coll {

struct LinkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Which collective call a message belongs to (docs/LINKS.md, "Call tags").
// The TCP and shared-memory links stamp every message with the sender's tag
// and give a recv only a message of this rank's own call: one of an earlier
// call (left by a call that failed part way) is dropped, one of a later call
// stays queued for it and fails the recv, one of the same call made
// otherwise (another collective, algorithm, root or count) fails the recv:
// a LinkError naming both calls. `epoch` counts the calls over the links:
// 2k - 1 during the k-th (CallScope, call_tag.hpp), 2k after it (messages
// between calls, as the calibration's, carry that and zeros).
struct CallTag {
  uint32_t epoch = 0;
  uint8_t coll = 0;    // the Collective's code + 1 (0 between calls)
  uint8_t algo = 0;    // the Algorithm's code
  uint16_t root = 0;   // a rooted collective's root (its low 16 bits), else 0
  uint64_t count = 0;  // the call's element count (the whole vector's)

  static constexpr size_t kBytes = 16;  // on the wire: these fields in this order, little-endian
  void store(uint8_t* p) const {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(epoch >> (8 * i));
    p[4] = coll, p[5] = algo, p[6] = uint8_t(root), p[7] = uint8_t(root >> 8);
    for (int i = 0; i < 8; ++i) p[8 + i] = uint8_t(count >> (8 * i));
  }
  static CallTag load(const uint8_t* p) {
    CallTag t;
    for (int i = 0; i < 4; ++i) t.epoch |= uint32_t(p[i]) << (8 * i);
    t.coll = p[4], t.algo = p[5], t.root = uint16_t(p[6] | p[7] << 8);
    for (int i = 0; i < 8; ++i) t.count |= uint64_t(p[8 + i]) << (8 * i);
    return t;
  }
  bool operator==(const CallTag&) const = default;
};

// Where a message tagged `got` stands against this rank's call `now`.
enum class CallOrder { SAME, EARLIER, LATER, OTHER };
inline CallOrder call_order(const CallTag& got, const CallTag& now) {
  const int32_t d = int32_t(got.epoch - now.epoch);  // serial arithmetic: epochs wrap
  if (d < 0) return CallOrder::EARLIER;
  if (d > 0) return CallOrder::LATER;
  return got == now ? CallOrder::SAME : CallOrder::OTHER;
}

class Links {
 public:
  virtual ~Links() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sends `len` bytes to `peer` as one message. It may return before the
  // peer receives it; it never waits for the peer to call recv() for
  // messages it can buffer.
  virtual void send(int peer, const void* data, size_t len) = 0;
  // The next message from `peer`, into `data` (at most `cap` bytes); returns
  // its length. Throws LinkError when it is longer than `cap`, or the
  // peer is gone.
  virtual size_t recv(int peer, void* data, size_t cap) = 0;
  // Sends to `to` and receives from `from` at once (a ring's or RHD's
  // exchange): never deadlocks when both sides call it with large messages.
  virtual size_t sendrecv(int to, const void* sdata, size_t slen, int from, void* rdata, size_t rcap) = 0;

  // This rank's spare accumulators and buffers, kept from one collective to
  // the next (acc_cache.hpp, buffer_cache.hpp): the links are the group's, so
  // the caches are too, with no global state.
  AccCache& accumulators() { return acc_; }
  BufferCache& buffers() { return buf_; }

  // The call under way (the tag this rank's messages carry and its recvs
  // want), or the state between calls. begin_call() starts the next call with
  // t's fields (its epoch is set here), end_call() ends it; CallScope calls both.
  const CallTag& call() const { return call_; }
  void begin_call(CallTag t) {
    t.epoch = call_.epoch + (call_.epoch % 2 ? 2 : 1);
    call_ = t;
  }
  void end_call() { call_ = CallTag{call_.epoch + call_.epoch % 2}; }

 private:
  AccCache acc_;
  BufferCache buf_;
  CallTag call_;
};

// What an observer of a transport sees (inproc.hpp): one message, when sent.
struct MessageEvent {
  int from, to;
  size_t bytes;
  uint64_t seq;  // the order of sends over the whole group
};

}  // namespace prism::coll
