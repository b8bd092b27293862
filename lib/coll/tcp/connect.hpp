// The setup of the TCP links (tcp.hpp): every rank listens; rank i connects
// to every rank j < i (retrying while j is not listening yet) and accepts
// every j > i, all in one poll() loop; a hello both ways on each connection.
// What calls in and is not a rank of this job is dropped alone (F14 of the
// security review: one port scanner must not fail the job).
#pragma once

#include <string>
#include <vector>

#include "coll/tcp.hpp"
#include "coll/tcp/fd.hpp"
#include "coll/tcp/listener.hpp"

namespace prism::coll {

// The hello each side of a connection sends first: six little-endian uint32
// (magic "PRCT", version, job, group size, from, to).
inline constexpr uint32_t kHelloMagic = 0x50524354;  // "PRCT"
inline constexpr uint32_t kHelloVersion = 1;

// Inbound connections a setup dropped: ones that were not a rank of this
// job (closed before a hello, garbage such as a port scanner's probe, a hello
// of another job or version). They fail nothing; the setup goes on.
struct Dropped {
  size_t count = 0;
  std::vector<std::string> first;  // why, for the first kNamed
  static constexpr size_t kNamed = 4;
};

// Rank `rank`'s connected sockets to every other rank of `peers`, [j] for
// rank j (none at [rank]), accepting on `listener` (at peers.ranks[rank]).
// Throws LinkError: the timeout (naming the ranks missing and what was
// dropped), or a hello of this job that conflicts (another group size,
// another address, a rank calling twice). `dropped`: what was dropped.
std::vector<Fd> establish(const TcpPeers& peers, int rank, const TcpOptions& o, Listener& listener,
                          Dropped* dropped = nullptr);

}  // namespace prism::coll
