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

Verdict ingress(const Directory& dir, wire::Refusal refusal, const wire::Parsed& p, uint16_t in_port) {
  Verdict v;
  // Who may be told about a refusal is looked up only when there is one: an
  // admitted packet costs no such lookup.
  const auto refuse = [&](Drop d, bool answerable = true) {
    v.drop = d;
    v.member = answerable ? dir.registered(p.src, in_port) : nullptr;
    return v;
  };
  if (refusal != wire::Refusal::OK) {
    const RefusalClass c = classify(refusal);
    return refuse(c.drop, c.source_checked);
  }
  if (p.h.kind == wire::Kind::NACK) return refuse(Drop::WRONG_KIND, false);  // never answer a NACK
  v.job = dir.job(p.h.job);
  if (p.h.kind == wire::Kind::RESULT || p.h.kind == wire::Kind::JOINED) {  // from the parent only, never answered
    if (!dir.is_parent(p.src) || !wire::same_mac(dir.config().parent->addr.mac, p.src.mac))
      return refuse(Drop::UNKNOWN_SOURCE, false);
    if (!v.job) return refuse(Drop::UNKNOWN_JOB, false);
    v.from_parent = true;
    return v;
  }
  // An unknown job or sender id is news only to a registered source; from
  // anywhere else it is an unknown source.
  if (!v.job) return dir.registered(p.src, in_port) ? refuse(Drop::UNKNOWN_JOB) : refuse(Drop::UNKNOWN_SOURCE, false);
  const Member* m = nullptr;
  if (p.h.kind == wire::Kind::JOIN) {
    // From the rank itself, or from a child forwarding one of its ranks' JOINs.
    if (p.h.sender < v.job->member_of_rank.size() && v.job->member_of_rank[p.h.sender] >= 0)
      m = &v.job->members[size_t(v.job->member_of_rank[p.h.sender])];
    for (const Member& c : v.job->children)
      if (c.addr.ip == p.src.ip && c.addr.port == p.src.port) m = &c;
  } else if (p.h.kind == wire::Kind::CONTRIB) {
    if (p.h.sender < v.job->member_of_rank.size() && v.job->member_of_rank[p.h.sender] >= 0)
      m = &v.job->members[size_t(v.job->member_of_rank[p.h.sender])];
  } else {  // PARTIAL
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

bool answer(const Directory& dir, const Verdict& v, const wire::Parsed& p, Sink& out) {
  const auto why = v.nack();
  if (!why) return false;
  out.send(nack(dir, p, *why, *v.member));
  return true;
}

}  // namespace prism::sw
