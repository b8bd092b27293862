// libprism-mpi's C entry points. MPI_Allreduce, MPI_Iallreduce, MPI_Reduce
// and MPI_Reduce_scatter_block go through PRISM where it can take the call
// (MPI_SUM over a predefined datatype it reduces, on an intracommunicator
// PRISM set up), MPI_Bcast and MPI_Allgather where the datatype is a
// predefined one (PRISM moves its bytes); anything else goes to Open MPI
// (PMPI_*) untouched. The choice depends only on the call's arguments, which
// MPI requires to agree on every rank, and on the communicator's state
// (comm_state.hpp), decided collectively: no rank ever takes another path
// than its peers. Loaded with LD_PRELOAD (docs/MPI.md).
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "coll/algorithms.hpp"
#include "group/same_type_sum.hpp"
#include "mpi/comm_state.hpp"
#include "mpi/settings.hpp"

namespace prism::mpi {
namespace {

// The settings, read at the first call; a bad one is every call's error.
struct Loaded {
  Settings s;
  std::string error;
};
const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded x;
    try {
      x.s = settings_from_env();
    } catch (const std::exception& e) {
      x.error = std::string("libprism-mpi: ") + e.what();
    }
    return x;
  }();
  return l;
}

// The PRISM format of a predefined datatype under MPI_SUM, or nothing.
std::optional<Format> format_of(MPI_Datatype t, const Settings& s) {
  int size = 0;
  PMPI_Type_size(t, &size);
  // C's and Fortran's (REAL and INTEGER of the default kind when 4 bytes)
  if (t == MPI_FLOAT || t == MPI_REAL4 || (t == MPI_REAL && size == 4)) return Format::FP32;
  if (t == MPI_INT || t == MPI_INT32_T || t == MPI_INTEGER4 || (t == MPI_INTEGER && size == 4)) return Format::INT32;
  if (t == MPI_INT8_T || t == MPI_SIGNED_CHAR || t == MPI_INTEGER1) return Format::INT8;
  if (s.half && (t == MPI_SHORT || t == MPI_INT16_T || t == MPI_UINT16_T)) return s.half;
  return std::nullopt;
}

// The bytes of one element of a predefined datatype (PRISM moves them as
// they are), or 0 for a derived one.
size_t predefined_bytes(MPI_Datatype t) {
  int n = 0, a = 0, d = 0, combiner = 0;
  if (PMPI_Type_get_envelope(t, &n, &a, &d, &combiner) != MPI_SUCCESS || combiner != MPI_COMBINER_NAMED) return 0;
  int size = 0;
  PMPI_Type_size(t, &size);
  return size > 0 ? size_t(size) : 0;
}

// The group to run a call on, or null for Open MPI's.
Group* group_of(MPI_Comm comm, const Settings& s) { return s.enabled ? comm_state(comm, s).group.get() : nullptr; }

// A call's options: PRISM_ALGO's algorithm where it runs this collective at
// this root, else AUTO's choice (the same on every rank: it follows from the
// call's arguments); for a sum, the policy and the input's format out (MPI's
// result has the input's datatype).
CollOptions options(Collective c, const Settings& s, int root = 0, std::optional<Format> sum = std::nullopt) {
  CollOptions o;
  o.algorithm = s.algorithm != Algorithm::AUTO && coll::runs(s.algorithm, c, root) ? s.algorithm : Algorithm::AUTO;
  o.root = uint16_t(root);
  if (sum) {
    o.op.policy = s.policy;
    o.op.out = *sum;
    o.op.out_given = true;
  }
  return o;
}

// A sum collective: MPI's result has the input's datatype (same_type_sum refuses an integer sum
// that overflows it, where Open MPI's own sum would wrap silently). `out_elems`: this rank's
// result's elements (0 where it has none).
void sum(Group& g, Collective c, const void* in, void* out, size_t count, size_t out_elems, Format f, const Settings& s,
         int root = 0) {
  same_type_sum(g, c, in, out, count, out_elems, f, options(c, s, root, f));
}

// Whether PRISM takes an MPI_SUM of `count` elements of `t` (the same on every rank: MPI requires
// the arguments to agree); sets `f` to their format when it does.
auto takes_sum(MPI_Op op, int count, MPI_Datatype t, std::optional<Format>& f) {
  return [=, &f](const Settings& s) { return op == MPI_SUM && count > 0 && (f = format_of(t, s)).has_value(); };
}

// MPI_Allreduce's and MPI_Iallreduce's sum (MPI_IN_PLACE: the input is in recvbuf).
void allreduce(Group& g, const Settings& s, const void* sendbuf, void* recvbuf, int count, Format f) {
  sum(g, Collective::ALLREDUCE, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, recvbuf, size_t(count), size_t(count), f,
      s);
}

// PRISM's message as an MPI error on `comm` (its error handler decides:
// MPI_ERRORS_ARE_FATAL, the default, aborts the job with the message).
int fail(MPI_Comm comm, const std::string& what) {
  static int klass = -1;
  if (klass < 0) PMPI_Add_error_class(&klass);
  int code = 0;
  PMPI_Add_error_code(klass, &code);
  const std::string text = what.substr(0, MPI_MAX_ERROR_STRING - 1);
  PMPI_Add_error_string(code, text.c_str());
  std::fprintf(stderr, "%s\n", text.c_str());
  PMPI_Comm_call_errhandler(comm, code);
  return code;
}

// One entry point: the settings' error first; then whether PRISM takes the
// call (`takes`, from its arguments); then the communicator's group (set up
// at its first such call). Open MPI's own (`pmpi`) otherwise. An exception
// is the communicator's MPI error.
template <class Takes, class Pmpi, class Body>
int call(const char* name, MPI_Comm comm, Takes takes, Pmpi pmpi, Body body) {
  const Loaded& l = loaded();
  if (!l.error.empty()) return fail(comm, l.error);
  if (!l.s.enabled || !takes(l.s)) return pmpi();
  try {
    Group* g = group_of(comm, l.s);
    if (!g) return pmpi();
    body(*g, l.s);
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return fail(comm, std::string("libprism-mpi: ") + name + ": " + e.what());
  }
}

// MPI_Iallreduce's request: a generalized one, complete when it is made.
int greq_query(void*, MPI_Status* st) {
  PMPI_Status_set_elements(st, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(st, 0);
  st->MPI_SOURCE = MPI_UNDEFINED;
  st->MPI_TAG = MPI_UNDEFINED;
  return MPI_SUCCESS;
}
int greq_free(void*) { return MPI_SUCCESS; }
int greq_cancel(void*, int) { return MPI_SUCCESS; }

}  // namespace
}  // namespace prism::mpi

using namespace prism::mpi;
using prism::Collective;
using prism::Format;
using prism::Group;

extern "C" int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
  std::optional<Format> f;
  return call(
      "MPI_Allreduce", comm, takes_sum(op, count, datatype, f),
      [&] { return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); },
      [&](Group& g, const Settings& s) { allreduce(g, s, sendbuf, recvbuf, count, *f); });
}

// The request is complete when it is returned: PRISM's collective ran here.
extern "C" int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                              MPI_Comm comm, MPI_Request* request) {
  std::optional<Format> f;
  return call(
      "MPI_Iallreduce", comm, takes_sum(op, count, datatype, f),
      [&] { return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request); },
      [&](Group& g, const Settings& s) {
        allreduce(g, s, sendbuf, recvbuf, count, *f);
        PMPI_Grequest_start(greq_query, greq_free, greq_cancel, nullptr, request);
        PMPI_Grequest_complete(*request);
      });
}

extern "C" int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op, int root,
                          MPI_Comm comm) {
  std::optional<Format> f;
  return call(
      "MPI_Reduce", comm, takes_sum(op, count, datatype, f),
      [&] { return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm); },
      [&](Group& g, const Settings& s) {  // MPI_IN_PLACE (the root's): its input is in recvbuf
        const bool at_root = g.rank() == root;
        sum(g, Collective::REDUCE, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, at_root ? recvbuf : nullptr,
            size_t(count), at_root ? size_t(count) : 0, *f, s, root);
      });
}

extern "C" int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype datatype,
                                        MPI_Op op, MPI_Comm comm) {
  std::optional<Format> f;
  return call(
      "MPI_Reduce_scatter_block", comm, takes_sum(op, recvcount, datatype, f),
      [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); },
      [&](Group& g, const Settings& s) {
        const size_t n = size_t(recvcount) * size_t(g.size());
        std::vector<uint8_t> in;  // MPI_IN_PLACE: the input is recvbuf's, the result its first block
        if (sendbuf == MPI_IN_PLACE) {
          const auto* b = static_cast<const uint8_t*>(recvbuf);
          in.assign(b, b + n * prism::format_bytes(*f));
        }
        sum(g, Collective::REDUCE_SCATTER, in.empty() ? sendbuf : in.data(), recvbuf, n, size_t(recvcount), *f, s);
      });
}

extern "C" int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  size_t esz = 0;
  return call(
      "MPI_Bcast", comm, [&](const Settings&) { return count > 0 && (esz = predefined_bytes(datatype)) > 0; },
      [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); },
      [&](Group& g, const Settings& s) {
        g.broadcast(buffer, buffer, size_t(count) * esz, Format::INT8, options(Collective::BROADCAST, s, root));
      });
}

extern "C" int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                             MPI_Datatype recvtype, MPI_Comm comm) {
  size_t esz = 0;
  return call(
      "MPI_Allgather", comm,
      [&](const Settings&) {
        return recvcount > 0 && (sendbuf == MPI_IN_PLACE || (sendtype == recvtype && sendcount == recvcount)) &&
               (esz = predefined_bytes(recvtype)) > 0;
      },
      [&] { return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); },
      [&](Group& g, const Settings& s) {
        const size_t block = size_t(recvcount) * esz;
        std::vector<uint8_t> mine;  // MPI_IN_PLACE: this rank's block is already at its place in recvbuf
        if (sendbuf == MPI_IN_PLACE) {
          const auto* at = static_cast<const uint8_t*>(recvbuf) + size_t(g.rank()) * block;
          mine.assign(at, at + block);
        }
        g.allgather(mine.empty() ? sendbuf : mine.data(), recvbuf, block * size_t(g.size()), Format::INT8,
                    options(Collective::ALLGATHER, s));
      });
}
