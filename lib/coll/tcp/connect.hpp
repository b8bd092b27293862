// The setup of the TCP links (tcp.hpp): every rank listens; rank i connects
// to every rank j < i (retrying while j is not listening yet) and accepts
// every j > i, all in one poll() loop; a hello both ways on each connection.
#pragma once

#include <vector>

#include "coll/tcp.hpp"
#include "coll/tcp/fd.hpp"
#include "coll/tcp/listener.hpp"

namespace prism::coll {

// The hello each side of a connection sends first: six little-endian uint32
// (magic "PRCT", version, job, group size, from, to).
inline constexpr uint32_t kHelloMagic = 0x50524354;  // "PRCT"
inline constexpr uint32_t kHelloVersion = 1;

// Rank `rank`'s connected sockets to every other rank of `peers`, [j] for
// rank j (none at [rank]), accepting on `listener` (at peers.ranks[rank]).
// Throws LinkError.
std::vector<Fd> establish(const TcpPeers& peers, int rank, const TcpOptions& o, Listener& listener);

}  // namespace prism::coll
