#include "switch/session.hpp"

#include <memory>

#include "proto/fragment.hpp"
#include "proto/steer.hpp"
#include "switch/key_table.hpp"

namespace prism::sw {
namespace {

bool serial_after(uint32_t a, uint32_t b) { return int32_t(a - b) > 0; }

// A session's first op is base + r, r uniform in [0, 2^24) and drawn afresh for each session (getrandom):
// an off-path host that knows how many ops a job ran still has one chance in 2^24 per guess of the op
// its forged CONTRIB must name. Op numbers are compared in serial order (RFC 1982): x is after y when it
// is less than 2^31 ahead. r < 2^31 keeps the first op after base, so after every op number the tree
// remembers; and r < 2^24 leaves 2^31 - 2^24 ops of the session before any of its op numbers would
// wrap round to look older than an op the switch remembers from before it.
uint32_t first_op_offset() { return uint32_t(fresh_seed() & (Sessions::kFirstOpSpread - 1)); }

}  // namespace

Sessions::Sessions(const Directory& dir, size_t mtu) : dir_(dir), state_(dir.jobs()), max_bitmap_(wire::max_body(mtu)) {
  for (const Job* j : dir.all_jobs()) {  // a pooled job: room for max_group ranks
    state_[j->index].nonce.assign(j->cfg->group, 0);
    state_[j->index].via_child.assign(j->cfg->group, -1);
    state_[j->index].heard.assign(j->cfg->group, 0);
  }
}

void Sessions::reset(const Job& j) {
  State& st = state_[j.index];
  std::fill(st.nonce.begin(), st.nonce.end(), 0);
  std::fill(st.via_child.begin(), st.via_child.end(), -1);
  st.joined = 0;
  st.complete = false;
  st.hinted = false;
  st.bitmap.reset();
}

void Sessions::forget(const Job& j, uint16_t rank) {
  State& st = state_[j.index];
  if (rank >= st.nonce.size() || st.nonce[rank] == 0) return;
  st.nonce[rank] = 0;
  --st.joined;
  st.complete = false;
  st.bitmap.reset();
}

// JOINED to `rank`: to its member entry, or to the child it joined through.
// Its bitmap is the state's shared one, built here when there is none yet;
// none at all when ceil(R / 8) bytes exceed a frame's body (R above 11520 at
// MTU 1500): a receiver takes a JOINED without one.
void Sessions::answer(const Job& j, State& st, uint16_t rank, Sink& out) {
  const Member* to = st.via_child[rank] >= 0       ? &j.children[size_t(st.via_child[rank])]
                     : j.member_of_rank[rank] >= 0 ? &j.members[size_t(j.member_of_rank[rank])]
                                                   : nullptr;
  if (!to) return;
  Out o;
  o.port = to->port;
  o.src = dir_.self(to->port);
  o.dst = to->addr;
  o.h = wire::session_header(wire::Kind::JOINED, j.cfg->id, j.group());
  o.h.op = st.nonce[rank];
  o.h.chunk = st.complete ? st.first_op : 0;
  o.h.sender = rank;
  o.h.terms = uint16_t(st.joined);
  o.h.status = st.complete ? wire::jstatus::COMPLETE : 0;
  const size_t bytes = wire::abandoned_bitmap_bytes(j.group());
  if (bytes <= max_bitmap_) {
    if (!st.bitmap || st.bitmap->size() != bytes) {  // a pooled job's R is its tenant's
      auto body = std::make_shared<std::vector<uint8_t>>(bytes);
      for (uint32_t r = 0; r < j.group(); ++r)
        if (st.nonce[r]) (*body)[r / 8] |= uint8_t(1u << (r % 8));
      st.bitmap = std::move(body);
    }
    o.body = st.bitmap;
  }
  out.send(std::move(o));
}

bool Sessions::on_join(const wire::Parsed& p, const Member& from, Sink& out, uint64_t now_ns) {
  const Job& j = *dir_.job(p.h.job);
  const uint16_t rank = p.h.sender;
  const uint32_t nonce = p.h.op;
  const uint16_t group = j.group();
  if (nonce == 0 || rank >= group || p.h.group != group) return false;
  const std::optional<uint32_t> fresh = dir_.first_fresh_op(j);
  if (dir_.config().role == Role::LEAF) {  // the root keeps the session: tell it what is fresh here
    const ParentConfig& parent = *dir_.config().parent;
    Out o;
    o.port = parent.port;
    o.src = dir_.self(parent.port);
    o.dst = parent.addr;
    o.h = p.h;
    o.dst.port = wire::shard_port(parent.addr.port, wire::shard_of(o.h, parent.shards));  // the session's shard
    if (fresh && serial_after(*fresh, o.h.chunk)) o.h.chunk = *fresh;
    out.send(std::move(o));
    return true;
  }
  State& st = state_[j.index];
  if (st.nonce[rank] != nonce) {
    if (st.nonce[rank] != 0) {  // this rank restarted: a new session
      std::fill(st.nonce.begin(), st.nonce.end(), 0);
      st.joined = 0;
      st.complete = false;
      st.hinted = false;
    }
    st.nonce[rank] = nonce;
    ++st.joined;
    st.bitmap.reset();
  }
  st.heard[rank] = now_ns;
  // Not complete yet: a JOIN no longer repeated is no rank's that is still joining.
  if (!st.complete && st.joined == group)
    for (uint16_t r = 0; r < group; ++r)
      if (st.nonce[r] && st.heard[r] + kJoinFreshNs < now_ns) forget(j, r);
  st.via_child[rank] = from.child ? int32_t(&from - j.children.data()) : -1;
  if (from.child && p.h.chunk && (!st.hinted || serial_after(p.h.chunk, st.hint))) {
    st.hint = p.h.chunk;
    st.hinted = true;
  }
  if (st.complete || st.joined < group) return answer(j, st, rank, out), true;
  // The last rank joined: the session starts past every op number any switch of the tree remembers
  // (base), at a random distance past it, so that no one off the path can tell its op numbers (review F4).
  st.complete = true;
  uint32_t base = fresh.value_or(0);
  if (st.hinted && (!fresh || serial_after(st.hint, base))) base = st.hint;
  st.first_op = base + first_op_offset();
  for (uint16_t r = 0; r < group; ++r) answer(j, st, r, out);
  return true;
}

bool Sessions::on_joined(const wire::Parsed& p, Sink& out) {
  const Job& j = *dir_.job(p.h.job);
  const uint16_t rank = p.h.sender;
  if (rank >= j.member_of_rank.size() || j.member_of_rank[rank] < 0) return false;
  const Member& m = j.members[size_t(j.member_of_rank[rank])];
  Out o;
  o.port = m.port;
  o.src = dir_.self(m.port);
  o.dst = m.addr;
  o.h = p.h;
  if (p.payload_len) o.body = std::make_shared<const std::vector<uint8_t>>(p.payload, p.payload + p.payload_len);
  out.send(std::move(o));
  return true;
}

}  // namespace prism::sw
