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
  // Free ids now: taken by the pool's shard at ALLOC, given back by the
  // job's shard at release (so a full pool refuses an ALLOC in O(1)).
  uint32_t free_ids() const { return free_.load(std::memory_order_acquire); }
  void took_one() const { free_.fetch_sub(1, std::memory_order_acq_rel); }
  void gave_one_back() const { free_.fetch_add(1, std::memory_order_acq_rel); }
  PoolCounters& counters() const { return counters_; }

 private:
  const PoolConfig& cfg_;
  std::vector<const Job*> jobs_;  // by id - first
  mutable PoolCounters counters_;
  mutable std::atomic<uint32_t> free_;
};

// What a pool sends a source it has not bound (a refusal, ALLOCATED, LEFT),
// per source IP, whatever UDP ports it rotates (SECURITY-REVIEW F8, F18):
// - never more bytes than that IP sent the pool: each of its pool messages
//   earns its frame's bytes (up to kMaxCredit), each answer spends its own;
// - at most one answer per kIntervalNs (GCRA, no burst);
// - and ALLOCs, taken at all (before any id is looked at: F10), at most
//   kAllocRate a second with bursts of kAllocBurst.
// A direct-mapped table per lcore stage (no sharing): a source whose entry
// another took starts again from nothing, with no credit, never another's.
class NackLimiter {
 public:
  static constexpr uint64_t kIntervalNs = 100 * 1000000ull;
  static constexpr uint64_t kAllocIntervalNs = 250 * 1000000ull;  // 4 a second
  static constexpr uint32_t kAllocBurst = 8;
  static constexpr uint32_t kMaxCredit = 64 * 1024;
  void earn(const wire::Endpoint& src, size_t in_bytes);
  // `in_bytes` received from `src` (earned first), then whether an answer
  // of `out_bytes` may go to it now (if so, spent). `paced`: one per
  // kIntervalNs too (refusals; an ALLOCATED is paced by take_alloc()).
  bool allow(const wire::Endpoint& src, uint64_t now_ns, size_t in_bytes = 74, size_t out_bytes = 74,
             bool paced = true);
  // Whether an ALLOC from `src` is taken now (counted against its rate).
  bool take_alloc(const wire::Endpoint& src, uint64_t now_ns);

 private:
  struct Entry {
    uint32_t ip = 0, credit = 0;
    uint64_t tat = 0, alloc_tat = 0;  // GCRA: the theoretical arrival times
    bool used = false;
  };
  Entry& at(uint32_t ip);
  static constexpr uint32_t kBits = 10;
  Entry table_[1u << kBits];
};

}  // namespace prism::sw
