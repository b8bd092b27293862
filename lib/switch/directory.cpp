#include "switch/directory.hpp"

namespace prism::sw {

const char* name(Drop d) {
  static const char* const kNames[] = {"malformed",           "not_for_us", "unknown_source", "unknown_job",
                                       "not_a_member",        "spoofed",    "wrong_kind",     "not_allowed",
                                       "descriptor_mismatch", "too_narrow", "no_free_slot",   "duplicate",
                                       "result_expired",      "late",       "bad_partial",    "stale_result"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(Drop::kCount));
  return size_t(d) < size_t(Drop::kCount) ? kNames[size_t(d)] : "?";
}

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
      addrs_[key(m.addr)] = 1;
    }
    for (const auto& c : jc.children) {
      j.child_of_id[c.id] = int32_t(j.children.size());
      j.children.push_back(Member{jc.id, c.id, c.port, c.addr, c.ranks, true});
      addrs_[key(c.addr)] = 1;
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
  if (cfg.parent) addrs_[key(cfg.parent->addr)] = 1;
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

Verdict admit(const Directory& dir, const wire::Parsed& p, uint16_t in_port) {
  Verdict v;
  // Whether a refusal may be NACKed (the sender is registered) is looked up
  // only when there is a refusal: an admitted packet costs no such lookup.
  const auto fail = [&](Drop d, bool may_nack = true) {
    v.why = d;
    v.nack = may_nack && dir.registered(p.src);
    return v;
  };
  if (p.h.kind == wire::Kind::NACK) return fail(Drop::WRONG_KIND, false);  // switches never take NACKs, nor answer one
  v.job = dir.job(p.h.job);
  if (p.h.kind == wire::Kind::RESULT) {  // never answered
    if (!dir.is_parent(p.src) || !wire::same_mac(dir.config().parent->addr.mac, p.src.mac))
      return fail(Drop::UNKNOWN_SOURCE, false);
    if (!v.job) return fail(Drop::UNKNOWN_JOB, false);
    v.from_parent = true;
    v.ok = true;
    return v;
  }
  if (!v.job) return dir.registered(p.src) ? fail(Drop::UNKNOWN_JOB) : fail(Drop::UNKNOWN_SOURCE, false);
  const Member* m = nullptr;
  if (p.h.kind == wire::Kind::CONTRIB) {
    if (p.h.sender < v.job->member_of_rank.size() && v.job->member_of_rank[p.h.sender] >= 0)
      m = &v.job->members[size_t(v.job->member_of_rank[p.h.sender])];
  } else {  // PARTIAL
    if (p.h.sender < v.job->child_of_id.size() && v.job->child_of_id[p.h.sender] >= 0)
      m = &v.job->children[size_t(v.job->child_of_id[p.h.sender])];
  }
  if (!m) return dir.registered(p.src) ? fail(Drop::NOT_A_MEMBER) : fail(Drop::UNKNOWN_SOURCE, false);
  if (m->addr.ip != p.src.ip || m->addr.port != p.src.port || !wire::same_mac(m->addr.mac, p.src.mac) ||
      m->port != in_port)
    return dir.registered(p.src) ? fail(Drop::SPOOFED) : fail(Drop::UNKNOWN_SOURCE, false);
  v.member = m;
  v.ok = true;
  return v;
}

}  // namespace prism::sw
