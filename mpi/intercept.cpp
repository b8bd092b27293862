// libprism-mpi's C entry points: MPI_Allreduce through PRISM where it can
// take the call (a predefined datatype it reduces, MPI_SUM, an
// intracommunicator PRISM set up), PMPI_Allreduce untouched otherwise.
// Loaded with LD_PRELOAD (docs/MPI.md).
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <optional>
#include <string>

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
  if (t == MPI_FLOAT) return Format::FP32;
  if (s.half && (t == MPI_SHORT || t == MPI_INT16_T || t == MPI_UINT16_T)) return s.half;
  return std::nullopt;
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

}  // namespace
}  // namespace prism::mpi

using namespace prism::mpi;

extern "C" int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                             MPI_Comm comm) {
  const Loaded& l = loaded();
  if (!l.error.empty()) return fail(comm, l.error);
  const std::optional<prism::Format> f = op == MPI_SUM && count > 0 ? format_of(datatype, l.s) : std::nullopt;
  if (!l.s.enabled || !f) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  try {
    CommState& st = comm_state(comm, l.s);
    if (!st.group) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
    prism::CollOptions o;
    o.op.policy = l.s.policy;
    o.op.out = *f;
    o.op.out_given = true;
    const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
    st.group->allreduce(in, recvbuf, size_t(count), *f, o);
    return MPI_SUCCESS;
  } catch (const std::exception& e) {
    return fail(comm, std::string("libprism-mpi: MPI_Allreduce: ") + e.what());
  }
}
