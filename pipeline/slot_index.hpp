// A reducer shard's slot index on DPDK's hash: (job, op, chunk) -> slot.
#pragma once

#include <memory>

#include "switch/reducer.hpp"

namespace prism::pipe {

// Only the shard's own lcore touches it, so no locking. Throws when the
// table cannot be created.
std::unique_ptr<sw::SlotIndex> make_rte_hash_index(uint32_t shard, uint32_t entries);

}  // namespace prism::pipe
