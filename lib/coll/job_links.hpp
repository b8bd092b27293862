// Links whose every call is one progress loop over a send job and a receive
// job (tcp/links.cpp over sockets, shm/links.cpp over shared-memory rings):
// send, recv and sendrecv made into jobs for the kind's run(), and the check
// that a peer is another rank of the group, written once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "coll/links.hpp"

namespace prism::coll {

// Send: built from (peer, data, len); Recv: {peer, data, cap}, its len the
// message's once run() returns.
template <class Send, class Recv>
class JobLinks : public Links {
 public:
  explicit JobLinks(int rank) : rank_(rank) {}
  int rank() const final { return rank_; }

  void send(int peer, const void* data, size_t len) final {
    check(peer);
    Send s(peer, data, len);
    run(&s, nullptr);
  }
  size_t recv(int peer, void* data, size_t cap) final {
    check(peer);
    Recv r{peer, static_cast<uint8_t*>(data), cap};
    run(nullptr, &r);
    return r.len;
  }
  size_t sendrecv(int to, const void* sdata, size_t slen, int from, void* rdata, size_t rcap) final {
    check(to), check(from);
    Send s(to, sdata, slen);
    Recv r{from, static_cast<uint8_t*>(rdata), rcap};
    run(&s, &r);
    return r.len;
  }

 protected:
  // Moves s and r (either may be null) along until both are done, or throws LinkError.
  virtual void run(Send* s, Recv* r) = 0;
  const int rank_;

 private:
  void check(int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw LinkError("rank " + std::to_string(rank_) + ": no peer " + std::to_string(peer) + " in a group of " +
                      std::to_string(size()));
  }
};

}  // namespace prism::coll
