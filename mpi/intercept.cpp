// libprism-mpi's C entry points. MPI_Allreduce, MPI_Iallreduce, MPI_Reduce
// and MPI_Reduce_scatter_block go through PRISM where it can take the call
// (MPI_SUM over a predefined datatype it reduces, on an intracommunicator
// PRISM set up), MPI_Bcast and MPI_Allgather whatever their datatypes (PRISM
// moves the bytes of their type signature); anything else goes to Open MPI
// (PMPI_*) untouched. The choice depends only on the settings, which every
// rank compares at a communicator's first call (comm_state.hpp), and on what
// of the call's arguments MPI requires to agree on every rank: a reduction's
// count and datatype, a broadcast's or an allgather's type signature (not the
// handles that describe it: the root may send 4 MPI_INTs that another rank
// receives as one contiguous type). No rank ever takes another path than its
// peers. Loaded with LD_PRELOAD (docs/MPI.md).
#include <mpi.h>

#include <algorithm>
#include <climits>
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
      x.error = e.what();
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

// The bytes of `count` elements of `t`'s type signature: what a broadcast or an allgather moves.
// MPI requires equal signatures (not equal handles) on every rank, so this is every rank's number.
size_t signature_bytes(int count, MPI_Datatype t) {
  MPI_Count size = 0;
  if (count <= 0 || PMPI_Type_size_x(t, &size) != MPI_SUCCESS || size <= 0) return 0;
  return size_t(count) * size_t(size);
}

// Whether `t`'s elements lie in memory as the bytes of its signature, in order, one after another:
// a predefined type without gaps (not MPI_SHORT_INT's padding), or a contiguous or dup'ed one of such.
bool plain(MPI_Datatype t) {
  int ni = 0, na = 0, nd = 0, combiner = 0, size = 0;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_envelope(t, &ni, &na, &nd, &combiner);
  PMPI_Type_size(t, &size);
  PMPI_Type_get_extent(t, &lb, &extent);
  if (lb != 0 || extent != size) return false;
  if (combiner == MPI_COMBINER_NAMED) return true;
  if (combiner != MPI_COMBINER_CONTIGUOUS && combiner != MPI_COMBINER_DUP) return false;
  std::vector<int> ints(size_t(ni) + 1);
  std::vector<MPI_Aint> addrs(size_t(na) + 1);
  std::vector<MPI_Datatype> types(size_t(nd) + 1);
  PMPI_Type_get_contents(t, ni, na, nd, ints.data(), addrs.data(), types.data());
  const bool inner = plain(types[0]);
  PMPI_Type_get_envelope(types[0], &ni, &na, &nd, &combiner);
  if (combiner != MPI_COMBINER_NAMED) PMPI_Type_free(&types[0]);  // get_contents made a handle of it
  return inner;
}

// `count` elements of `t` at `buf` as the bytes of their signature: the memory itself where the type
// is plain() (and no `copy` is asked for), else a copy MPI_Pack()ed from it (`in`) and
// MPI_Unpack()ed into it by `out()`. (On one kind of host MPI_Pack's form is the signature's bytes.)
class SignatureBytes {
 public:
  SignatureBytes(const void* buf, size_t count, MPI_Datatype t, size_t bytes, MPI_Comm comm, bool in, bool copy = false)
      : buf_(const_cast<void*>(buf)), count_(count), t_(t), comm_(comm), bytes_(bytes) {
    if (plain(t)) {
      const auto* b = static_cast<const uint8_t*>(buf);
      if (copy) copy_.assign(b, b + bytes), packed_ = false;
      return;
    }
    copy_.resize(bytes);
    if (in) pieces(true);
  }
  uint8_t* data() { return copy_.empty() ? static_cast<uint8_t*>(buf_) : copy_.data(); }
  void out() {
    if (packed_ && !copy_.empty()) pieces(false);
  }

 private:
  // MPI_Pack or MPI_Unpack, as many elements at a time as its int sizes allow.
  void pieces(bool pack) {
    MPI_Aint lb = 0, extent = 0;
    PMPI_Type_get_extent(t_, &lb, &extent);
    const size_t elem = bytes_ / count_, step = std::max<size_t>(1, size_t(INT_MAX) / elem);
    size_t done = 0;
    for (size_t i = 0; i < count_; i += step) {
      const int n = int(std::min(step, count_ - i));
      char* at = static_cast<char*>(buf_) + MPI_Aint(i) * extent;
      const size_t len = size_t(n) * elem;
      if (len > size_t(INT_MAX))
        throw std::invalid_argument("one element of " + std::to_string(elem) +
                                    " bytes of a datatype with gaps (MPI_Pack's limit is 2^31 - 1): send a "
                                    "contiguous type, or in parts");
      int pos = 0;
      if (pack)
        PMPI_Pack(at, n, t_, copy_.data() + done, int(len), &pos, comm_);
      else
        PMPI_Unpack(copy_.data() + done, int(len), &pos, at, n, t_, comm_);
      if (size_t(pos) != len)
        throw std::logic_error("MPI_Pack's form of " + std::to_string(len) + " bytes of signature has " +
                               std::to_string(pos) + ": not one kind of host?");
      done += len;
    }
  }

  void* buf_;
  size_t count_;
  MPI_Datatype t_;
  MPI_Comm comm_;
  size_t bytes_;
  std::vector<uint8_t> copy_;
  bool packed_ = true;  // copy_ is MPI_Pack's form (not plain memory copied)
};

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

// One entry point: the communicator's state first (at its first call here,
// every rank's settings compared: a bad or differing one is this call's
// error on every rank); then whether PRISM takes the call (`takes`, from the
// settings and its arguments: the same on every rank); then the
// communicator's group (set up at its first such call). Open MPI's own
// (`pmpi`) otherwise. An exception is the communicator's MPI error.
template <class Takes, class Pmpi, class Body>
int call(const char* name, MPI_Comm comm, Takes takes, Pmpi pmpi, Body body) {
  const Loaded& l = loaded();
  try {
    CommState& st = comm_state(comm, l.s, l.error);
    if (!l.error.empty()) throw std::invalid_argument(l.error);  // a communicator of one rank compares nothing
    if (!l.s.enabled || !takes(l.s)) return pmpi();
    Group* g = comm_group(comm, st, l.s);
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
  size_t bytes = 0;
  return call(
      "MPI_Bcast", comm, [&](const Settings&) { return (bytes = signature_bytes(count, datatype)) > 0; },
      [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); },
      [&](Group& g, const Settings& s) {
        SignatureBytes b(buffer, size_t(count), datatype, bytes, comm, g.rank() == root);
        g.broadcast(b.data(), b.data(), bytes, Format::INT8, options(Collective::BROADCAST, s, root));
        if (g.rank() != root) b.out();
      });
}

// Every rank's block is `recvcount` elements of `recvtype`'s signature (MPI's rule: each rank's
// send signature is every rank's block's), so the block's bytes decide, the same on every rank.
extern "C" int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                             MPI_Datatype recvtype, MPI_Comm comm) {
  size_t block = 0;
  return call(
      "MPI_Allgather", comm, [&](const Settings&) { return (block = signature_bytes(recvcount, recvtype)) > 0; },
      [&] { return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm); },
      [&](Group& g, const Settings& s) {
        MPI_Aint lb = 0, extent = 0;
        PMPI_Type_get_extent(recvtype, &lb, &extent);
        const size_t n = size_t(g.size());
        // This rank's block: sendbuf's, or in place its own block of recvbuf (recvcount elements
        // at element rank * recvcount).
        const bool in_place = sendbuf == MPI_IN_PLACE;
        const void* from =
            in_place ? static_cast<const char*>(recvbuf) + MPI_Aint(g.rank()) * recvcount * extent : sendbuf;
        if (!in_place && signature_bytes(sendcount, sendtype) != block)
          throw std::invalid_argument("this rank sends " + std::to_string(signature_bytes(sendcount, sendtype)) +
                                      " bytes and receives blocks of " + std::to_string(block) +
                                      ": MPI requires the send type signature to be every block's");
        // (in place: a copy, since the block's place in recvbuf is written too)
        SignatureBytes mine(from, size_t(in_place ? recvcount : sendcount), in_place ? recvtype : sendtype, block, comm,
                            true, in_place);
        // Block i is elements i * recvcount ... of recvtype at recvbuf, as MPI lays them out.
        SignatureBytes all(recvbuf, size_t(recvcount) * n, recvtype, block * n, comm, false);
        g.allgather(mine.data(), all.data(), block * n, Format::INT8, options(Collective::ALLGATHER, s));
        all.out();
      });
}
