#include "coll/tcp/listener.hpp"

#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "coll/tcp/socket.hpp"

namespace prism::coll {

Listener::Listener(const TcpAddr& at, int backlog, const TcpOptions& o, const std::string& who)
    : fd_(tcp_socket(o, who)), addr_(at) {
  const int one = 1;
  setsockopt(fd_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = to_sockaddr(at);
  if (bind(fd_.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0 || listen(fd_.get(), backlog) != 0)
    throw LinkError(who + ": cannot listen at " + addr_str(at) + ": " + std::strerror(errno) +
                    " (is this host's address right, and the port free?)");
  socklen_t len = sizeof sa;
  if (getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&sa), &len) == 0) addr_.port = ntohs(sa.sin_port);
}

std::vector<Listener::Accepted> Listener::accept_all() {
  std::vector<Accepted> out;
  for (;;) {
    Accepted c{};
    socklen_t len = sizeof c.from;
    c.fd.reset(accept4(fd_.get(), reinterpret_cast<sockaddr*>(&c.from), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.fd) break;
    const int on = 1;
    setsockopt(c.fd.get(), IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace prism::coll
