// Which Links a group made through a store gets: shared memory (coll/shm.hpp)
// when every rank is on this host, else TCP (coll/tcp.hpp); PRISM_LINKS
// overrides it for benchmarks and for hosts where shared memory is not
// wanted:
//   PRISM_LINKS=auto  (or unset) shared memory when every rank shares this
//                     host (host name, boot, IPC and PID namespaces) and
//                     /dev/shm has room for the group's rings, else TCP
//   PRISM_LINKS=tcp   TCP always
//   PRISM_LINKS=shm   shared memory, an error when a rank is on another host
// Every rank publishes "links/<rank>" = "<asked> <host identity>" and reads
// everyone's, so all decide alike; a rank asking for tcp and another for shm
// is an error naming both. Groups from a config or explicit addresses have no
// store and use TCP.
#pragma once

#include <memory>
#include <string>

#include "coll/links.hpp"
#include "coll/tcp.hpp"

namespace prism::rdv {
class Store;
}

namespace prism::group {

enum class LinksKind { AUTO, TCP, SHM };

// PRISM_LINKS's; throws std::invalid_argument for another value, saying which are.
LinksKind links_kind_from_env();
const char* links_kind_name(LinksKind k);

// What makes ranks share memory: equal strings on every rank of one host's namespace.
std::string host_identity();

// The links of rank `rank` of `size` through `store` (o's timeouts and address for TCP), of the kind
// `want` and the host identities decide. Throws LinkError.
std::unique_ptr<coll::Links> connect_links(rdv::Store& store, int rank, int size, const coll::TcpOptions& o,
                                           LinksKind want);

}  // namespace prism::group
