#include "switch/pool_shard.hpp"

#include "proto/steer.hpp"
#include "switch/reducer.hpp"

namespace prism::sw {
namespace {

constexpr uint64_t kScanNs = 100 * 1000000ull;

uint32_t word(uint32_t gen, PoolJobState s) { return gen << 2 | uint32_t(s); }

bool same_source(const PooledJob& pj, const wire::Endpoint& src, uint16_t port) {
  return pj.asker.ip == src.ip && pj.asker.port == src.port && wire::same_mac(pj.asker.mac, src.mac) &&
         pj.asker_port == port;
}

}  // namespace

PoolShard::PoolShard(const Directory& dir, uint32_t shard, ReducerStats& stats)
    : dir_(dir),
      shard_(shard),
      shards_(std::max<uint32_t>(1, dir.config().reducer_shards)),
      stats_(stats),
      rng_(fresh_seed()) {
  for (const auto& pool : dir.pools())
    for (const Job* j : pool->jobs())
      if (wire::shard_of(j->cfg->id, 0, 0, shards_) == shard_) mine_.push_back(j);
}

void PoolShard::refuse(Drop d, const wire::Parsed& p, const Verdict& v, Sink& out, uint64_t now_ns) {
  stats_.count(d);
  if (v.pool) v.pool->counters().refused[size_t(d)].fetch_add(1, std::memory_order_relaxed);
  Verdict r = v;
  r.drop = d;
  r.member = nullptr;
  r.to_source = true;
  if (answer(dir_, r, p, out, &limit_, now_ns)) ++stats_.nacks_sent;
}

void PoolShard::send_allocated(const Job& j, const wire::Parsed& p, uint16_t port, Sink& out) {
  const PooledJob& pj = *j.pooled;
  Out o;
  o.port = port;
  o.src = dir_.self(port);
  o.dst = p.src;
  o.h = wire::allocated_header(j.cfg->id, pj.nonce, pj.pool->id(), dir_.config().id, pj.R(),
                               uint16_t(dir_.config().reducer_shards));
  const auto body =
      wire::allocated_body(wire::AllocatedBody{pj.pool->cfg().slot_quota, pj.pool->cfg().idle_timeout_ms});
  o.body = std::make_shared<const std::vector<uint8_t>>(body.begin(), body.end());
  out.send(std::move(o));
  ++stats_.pool_replies;
  ++stats_.accepted;
}

void PoolShard::send_left(const wire::Parsed& p, uint16_t group, uint16_t still_bound, uint16_t port, Sink& out) {
  Out o;
  o.port = port;
  o.src = dir_.self(port);
  o.dst = p.src;
  o.h = wire::left_header(p.h.job, p.h.op, p.h.sender, group ? group : 1, still_bound);
  out.send(std::move(o));
  ++stats_.pool_replies;
  ++stats_.accepted;
}

// The pool's shard is the only one that takes a FREE job: it reads each
// state once, writes what the ALLOC fixes, and publishes ALLOCATED last.
// Cost, before anything else: the source's ALLOC rate (F10); a repeat is one
// hash lookup, a full pool one load; a free id is searched for from a random
// place (F9), about count / free ids looked at.
void PoolShard::on_alloc(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const Pool& pool = *v.pool;
  const size_t in = wire::kFrameOverhead + p.payload_len;
  if (!limit_.take_alloc(p.src, now_ns)) {
    limit_.earn(p.src, in);
    stats_.count(Drop::RATE_LIMITED);
    pool.counters().refused[size_t(Drop::RATE_LIMITED)].fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (p.h.op == 0) return refuse(Drop::MALFORMED, p, v, out, now_ns);  // the nonce
  const uint64_t key = uint64_t(p.h.op) << 32 | p.src.ip;
  if (const auto it = taken_.find(key); it != taken_.end()) {  // a repeat (its ALLOCATED was lost): the same id
    const PooledJob& pj = *it->second->pooled;
    if (pj.state() != PoolJobState::FREE && pj.nonce == p.h.op && same_source(pj, p.src, v.in_port)) {
      if (limit_.allow(p.src, now_ns, in, wire::kFrameOverhead + wire::kAllocatedBody))
        return send_allocated(*it->second, p, v.in_port, out);
      return stats_.count(Drop::RATE_LIMITED);
    }
    taken_.erase(it);
  }
  const auto jobs = pool.jobs();
  if (pool.free_ids() > 0) {
    const size_t start = size_t(rng_() % jobs.size());
    for (size_t k = 0; k < jobs.size(); ++k) {
      const Job* j = jobs[(start + k) % jobs.size()];
      PooledJob& pj = *j->pooled;
      const uint32_t w = pj.word.load(std::memory_order_acquire);
      if (PoolJobState(w & 3) != PoolJobState::FREE) continue;
      if (!limit_.allow(p.src, now_ns, in, wire::kFrameOverhead + wire::kAllocatedBody, false)) {
        // Not a byte more than the source sent (an ALLOC without its 8 bytes of padding
        // is answered when it asks again): the id stays free.
        stats_.count(Drop::RATE_LIMITED);
        pool.counters().nacks_limited.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      pj.group.store(p.h.group, std::memory_order_relaxed);
      pj.asker = p.src;
      pj.asker_port = v.in_port;
      pj.nonce = p.h.op;
      pj.heard_ns.store(now_ns, std::memory_order_relaxed);
      pj.word.store(word(w >> 2, PoolJobState::ALLOCATED), std::memory_order_release);
      pool.took_one();
      pool.counters().allocated.fetch_add(1, std::memory_order_relaxed);
      if (taken_.size() >= 4 * jobs.size()) sweep_taken();
      taken_[key] = j;
      return send_allocated(*j, p, v.in_port, out);
    }
  }
  refuse(Drop::POOL_FULL, p, v, out, now_ns);
}

// Forgets the hints whose job was released or taken again since.
void PoolShard::sweep_taken() {
  for (auto it = taken_.begin(); it != taken_.end();) {
    const PooledJob& pj = *it->second->pooled;
    it = pj.state() == PoolJobState::FREE || pj.nonce != uint32_t(it->first >> 32) ? taken_.erase(it) : std::next(it);
  }
}

// The seqlock's write side (pool.hpp): the sequence is even while unbound;
// the entry is written, then the sequence made odd.
void PoolShard::bind(const Job& j, uint16_t rank, const wire::Endpoint& src, uint16_t port) {
  Job& w = const_cast<Job&>(j);  // the job's shard is the one writer of a pooled job's entries
  std::atomic_thread_fence(std::memory_order_release);
  w.members[rank].addr = src;
  w.members[rank].port = port;
  w.result_dests[rank] = Dest{port, dir_.self(port), src, wire::header_template(dir_.self(port), src)};
  j.pooled->seq[rank].fetch_add(1, std::memory_order_release);
  j.pooled->bound.fetch_add(1, std::memory_order_relaxed);
}

void PoolShard::unbind(const Job& j, uint16_t rank) {
  if (!(j.pooled->seq[rank].load(std::memory_order_relaxed) & 1)) return;
  j.pooled->seq[rank].fetch_add(1, std::memory_order_release);
  j.pooled->bound.fetch_sub(1, std::memory_order_relaxed);
}

const Member* PoolShard::join(const wire::Parsed& p, const Verdict& v, Sink& out, uint64_t now_ns) {
  const Job& j = *v.job;
  PooledJob& pj = *j.pooled;
  const PoolJobState st = pj.state();
  const uint16_t rank = p.h.sender;
  // Ingress judged it on another lcore: the job may have been released since.
  if (st == PoolJobState::FREE) return refuse(Drop::UNKNOWN_JOB, p, v, out, now_ns), nullptr;
  if (p.h.op == 0 || p.h.group != pj.R() || rank >= pj.R()) return refuse(Drop::MALFORMED, p, v, out, now_ns), nullptr;
  switch (pj.binding(j, rank, p.src, v.in_port)) {
    case PooledJob::Binding::ANOTHER: return refuse(Drop::RANK_TAKEN, p, v, out, now_ns), nullptr;
    case PooledJob::Binding::UNBOUND: bind(j, rank, p.src, v.in_port); break;
    case PooledJob::Binding::THIS_SOURCE: break;
  }
  pj.join_nonce[rank] = p.h.op;
  pj.heard(now_ns);
  if (st == PoolJobState::ALLOCATED)
    pj.word.store(word(pj.generation(), PoolJobState::JOINING), std::memory_order_release);
  return &j.members[rank];
}

void PoolShard::joined(const Job& j, bool complete) {
  PooledJob& pj = *j.pooled;
  const uint32_t w = pj.word.load(std::memory_order_relaxed);
  const PoolJobState want = complete ? PoolJobState::LIVE : PoolJobState::JOINING;
  if (PoolJobState(w & 3) != PoolJobState::FREE && PoolJobState(w & 3) != want)
    pj.word.store(word(w >> 2, want), std::memory_order_release);
}

void PoolShard::on_leave(const wire::Parsed& p, const Verdict& v, Sessions& sessions, Sink& out, uint64_t now_ns) {
  const Job& j = *v.job;
  PooledJob& pj = *j.pooled;
  const uint16_t rank = p.h.sender;
  const bool bound_here = pj.state() != PoolJobState::FREE &&
                          pj.binding(j, rank, p.src, v.in_port) == PooledJob::Binding::THIS_SOURCE &&
                          pj.join_nonce[rank] == p.h.op;
  if (!bound_here) {  // already left (a repeat: its LEFT was lost), or never joined with this nonce
    if (limit_.allow(p.src, now_ns, wire::kFrameOverhead + p.payload_len, wire::kFrameOverhead))
      return send_left(p, pj.R(), uint16_t(pj.state() == PoolJobState::FREE ? 0 : pj.bound.load()), v.in_port, out);
    return stats_.count(Drop::RATE_LIMITED);
  }
  unbind(j, rank);
  sessions.forget(j, rank);
  const uint32_t left = pj.bound.load(std::memory_order_relaxed);
  send_left(p, pj.R(), uint16_t(left), v.in_port, out);
  if (left == 0) return release(j, sessions, false);
  joined(j, false);
}

// Bindings dropped, no session, the id FREE again under a new generation
// (the shards abandon the old one's open slots: Reducer::tick).
void PoolShard::release(const Job& j, Sessions& sessions, bool idle) {
  PooledJob& pj = *j.pooled;
  for (uint16_t r = 0; r < j.cfg->group; ++r) {
    unbind(j, r);
    pj.join_nonce[r] = 0;
  }
  sessions.reset(j);
  pj.word.store(word(pj.generation() + 1, PoolJobState::FREE), std::memory_order_release);
  pj.pool->gave_one_back();
  auto& c = pj.pool->counters();
  (idle ? c.reclaimed : c.released).fetch_add(1, std::memory_order_relaxed);
}

void PoolShard::tick(uint64_t now_ns, Sessions& sessions) {
  if (now_ns < next_scan_ns_) return;
  next_scan_ns_ = now_ns + kScanNs;
  for (const Job* j : mine_) {
    const PooledJob& pj = *j->pooled;
    if (pj.state() == PoolJobState::FREE) continue;
    // Silent for idle_timeout_ms; or ALLOCATED and never joined for join_timeout_ms (an ALLOC from a
    // source that never meant to use the id, spoofed or not, holds it that long only: F9).
    const PoolConfig& pc = pj.pool->cfg();
    const bool unjoined = pj.state() == PoolJobState::ALLOCATED;
    const uint64_t idle =
        uint64_t(unjoined ? std::min(pc.join_timeout_ms, pc.idle_timeout_ms) : pc.idle_timeout_ms) * 1000000;
    if (now_ns >= pj.heard_ns.load(std::memory_order_relaxed) + idle) release(*j, sessions, true);
  }
}

}  // namespace prism::sw
