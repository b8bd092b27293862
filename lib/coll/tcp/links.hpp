// The Links over connected pairs (tcp.hpp's progress rules): every wait is
// one poll() over all peers (after a short spin of non-sleeping polls,
// spin.hpp), reading what each sends into its queue.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "coll/links.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll {

// Rank `rank`'s links from its connected sockets, fds[j] to rank j (none at
// [rank]); `group` names the group in errors (the hello's job).
std::unique_ptr<Links> make_tcp_links(int rank, uint32_t group, std::vector<Fd> fds, std::chrono::milliseconds timeout);

}  // namespace prism::coll
