#include "group/links_choice.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "coll/shm.hpp"
#include "rendezvous/store.hpp"

namespace prism::group {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

std::string key(int rank) { return "links/" + to_string(rank); }

std::string read_link(const char* path) {
  char b[256];
  const ssize_t n = readlink(path, b, sizeof b - 1);
  return n > 0 ? std::string(b, size_t(n)) : "";
}

}  // namespace

const char* links_kind_name(LinksKind k) {
  switch (k) {
    case LinksKind::AUTO: return "auto";
    case LinksKind::TCP: return "tcp";
    case LinksKind::SHM: return "shm";
  }
  return "?";
}

LinksKind links_kind_from_env() {
  const char* v = std::getenv("PRISM_LINKS");
  if (!v || !*v) return LinksKind::AUTO;
  for (LinksKind k : {LinksKind::AUTO, LinksKind::TCP, LinksKind::SHM})
    if (std::string(v) == links_kind_name(k)) return k;
  throw std::invalid_argument(std::string("PRISM_LINKS='") + v + "': give auto, tcp or shm");
}

std::string host_identity() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(name) + "/" + boot + "/" + read_link("/proc/self/ns/ipc") + "/" + read_link("/proc/self/ns/pid");
}

std::unique_ptr<coll::Links> connect_links(rdv::Store& store, int rank, int size, const coll::TcpOptions& o,
                                           LinksKind want) {
  const std::string me = "rank " + to_string(rank) + " of a group of " + to_string(size);
  if (size < 1 || rank < 0 || rank >= size) return coll::connect_tcp(store, rank, size, o);  // its error
  const Clock::time_point deadline = Clock::now() + o.connect_timeout;
  auto left = [&] { return std::max(std::chrono::ceil<rdv::Millis>(deadline - Clock::now()), rdv::Millis(0)); };
  const std::string here = host_identity();
  // auto without room in /dev/shm for the whole group: this rank asks for TCP, and so all get it.
  if (want == LinksKind::AUTO && !coll::shm_has_room(size)) want = LinksKind::TCP;
  bool one_host = true;
  int asked[3] = {-1, -1, -1};  // a rank that asked for each kind
  int elsewhere = -1;
  try {
    store.set(key(rank), std::string(links_kind_name(want)) + " " + here);
    for (int j = 0; j < size; ++j) {
      const std::string v =
          j == rank ? std::string(links_kind_name(want)) + " " + here : store.get_string(key(j), left());
      const size_t sp = v.find(' ');
      const std::string kind = v.substr(0, sp), host = sp == std::string::npos ? "" : v.substr(sp + 1);
      for (LinksKind k : {LinksKind::AUTO, LinksKind::TCP, LinksKind::SHM})
        if (kind == links_kind_name(k)) asked[int(k)] = j;
      if (host != here) one_host = false, elsewhere = j;
    }
  } catch (const rdv::StoreError& e) {
    throw coll::LinkError(me + ": not every rank published which links it wants ('links/<rank>') within " +
                          to_string(o.connect_timeout.count()) + " ms: are they all started, with the same store? (" +
                          e.what() + ")");
  }
  const int tcp = asked[int(LinksKind::TCP)], shm = asked[int(LinksKind::SHM)];
  if (tcp >= 0 && shm >= 0)
    throw coll::LinkError(me + ": rank " + to_string(tcp) + " asks for tcp links and rank " + to_string(shm) +
                          " for shm (PRISM_LINKS): give every rank the same");
  if (shm >= 0 && !one_host)
    throw coll::LinkError(me + ": rank " + to_string(shm) +
                          " asks for shared-memory links (PRISM_LINKS=shm) but rank " + to_string(elsewhere) +
                          " is on another host (or namespace): use PRISM_LINKS=auto or tcp");
  if (tcp >= 0 || !one_host) return coll::connect_tcp(store, rank, size, o);
  coll::ShmOptions so;
  so.connect_timeout = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  so.recv_timeout = o.recv_timeout;
  return coll::connect_shm(store, rank, size, so);
}

}  // namespace prism::group
