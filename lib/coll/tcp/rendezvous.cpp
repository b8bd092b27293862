// connect_tcp through a rendezvous store: each rank listens first (port 0),
// publishes where, reads everyone else's, then connects as with TcpPeers.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>

#include "coll/tcp.hpp"
#include "coll/tcp/connect.hpp"
#include "coll/tcp/links.hpp"
#include "coll/tcp/listener.hpp"
#include "coll/tcp/socket.hpp"
#include "rendezvous/from_url.hpp"
#include "rendezvous/tcp_store.hpp"

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

const std::string kGroupKey = "tcp/group";
std::string addr_key(int rank) { return "tcp/" + to_string(rank); }
std::string host_key(int rank) { return "tcp/" + to_string(rank) + "/host"; }  // only beside a loopback address

bool is_loopback(uint32_t ip) { return ip >> 24 == 127; }

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// The address this rank listens at (TcpOptions::local_ip says the order).
uint32_t local_ip(rdv::Store& store, const TcpOptions& o, const std::string& me) {
  auto given = [&](const std::string& ip, const std::string& from) {
    const std::optional<uint32_t> a = parse_ipv4_str(ip);
    if (!a) throw LinkError(me + ": " + from + " '" + ip + "' is not an IPv4 address (a.b.c.d): give this host's");
    return *a;
  };
  if (!o.local_ip.empty()) return given(o.local_ip, "TcpOptions::local_ip");
  if (const char* env = std::getenv("PRISM_HOST_IP"); env && *env) return given(env, "PRISM_HOST_IP");
  std::string host = store.network_host();  // a TCP store's host, through any PrefixStore
  if (host.empty()) {
    try {
      host = rdv::tcp_url_host(rdv::store_url_from_env());
    } catch (const rdv::StoreError&) {
      // No store in the environment: a file or callback store on one host.
    }
  }
  if (host.empty()) return 0x7F000001;  // 127.0.0.1
  if (const std::optional<uint32_t> a = source_address_to(host)) return *a;
  throw LinkError(me + ": no local address reaches the TCP store's host '" + host +
                  "' (no route?): set PRISM_HOST_IP to the address the other ranks reach this host at");
}

}  // namespace

std::unique_ptr<Links> connect_tcp(rdv::Store& store, int rank, int size, const TcpOptions& o) {
  if (size < 1 || rank < 0 || rank >= size)
    throw LinkError("connect_tcp: rank " + to_string(rank) + " is not in a group of " + to_string(size));
  const std::string me = "rank " + to_string(rank) + " of a group of " + to_string(size);
  Listener listener(TcpAddr{local_ip(store, o, me), 0}, size + 16, o, me);
  TcpPeers peers;
  peers.ranks.resize(size_t(size));
  peers.ranks[size_t(rank)] = listener.address();
  const Clock::time_point deadline = Clock::now() + o.connect_timeout;
  auto left = [&] { return std::max(std::chrono::ceil<rdv::Millis>(deadline - Clock::now()), rdv::Millis(0)); };
  try {
    if (rank == 0) {
      std::random_device rd;
      peers.job = 0;
      while (peers.job == 0) peers.job = uint32_t(rd());
      store.set(kGroupKey, to_string(peers.job) + " " + to_string(size));
    }
    const bool on_loopback = is_loopback(listener.address().ip);
    if (on_loopback) store.set(host_key(rank), host_name());  // before the address: whoever reads one finds both
    store.set(addr_key(rank), addr_str(listener.address()));
    if (rank != 0) {
      std::istringstream group(store.get_string(kGroupKey, left()));
      int their_size = 0;
      if (!(group >> peers.job >> their_size))
        throw LinkError(me + ": the store's '" + kGroupKey +
                        "' is not '<id> <size>': is another program using these keys?");
      if (their_size != size)
        throw LinkError(me + ": rank 0 started a group of " + to_string(their_size) + ", this rank was told " +
                        to_string(size) + ": give every rank the same group size");
    }
    for (int j = 0; j < size; ++j) {
      if (j == rank) continue;
      const std::string v = store.get_string(addr_key(j), left());
      const std::optional<TcpAddr> a = parse_addr_str(v);
      if (!a)
        throw LinkError(me + ": rank " + to_string(j) + " published '" + v + "' under '" + addr_key(j) +
                        "', not ip:port: is another program using these keys?");
      peers.ranks[size_t(j)] = *a;
      // A loopback address reaches only its own host: one published from another host is
      // a rank that could not tell which of its addresses the others reach.
      if (is_loopback(a->ip)) {
        const std::string there = store.get_string(host_key(j), left());
        if (there != host_name())
          throw LinkError(me + " (on host " + host_name() + "): rank " + to_string(j) +
                          " published the loopback address " + v + " from host " + there +
                          ": set PRISM_HOST_IP (or TcpOptions::local_ip) on every rank to an address the others "
                          "reach it at");
      }
    }
  } catch (const rdv::StoreError& e) {
    std::string missing;
    int count = 0;
    try {
      for (int j = 0; j < size; ++j)
        if (j != rank && (!store.check(addr_key(j)) || (j == 0 && !store.check(kGroupKey))))
          missing += (count++ ? ", " : "") + to_string(j);
    } catch (const rdv::StoreError&) {
      count = 0;  // the store itself fails: its own message says how
    }
    if (count == 0) throw LinkError(me + ": rendezvous through the store failed: " + e.what());
    throw LinkError(
        me +
        (count == 1 ? ": rank " + missing + " never published its" : ": ranks " + missing + " never published their") +
        " address ('tcp/<rank>') in the store within " + to_string(o.connect_timeout.count()) +
        " ms (TcpOptions::connect_timeout): are they started, with the same store (and prefix) and group "
        "size? (" +
        e.what() + ")");
  }
  try {
    return make_tcp_links(rank, peers.job, establish(peers, rank, o, listener), o.recv_timeout);
  } catch (const LinkError& e) {
    // Loopback addresses on one host name can still be apart: network namespaces, containers.
    if (std::none_of(peers.ranks.begin(), peers.ranks.end(), [](const TcpAddr& a) { return is_loopback(a.ip); })) throw;
    throw LinkError(std::string(e.what()) +
                    " (ranks published loopback addresses: ranks in network namespaces or containers of their own "
                    "need PRISM_HOST_IP, or TcpOptions::local_ip, set to an address the others reach)");
  }
}

}  // namespace prism::coll
