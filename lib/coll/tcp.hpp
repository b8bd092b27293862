// The Links between processes, over TCP, as Gloo does it: one
// connection per pair of ranks, each message a 64-bit little-endian length
// and then its bytes.
//
// The code, by role (lib/coll/tcp/, as Gloo's transport/tcp): fd.hpp (an
// owned descriptor), socket (addresses, the links' socket options),
// listener, pair (one peer's framing and queue), links.cpp (the Links over
// pairs: the poll() loop), connect.cpp (the setup below), rendezvous.cpp
// (the setup through a store), from_config.cpp (the only part that reads
// the switch's YAML).
//
// Where the addresses come from: a TcpPeers (explicit, or the switch's YAML
// through tcp_peers_from_config), or a rendezvous store (rendezvous/store.hpp),
// where each rank publishes the port it listens at.
//
// Setup: every rank listens at its own address; rank i connects to every
// rank j < i (retrying while j is not listening yet) and accepts every rank
// j > i, all at once in one poll() loop, so no order of starting deadlocks.
// Each connection opens with a hello both ways (magic, version, job, group
// size, who is calling whom); a mismatch is an error that says which.
//
// Progress: sockets are non-blocking and every wait is one poll() over all
// peers, which first polls without sleeping between sched_yield()s for a few
// microseconds (coll/spin.hpp: a wake-up costs 10-30 us on a VM). While a
// rank waits (to send, or to receive from one peer), what
// every peer sends is read into per-peer queues, so no pattern of sends
// deadlocks (each side drains the other), sendrecv included, and recv(peer)
// takes the next message from that peer whatever arrived from others
// meanwhile. A message whose recv() is already waiting goes straight into
// the caller's buffer (no copy), and that recv reads no further: the next
// message waits in the socket for the recv that wants it.
//
// Ranks that share a host get shared-memory links instead (coll/shm.hpp,
// chosen by lib/group/links_choice.hpp; PRISM_LINKS=tcp keeps TCP). What was
// measured against Open MPI's TCP BTL, and which socket options were tried:
// docs/LINKS.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coll/links.hpp"

namespace prism {
struct SwitchConfig;  // config/config.hpp
namespace rdv {
class Store;  // rendezvous/store.hpp
}
}  // namespace prism

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
  // SO_SNDBUF/SO_RCVBUF asked for (the kernel caps it at net.core.[rw]mem_max). 8 MiB: smaller
  // buffers or autotuning helped ping-pongs and streams but cost the 1 MiB exchange (docs/LINKS.md).
  int socket_buffer = 8 << 20;
  // connect_tcp(store, ...): the IPv4 address this rank listens at and
  // publishes. Empty: $PRISM_HOST_IP if set, else the address the kernel
  // sends from to reach the TCP store's server (the store given, when it is
  // a TcpStore; else the host of $PRISM_STORE's tcp:// URL or $MASTER_ADDR),
  // else 127.0.0.1 (a file or callback store: every rank on one host).
  std::string local_ip;
};

// Connects rank `rank` to every other rank of `peers`; returns once all are
// connected. Throws LinkError (a bad rank, an address it cannot listen
// at, a handshake mismatch, or the timeout with the ranks still missing).
std::unique_ptr<Links> connect_tcp(const TcpPeers& peers, int rank, const TcpOptions& o = {});

// Connects rank `rank` of a group of `size` through a rendezvous store: it
// listens at o.local_ip on a port the kernel picks and publishes
// "tcp/<rank>" = "ip:port"; rank 0 also "tcp/group" = "<id> <size>" (the
// group identity every hello carries: a random id); beside a loopback
// address, "tcp/<rank>/host" = its host name (one published from another
// host is refused). It reads every other rank's, then connects as above.
// Give each group its own keys (a PrefixStore) when one store serves
// several. o.connect_timeout bounds the rendezvous, then the connecting.
// Throws LinkError: a bad rank or size, an address it cannot listen at, a
// rank that never published within o.connect_timeout (naming the missing
// ranks), a store that fails (StoreError's text).
std::unique_ptr<Links> connect_tcp(rdv::Store& store, int rank, int size, const TcpOptions& o = {});

// The addresses of job `job`'s ranks (0: the config's only job) from the
// switch's YAML: each member's ip, and its udp_port + o.port_offset as TCP
// port. Every rank of the job must be a member at this switch (not behind a
// child switch). Throws LinkError.
TcpPeers tcp_peers_from_config(const SwitchConfig& cfg, uint32_t job, const TcpOptions& o = {});
TcpPeers tcp_peers_from_config(const std::string& yaml_path, uint32_t job, const TcpOptions& o = {});

}  // namespace prism::coll
