// Who may talk to this switch: the jobs, their members and children, looked
// up by id and by source address. Built once from the configuration; read-only
// afterwards, so every lcore may share it, but for one atomic per job and
// shard, each on a cache line of its own: the highest op number that shard
// opened (for sessions, switch/session.hpp), and the run-time state of the
// pooled jobs (switch/pool.hpp): each pool's jobs are made here at start, with
// max_group member entries each, so looking a job up costs the same.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"
#include "switch/drop.hpp"
#include "switch/pool.hpp"
#include "switch/sink.hpp"

namespace prism::sw {

struct Member {
  uint32_t job;
  uint16_t id;    // rank (members) or child id (children)
  uint16_t port;  // switch port it is reached through
  wire::Endpoint addr;
  uint16_t terms;  // contributions its packets fold: 1 for a rank, `ranks` for a child
  bool child;
};

struct Job {
  const JobConfig* cfg;
  std::vector<int32_t> member_of_rank;  // rank -> index into members, -1 if not attached here
  std::vector<int32_t> child_of_id;     // child id -> index into children, -1
  std::vector<Member> members, children;
  std::vector<Dest> result_dests;  // every member, then every child: where a RESULT goes
  uint32_t format_mask = 0, policy_mask = 0;
  uint32_t index = 0;  // dense, 0 .. jobs - 1: per-job state elsewhere is an array by it
  // Its members' and children's entries in per-member arrays elsewhere:
  // base + the member's place in result_dests (Directory::member_entries()).
  uint32_t entry_base = 0;
  // A pooled job's run-time state (null for a declared job). Its members and
  // result_dests have max_group entries; the first R count, each once bound.
  std::unique_ptr<PooledJob> pooled;
  // R: the declared group, or the R a pooled job was allocated with.
  uint16_t group() const { return pooled ? pooled->R() : cfg->group; }
  // Where a RESULT goes: every member and child (a pooled job: its R ranks).
  std::span<const Dest> dests() const {
    return pooled ? std::span<const Dest>(result_dests.data(), group()) : std::span<const Dest>(result_dests);
  }
  // Its members at this switch (a pooled job: the entries of its R ranks).
  std::span<const Member> local_members() const {
    return pooled ? std::span<const Member>(members.data(), group()) : std::span<const Member>(members);
  }
  bool allows(Format f) const { return format_mask & (1u << uint8_t(f)); }
  bool allows(Policy p) const { return policy_mask & (1u << uint8_t(p)); }
  // Where a RESULT for member or child `m` (one of this job's) goes.
  const Dest& dest_of(const Member& m) const { return result_dests[place(m)]; }
  // `m`'s entry in per-member arrays (Directory::member_entries() of them).
  uint32_t entry_of(const Member& m) const { return entry_base + uint32_t(place(m)); }
  size_t place(const Member& m) const {
    return m.child ? members.size() + size_t(&m - children.data()) : size_t(&m - members.data());
  }
};

class Directory {
 public:
  explicit Directory(const SwitchConfig& cfg);
  const SwitchConfig& config() const { return cfg_; }
  // Every packet looks its job up: an open-addressed table of (id, job),
  // probed from a multiplicative hash, with no division (std::unordered_map
  // divides by a prime bucket count on every find).
  const Job* job(uint32_t id) const {
    for (uint32_t i = (id * 0x9E3779B1u) >> lookup_shift_;; i = (i + 1) & lookup_mask_) {
      const JobRef& r = lookup_[i];
      if (r.job == nullptr || r.id == id) return r.job;
    }
  }
  size_t jobs() const { return jobs_.size(); }
  // Every job's members and children (a pooled job: max_group entries):
  // the size of an array by Job::entry_of().
  size_t member_entries() const { return member_entries_; }
  // Every job, declared ones first (in the configuration's order), then each pool's.
  const std::vector<const Job*>& all_jobs() const { return all_; }
  // The pool whose id (first job id) is `id`, for an ALLOC; null when none.
  const Pool* pool(uint32_t id) const {
    for (const auto& p : pools_)
      if (p->id() == id) return p.get();
    return nullptr;
  }
  const std::vector<std::unique_ptr<Pool>>& pools() const { return pools_; }
  // The pool that job `id` belongs to; null for a declared or unknown job.
  const Pool* pool_of(uint32_t id) const {
    const Job* j = job(id);
    return j && j->pooled ? j->pooled->pool : nullptr;
  }
  // Some pool lists switch port `port`: a refusal of a pool message that
  // came in on it is answered to its source (PROTOCOL.md, Job pools).
  bool pool_port(uint16_t port) const {
    for (const auto& p : pools_)
      if (p->cfg().lists(port)) return true;
    return false;
  }
  // The member or child registered at exactly this source (MAC, IP, UDP port)
  // behind switch port `in_port`, in any job; null when there is none. Only
  // such a source is ever answered (a NACK goes to its registered address).
  const Member* registered(const wire::Endpoint& src, uint16_t in_port) const;
  // True when some member or child is registered with this IP and UDP port
  // (whatever its MAC and switch port): a packet from it that claims another
  // identity is counted as spoofed rather than as from an unknown source.
  bool claims_registered_address(const wire::Endpoint& src) const { return by_addr_.count(key(src)) != 0; }
  bool is_parent(const wire::Endpoint& e) const {
    return cfg_.parent && cfg_.parent->addr.ip == e.ip && cfg_.parent->addr.port == e.port;
  }
  // The highest op number opened for job `j` at this switch, over every
  // shard (sessions start past it): note_op() on each slot a shard opens, in
  // that shard's own line (shards on other lcores open ops all the time, and
  // one shared line would cross cores on every op), and first_fresh_op() =
  // one past the highest of them (nothing when none was opened).
  void note_op(const Job& j, uint32_t op, uint32_t shard = 0) const {
    std::atomic<uint64_t>& h = op_high_[size_t(j.index) * shards_ + shard % shards_].v;
    uint64_t cur = h.load(std::memory_order_relaxed);
    const uint64_t mine = uint64_t(1) << 32 | op;
    while ((cur == 0 || int32_t(op - uint32_t(cur)) > 0) &&
           !h.compare_exchange_weak(cur, mine, std::memory_order_relaxed)) {
    }
  }
  std::optional<uint32_t> first_fresh_op(const Job& j) const {
    std::optional<uint32_t> high;
    for (uint32_t s = 0; s < shards_; ++s) {
      const uint64_t h = op_high_[size_t(j.index) * shards_ + s].v.load(std::memory_order_relaxed);
      if (h && (!high || int32_t(uint32_t(h) - *high) > 0)) high = uint32_t(h);
    }
    return high ? std::optional<uint32_t>(*high + 1) : std::nullopt;
  }
  // A source a pool may bind a rank to and answer (SECURITY-REVIEW F8): a
  // unicast MAC and a unicast IPv4 address (not 0.0.0.0, 127/8, multicast,
  // 240/4 or the broadcast), neither of them a port's of this switch. The
  // configuration reader holds declared members to the same.
  bool usable_source(const wire::Endpoint& e) const {
    const uint32_t ip = e.ip;
    if ((e.mac[0] & 1) || (e.mac[0] | e.mac[1] | e.mac[2] | e.mac[3] | e.mac[4] | e.mac[5]) == 0) return false;
    if (ip == 0 || (ip >> 24) == 127 || (ip >> 28) >= 14) return false;  // 224/4 multicast, 240/4 and broadcast
    for (const wire::Endpoint& s : self_)
      if (s.ip == ip || wire::same_mac(s.mac, e.mac)) return false;
    return true;
  }
  // A frame addressed to switch port `port` itself: its MAC and its IP.
  bool addressed_to(const wire::Endpoint& dst, uint16_t port) const {
    return port < self_.size() && self_[port].ip == dst.ip && wire::same_mac(self_[port].mac, dst.mac);
  }
  // The switch's own endpoint on a port (source of what it sends there).
  wire::Endpoint self(uint16_t port) const {
    if (port < self_.size()) return self_[port];
    wire::Endpoint e;
    e.port = cfg_.udp_port;
    return e;
  }

 private:
  static uint64_t key(const wire::Endpoint& e) { return uint64_t(e.ip) << 16 | e.port; }
  Job make_job(const JobConfig& jc);
  void make_pool(const PoolConfig& pc);
  const SwitchConfig& cfg_;
  std::deque<JobConfig> pooled_cfgs_;  // each pooled job's settings (the pool's), for Job::cfg
  std::vector<std::unique_ptr<Pool>> pools_;
  std::vector<const Job*> all_;
  std::unordered_map<uint32_t, Job> jobs_;  // owns them (nodes do not move)
  struct JobRef {
    uint32_t id;
    const Job* job;  // null: an empty entry, where a probe ends
  };
  std::vector<JobRef> lookup_;  // at most half full
  uint32_t lookup_mask_ = 0, lookup_shift_ = 32;
  std::unordered_multimap<uint64_t, const Member*> by_addr_;  // (IP, UDP port) -> every member and child there
  std::vector<wire::Endpoint> self_;                          // by port id
  struct alignas(64) OpHigh {
    std::atomic<uint64_t> v{0};  // 1 << 32 | op, 0 for none
  };
  uint32_t shards_ = 1;
  std::unique_ptr<OpHigh[]> op_high_;
  size_t member_entries_ = 0;  // by Job::index * shards + shard
};

}  // namespace prism::sw
