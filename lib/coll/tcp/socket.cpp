#include "coll/tcp/socket.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "coll/links.hpp"

namespace prism::coll {

std::string ipv4_str(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." + std::to_string((ip >> 8) & 255) +
         "." + std::to_string(ip & 255);
}

std::optional<uint32_t> parse_ipv4_str(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::string addr_str(const TcpAddr& a) { return ipv4_str(a.ip) + ":" + std::to_string(a.port); }

std::optional<TcpAddr> parse_addr_str(const std::string& s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::optional<uint32_t> ip = parse_ipv4_str(s.substr(0, colon));
  unsigned port = 0;
  const char* b = s.data() + colon + 1;
  const char* e = s.data() + s.size();
  const auto r = std::from_chars(b, e, port);
  if (!ip || b == e || r.ec != std::errc() || r.ptr != e || port > 65535) return std::nullopt;
  return TcpAddr{*ip, uint16_t(port)};
}

sockaddr_in to_sockaddr(const TcpAddr& a) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(a.ip);
  s.sin_port = htons(a.port);
  return s;
}

TcpAddr from_sockaddr(const sockaddr_in& s) { return TcpAddr{ntohl(s.sin_addr.s_addr), ntohs(s.sin_port)}; }

// Buffers: SO_*BUFFORCE when privileged; otherwise the kernel's autotuning is
// left alone, since a plain SO_*BUF is capped at net.core.*mem_max (some
// 200 KiB) and switches autotuning off, which would make the buffers
// smaller, not larger.
Fd tcp_socket(const TcpOptions& o, const std::string& who) {
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) throw LinkError(who + ": socket(): " + std::strerror(errno));
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (o.socket_buffer > 0) {
    setsockopt(fd.get(), SOL_SOCKET, SO_SNDBUFFORCE, &o.socket_buffer, sizeof o.socket_buffer);
    setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &o.socket_buffer, sizeof o.socket_buffer);
  }
  return fd;
}

bool connected_to_itself(int fd) {
  sockaddr_in a{}, b{};
  socklen_t la = sizeof a, lb = sizeof b;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &la);
  getpeername(fd, reinterpret_cast<sockaddr*>(&b), &lb);
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

std::optional<uint32_t> source_address_to(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return std::nullopt;
  std::optional<uint32_t> out;
  for (const addrinfo* ai = res; ai && !out; ai = ai->ai_next) {
    Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd || connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) continue;
    sockaddr_in me{};
    socklen_t len = sizeof me;
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&me), &len) == 0 && me.sin_addr.s_addr != 0)
      out = ntohl(me.sin_addr.s_addr);
  }
  freeaddrinfo(res);
  return out;
}

}  // namespace prism::coll
