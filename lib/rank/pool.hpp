// A job from a switch's pool (docs/PROTOCOL.md, "Job pools"): one rank (a
// Group's rank 0) asks the pool for a job id of R ranks with ALLOC, and
// shares the answer with the others (through the group's rendezvous store);
// every rank then JOINs that job from its own address, which the switch binds
// to it, and LEAVEs it when done (~Communicator, for Endpoints::pooled).
#pragma once

#include <cstdint>
#include <string>

namespace prism::rank {

struct PooledJob {
  uint32_t job = 0;
  uint16_t shards = 1;           // the switch's reducers.shards (the steering rule's S)
  uint32_t slot_quota = 0;       // the pool's per-job slot quota
  uint32_t idle_timeout_ms = 0;  // a job silent this long is reclaimed
};

// Asks pool `pool` (its first job id) at the switch at switch_ip:switch_port
// for a job of `group` ranks, from local_ip ("": any), re-sending ALLOC (the
// same nonce) until ALLOCATED answers or `timeout_ms` passes. The ALLOC goes
// to switch_port itself: before the answer the shard count is unknown, and
// the switch dispatches what reaches another shard's port. Throws Error:
// REFUSED with the NACK's reason (pool_full, group_too_large, out_of_pool,
// unknown_job: no such pool), TIMEOUT naming the switch, SYSTEM.
PooledJob alloc_pooled_job(const std::string& local_ip, const std::string& switch_ip, uint16_t switch_port,
                           uint32_t pool, uint16_t group, uint32_t timeout_ms);

}  // namespace prism::rank
