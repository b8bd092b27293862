#include "switch/directory.hpp"

#include <algorithm>

namespace prism::sw {

Directory::Directory(const SwitchConfig& cfg) : cfg_(cfg) {
  for (const auto& p : cfg.ports) {
    if (p.id >= self_.size()) {
      wire::Endpoint none;
      none.port = cfg.udp_port;
      self_.resize(size_t(p.id) + 1, none);
    }
    self_[p.id].mac = p.mac;
    self_[p.id].ip = p.ip;
    self_[p.id].port = cfg.udp_port;
  }
  for (const auto& jc : cfg.jobs) {
    Job j = make_job(jc);
    jobs_.emplace(jc.id, std::move(j));
  }
  for (const auto& pc : cfg.pools) make_pool(pc);
  shards_ = std::max<uint32_t>(1, cfg.reducer_shards);
  op_high_ = std::make_unique<OpHigh[]>(jobs_.size() * shards_);
  // Members and children do not move from here on (jobs_ is a node map).
  // A pooled job's members are bound at run time: they are in no address table.
  for (const auto& [id, j] : jobs_)
    if (!j.pooled)
      for (const auto* v : {&j.members, &j.children})
        for (const Member& m : *v) by_addr_.emplace(key(m.addr), &m);
  for (const auto& jc : cfg.jobs) all_.push_back(&jobs_.at(jc.id));
  for (auto& [id, j] : jobs_) {
    j.entry_base = uint32_t(member_entries_);
    member_entries_ += j.result_dests.size();
  }
  for (const auto& pc : cfg.pools) {
    std::vector<const Job*> pj;
    for (uint32_t k = 0; k < pc.count; ++k) pj.push_back(&jobs_.at(pc.first + k));
    all_.insert(all_.end(), pj.begin(), pj.end());
    pools_.push_back(std::make_unique<Pool>(pc, std::move(pj)));
    for (const Job* j : pools_.back()->jobs()) j->pooled->pool = pools_.back().get();
  }
  uint32_t bits = 1;
  while ((size_t(1) << bits) < 2 * jobs_.size()) ++bits;
  lookup_.assign(size_t(1) << bits, JobRef{0, nullptr});
  lookup_mask_ = (uint32_t(1) << bits) - 1;
  lookup_shift_ = 32 - bits;
  for (const auto& [id, j] : jobs_) {
    uint32_t i = (id * 0x9E3779B1u) >> lookup_shift_;
    while (lookup_[i].job) i = (i + 1) & lookup_mask_;
    lookup_[i] = JobRef{id, &j};
  }
}

Job Directory::make_job(const JobConfig& jc) {
  Job j;
  j.cfg = &jc;
  j.index = uint32_t(jobs_.size());
  j.member_of_rank.assign(jc.group, -1);
  uint16_t max_child = 0;
  for (const auto& c : jc.children) max_child = std::max(max_child, c.id);
  j.child_of_id.assign(jc.children.empty() ? 0 : size_t(max_child) + 1, -1);
  for (const auto& m : jc.members) {
    j.member_of_rank[m.rank] = int32_t(j.members.size());
    j.members.push_back(Member{jc.id, m.rank, m.port, m.addr, 1, false});
  }
  for (const auto& c : jc.children) {
    j.child_of_id[c.id] = int32_t(j.children.size());
    j.children.push_back(Member{jc.id, c.id, c.port, c.addr, c.ranks, true});
  }
  for (const auto* v : {&j.members, &j.children})
    for (const Member& m : *v)
      j.result_dests.push_back(Dest{m.port, self(m.port), m.addr, wire::header_template(self(m.port), m.addr)});
  if (jc.formats.empty()) j.format_mask = ~0u;
  for (Format f : jc.formats) j.format_mask |= 1u << uint8_t(f);
  if (jc.policies.empty()) j.policy_mask = ~0u;
  for (Policy p : jc.policies) j.policy_mask |= 1u << uint8_t(p);
  return j;
}

// A pool's jobs: each with the pool's settings and max_group member entries
// (rank r at entry r), unbound; FREE.
void Directory::make_pool(const PoolConfig& pc) {
  for (uint32_t k = 0; k < pc.count; ++k) {
    JobConfig& jc = pooled_cfgs_.emplace_back();
    jc.id = pc.first + k;
    jc.group = pc.max_group;
    jc.formats = pc.formats;
    jc.policies = pc.policies;
    jc.slot_quota = pc.slot_quota;
    jc.udp_checksum_optional = pc.udp_checksum_optional;
    jc.rate = pc.rate;
    Job j = make_job(jc);
    for (uint16_t r = 0; r < pc.max_group; ++r) {
      j.member_of_rank[r] = int32_t(r);
      j.members.push_back(Member{jc.id, r, 0, wire::Endpoint{}, 1, false});
      j.result_dests.push_back(Dest{});
    }
    j.pooled = std::make_unique<PooledJob>();
    j.pooled->seq = std::make_unique<std::atomic<uint32_t>[]>(pc.max_group);
    j.pooled->join_nonce = std::make_unique<uint32_t[]>(pc.max_group);
    jobs_.emplace(jc.id, std::move(j));
  }
}

const Member* Directory::registered(const wire::Endpoint& src, uint16_t in_port) const {
  const auto [from, to] = by_addr_.equal_range(key(src));
  for (auto it = from; it != to; ++it)
    if (it->second->port == in_port && wire::same_mac(it->second->addr.mac, src.mac)) return it->second;
  return nullptr;
}

}  // namespace prism::sw
