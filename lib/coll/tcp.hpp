// The Links between processes, over TCP, as Gloo does it: one
// connection per pair of ranks, each message a 64-bit little-endian length
// and then its bytes.
//
// Setup: every rank listens at its own address; rank i connects to every
// rank j < i (retrying while j is not listening yet) and accepts every rank
// j > i, all at once in one poll() loop, so no order of starting deadlocks.
// Each connection opens with a hello both ways (magic, version, job, group
// size, who is calling whom); a mismatch is an error that says which.
//
// Progress: sockets are non-blocking and every wait is one poll() over all
// peers. While a rank waits (to send, or to receive from one peer), what
// every peer sends is read into per-peer queues, so no pattern of sends
// deadlocks (each side drains the other), sendrecv included, and recv(peer)
// takes the next message from that peer whatever arrived from others
// meanwhile. A message whose recv() is already waiting goes straight into
// the caller's buffer (no copy).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/links.hpp"
#include "config/config.hpp"

namespace prism::coll {

struct TcpAddr {
  uint32_t ip = 0;  // IPv4, host order
  uint16_t port = 0;
};

// Every rank's address, [rank]; the job id is checked in the handshake.
struct TcpPeers {
  uint32_t job = 0;
  std::vector<TcpAddr> ranks;
};

struct TcpOptions {
  std::chrono::milliseconds connect_timeout{60000};  // setup gives up after this, naming who never connected
  std::chrono::milliseconds recv_timeout{60000};     // a recv (or send) with no progress for this long throws
  int port_offset = 0;                               // tcp_peers_from_config: TCP port = member's udp_port + this
  int socket_buffer = 8 << 20;  // SO_SNDBUF/SO_RCVBUF asked for (the kernel caps it at net.core.[rw]mem_max)
};

// Connects rank `rank` to every other rank of `peers`; returns once all are
// connected. Throws LinkError (a bad rank, an address it cannot listen
// at, a handshake mismatch, or the timeout with the ranks still missing).
std::unique_ptr<Links> connect_tcp(const TcpPeers& peers, int rank, const TcpOptions& o = {});

// The addresses of job `job`'s ranks (0: the config's only job) from the
// switch's YAML: each member's ip, and its udp_port + o.port_offset as TCP
// port. Every rank of the job must be a member at this switch (not behind a
// child switch). Throws LinkError.
TcpPeers tcp_peers_from_config(const SwitchConfig& cfg, uint32_t job, const TcpOptions& o = {});
TcpPeers tcp_peers_from_config(const std::string& yaml_path, uint32_t job, const TcpOptions& o = {});

}  // namespace prism::coll
