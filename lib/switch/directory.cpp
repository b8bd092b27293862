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
    jobs_.emplace(jc.id, std::move(j));
  }
  shards_ = std::max<uint32_t>(1, cfg.reducer_shards);
  op_high_ = std::make_unique<OpHigh[]>(jobs_.size() * shards_);
  // Members and children do not move from here on (jobs_ is a node map).
  for (const auto& [id, j] : jobs_)
    for (const auto* v : {&j.members, &j.children})
      for (const Member& m : *v) by_addr_.emplace(key(m.addr), &m);
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

const Member* Directory::registered(const wire::Endpoint& src, uint16_t in_port) const {
  const auto [from, to] = by_addr_.equal_range(key(src));
  for (auto it = from; it != to; ++it)
    if (it->second->port == in_port && wire::same_mac(it->second->addr.mac, src.mac)) return it->second;
  return nullptr;
}

}  // namespace prism::sw
