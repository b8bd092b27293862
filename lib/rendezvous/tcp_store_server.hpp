// The TCP store's server (tcp_store.hpp has the protocol): a thread with one
// poll() loop over its listening socket and its clients. A GET for a key not
// yet set is parked until a SET or ADD of that key, or its deadline: nothing
// polls. A client that breaks the protocol or goes away is dropped alone.
// Within TcpStoreLimits: a SET or ADD past the keys or bytes is answered with
// an ERROR; a connection past the connections is greeted, its first request
// answered with an ERROR that says so, and closed.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <thread>

#include "coll/tcp/fd.hpp"
#include "rendezvous/tcp_store.hpp"

namespace prism::rdv {

class TcpStoreServer {
 public:
  // Listens at `ip` (INADDR_ANY: every local address) on `port` (0: one the
  // kernel picks), with SO_REUSEADDR, and starts serving. Throws StoreError.
  TcpStoreServer(in_addr ip, uint16_t port, const TcpStoreLimits& limits);
  // Stops serving: every client's connection closes.
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const { return port_; }

 private:
  void serve();

  coll::Fd listener_, wake_;  // wake_: an eventfd the destructor writes to
  uint16_t port_ = 0;
  TcpStoreLimits limits_;
  std::thread thread_;
};

}  // namespace prism::rdv
