// libprism-mpi's Fortran entry points. Open MPI's Fortran bindings
// (libmpi_mpifh, and mpi_f08's) call PMPI_* directly, so a preloaded C
// MPI_Allreduce sees none of a Fortran program's calls: each of these
// wraps one binding under every name a Fortran compiler gives it
// (mpi_allreduce_, mpi_allreduce__, mpi_allreduce, MPI_ALLREDUCE, and
// mpi_allreduce_f08_ whose handle types hold one integer), turns the
// handles into C's (MPI_*_f2c) and Fortran's MPI_IN_PLACE (the address of
// the common block mpi_fortran_in_place_) into C's, and calls the C entry
// point of intercept.cpp, which takes the call or gives it to Open MPI.
#include <dlfcn.h>
#include <mpi.h>

namespace {

// Whether `p` is Fortran's MPI_IN_PLACE (any spelling of its symbol).
bool fortran_in_place(const void* p) {
  static const void* const names[] = {
      dlsym(RTLD_DEFAULT, "mpi_fortran_in_place_"), dlsym(RTLD_DEFAULT, "mpi_fortran_in_place__"),
      dlsym(RTLD_DEFAULT, "mpi_fortran_in_place"), dlsym(RTLD_DEFAULT, "MPI_FORTRAN_IN_PLACE")};
  for (const void* n : names)
    if (n && p == n) return true;
  return false;
}

const void* in(const void* p) { return fortran_in_place(p) ? MPI_IN_PLACE : p; }

void allreduce(void* s, void* r, const MPI_Fint* n, const MPI_Fint* t, const MPI_Fint* op, const MPI_Fint* c,
               MPI_Fint* err) {
  *err = MPI_Allreduce(in(s), r, *n, MPI_Type_f2c(*t), MPI_Op_f2c(*op), MPI_Comm_f2c(*c));
}
void reduce(void* s, void* r, const MPI_Fint* n, const MPI_Fint* t, const MPI_Fint* op, const MPI_Fint* root,
            const MPI_Fint* c, MPI_Fint* err) {
  *err = MPI_Reduce(in(s), r, *n, MPI_Type_f2c(*t), MPI_Op_f2c(*op), *root, MPI_Comm_f2c(*c));
}
void bcast(void* b, const MPI_Fint* n, const MPI_Fint* t, const MPI_Fint* root, const MPI_Fint* c, MPI_Fint* err) {
  *err = MPI_Bcast(b, *n, MPI_Type_f2c(*t), *root, MPI_Comm_f2c(*c));
}
void reduce_scatter_block(void* s, void* r, const MPI_Fint* n, const MPI_Fint* t, const MPI_Fint* op, const MPI_Fint* c,
                          MPI_Fint* err) {
  *err = MPI_Reduce_scatter_block(in(s), r, *n, MPI_Type_f2c(*t), MPI_Op_f2c(*op), MPI_Comm_f2c(*c));
}
void allgather(void* s, const MPI_Fint* sn, const MPI_Fint* st, void* r, const MPI_Fint* rn, const MPI_Fint* rt,
               const MPI_Fint* c, MPI_Fint* err) {
  *err = MPI_Allgather(in(s), *sn, MPI_Type_f2c(*st), r, *rn, MPI_Type_f2c(*rt), MPI_Comm_f2c(*c));
}
void iallreduce(void* s, void* r, const MPI_Fint* n, const MPI_Fint* t, const MPI_Fint* op, const MPI_Fint* c,
                MPI_Fint* req, MPI_Fint* err) {
  MPI_Request q;
  *err = MPI_Iallreduce(in(s), r, *n, MPI_Type_f2c(*t), MPI_Op_f2c(*op), MPI_Comm_f2c(*c), &q);
  if (*err == MPI_SUCCESS) *req = MPI_Request_c2f(q);
}

}  // namespace

// Every spelling of one binding.
#define PRISM_FORTRAN(lower, upper, impl, params, args) \
  extern "C" void lower##_ params { impl args; }        \
  extern "C" void lower##__ params { impl args; }       \
  extern "C" void lower params { impl args; }           \
  extern "C" void upper params { impl args; }           \
  extern "C" void lower##_f08_ params { impl args; }

PRISM_FORTRAN(mpi_allreduce, MPI_ALLREDUCE, allreduce,
              (void* s, void* r, MPI_Fint* n, MPI_Fint* t, MPI_Fint* op, MPI_Fint* c, MPI_Fint* e),
              (s, r, n, t, op, c, e))
PRISM_FORTRAN(mpi_reduce, MPI_REDUCE, reduce,
              (void* s, void* r, MPI_Fint* n, MPI_Fint* t, MPI_Fint* op, MPI_Fint* root, MPI_Fint* c, MPI_Fint* e),
              (s, r, n, t, op, root, c, e))
PRISM_FORTRAN(mpi_bcast, MPI_BCAST, bcast,
              (void* b, MPI_Fint* n, MPI_Fint* t, MPI_Fint* root, MPI_Fint* c, MPI_Fint* e), (b, n, t, root, c, e))
PRISM_FORTRAN(mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK, reduce_scatter_block,
              (void* s, void* r, MPI_Fint* n, MPI_Fint* t, MPI_Fint* op, MPI_Fint* c, MPI_Fint* e),
              (s, r, n, t, op, c, e))
PRISM_FORTRAN(mpi_allgather, MPI_ALLGATHER, allgather,
              (void* s, MPI_Fint* sn, MPI_Fint* st, void* r, MPI_Fint* rn, MPI_Fint* rt, MPI_Fint* c, MPI_Fint* e),
              (s, sn, st, r, rn, rt, c, e))
PRISM_FORTRAN(mpi_iallreduce, MPI_IALLREDUCE, iallreduce,
              (void* s, void* r, MPI_Fint* n, MPI_Fint* t, MPI_Fint* op, MPI_Fint* c, MPI_Fint* q, MPI_Fint* e),
              (s, r, n, t, op, c, q, e))
