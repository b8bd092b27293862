#include "switch/ingress.hpp"

#include "switch/sink.hpp"

namespace prism::sw {

RefusalClass classify(wire::Refusal r) {
  using R = wire::Refusal;
  switch (r) {
    case R::OK:  // not a refusal: the caller admits or refuses by ingress()
    case R::SHORT_FRAME:
    case R::NOT_IPV4:
    case R::NOT_UDP:
    case R::WRONG_PORT: return {Drop::NOT_FOR_US, false};
    // Broken below PRISM's header: the source address cannot be trusted.
    case R::IP_BAD_HEADER:
    case R::IP_BAD_LENGTH:
    case R::IP_BAD_CHECKSUM:
    case R::IP_FRAGMENT:
    case R::UDP_BAD_LENGTH:
    case R::UDP_BAD_CHECKSUM: return {Drop::MALFORMED, false};
    // PRISM traffic past the UDP checks, however broken: its source is as good as any packet's.
    case R::SHORT_HEADER:
    case R::BAD_MAGIC:
    case R::BAD_VERSION:
    case R::BAD_KIND:
    case R::BAD_DTYPE:
    case R::BAD_OUT_DTYPE:
    case R::BAD_POLICY:
    case R::BAD_ENCODING:
    case R::BAD_TRANSPORT:
    case R::BAD_EXCEPTIONS:
    case R::BAD_FLAGS:
    case R::BAD_GROUP:
    case R::BAD_TERMS:
    case R::BAD_COUNT:
    case R::PAYLOAD_LENGTH:
    case R::BAD_FRAGMENT:
    case R::BAD_PARTIAL:
    case R::BAD_NACK_REASON:
    case R::BAD_STATUS:
    case R::BAD_SIDEBAND: return {Drop::MALFORMED, true};
    case R::kCount: break;
  }
  return {Drop::MALFORMED, false};
}

namespace {

// A refusal of a pool message: answered to its source when it came in on a
// port some pool lists (`answerable`), never when the kind is no pool
// message's (a CONTRIB to a pooled job is refused as a spoof is).
Verdict refuse_pooled(const Directory& dir, Verdict v, Drop d, uint16_t in_port, bool answerable) {
  v.drop = d;
  v.to_source = answerable && dir.pool_port(in_port);
  v.in_port = in_port;
  return v;
}

// ALLOC: a source in the pool's ranges, on a port it lists, for a group it
// admits. Whether an id is free is the pool's shard's to say.
Verdict alloc_verdict(const Directory& dir, const wire::Parsed& p, uint16_t in_port) {
  Verdict v;
  v.pool = dir.pool(p.h.job);
  if (!dir.usable_source(p.src)) return refuse_pooled(dir, v, Drop::UNKNOWN_SOURCE, in_port, false);
  if (!v.pool) return refuse_pooled(dir, v, Drop::UNKNOWN_JOB, in_port, true);
  if (!v.pool->admits(p.src, in_port)) return refuse_pooled(dir, v, Drop::OUT_OF_POOL, in_port, true);
  if (p.h.group > v.pool->cfg().max_group) return refuse_pooled(dir, v, Drop::GROUP_TOO_LARGE, in_port, true);
  if (p.no_checksum && !v.pool->cfg().udp_checksum_optional)
    return refuse_pooled(dir, v, Drop::NO_CHECKSUM, in_port, true);
  v.in_port = in_port;
  return v;
}

// JOIN, LEAVE and CONTRIB to a pooled job: by its state and its bindings.
// A rank bound to this very source is a member like a declared one.
Verdict pooled_verdict(const Directory& dir, const Job& job, const wire::Parsed& p, uint16_t in_port) {
  Verdict v;
  v.job = &job;
  v.pool = job.pooled->pool;
  const bool pool_msg = p.h.kind == wire::Kind::JOIN || p.h.kind == wire::Kind::LEAVE;
  const auto refuse = [&](Drop d) { return refuse_pooled(dir, v, d, in_port, pool_msg); };
  if (p.h.kind == wire::Kind::PARTIAL) return refuse(Drop::UNKNOWN_SOURCE);  // a pooled job has no children
  // Never bound, never answered: a broadcast or multicast source, or the switch's own (F8).
  if (!dir.usable_source(p.src)) return refuse_pooled(dir, v, Drop::UNKNOWN_SOURCE, in_port, false);
  // The generation first: a release unbinds every rank before it bumps the
  // generation, so a binding read after it is this generation's or newer.
  const uint32_t word = job.pooled->word.load(std::memory_order_acquire);
  v.pool_gen = word >> 2;
  const PoolJobState st = PoolJobState(word & 3);
  if (!v.pool->admits(p.src, in_port)) return refuse(Drop::OUT_OF_POOL);
  if (st == PoolJobState::FREE && p.h.kind != wire::Kind::LEAVE)
    return refuse(pool_msg ? Drop::UNKNOWN_JOB : Drop::UNKNOWN_SOURCE);
  if (p.no_checksum && !job.cfg->udp_checksum_optional) return refuse(Drop::NO_CHECKSUM);
  const uint16_t R = job.group();
  if (p.h.kind == wire::Kind::JOIN && (p.h.group != R || p.h.sender >= R)) return refuse(Drop::MALFORMED);
  const auto b =
      st == PoolJobState::FREE ? PooledJob::Binding::UNBOUND : job.pooled->binding(job, p.h.sender, p.src, in_port);
  if (b == PooledJob::Binding::ANOTHER) return refuse(Drop::RANK_TAKEN);
  v.in_port = in_port;
  if (b == PooledJob::Binding::THIS_SOURCE) {
    v.member = &job.members[p.h.sender];
    return v;
  }
  // Not bound: a JOIN binds it (at the job's shard), a LEAVE is answered
  // there as already done; a CONTRIB (or QUERY) is no member's.
  if (p.h.kind == wire::Kind::CONTRIB || p.h.kind == wire::Kind::QUERY) return refuse(Drop::UNKNOWN_SOURCE);
  v.bind = p.h.kind == wire::Kind::JOIN;
  return v;
}

}  // namespace

Verdict ingress(const Directory& dir, wire::Refusal refusal, const wire::Parsed& p, uint16_t in_port) {
  Verdict v;
  // Who may be told about a refusal is looked up only when there is one: an
  // admitted packet costs no such lookup.
  const auto refuse = [&](Drop d, bool answerable = true) {
    v.drop = d;
    v.member = answerable ? dir.registered(p.src, in_port) : nullptr;
    return v;
  };
  // A promiscuous port also sees frames for other stations (another switch,
  // unicast flooded by a bridge): only those addressed to this port, its MAC
  // and IP, are the switch's to take or answer (SECURITY-REVIEW F19).
  if ((refusal == wire::Refusal::OK || classify(refusal).source_checked) && !dir.addressed_to(p.dst, in_port))
    return refuse(Drop::NOT_FOR_US, false);
  if (refusal != wire::Refusal::OK) {
    const RefusalClass c = classify(refusal);
    const bool pool_msg = p.h.kind == wire::Kind::ALLOC ||
                          ((p.h.kind == wire::Kind::JOIN || p.h.kind == wire::Kind::LEAVE) && dir.pool_of(p.h.job));
    if (c.source_checked && pool_msg) {  // a broken pool message: told at its source
      v.pool = p.h.kind == wire::Kind::ALLOC ? dir.pool(p.h.job) : dir.pool_of(p.h.job);
      return refuse_pooled(dir, v, c.drop, in_port, dir.usable_source(p.src));
    }
    return refuse(c.drop, c.source_checked);
  }
  // What a switch sends, never answered; of it a switch takes only OP_ABANDONED from the
  // switch above or below it in a tree (a chunk that switch gave up), checked as its
  // RESULT or PARTIAL would be.
  const bool peer_abandoned = p.h.kind == wire::Kind::NACK && p.h.status == uint8_t(wire::NackReason::OP_ABANDONED) &&
                              (dir.is_parent(p.src) || (dir.job(p.h.job) && !dir.job(p.h.job)->children.empty()));
  if ((p.h.kind == wire::Kind::NACK && !peer_abandoned) || p.h.kind == wire::Kind::ALLOCATED ||
      p.h.kind == wire::Kind::LEFT || p.h.kind == wire::Kind::STATUS)
    return refuse(Drop::WRONG_KIND, false);
  if (p.h.kind == wire::Kind::ALLOC) return alloc_verdict(dir, p, in_port);
  v.job = dir.job(p.h.job);
  if (p.h.kind == wire::Kind::RESULT || p.h.kind == wire::Kind::JOINED ||
      (peer_abandoned && dir.is_parent(p.src))) {  // from the parent only, never answered
    if (!dir.is_parent(p.src)) return refuse(Drop::UNKNOWN_SOURCE, false);
    // The parent is bound to its switch port as a member is: its address
    // arriving anywhere else is a spoof (SECURITY-REVIEW F3).
    if (!wire::same_mac(dir.config().parent->addr.mac, p.src.mac) || in_port != dir.config().parent->port)
      return refuse(Drop::SPOOFED, false);
    if (!v.job) return refuse(Drop::UNKNOWN_JOB, false);
    v.from_parent = true;
    return v;
  }
  // An unknown job or sender id is news only to a registered source; from
  // anywhere else it is an unknown source.
  if (!v.job) return dir.registered(p.src, in_port) ? refuse(Drop::UNKNOWN_JOB) : refuse(Drop::UNKNOWN_SOURCE, false);
  if (v.job->pooled) return pooled_verdict(dir, *v.job, p, in_port);
  if (p.h.kind == wire::Kind::LEAVE) return refuse(Drop::MALFORMED);  // a declared job is never left
  const Member* m = nullptr;
  if (p.h.kind == wire::Kind::JOIN) {
    // From the rank itself, or from a child forwarding one of its ranks' JOINs.
    if (p.h.sender < v.job->member_of_rank.size() && v.job->member_of_rank[p.h.sender] >= 0)
      m = &v.job->members[size_t(v.job->member_of_rank[p.h.sender])];
    for (const Member& c : v.job->children)
      if (c.addr.ip == p.src.ip && c.addr.port == p.src.port) m = &c;
  } else if (p.h.kind == wire::Kind::CONTRIB || p.h.kind == wire::Kind::QUERY) {  // a QUERY is its CONTRIB's
    if (p.h.sender < v.job->member_of_rank.size() && v.job->member_of_rank[p.h.sender] >= 0)
      m = &v.job->members[size_t(v.job->member_of_rank[p.h.sender])];
  } else {  // PARTIAL, or a child's OP_ABANDONED
    if (p.h.sender < v.job->child_of_id.size() && v.job->child_of_id[p.h.sender] >= 0)
      m = &v.job->children[size_t(v.job->child_of_id[p.h.sender])];
  }
  if (!m) return dir.registered(p.src, in_port) ? refuse(Drop::NOT_A_MEMBER) : refuse(Drop::UNKNOWN_SOURCE, false);
  // The claimed identity's registered address, exactly, on its own port.
  // Anything else is a spoof, and a spoof is never answered: not even a
  // registered source claiming another's id (it would learn nothing it
  // needs, and the switch would answer traffic it cannot attribute).
  if (m->addr.ip != p.src.ip || m->addr.port != p.src.port || !wire::same_mac(m->addr.mac, p.src.mac) ||
      m->port != in_port)
    return refuse(dir.claims_registered_address(p.src) ? Drop::SPOOFED : Drop::UNKNOWN_SOURCE, false);
  // No UDP checksum (0): only for a job that accepts it; the link's own CRC is then all the integrity there is.
  if (p.no_checksum && !v.job->cfg->udp_checksum_optional) return refuse(Drop::NO_CHECKSUM);
  v.member = m;
  return v;
}

Out nack_to_source(const Directory& dir, const wire::Header& echoed, wire::NackReason why, const wire::Endpoint& src,
                   uint16_t port) {
  Member to{echoed.job, echoed.sender, port, src, 1, false};
  Out o = nack(dir, echoed, why, to);
  o.h.sender = echoed.sender;  // the rank refused: a host running several tells which
  o.h.group = echoed.group;
  o.h.chunk = echoed.chunk;
  o.h.dtype = o.h.out_dtype = Format(0);  // a pool message has no descriptor
  o.h.policy = Policy(0);
  o.h.encoding = wire::Encoding(0);
  o.h.transport = PartialTransport(0);
  o.h.exceptions = Exceptions(0);
  return o;
}

Out nack(const Directory& dir, const wire::Parsed& p, wire::NackReason why, const Member& to) {
  return nack(dir, p.h, why, to);
}

Out nack(const Directory& dir, const wire::Header& echoed, wire::NackReason why, const Member& to) {
  Out o;
  o.port = to.port;
  o.src = dir.self(to.port);
  o.dst = to.addr;
  o.h = echoed;  // the refused packet's job, op, chunk and codes
  o.h.magic = wire::kMagic;
  o.h.version = wire::kVersion;
  o.h.kind = wire::Kind::NACK;
  o.h.sender = dir.config().id;
  o.h.terms = 0;
  o.h.count = 0;
  o.h.flags = 0;
  o.h.status = uint8_t(why);
  return o;
}

bool answer(const Directory& dir, const Verdict& v, const wire::Parsed& p, Sink& out, NackLimiter* limit,
            uint64_t now_ns) {
  const auto why = v.nack();
  if (!why) return false;
  if (!v.to_source) {
    out.send(nack(dir, p, *why, *v.member));
    return true;
  }
  if (limit && !limit->allow(p.src, now_ns)) {
    if (v.pool) v.pool->counters().nacks_limited.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  out.send(nack_to_source(dir, p.h, *why, p.src, v.in_port));
  return true;
}

}  // namespace prism::sw
