// Steering (docs/PROTOCOL.md, Steering): which of a switch's reducer shards
// owns an op chunk, and the UDP port a client sends that chunk to, so that a
// NIC can deliver it to the lcore that owns the shard (an rte_flow rule or a
// steering program per port) without the switch looking inside the packet.
//
// shard = (job + op + chunk) mod S, summed without wrapping; S is the
// switch's reducers.shards. The ops of a job and the chunks of an op go round
// the shards in turn, so any stream of ops spreads evenly; a chunk's QUERY and
// STATUS go with its CONTRIB (the chunk's shard). JOIN and JOINED
// (whose op field is a nonce) belong to the shard of (job, 0, 0), which keeps
// the job's session; so do a pool's ALLOC (job = the pool id), ALLOCATED,
// LEAVE and LEFT. A chunk goes to UDP port base + shard, base being the
// switch's udp_port; the switch answers from base.
#pragma once

#include <cstdint>

#include "proto/wire.hpp"

namespace prism::wire {

inline uint32_t shard_of(uint32_t job, uint32_t op, uint32_t chunk, uint32_t shards) {
  return shards <= 1 ? 0 : uint32_t((uint64_t(job) + op + chunk) % shards);
}

// Kinds that belong to a job rather than an op chunk (their op is a nonce):
// the session's JOIN and JOINED, and a pool's ALLOC (whose job is the pool
// id), ALLOCATED, LEAVE and LEFT.
inline bool is_job_kind(Kind k) {
  return k == Kind::JOIN || k == Kind::JOINED || k == Kind::ALLOC || k == Kind::ALLOCATED || k == Kind::LEAVE ||
         k == Kind::LEFT;
}

// A packet's shard: its op chunk's, or the job's (job mod S) for the job kinds.
inline uint32_t shard_of(const Header& h, uint32_t shards) {
  const bool session = is_job_kind(h.kind);
  return session ? shard_of(h.job, 0, 0, shards) : shard_of(h.job, h.op, h.chunk, shards);
}

// The UDP destination port of a shard's packets at a switch whose udp_port is `base`.
inline uint16_t shard_port(uint16_t base, uint32_t shard) { return uint16_t(base + shard); }

}  // namespace prism::wire
