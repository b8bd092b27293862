// A sum whose result has the input's own type, as MPI's and torch.distributed's
// collectives return it (libprism-mpi, the Python binding). PRISM rounds the
// exact sum once to `f`; an int32 sum that overflows, or an int8 one beyond
// int8 (summed in int32, then narrowed), is refused with std::overflow_error
// naming how many elements, where Open MPI and Gloo wrap silently.
#pragma once

#include <cstddef>

#include "prism/group.hpp"

namespace prism {

// `o.op.out` is set to `f` (int32 for int8's wide sum); `out_elems`: this rank's result's elements
// (0 where it has none: a reduce's non-root).
CollReport same_type_sum(Group& g, Collective c, const void* in, void* out, size_t count, size_t out_elems, Format f,
                         CollOptions o);

}  // namespace prism
