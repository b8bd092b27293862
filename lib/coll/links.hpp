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

 private:
  AccCache acc_;
  BufferCache buf_;
};

// What an observer of a transport sees (inproc.hpp): one message, when sent.
struct MessageEvent {
  int from, to;
  size_t bytes;
  uint64_t seq;  // the order of sends over the whole group
};

}  // namespace prism::coll
