// The socket a rank listens at while its group connects: bound before the
// rank's address is published (port 0: one the kernel picks), closed once
// every higher rank has called in.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "coll/tcp.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll {

class Listener {
 public:
  // Listens at `at` with room for `backlog` calls waiting; a socket of
  // tcp_socket(o) (what it accepts inherits its buffers). Throws LinkError
  // naming `who` and the address.
  Listener(const TcpAddr& at, int backlog, const TcpOptions& o, const std::string& who);

  int fd() const { return fd_.get(); }
  // Where it listens, with the port the kernel chose for port 0.
  const TcpAddr& address() const { return addr_; }

  struct Accepted {
    Fd fd;  // non-blocking, Nagle off
    sockaddr_in from;
  };
  // Every call waiting now (never blocks).
  std::vector<Accepted> accept_all();

 private:
  Fd fd_;
  TcpAddr addr_;
};

}  // namespace prism::coll
