// A store named by a URL, or by the environment a launcher sets.
//   tcp://host:port     the TCP store (tcp_store.hpp); rank 0 serves it at
//                       `port` on every local address, every rank connects
//                       to host:port
//   file:///path/to/f   the file store (file_store.hpp) at /path/to/f
// The environment: PRISM_STORE (such a URL); else MASTER_ADDR and
// MASTER_PORT (torch's convention: tcp://$MASTER_ADDR:$MASTER_PORT).
#pragma once

#include <memory>
#include <string>

#include "rendezvous/store.hpp"

namespace prism::rdv {

// store_from_url() and store_from_env() are declared with the interface, in
// the public prism/store.hpp.

// The URL store_from_env() would use: PRISM_STORE, else tcp://MASTER_ADDR:MASTER_PORT.
// Throws StoreError when neither is set (or only half of the second).
std::string store_url_from_env();


// The host of a tcp:// URL ("" for another kind, or a URL that does not parse).
std::string tcp_url_host(const std::string& url);

}  // namespace prism::rdv
