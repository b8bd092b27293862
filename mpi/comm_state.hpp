// libprism-mpi's state per communicator: whether PRISM reduces its
// collectives, and the prism::Group that does.
//
// Two decisions, each made once per communicator and collectively, at a call
// every rank makes at the same point (MPI's rule for collectives):
//  - at its first call here, whatever its arguments, every rank's settings
//    (settings.hpp) are compared: a rank whose settings are bad, or differ
//    from rank 0's, makes that call an error on every rank, naming the
//    difference. From then on every rank decides alike which calls PRISM
//    takes (they follow from the settings and the call's arguments);
//  - at the first call PRISM takes, each rank tries to set the group up, and
//    one PMPI_Allreduce of the outcome makes every rank agree.
// A rank never falls back alone (its peers would wait in PRISM's collective
// while it ran Open MPI's: a deadlock). The state is cached on the
// communicator with an attribute whose delete callback destroys the group at
// MPI_Comm_free (and at MPI_Finalize for MPI_COMM_WORLD).
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
  bool tried = false;            // the group's set-up ran (or needs none)
  std::unique_ptr<Group> group;  // null: this communicator's collectives go to Open MPI (PMPI)
  std::string why_not;           // why, when null ("" for a communicator of one rank)
};

// The communicator's state, made at its first call here: every rank's
// settings compared (`settings_error`: this rank's settings' error, or "").
// Throws std::runtime_error on every rank where a rank's settings are bad or
// differ from rank 0's, naming that rank and the difference.
CommState& comm_state(MPI_Comm comm, const Settings& s, const std::string& settings_error);

// The communicator's group, set up collectively at the first call PRISM takes
// (every rank makes it: they agree on the settings); null: Open MPI's. Throws
// std::runtime_error (a set-up that failed on some rank: every rank throws,
// with that rank's message) — the caller turns it into an MPI error.
Group* comm_group(MPI_Comm comm, CommState& st, const Settings& s);

}  // namespace prism::mpi
