// The Links over shared-memory channels (shm.hpp's progress and waiting
// rules): every wait moves every ring along, spins briefly, then sleeps on
// this rank's doorbell.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "coll/links.hpp"
#include "coll/shm/segment.hpp"

namespace prism::coll::shm {

// Rank `rank`'s links over segs[j], every rank's segment mapped (segs[rank]
// its own, unlinked or not); `group` names the group in errors.
// single_copy[j]: this rank showed it can read rank j's memory.
std::unique_ptr<Links> make_shm_links(int rank, uint64_t group, std::vector<Segment> segs,
                                      std::chrono::milliseconds timeout);

}  // namespace prism::coll::shm
