// The rank's kernel UDP socket: bound to the rank's registered address
// (alone: no SO_REUSEADDR, so while it is open no other socket, whoever's,
// can bind that ip:port and take the switch's replies), connected to the switch's (its base udp_port, where every reply
// comes from: the kernel then drops datagrams from anyone else), DF set (the switch refuses IP fragments), and batched
// I/O so a window of chunks costs a few system calls, not one per packet:
// - sends: a run of equal-size datagrams to one of the switch's ports goes as
//   one UDP GSO message (UDP_SEGMENT: the kernel cuts it into the datagrams,
//   headers and bodies gathered from where they are, no copy), several runs
//   in one sendmmsg. GSO is probed on the first send: a kernel or interface
//   that refuses it (EINVAL, EIO: no checksum offload) turns it off for the
//   link's life, and every run goes as plain datagrams; gso_refused() says so.
// - receives: recvmmsg, with UDP_GRO set where the kernel has it, so the
//   datagrams the kernel coalesced arrive as one buffer and are cut back
//   into datagrams here (the UDP_GRO control message gives their size).
// A datagram may name another UDP port of the switch (a shard port,
// proto/steer.hpp): Linux takes a per-message destination on a connected UDP
// socket and keeps the connection's receive filter.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prism::rank {

class UdpLink {
 public:
  // Throws prism::Error (SYSTEM, INVALID_ARGUMENT) with what failed and what to check.
  // `gso` false: never try UDP GSO (plain sendmmsg), e.g. to compare the two.
  UdpLink(const std::string& local_ip, uint16_t local_port, const std::string& switch_ip, uint16_t switch_port,
          bool gso = true);
  ~UdpLink();
  UdpLink(const UdpLink&) = delete;
  UdpLink& operator=(const UdpLink&) = delete;

  // The path MTU towards the switch (IP_MTU; 1500 when the kernel cannot say).
  size_t path_mtu() const;
  // Socket buffers for `window` datagrams of up to `mtu` bytes in flight
  // (SO_*BUFFORCE as root, else as much as net.core.[rw]mem_max allows).
  void size_buffers(size_t window, size_t mtu);

  // One datagram of up to two parts: a header and a body that stays where it
  // is, to the switch's UDP port `port` (0: the connected one).
  struct Datagram {
    const void* head;
    size_t head_len;
    const void* body;
    size_t body_len;
    uint16_t port = 0;
  };
  // Sends them all, in order; returns how many the kernel took (the rest
  // when its buffer is full: ENOBUFS/EAGAIN, to be sent again later).
  size_t send(const Datagram* d, size_t n);

  // Waits up to `timeout_ms` (0: not at all) for datagrams and receives what
  // is there, up to a batch; returns how many datagrams (coalesced ones cut
  // apart). data(i)/length(i) stay valid until the next receive; length 0
  // marks a datagram that did not fit the buffer (truncated: not data).
  size_t receive(int timeout_ms);
  const uint8_t* data(size_t i) const { return views_[i].data; }
  size_t length(size_t i) const { return views_[i].len; }

  // What the batching did, for the rank's statistics.
  struct Counters {
    uint64_t gso_sends = 0;      // UDP GSO messages sent (each a run of 2 or more datagrams)
    uint64_t gso_datagrams = 0;  // datagrams inside them
    uint64_t gro_buffers = 0;    // received buffers the kernel had coalesced (2 or more datagrams)
    uint64_t gro_datagrams = 0;  // datagrams inside them
    uint64_t syscalls_send = 0, syscalls_receive = 0;
  };
  const Counters& counters() const { return counters_; }
  bool gso() const { return gso_ == Gso::ON || gso_ == Gso::UNTRIED; }
  bool gso_refused() const { return gso_ == Gso::REFUSED; }
  // GSO sends never arrived (a path that passes super-packets whole to a
  // receiver that cannot take them): plain datagrams from now on.
  void give_up_gso() {
    if (gso_ != Gso::OFF) gso_ = Gso::REFUSED;
  }
  bool gro() const { return gro_; }
  int send_buffer() const { return sndbuf_; }
  int receive_buffer() const { return rcvbuf_; }

  static constexpr size_t kBatch = 64, kBufSize = 9216;  // receive without GRO: datagrams up to jumbo
  // With GRO: a coalesced datagram each (64 KiB; the odd size keeps the buffers off one cache set).
  static constexpr size_t kGroBatch = 64, kGroBufSize = 65536 + 256;
  static constexpr size_t kMaxSegments = 64;         // UDP_MAX_SEGMENTS of every kernel with UDP GSO
  static constexpr size_t kMaxGsoBytes = 65507 - 8;  // a GSO message's UDP payload, room to spare

 private:
  enum class Gso { UNTRIED, ON, OFF, REFUSED };
  struct View {
    const uint8_t* data;
    size_t len;
  };
  size_t send_plain(const Datagram* d, size_t n);

  int fd_ = -1;
  sockaddr_in remote_{};  // the switch's address and base port (connected)
  Gso gso_ = Gso::UNTRIED;
  bool gro_ = false;
  int sndbuf_ = 0, rcvbuf_ = 0;
  size_t batch_ = 0, buf_size_ = 0;  // receive: buffers of buf_size_ bytes, batch_ of them
  std::vector<uint8_t> bufs_;
  std::vector<View> views_;
  std::vector<iovec> iov_, send_iov_;
  std::vector<uint8_t> control_;
  std::vector<struct mmsghdr> msgs_;
  static constexpr size_t kControl = 64;  // a received message's control buffer (UDP_GRO's int)
  Counters counters_;
};

}  // namespace prism::rank
