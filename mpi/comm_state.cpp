#include "mpi/comm_state.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous/tcp_store.hpp"

namespace prism::mpi {
namespace {

int g_keyval = MPI_KEYVAL_INVALID;

int delete_state(MPI_Comm, int, void* value, void*) {
  delete static_cast<CommState*>(value);  // leaves the group: its links close, its switch job is given back
  return MPI_SUCCESS;
}

// Whether every rank of `comm` shares this node.
bool all_on_one_node(MPI_Comm comm) {
  MPI_Comm node;
  PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int here = 0, all = 0;
  PMPI_Comm_size(node, &here);
  PMPI_Comm_size(comm, &all);
  PMPI_Comm_free(&node);
  return here == all;
}

constexpr int kText = 1024;  // a rank's message or settings, as one rank sends them to all

// `text` from rank `from` to every rank (truncated to kText - 1 bytes).
std::string from_rank(MPI_Comm comm, int from, const std::string& text) {
  int rank = 0;
  PMPI_Comm_rank(comm, &rank);
  std::vector<char> b(kText, 0);
  if (rank == from) std::strncpy(b.data(), text.c_str(), b.size() - 1);
  PMPI_Bcast(b.data(), kText, MPI_CHAR, from, comm);
  return b.data();
}

// The lowest rank for which `mine` holds, or the communicator's size when none does.
int lowest(MPI_Comm comm, bool mine) {
  int size = 0, rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  int who = mine ? rank : size, first = size;
  PMPI_Allreduce(&who, &first, 1, MPI_INT, MPI_MIN, comm);
  return first;
}

// Every rank's outcome: "" where it succeeded, else its message. The first
// rank's message that failed, or "" when none did.
std::string agree(MPI_Comm comm, const std::string& mine) {
  int failed = mine.empty() ? 0 : 1, any = 0;
  PMPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, comm);
  if (!any) return {};
  const int first = lowest(comm, failed);
  return "rank " + std::to_string(first) + " of the communicator: " + from_rank(comm, first, mine);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325u;
  for (const unsigned char c : s) h = (h ^ c) * 0x100000001b3u;
  return h;
}

// Throws on every rank unless every rank's settings are good and rank 0's. One allreduce of a hash
// when they are; the first rank that differs, and how, when not.
void agree_on_settings(MPI_Comm comm, const Settings& s, const std::string& error) {
  if (const std::string err = agree(comm, error); !err.empty()) throw std::runtime_error(err);
  const std::string mine = shared_settings(s);
  const uint64_t h = fnv1a(mine);
  const uint64_t both[2] = {h, ~h};  // the largest hash, and the smallest (~ of the largest ~)
  uint64_t most[2] = {0, 0};
  PMPI_Allreduce(both, most, 2, MPI_UINT64_T, MPI_MAX, comm);
  if (most[0] == h && most[1] == ~h) return;  // every rank's is this one
  const std::string zero = from_rank(comm, 0, mine);
  const int first = lowest(comm, mine.substr(0, kText - 1) != zero);
  const std::string theirs = from_rank(comm, first, mine);
  throw std::runtime_error("the ranks' settings differ: " + settings_difference(0, zero, first, theirs) +
                           ". Give every rank the same (mpirun -x VAR)");
}

void set_up(MPI_Comm comm, CommState& st, const Settings& s) {
  int size = 0, rank = 0;
  PMPI_Comm_size(comm, &size);
  PMPI_Comm_rank(comm, &rank);
  const bool one_node = all_on_one_node(comm);
  const std::string host = !s.host.empty() ? s.host : one_node ? "127.0.0.1" : "";
  // Rank 0 serves the store and tells every rank where.
  std::string mine;
  std::shared_ptr<rdv::TcpStore> store;
  char where[256] = {};
  if (rank == 0) {
    try {
      // Across nodes without PRISM_MPI_HOST: rank 0's host name, as its peers resolve it, served at
      // every address (here it may resolve to another: Debian's 127.0.1.1); else at that host alone.
      char name[200] = {};
      if (host.empty() && gethostname(name, sizeof name - 1) != 0) throw std::runtime_error("gethostname() failed");
      const std::string at = host.empty() ? std::string(name) : host;
      store = std::make_shared<rdv::TcpStore>(at, 0, true, rdv::kDefaultStoreTimeout,
                                              host.empty() ? rdv::Listen::EVERY_ADDRESS : rdv::Listen::STORE_HOST);
      std::snprintf(where, sizeof where, "%s:%u", at.c_str(), unsigned(store->port()));
    } catch (const std::exception& e) {
      mine = e.what();
    }
  }
  if (const std::string err = agree(comm, mine); !err.empty()) throw std::runtime_error(err);
  PMPI_Bcast(where, sizeof where, MPI_CHAR, 0, comm);
  std::unique_ptr<Group> group;
  try {
    std::string w(where);
    const size_t colon = w.rfind(':');
    if (rank != 0)
      store = std::make_shared<rdv::TcpStore>(w.substr(0, colon), uint16_t(std::stoi(w.substr(colon + 1))), false);
    GroupOptions o;
    o.algorithm = Algorithm::AUTO;  // each call names its own (intercept.cpp: PRISM_ALGO where it runs the call)
    // Each rank's host links: loopback on one node, else its own address towards the store's host
    // (found by the group: a rank on another node never listens at rank 0's address).
    o.host_ip = s.host.empty() && one_node ? "127.0.0.1" : "";
    group = std::make_unique<Group>(Group::from_store(store, rank, size, o));
  } catch (const std::exception& e) {
    mine = e.what();
  }
  if (const std::string err = agree(comm, mine); !err.empty()) throw std::runtime_error(err);
  // Every rank has its group (the agreement above): Group::from_store is the store's last reader
  // (the group keeps it, and reads it no more). Rank 0 stops serving it.
  store->close();
  st.group = std::move(group);
}

}  // namespace

CommState& comm_state(MPI_Comm comm, const Settings& s, const std::string& settings_error) {
  if (g_keyval == MPI_KEYVAL_INVALID) PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &g_keyval, nullptr);
  void* v = nullptr;
  int found = 0;
  PMPI_Comm_get_attr(comm, g_keyval, &v, &found);
  if (found) return *static_cast<CommState*>(v);
  auto st = std::make_unique<CommState>();
  int inter = 0, size = 0;
  PMPI_Comm_test_inter(comm, &inter);
  if (inter) {
    st->why_not = "an intercommunicator", st->tried = true;
  } else {
    PMPI_Comm_size(comm, &size);
    if (size < 2)
      st->tried = true;  // nothing to reduce with anyone: Open MPI's copy
    else
      agree_on_settings(comm, s, settings_error);
  }
  CommState* raw = st.release();
  PMPI_Comm_set_attr(comm, g_keyval, raw);
  return *raw;
}

Group* comm_group(MPI_Comm comm, CommState& st, const Settings& s) {
  if (!st.tried) {
    set_up(comm, st, s);  // throws on every rank, or sets every rank's group up
    st.tried = true;
  }
  return st.group.get();
}

}  // namespace prism::mpi
