// libprism-mpi's settings, from the environment (read once, at the first
// collective):
//   PRISM_MPI        off: every call goes to Open MPI (default on)
//   PRISM_ALGO       switch|binomial|chain|rhd|ring|auto (default auto)
//   PRISM_POLICY     kulisch|fp32_arrival|fp32_binomial (default kulisch)
//   PRISM_MPI_16BIT  bf16|fp16: what MPI_SHORT, MPI_INT16_T and MPI_UINT16_T
//                    hold (default: none; such calls go to Open MPI)
//   PRISM_MPI_HOST   the address rank 0 serves the rendezvous store at
//                    (default: 127.0.0.1 when every rank of the communicator
//                    shares a node, else rank 0's host name); each rank's host
//                    links listen at its own address towards it
//                    (127.0.0.1 on one node)
//   PRISM_SWITCH, PRISM_POOL  a switch and its job pool (prism::GroupOptions)
// A value it does not know is an error naming the variable and the values
// it takes. Every rank of a communicator must have the same settings but
// PRISM_MPI_HOST (rank 0's counts): comm_state.hpp compares them.
#pragma once

#include <optional>
#include <string>

#include "prism/group.hpp"

namespace prism::mpi {

struct Settings {
  bool enabled = true;
  Algorithm algorithm = Algorithm::AUTO;
  Policy policy = Policy::KULISCH_FIXED;
  std::optional<Format> half;  // what the 16-bit integer types hold
  std::string host;
  std::string switch_address, pool;  // as the group reads them (compared here only)
};

// Throws std::invalid_argument naming the variable.
Settings settings_from_env();

// The settings every rank must share, one "VAR=value" line each ("VAR=" where
// unset), in a fixed order: equal texts, equal settings.
std::string shared_settings(const Settings& s);

// Where two ranks' shared_settings() first differ: "rank 0 has
// PRISM_MPI_16BIT=bf16, rank 2 has none"; "" where they do not.
std::string settings_difference(int a, const std::string& sa, int b, const std::string& sb);

}  // namespace prism::mpi
