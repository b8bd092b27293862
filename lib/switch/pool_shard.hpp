// What one reducer shard does for job pools (docs/PROTOCOL.md, "Job pools";
// the state it changes: switch/pool.hpp). ALLOC belongs to the pool id's
// shard, JOIN and LEAVE to the job's (job id mod S, the session's), which is
// also the one that reclaims the job when it falls silent: each transition
// has one writer. Replies go to the packet's source; a refusal's NACK (and a
// LEFT or ALLOCATED repeated to a source no binding vouches for) at most once
// per source per 100 ms.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "switch/directory.hpp"
#include "switch/ingress.hpp"
#include "switch/session.hpp"
#include "switch/sink.hpp"

namespace prism::sw {

struct ReducerStats;

class PoolShard {
 public:
  // `stats`: the shard's, where refusals and replies are counted.
  PoolShard(const Directory& dir, uint32_t shard, ReducerStats& stats);
  // ALLOC (admitted by ingress: a source in the pool's ranges, a group it
  // admits): a free id, or the same one again for a repeat of an ALLOC that
  // took one; POOL_FULL when none is free.
  void on_alloc(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  // A JOIN to a pooled job: the member it comes from, bound to its source
  // now if it was not; null when refused (and answered).
  const Member* join(const wire::Parsed& p, const Verdict& v, Sink& out, uint64_t now_ns);
  // After the job's session took the JOIN: LIVE when it is complete, else JOINING.
  void joined(const Job& j, bool complete);
  // LEAVE: the rank's binding dropped (its session forgets it), LEFT to it;
  // the last one releases the job. A LEAVE no binding matches is answered as done.
  void on_leave(const wire::Parsed& p, const Verdict& v, Sessions& sessions, Sink& out, uint64_t now_ns);
  // Reclaims this shard's pooled jobs silent for their pool's idle_timeout_ms
  // (looked at every 100 ms).
  void tick(uint64_t now_ns, Sessions& sessions);
  // Counts a refusal of a pool message and NACKs its source (rate-limited).
  void refuse(Drop d, const wire::Parsed& p, const Verdict& v, Sink& out, uint64_t now_ns);

 private:
  void bind(const Job& j, uint16_t rank, const wire::Endpoint& src, uint16_t port);
  void unbind(const Job& j, uint16_t rank);
  void release(const Job& j, Sessions& sessions, bool idle);
  void sweep_taken();
  void send_allocated(const Job& j, const wire::Parsed& p, uint16_t port, Sink& out);
  void send_left(const wire::Parsed& p, uint16_t group, uint16_t still_bound, uint16_t port, Sink& out);
  const Directory& dir_;
  uint32_t shard_, shards_;
  ReducerStats& stats_;
  NackLimiter limit_;
  std::vector<const Job*> mine_;  // the pooled jobs whose id mod S is this shard
  // ALLOCs that took an id, by (nonce, source IP): a repeat finds its id in
  // O(1). An entry is a hint (checked against the job), swept when it grows.
  std::unordered_map<uint64_t, const Job*> taken_;
  std::mt19937_64 rng_;  // where a search for a free id starts: ids are not predictable (F9)
  uint64_t next_scan_ns_ = 0;
};

}  // namespace prism::sw
