// libprism-mpi's state per communicator: whether PRISM reduces its
// collectives, and the prism::Group that does.
//
// The decision is made once per communicator, collectively, at its first
// collective PRISM could take: every rank calls it at the same point (MPI's
// rule for collectives), each tries to set the group up, and one
// PMPI_Allreduce of the outcome makes every rank agree. A rank never falls
// back alone (its peers would wait in PRISM's collective while it ran
// Open MPI's: a deadlock). The state is cached on the communicator with an
// attribute whose delete callback destroys the group at MPI_Comm_free (and
// at MPI_Finalize for MPI_COMM_WORLD).
//
// The group is bootstrapped through MPI: the communicator's rank 0 serves a
// TCP rendezvous store (rendezvous/tcp_store.hpp) on a port the kernel
// picks, at 127.0.0.1 when every rank shares its node (else at
// PRISM_MPI_HOST, or every address under rank 0's host name), and
// PMPI_Bcast()s its address; every rank then makes the group from that store
// (prism::Group::from_store). Nothing reads the store once every rank has its
// group: it is closed then.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "mpi/settings.hpp"
#include "prism/group.hpp"

namespace prism::mpi {

struct CommState {
  std::unique_ptr<Group> group;  // null: this communicator's collectives go to Open MPI (PMPI)
  std::string why_not;           // why, when null ("" for a communicator of one rank)
};

// The communicator's state, set up collectively on the first call. Throws
// std::runtime_error (a setup that failed on some rank: every rank throws,
// with that rank's message) — the caller turns it into an MPI error.
CommState& comm_state(MPI_Comm comm, const Settings& s);

}  // namespace prism::mpi
