#include "rank/udp_link.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "prism/prism.hpp"

namespace prism::rank {
namespace {

[[noreturn]] void fail_errno(const std::string& what, const std::string& todo) {
  throw Error(Errc::SYSTEM, what + ": " + std::strerror(errno) + " (" + todo + ")");
}

sockaddr_in address(const std::string& ip, uint16_t port, const char* role) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (ip.empty()) {
    a.sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    throw Error(Errc::INVALID_ARGUMENT,
                std::string(role) + " address '" + ip + "' is not an IPv4 address (write a.b.c.d)");
  }
  return a;
}

// A larger socket buffer than the default, so a window of RESULTs is not
// dropped while the rank computes: SO_RCVBUFFORCE as root, else as much as
// net.core.rmem_max allows.
void grow_buffer(int fd, int opt, int force_opt, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
}

}  // namespace

UdpLink::UdpLink(const std::string& local_ip, uint16_t local_port, const std::string& switch_ip, uint16_t switch_port)
    : remote_(address(switch_ip, switch_port, "the switch's")), bufs_(kBatch * kBufSize), lens_(kBatch), iov_(kBatch) {
  const sockaddr_in local = address(local_ip, local_port, "the rank's");
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail_errno("socket(AF_INET, SOCK_DGRAM)", "the system is out of sockets?");
  const int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int pmtu = IP_PMTUDISC_DO;  // DF: a packet that does not fit fails here, not at the switch
  setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  grow_buffer(fd_, SO_RCVBUF, SO_RCVBUFFORCE, 8 << 20);
  grow_buffer(fd_, SO_SNDBUF, SO_SNDBUFFORCE, 4 << 20);
  if (bind(fd_, reinterpret_cast<const sockaddr*>(&local), sizeof local) != 0) {
    const int e = errno;
    close(fd_);
    errno = e;
    fail_errno("bind to " + (local_ip.empty() ? std::string("*") : local_ip) + ":" + std::to_string(local_port),
               "the rank's address must be one of this host's (the member's ip in the switch's config) and its UDP "
               "port free");
  }
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&remote_), sizeof remote_) != 0) {
    const int e = errno;
    close(fd_);
    errno = e;
    fail_errno("connect to the switch at " + switch_ip + ":" + std::to_string(switch_port),
               "is there a route to the switch port's address from this host?");
  }
}

UdpLink::~UdpLink() {
  if (fd_ >= 0) close(fd_);
}

size_t UdpLink::path_mtu() const {
  int mtu = 0;
  socklen_t len = sizeof mtu;
  if (getsockopt(fd_, IPPROTO_IP, IP_MTU, &mtu, &len) != 0 || mtu < 576) return 1500;
  return size_t(mtu);
}

size_t UdpLink::send(const Datagram* d, size_t n) {
  mmsghdr msgs[kBatch];
  iovec iov[kBatch][2];
  sockaddr_in to[kBatch];
  size_t sent = 0;
  while (sent < n) {
    const size_t k = std::min(n - sent, kBatch);
    for (size_t i = 0; i < k; ++i) {
      const Datagram& g = d[sent + i];
      iov[i][0] = {const_cast<void*>(g.head), g.head_len};
      iov[i][1] = {const_cast<void*>(g.body), g.body_len};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = iov[i];
      msgs[i].msg_hdr.msg_iovlen = g.body_len ? 2 : 1;
      if (g.port && htons(g.port) != remote_.sin_port) {  // another of the switch's ports: named per message
        to[i] = remote_;
        to[i].sin_port = htons(g.port);
        msgs[i].msg_hdr.msg_name = &to[i];
        msgs[i].msg_hdr.msg_namelen = sizeof to[i];
      }
    }
    const int r = sendmmsg(fd_, msgs, unsigned(k), 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == ENOBUFS) return sent;  // the kernel's queue is full: later
      if (errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) {
        ++sent;  // an ICMP error for an earlier datagram: drop this one, the timer resends it
        continue;
      }
      fail_errno("sendmmsg to the switch", "check the interface and the route to the switch");
    }
    sent += size_t(r);
    if (size_t(r) < k) return sent;
  }
  return sent;
}

size_t UdpLink::receive(int timeout_ms) {
  if (timeout_ms > 0) {
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno != EINTR) fail_errno("poll on the rank's socket", "this should not happen");
    if (r <= 0) return 0;
  }
  mmsghdr msgs[kBatch];
  for (size_t i = 0; i < kBatch; ++i) {
    iov_[i] = {bufs_.data() + i * kBufSize, kBufSize};
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_iov = &iov_[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  for (;;) {
    const int r = recvmmsg(fd_, msgs, unsigned(kBatch), MSG_DONTWAIT, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      // An ICMP error (port unreachable: no switch there) is reported on a connected socket: not data.
      if (errno == EAGAIN || errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH) return 0;
      fail_errno("recvmmsg from the switch", "check the interface");
    }
    for (int i = 0; i < r; ++i) lens_[size_t(i)] = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ? 0 : msgs[i].msg_len;
    return size_t(r);
  }
}

}  // namespace prism::rank
