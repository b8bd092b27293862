// Job pools (docs/PROTOCOL.md, "Job pools"): job ids that ranks claim at run
// time. ALLOC takes a free id of a pool; the first JOIN of each rank binds
// that rank to the address it came from (MAC, IP, UDP port, switch port);
// LEAVE unbinds it, and the last LEAVE (or an idle timeout) gives the id back.
//
// Representation. Every pooled Job is made at start, like a declared one
// (directory.hpp), with max_group member entries and RESULT destinations, so
// the per-packet lookup is the same; what changes at run time is this state:
//
// - `word`: generation << 2 | PoolJobState. FREE -> ALLOCATED is written by
//   the pool's shard (pool id mod S) and only while FREE; every later
//   transition (JOINING, LIVE, back to FREE with the generation bumped) by
//   the job's shard (job id mod S). One writer per transition, published
//   with release and read with acquire: no lock, no compare-and-swap.
//   Everything the ALLOC sets (group, asker, nonce) is written before it.
// - `seq[r]`: rank r's binding, a sequence number (a seqlock): odd = bound.
//   The job's shard makes it even, writes the member entry and the RESULT
//   destination, and makes it odd (release); a reader (ingress on any lcore)
//   reads it (acquire), reads the entry, and reads it again: an entry read
//   while it changed does not count as bound.
// - `heard_ns`: the last time a packet of one of its ranks reached a shard
//   (relaxed; written at most once a millisecond per shard): the job's shard
//   reclaims a job silent for idle_timeout_ms.
//
// Slots opened for a pooled job remember its generation; when the job is
// released, each shard abandons its slots of the old generation silently (no
// member is left to tell) and tombstones their keys. A reused id's new
// session starts past every op the switch opened for it (Sessions).
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "config/config.hpp"
#include "switch/drop.hpp"
#include "util/closed_set.hpp"

namespace prism::sw {

struct Job;
struct Member;
class Directory;

enum class PoolJobState : uint8_t { FREE, ALLOCATED, JOINING, LIVE };
inline constexpr Entry<PoolJobState> kPoolJobStates[] = {
    {PoolJobState::FREE, "free", "not allocated: its id is in the pool's free ids"},
    {PoolJobState::ALLOCATED, "allocated", "an ALLOC took it; no rank has joined yet"},
    {PoolJobState::JOINING, "joining", "some of its R ranks are bound"},
    {PoolJobState::LIVE, "live", "every rank joined: its session is complete"},
};
constexpr std::span<const Entry<PoolJobState>> entries(PoolJobState) { return kPoolJobStates; }

class Pool;

// One pooled job's run-time state (see above).
struct PooledJob {
  const Pool* pool = nullptr;
  std::atomic<uint32_t> word{0};  // generation << 2 | state
  std::atomic<uint16_t> group{0};
  std::atomic<uint64_t> heard_ns{0};
  std::atomic<uint32_t> bound{0};  // ranks bound now
  // The ALLOC that took it: written by the pool's shard while FREE, read by it.
  wire::Endpoint asker{};
  uint16_t asker_port = 0;
  uint32_t nonce = 0;
  std::unique_ptr<std::atomic<uint32_t>[]> seq;  // by rank: odd = bound
  std::unique_ptr<uint32_t[]> join_nonce;        // by rank: its last JOIN's nonce (the job's shard's)

  PoolJobState state(std::memory_order o = std::memory_order_acquire) const { return PoolJobState(word.load(o) & 3); }
  uint32_t generation() const { return word.load(std::memory_order_acquire) >> 2; }
  uint16_t R() const { return group.load(std::memory_order_relaxed); }
  // Whether rank r is bound, and to this source (MAC, IP, UDP port, switch
  // port): the entry compared between two reads of its sequence.
  enum class Binding : uint8_t { UNBOUND, THIS_SOURCE, ANOTHER };
  Binding binding(const Job& j, uint16_t r, const wire::Endpoint& src, uint16_t in_port) const;
  bool is_bound(uint16_t r) const { return r < R() && (seq[r].load(std::memory_order_acquire) & 1); }
  // Noted by a shard that took one of its packets (stored at most once a
  // millisecond, so the shards that share the line write it rarely).
  void heard(uint64_t now_ns) {
    if (now_ns > heard_ns.load(std::memory_order_relaxed) + 1000000) heard_ns.store(now_ns, std::memory_order_relaxed);
  }
};

// A pool's counters, summed by telemetry. Relaxed atomics: several lcores add.
struct PoolCounters {
  std::atomic<uint64_t> allocated{0}, released{0}, reclaimed{0}, nacks_limited{0};
  std::atomic<uint64_t> refused[size_t(Drop::kCount)] = {};
};

class Pool {
 public:
  Pool(const PoolConfig& cfg, std::vector<const Job*> jobs);
  const PoolConfig& cfg() const { return cfg_; }
  uint32_t id() const { return cfg_.first; }
  std::span<const Job* const> jobs() const { return jobs_; }
  // A source its ranks may have, on a port they may come through.
  bool admits(const wire::Endpoint& src, uint16_t in_port) const { return cfg_.admits(src.ip) && cfg_.lists(in_port); }
  // Free ids now (each FREE job's word read once).
  uint32_t free_ids() const;
  PoolCounters& counters() const { return counters_; }

 private:
  const PoolConfig& cfg_;
  std::vector<const Job*> jobs_;  // by id - first
  mutable PoolCounters counters_;
};

// One NACK per source (IP, UDP port) per 100 ms: what a pool answers to a
// source it has not bound. A direct-mapped table, per lcore stage (no
// sharing): a collision only forgets an older source's time early.
class NackLimiter {
 public:
  static constexpr uint64_t kIntervalNs = 100 * 1000000ull;
  bool allow(const wire::Endpoint& src, uint64_t now_ns);

 private:
  struct Entry {
    uint64_t key = ~0ull, t = 0;
  };
  static constexpr uint32_t kBits = 10;
  Entry table_[1u << kBits];
};

}  // namespace prism::sw
