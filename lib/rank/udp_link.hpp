// The rank's kernel UDP socket: bound to the rank's registered address,
// connected to the switch's (its base udp_port, where every reply comes
// from: the kernel then drops datagrams from anyone else), DF set (the
// switch refuses IP fragments), and batched I/O (sendmmsg / recvmmsg) so a
// window of chunks costs a few system calls, not one per packet. A datagram
// may name another UDP port of the switch (a shard port, proto/steer.hpp):
// Linux takes a per-message destination on a connected UDP socket and keeps
// the connection's receive filter.
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prism::rank {

class UdpLink {
 public:
  // Throws prism::Error (SYSTEM, INVALID_ARGUMENT) with what failed and what to check.
  UdpLink(const std::string& local_ip, uint16_t local_port, const std::string& switch_ip, uint16_t switch_port);
  ~UdpLink();
  UdpLink(const UdpLink&) = delete;
  UdpLink& operator=(const UdpLink&) = delete;

  // The path MTU towards the switch (IP_MTU; 1500 when the kernel cannot say).
  size_t path_mtu() const;

  // One datagram of up to two parts: a header and a body that stays where it
  // is, to the switch's UDP port `port` (0: the connected one).
  struct Datagram {
    const void* head;
    size_t head_len;
    const void* body;
    size_t body_len;
    uint16_t port = 0;
  };
  // Sends them all, in batches; returns how many the kernel took (the rest
  // when its buffer is full: ENOBUFS/EAGAIN, to be sent again later).
  size_t send(const Datagram* d, size_t n);

  // Waits up to `timeout_ms` (0: not at all) for datagrams and receives up
  // to kBatch of them into the link's buffers; returns how many.
  size_t receive(int timeout_ms);
  const uint8_t* data(size_t i) const { return bufs_.data() + i * kBufSize; }
  size_t length(size_t i) const { return lens_[i]; }

  static constexpr size_t kBatch = 64, kBufSize = 9216;

 private:
  int fd_ = -1;
  sockaddr_in remote_{};  // the switch's address and base port (connected)
  std::vector<uint8_t> bufs_;
  std::vector<size_t> lens_;
  std::vector<iovec> iov_;
};

}  // namespace prism::rank
