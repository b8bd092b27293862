#include "rank/udp_link.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
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
// Returns the size the kernel gave (twice what was asked: its bookkeeping).
int grow_buffer(int fd, int opt, int force_opt, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
  int got = 0;
  socklen_t len = sizeof got;
  getsockopt(fd, SOL_SOCKET, opt, &got, &len);
  return got;
}

}  // namespace

UdpLink::UdpLink(const std::string& local_ip, uint16_t local_port, const std::string& switch_ip, uint16_t switch_port,
                 bool gso)
    : remote_(address(switch_ip, switch_port, "the switch's")), gso_(gso ? Gso::UNTRIED : Gso::OFF) {
  const sockaddr_in local = address(local_ip, local_port, "the rank's");
  fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) fail_errno("socket(AF_INET, SOCK_DGRAM)", "the system is out of sockets?");
  // No SO_REUSEADDR: on UDP it would let any local user's socket that sets
  // it too bind this ip:port (no uid check) and take the switch's RESULTs or
  // send as this rank; UDP has no TIME_WAIT for it to help with.
  const int one = 1;
  const int pmtu = IP_PMTUDISC_DO;  // DF: a packet that does not fit fails here, not at the switch
  setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  size_buffers(256, 1500);  // until the communicator knows its window and the path's MTU
  // Coalesced receives where the kernel has them (Linux 5.0); a buffer must
  // then hold a whole coalesced datagram (64 KiB).
  gro_ = setsockopt(fd_, IPPROTO_UDP, UDP_GRO, &one, sizeof one) == 0;
  batch_ = gro_ ? kGroBatch : kBatch;
  buf_size_ = gro_ ? kGroBufSize : kBufSize;
  bufs_.resize(batch_ * buf_size_);
  iov_.resize(batch_);
  control_.resize(batch_ * kControl);
  views_.reserve(batch_);
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

// A kernel datagram costs its payload and about 800 bytes of bookkeeping
// (skb truesize). The receive side holds a whole window of RESULTs twice
// over (a rank descheduled for a while, RESULTs of two windows in a row);
// the send side one window, which one GSO burst queues at once.
void UdpLink::size_buffers(size_t window, size_t mtu) {
  const size_t per = mtu + 800;
  sndbuf_ = grow_buffer(fd_, SO_SNDBUF, SO_SNDBUFFORCE, int(std::max<size_t>(1 << 20, window * per)));
  rcvbuf_ = grow_buffer(fd_, SO_RCVBUF, SO_RCVBUFFORCE, int(std::max<size_t>(1 << 20, 2 * window * per)));
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

// Whether sendmmsg's error means "drop this message, its timer resends it":
// an ICMP error that an earlier datagram drew, reported on the connected socket.
static bool icmp_error(int e) { return e == ECONNREFUSED || e == EHOSTUNREACH || e == ENETUNREACH; }

size_t UdpLink::send(const Datagram* d, size_t n) {
  if (gso_ == Gso::OFF || gso_ == Gso::REFUSED) return send_plain(d, n);
  constexpr size_t kMsgs = 64;
  mmsghdr msgs[kMsgs];
  sockaddr_in to[kMsgs];
  uint32_t count[kMsgs];
  alignas(cmsghdr) uint8_t control[kMsgs][CMSG_SPACE(sizeof(uint16_t))];
  if (send_iov_.size() < 2 * n) send_iov_.resize(2 * n);
  size_t sent = 0;
  while (sent < n) {
    // Up to kMsgs messages, each a run of datagrams of one size (the last may
    // be shorter: the kernel's last segment) to one port, within GSO's limits.
    size_t m = 0, i = sent, iv = 0;
    bool first_gso = false;
    while (i < n && m < kMsgs) {
      const size_t len = d[i].head_len + d[i].body_len;
      size_t j = i + 1, bytes = len;
      while (j < n && j - i < kMaxSegments && d[j].port == d[i].port) {
        const size_t lj = d[j].head_len + d[j].body_len;
        if (lj > len || bytes + lj > kMaxGsoBytes) break;
        bytes += lj;
        ++j;
        if (lj < len) break;
      }
      msgs[m] = mmsghdr{};
      msghdr& h = msgs[m].msg_hdr;
      h.msg_iov = &send_iov_[iv];
      for (size_t k = i; k < j; ++k) {
        send_iov_[iv++] = {const_cast<void*>(d[k].head), d[k].head_len};
        if (d[k].body_len) send_iov_[iv++] = {const_cast<void*>(d[k].body), d[k].body_len};
      }
      h.msg_iovlen = size_t(&send_iov_[iv] - h.msg_iov);
      if (d[i].port && htons(d[i].port) != remote_.sin_port) {  // another of the switch's ports: named per message
        to[m] = remote_;
        to[m].sin_port = htons(d[i].port);
        h.msg_name = &to[m];
        h.msg_namelen = sizeof to[m];
      }
      if (j - i > 1) {
        h.msg_control = control[m];
        h.msg_controllen = sizeof control[m];
        cmsghdr* c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t seg = uint16_t(len);
        std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
        if (m == 0) first_gso = true;
      }
      count[m++] = uint32_t(j - i);
      i = j;
    }
    ++counters_.syscalls_send;
    const int r = sendmmsg(fd_, msgs, unsigned(m), 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == ENOBUFS) return sent;  // the kernel's queue is full: later
      if (first_gso && (errno == EINVAL || errno == EIO)) {
        gso_ = Gso::REFUSED;  // no UDP GSO on this path (no checksum offload): plain datagrams from now on
        return sent + send_plain(d + sent, n - sent);
      }
      if (icmp_error(errno)) {
        sent += count[0];  // drop this message: its timers resend it
        continue;
      }
      fail_errno("sendmmsg to the switch", "check the interface and the route to the switch");
    }
    for (int k = 0; k < r; ++k) {
      sent += count[k];
      if (count[k] > 1) {
        gso_ = Gso::ON;
        ++counters_.gso_sends;
        counters_.gso_datagrams += count[k];
      }
    }
    if (size_t(r) < m) return sent;
  }
  return sent;
}

size_t UdpLink::send_plain(const Datagram* d, size_t n) {
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
      if (g.port && htons(g.port) != remote_.sin_port) {
        to[i] = remote_;
        to[i].sin_port = htons(g.port);
        msgs[i].msg_hdr.msg_name = &to[i];
        msgs[i].msg_hdr.msg_namelen = sizeof to[i];
      }
    }
    ++counters_.syscalls_send;
    const int r = sendmmsg(fd_, msgs, unsigned(k), 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == ENOBUFS) return sent;
      if (icmp_error(errno)) {
        ++sent;
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
  views_.clear();
  if (timeout_ms > 0) {
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno != EINTR) fail_errno("poll on the rank's socket", "this should not happen");
    if (r <= 0) return 0;
  }
  std::vector<mmsghdr>& msgs = msgs_;
  msgs.resize(batch_);
  for (size_t i = 0; i < batch_; ++i) {
    iov_[i] = {bufs_.data() + i * buf_size_, buf_size_};
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_iov = &iov_[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    if (gro_) {
      msgs[i].msg_hdr.msg_control = control_.data() + i * kControl;
      msgs[i].msg_hdr.msg_controllen = kControl;
    }
  }
  for (;;) {
    ++counters_.syscalls_receive;
    const int r = recvmmsg(fd_, msgs.data(), unsigned(batch_), MSG_DONTWAIT, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;
      // An ICMP error (port unreachable: no switch there) is reported on a connected socket: not data.
      if (errno == EAGAIN || icmp_error(errno)) return 0;
      fail_errno("recvmmsg from the switch", "check the interface");
    }
    for (int i = 0; i < r; ++i) {
      const msghdr& h = msgs[size_t(i)].msg_hdr;
      const uint8_t* buf = bufs_.data() + size_t(i) * buf_size_;
      const size_t len = msgs[size_t(i)].msg_len;
      if (h.msg_flags & MSG_TRUNC) {
        views_.push_back({buf, 0});
        continue;
      }
      size_t seg = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); gro_ && c; c = CMSG_NXTHDR(const_cast<msghdr*>(&h), c))
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          seg = size_t(v > 0 ? v : 0);
        }
      if (seg == 0 || seg >= len) {
        views_.push_back({buf, len});
        continue;
      }
      ++counters_.gro_buffers;
      for (size_t at = 0; at < len; at += seg) {
        views_.push_back({buf + at, std::min(seg, len - at)});
        ++counters_.gro_datagrams;
      }
    }
    return views_.size();
  }
}

}  // namespace prism::rank
