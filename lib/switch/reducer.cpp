#include "switch/reducer.hpp"

#include <algorithm>
#include <cstring>

namespace prism::sw {
namespace {

bool test_set(std::vector<uint64_t>& bits, uint32_t i) {
  uint64_t& w = bits[i >> 6];
  const uint64_t m = uint64_t(1) << (i & 63);
  const bool was = w & m;
  w |= m;
  return was;
}

uint8_t side_from_status(uint8_t st) {
  return uint8_t(((st & flag::OVERFLOW) ? side::OVERFLOW : 0) | ((st & flag::INVALID) ? side::INVALID : 0) |
                 ((st & flag::NAN_INPUT) ? side::NAN_INPUT : 0));
}

}  // namespace

struct Reducer::Slot {
  int32_t self = -1;  // index in slots_
  SlotKey key{};
  State state = State::FREE;
  uint32_t gen = 0;                // bumped each time the slot opens: tells a reuse from the op before
  uint32_t pool_gen = 0;           // a pooled job's generation when it opened (switch/pool.hpp)
  int32_t older = -1, newer = -1;  // neighbours in the open-order list (or the peer list)
  bool waits_on_peer = false;      // on the peer list: only another switch can complete it
  const Job* job = nullptr;
  wire::Header desc;  // the op's descriptor, fixed by the first packet
  std::unique_ptr<Accumulator> acc;
  OpDesc acc_desc;  // the accumulator's: acc_desc.lanes is the chunk's element count
  std::vector<uint64_t> ranks_seen, children_seen;
  // Kulisch fragments of each child's partial, staged until all its lanes are in.
  std::vector<std::vector<LaneExact>> staged;
  std::vector<std::vector<uint64_t>> staged_seen;
  std::vector<uint32_t> staged_count;
  uint32_t terms = 0, expected = 0;
  uint64_t t_open = 0, t_partial = 0;
  uint32_t lanes() const { return acc_desc.lanes; }
  // Rank ids past the group the slot opened with are nobody's here.
  bool has_rank(uint16_t r) const { return r < desc.group && (ranks_seen[r >> 6] & (uint64_t(1) << (r & 63))); }
  // Opens the slot for op chunk `k` of generation `gen` with descriptor `h`
  // (its accumulator `d`), keeping the memory of the op before it where it can.
  void start(const SlotKey& k, const Job& j, uint32_t job_gen, const wire::Header& h, const OpDesc& d, uint64_t now_ns);
};

void Reducer::Slot::start(const SlotKey& k, const Job& j, uint32_t job_gen, const wire::Header& h, const OpDesc& d,
                          uint64_t now_ns) {
  // What may throw first: the slot stays FREE, its old accumulator kept.
  const bool same = acc && acc_desc.dtype == d.dtype && acc_desc.out == d.out && acc_desc.policy == d.policy &&
                    acc_desc.exceptions == d.exceptions && acc_desc.group == d.group && acc_desc.lanes == d.lanes;
  if (same)
    acc->reset();
  else
    acc = make_accumulator(d);
  acc_desc = d;
  key = k;
  ++gen;
  job = &j;
  desc = h;
  ranks_seen.assign((size_t(h.group) + 63) / 64, 0);  // (open() refused a group other than the job's)
  children_seen.assign((j.child_of_id.size() + 63) / 64, 0);
  for (auto& st : staged) st.clear();
  staged.resize(j.children.size());
  staged_seen.resize(j.children.size());
  for (auto& ss : staged_seen) ss.clear();
  staged_count.assign(j.children.size(), 0);
  terms = 0;
  expected = uint32_t(j.local_members().size());  // a pooled job: its R bound ranks
  for (const auto& c : j.children) expected += c.terms;
  pool_gen = job_gen;
  t_open = now_ns;
  state = State::OPEN;
  waits_on_peer = false;
}

Reducer::Reducer(const Directory& dir, uint32_t slots, size_t mtu, uint32_t shard, size_t result_mtu,
                 std::optional<LogSize> log)
    : dir_(dir),
      index_(slots),
      log_(log ? log->bytes : size_t(dir.config().retention_mib) << 20, log ? log->tombstones : kTombstones),
      sessions_(dir, mtu),
      pool_(dir, shard, stats_),
      mtu_(mtu),
      shard_(shard),
      result_mtu_(result_mtu) {
  slots_.reserve(slots);
  for (uint32_t i = 0; i < slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->self = int32_t(i);
  }
  for (int32_t i = int32_t(slots) - 1; i >= 0; --i) free_.push_back(i);
  waiting_.reserve(slots);
  credit_.resize(dir.member_entries());
  for (const Job* j : dir.all_jobs()) jobs_[j->cfg->id];
  // Per-job statistics by the job's dense index, so the hot path does not hash its id.
  stats_of_.assign(dir.jobs(), nullptr);
  for (auto& [id, js] : jobs_)
    if (const Job* j = dir.job(id)) stats_of_[j->index] = &js;
}

Reducer::~Reducer() = default;

size_t Reducer::bytes_per_slot_estimate() const {
  size_t b = sizeof(Slot);
  for (const auto& s : slots_)
    if (s->acc) return b + s->acc->bytes_per_lane() * s->lanes() + (s->ranks_seen.size() + s->children_seen.size()) * 8;
  return b;
}

std::vector<Reducer::Open> Reducer::open_slots() const {
  std::vector<Open> v;
  for (const auto& s : slots_)
    if (s->state != State::FREE) v.push_back({s->key, s->terms, s->expected});
  return v;
}

Reducer::Slot* Reducer::find(const SlotKey& k) {
  int32_t& hint = cache_[cache_at(k)];
  if (hint >= 0) {
    Slot* s = slots_[size_t(hint)].get();
    if (s->state != State::FREE && s->key == k) return s;
  }
  log_.prefetch(k);  // a key without a live slot is looked up in the log next
  const int32_t i = int32_t(index_.get(k)) - 1;
  if (i < 0) return nullptr;
  hint = i;
  return slots_[size_t(i)].get();
}

// A pooled id's slots and retained results belong to the tenant that made
// them: for a packet of generation `gen`, a slot of an earlier generation is
// given up now (its tenant left; the sweep would have done it within 100 ms)
// and is not found, and what the log remembers of another generation is
// unknown to it (SECURITY-REVIEW F1, F2). A declared job is always
// generation 0.
Reducer::Slot* Reducer::find(const SlotKey& k, uint32_t gen) {
  Slot* s = find(k);
  if (!s || s->pool_gen == gen) return s;
  give_up(*s);
  return nullptr;
}

ResultLog::Memory Reducer::recall(const SlotKey& k, uint32_t gen) const {
  const ResultLog::Memory m = log_.recall(k);
  return m.gen == gen ? m : ResultLog::Memory{ResultLog::Known::NOTHING, nullptr, 0};
}

Reducer::Credit& Reducer::credit(const Verdict& v, const Member& m) {
  Credit& c = credit_[v.job->entry_of(m)];
  if (c.gen != v.pool_gen) c = Credit{0, v.pool_gen, {kReplyBurst, now_ns_}, {kReplyBurst, now_ns_}};
  return c;
}

bool Reducer::reply_token(const Verdict& v, const Member& m, bool nack) {
  Credit::Bucket& b = nack ? credit(v, m).nacks : credit(v, m).replies;
  if (b.tokens < kReplyBurst && now_ns_ > b.refilled_ns) {  // the trickle, up to kReplyBurst
    const uint64_t add = (now_ns_ - b.refilled_ns) / kReplyRefillNs;
    if (add >= kReplyBurst - b.tokens) {
      b.tokens = kReplyBurst;
      b.refilled_ns = now_ns_;
    } else {
      b.tokens += uint32_t(add);
      b.refilled_ns += add * kReplyRefillNs;
    }
  }
  if (b.tokens == 0) return false;
  if (b.tokens-- == kReplyBurst) b.refilled_ns = now_ns_;  // the trickle counts from the first token taken
  return true;
}

void Reducer::earn_reply() {
  Credit::Bucket& b = earned_->replies;
  if (b.tokens < kMaxReplies) ++b.tokens;
}

void Reducer::earn(const Verdict& v, const wire::Parsed& p) {
  Credit& c = credit(v, *v.member);
  earned_ = &c;
  const size_t bytes = wire::kFrameOverhead + p.payload_len + (p.sideband ? p.h.count : 0);
  c.bytes = uint32_t(std::min<size_t>(kMaxCredit, c.bytes + bytes));
}

bool Reducer::spend(const Verdict& v, size_t bytes) {
  Credit& c = credit(v, *v.member);
  if (c.bytes < bytes) return false;
  c.bytes -= uint32_t(bytes);
  return true;
}

void Reducer::refuse(Drop d, const wire::Parsed& p, const Verdict& v, const Member& from, Sink& out) {
  drop(d);
  if (const auto r = nack_for(d); r && reply_token(v, from, true)) {
    out.send(nack(dir_, p, *r, from));
    ++stats_.nacks_sent;
  }
}

Reducer::Slot* Reducer::open(const wire::Parsed& p, const Verdict& v, ResultLog::Known known, uint64_t now_ns,
                             Sink& out) {
  const wire::Header& h = p.h;
  const Job& job = *v.job;
  const Member& from = *v.member;
  const SlotKey key{h.job, h.op, h.chunk};
  const auto refused = [&](Drop d) {
    refuse(d, p, v, from, out);
    return nullptr;
  };
  switch (known) {
    case ResultLog::Known::NOTHING:
    case ResultLog::Known::RETAINED: break;  // (a retained result is answered before)
    case ResultLog::Known::EXPIRED:          // the op completed and its result is no longer retained
      return refused((h.flags & wire::hflag::RETRANSMIT) ? Drop::RESULT_EXPIRED : Drop::LATE);
    case ResultLog::Known::ABANDONED: return refused(Drop::ABANDONED);
  }
  if (h.group != job.group()) return refused(Drop::DESCRIPTOR_MISMATCH);
  if (!job.allows(h.dtype) || !job.allows(h.policy)) return refused(Drop::NOT_ALLOWED);
  OpDesc d;
  d.dtype = h.dtype;
  d.out = h.out_dtype;
  d.policy = h.policy;
  d.exceptions = h.exceptions;
  d.group = h.group;
  d.lanes = h.encoding == wire::Encoding::KULISCH ? p.chunk_lanes : h.count;
  // Not a valid op at all (e.g. float in, int out), or wider than this switch's accumulators.
  if (admission_error(d, kMaxWidth)) return refused(Drop::DESCRIPTOR_MISMATCH);
  // What the chunk will need, bounded before anything is taken (SECURITY-REVIEW F12, F13): its
  // RESULT, sideband included, in one frame of the ports it leaves through (at a leaf too: the
  // parent's RESULT comes back through it), and its accumulator within kMaxSlotBytes.
  const size_t result_body = size_t(d.lanes) * (info(d.out).bytes + 1);
  const size_t per_lane = d.policy == Policy::FP32_BINOMIAL && is_float(d.dtype) ? 4 * size_t(d.group) + 1 : 256;
  if (result_body > wire::max_body(result_mtu_) || per_lane * d.lanes > kMaxSlotBytes) return refused(Drop::TOO_LARGE);
  if (const auto w = exact_width_needed(d); w && *w > dir_.config().kulisch_width) return refused(Drop::TOO_NARROW);
  JobStats& js = *stats_of_[job.index];
  const int32_t idx = free_.empty() ? -1 : free_.back();
  if ((job.cfg->slot_quota && js.in_flight >= job.cfg->slot_quota) || idx < 0) {
    ++js.quota_refused;
    return refused(Drop::NO_FREE_SLOT);
  }
  Slot& s = *slots_[size_t(idx)];
  s.start(key, job, v.pool_gen, h, d, now_ns);  // may throw std::bad_alloc: then nothing changed but the slot's memory
  free_.pop_back();
  index_.put(key, uint32_t(idx) + 1);
  cache_[cache_at(key)] = idx;
  link_newest(s);  // the newest open slot: the end of the open-order list
  ++js.opened;
  ++js.in_flight;
  dir_.note_op(job, s.key.op, shard_);  // sessions start past every op opened
  ++stats_.slots_in_use;
  stats_.slots_high = std::max(stats_.slots_high, stats_.slots_in_use);
  return &s;
}

// Every allocation on these paths happens before the state it serves
// changes (a slot opens only once its accumulator and bitmaps are made; a
// fragment's staging is sized before it is written), so a failed one leaves
// the shard as it was: the packet is refused, and its registered sender told
// NO_FREE_SLOT (retry later) if even that can be said.
void Reducer::on_packet(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  now_ns_ = now_ns;
  const uint64_t accepted = stats_.accepted;
  try {
    take(p, v, now_ns, out);
  } catch (const std::bad_alloc&) {
    // Refused for want of memory, or accepted already (a contribution counted, its completion out
    // of memory: a repeat retries it), when the failure is counted but the packet is not dropped.
    if (stats_.accepted == accepted)
      drop(Drop::NO_MEMORY);
    else
      ++stats_.drops[size_t(Drop::NO_MEMORY)];
    try {
      if (v.member) {
        out.send(nack(dir_, p, wire::NackReason::NO_FREE_SLOT, *v.member));
        ++stats_.nacks_sent;
      }
    } catch (const std::bad_alloc&) {
    }
  }
}

void Reducer::tick(uint64_t now_ns, Sink& out) {
  now_ns_ = now_ns;
  try {
    expire(now_ns, out);
  } catch (const std::bad_alloc&) {
    ++stats_.drops[size_t(Drop::NO_MEMORY)];  // no packet's: the rest waits for the next tick
  }
}

void Reducer::take(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  ++stats_.packets;
  if (v.job && v.job->pooled && v.member) v.job->pooled->heard(now_ns);  // not idle
  switch (p.h.kind) {
    case wire::Kind::ALLOC:
      ++stats_.pool_packets;
      if (draining_) return drop(Drop::STOPPING);  // from no member: unanswered, its asker's timer tries again
      return pool_.on_alloc(p, v, now_ns, out);
    case wire::Kind::LEAVE: ++stats_.pool_packets; return pool_.on_leave(p, v, sessions_, out, now_ns);
    case wire::Kind::JOIN:
    case wire::Kind::JOINED: return on_session(p, v, now_ns, out);
    case wire::Kind::CONTRIB:
    case wire::Kind::PARTIAL:
    case wire::Kind::RESULT: break;
    case wire::Kind::QUERY: return on_query(p, v, out);
    case wire::Kind::NACK: return on_peer_abandoned(p, v, out);  // ingress admits only a peer's OP_ABANDONED
    case wire::Kind::ALLOCATED:
    case wire::Kind::LEFT:
    case wire::Kind::STATUS: return drop(Drop::WRONG_KIND);  // ingress admits none of these
  }
  const SlotKey key{p.h.job, p.h.op, p.h.chunk};
  // A pooled job's packet judged under a binding of a tenant that has left
  // since (ingress runs on another lcore): that binding is no member now.
  const uint32_t gen = v.from_parent ? generation(*v.job) : v.pool_gen;
  if (v.job->pooled && gen != v.job->pooled->generation()) return drop(Drop::UNKNOWN_SOURCE);
  if (!v.from_parent) earn(v, p);
  Slot* s = find(key, gen);
  if (v.from_parent) {
    ++stats_.parent_results;
    if (s && s->state == State::WAIT_PARENT) return forward_parent_result(*s, p, now_ns, out);
    return drop(!s && recall(key, gen).record ? Drop::DUPLICATE : Drop::STALE_RESULT);
  }
  if (p.h.kind == wire::Kind::CONTRIB)
    ++stats_.contribs;
  else
    ++stats_.partials;
  if (!s) {
    const ResultLog::Memory m = recall(key, gen);
    if (m.record) return repeat(*m.record, p, v, out);
    if (draining_ && m.known == ResultLog::Known::NOTHING && !before_drain(*v.job, p.h.op))
      return refuse(Drop::STOPPING, p, v, *v.member, out);
    s = open(p, v, m.known, now_ns, out);
    if (!s) return;
  }
  if (p.h.kind == wire::Kind::CONTRIB)
    contribute(*s, p, v, now_ns, out);
  else
    merge_partial(*s, p, v, now_ns, out);
}

// JOIN and JOINED: the job's session (switch/session.hpp), never a slot. A
// pooled job's JOIN binds its rank first (switch/pool_shard.hpp).
void Reducer::on_session(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  ++stats_.session_packets;
  if (draining_ && p.h.kind == wire::Kind::JOIN) {  // no new session while stopping
    if (v.member) return refuse(Drop::STOPPING, p, v, *v.member, out);
    return drop(Drop::STOPPING);  // a pooled rank not bound yet: its timer tries again
  }
  if (p.h.kind == wire::Kind::JOIN && v.job->pooled) {
    const Member* m = pool_.join(p, v, out, now_ns);
    if (!m) return;
    if (!sessions_.on_join(p, *m, out, now_ns)) return refuse(Drop::MALFORMED, p, v, *m, out);
    accept();
    return pool_.joined(*v.job, sessions_.complete(*v.job));
  }
  const bool ok =
      p.h.kind == wire::Kind::JOIN ? sessions_.on_join(p, *v.member, out, now_ns) : sessions_.on_joined(p, out);
  if (ok) return accept();
  if (v.member) return refuse(Drop::MALFORMED, p, v, *v.member, out);
  drop(Drop::MALFORMED);
}

void Reducer::contribute(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const wire::Header& h = p.h;
  const Member& m = *v.member;
  // A leaf waiting for its parent has the contribution already (it sent its PARTIAL).
  if (s.state != State::OPEN) return drop(Drop::DUPLICATE);
  if (!wire::same_descriptor(s.desc, h) || !wire::same_extent(s.desc, h) || h.count != s.lanes())
    return refuse(Drop::DESCRIPTOR_MISMATCH, p, v, m, out);
  if (s.terms == s.expected) return retry_completion(s, now_ns, out);
  if (m.id >= s.desc.group) return refuse(Drop::NOT_A_MEMBER, p, v, m, out);  // (the same generation's R: never)
  if (test_set(s.ranks_seen, m.id)) return drop(Drop::DUPLICATE);
  s.acc->add(p.payload, m.id);
  accept();
  earn_reply();
  stats_.elements += s.lanes();
  if (++s.terms == s.expected) complete(s, now_ns, out);
}

void Reducer::merge_partial(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const wire::Header& h = p.h;
  const Member& c = *v.member;
  if (s.state != State::OPEN) return drop(Drop::DUPLICATE);
  if (!wire::same_descriptor(s.desc, h) || !wire::same_extent(s.desc, h) || p.chunk_lanes != s.lanes() ||
      h.terms != c.terms)
    return refuse(Drop::DESCRIPTOR_MISMATCH, p, v, c, out);
  if (s.terms == s.expected) return retry_completion(s, now_ns, out);
  const uint32_t ci = uint32_t(s.job->child_of_id[c.id]);
  if (s.children_seen[c.id >> 6] & (uint64_t(1) << (c.id & 63))) return drop(Drop::DUPLICATE);
  const int unit = unit_exp(s.desc.dtype);
  if (h.encoding == wire::Encoding::OUT_DTYPE) {
    std::vector<LaneExact> lanes(s.lanes());
    if (lanes_from_elements(h.out_dtype, p.payload, h.count, unit, lanes.data()) != PartialError::None)
      return refuse(Drop::BAD_PARTIAL, p, v, c, out);
    if (p.sideband)
      for (uint32_t i = 0; i < s.lanes(); ++i) lanes[i].side |= side_from_status(p.sideband[i]);
    if (!s.acc->add_exact(lanes.data())) return refuse(Drop::BAD_PARTIAL, p, v, c, out);
  } else {  // Kulisch fragment: stage until every lane of the chunk is in
    auto& st = s.staged[ci];
    auto& seen = s.staged_seen[ci];
    if (st.empty()) {  // the bitmap first: staging is in use only once both are sized
      seen.assign((size_t(s.lanes()) + 63) / 64, 0);
      st.assign(s.lanes(), LaneExact{});
    }
    for (uint32_t i = p.first_lane; i < uint32_t(p.first_lane) + h.count; ++i)
      if (seen[i >> 6] & (uint64_t(1) << (i & 63))) return drop(Drop::DUPLICATE);  // a repeated fragment
    if (wire::decode_fragment(p, st.data()) != PartialError::None) return refuse(Drop::BAD_PARTIAL, p, v, c, out);
    for (uint32_t i = p.first_lane; i < uint32_t(p.first_lane) + h.count; ++i) test_set(seen, i);
    s.staged_count[ci] += h.count;
    if (s.staged_count[ci] < s.lanes()) return accept();
    const bool ok = s.acc->add_exact(st.data());
    st.clear();
    if (!ok) {
      s.staged_count[ci] = 0;
      return refuse(Drop::BAD_PARTIAL, p, v, c, out);
    }
  }
  test_set(s.children_seen, c.id);
  accept();
  earn_reply();
  stats_.elements += uint64_t(s.lanes()) * c.terms;
  s.terms += c.terms;
  if (s.terms == s.expected) complete(s, now_ns, out);
}

// A packet for a completed op whose result is retained: a RETRANSMIT means
// its sender lost the RESULT (send the very bytes again, to it only, with
// RETRANSMIT set); anything else is a repeat.
// It gets only what it asks for: a RETRANSMIT whose descriptor or count is
// not the retained RESULT's is refused as a mismatch (SECURITY-REVIEW F8).
void Reducer::repeat(const ResultLog::Record& r, const wire::Parsed& p, const Verdict& v, Sink& out) {
  if (!(p.h.flags & wire::hflag::RETRANSMIT)) return drop(Drop::DUPLICATE);
  if (!wire::same_descriptor(r.h, p.h) || !wire::same_extent(r.h, p.h) || p.chunk_lanes != r.h.count)
    return refuse(Drop::DESCRIPTOR_MISMATCH, p, v, *v.member, out);
  resend(r, v, out);
}

// The retained RESULT `r` again, to the admitted member only, RETRANSMIT set,
// within the member's resend budget.
void Reducer::resend(const ResultLog::Record& r, const Verdict& v, Sink& out) {
  if (!reply_token(v, *v.member)) return drop(Drop::OVER_BUDGET);
  if (!spend(v, wire::kFrameOverhead + r.len)) {
    ++credit(v, *v.member).replies.tokens;  // the token back: nothing was sent
    return drop(Drop::OVER_BUDGET);
  }
  accept();
  std::memcpy(out.result_buffer(r.len), r.body(), r.len);
  wire::Header h = r.h;
  h.flags |= wire::hflag::RETRANSMIT;
  out.send_result(h, r.len, {&v.job->dest_of(*v.member), 1});
  ++stats_.results_sent;
  ++stats_.resent;
}

// QUERY (PROTOCOL.md, Queries): does this shard hold the member's
// contribution to the chunk? By the chunk's state here: open (or, at a leaf,
// waiting for the parent's RESULT), a STATUS HELD or MISSING with the terms
// received and the bitmap of the members lacking; complete and retained, the
// RESULT again (as for a RETRANSMIT); let go, NACK RESULT_EXPIRED; abandoned,
// NACK OP_ABANDONED; never seen, STATUS MISSING with terms 0. It never opens
// a slot, never counts as a contribution and changes nothing. Cost: one slot
// lookup (and a log lookup without a slot), plus the bitmap's bytes.
void Reducer::on_query(const wire::Parsed& p, const Verdict& v, Sink& out) {
  ++stats_.queries;
  const Member& m = *v.member;
  const SlotKey key{p.h.job, p.h.op, p.h.chunk};
  earn(v, p);
  const auto status = [&](bool held, uint32_t terms, std::shared_ptr<std::vector<uint8_t>> bitmap) {
    if (!reply_token(v, m)) return drop(Drop::OVER_BUDGET);
    if (bitmap && !spend(v, bitmap->size())) {  // a bare STATUS (the QUERY's size) instead
      drop(Drop::OVER_BUDGET);
      bitmap = nullptr;
    } else {
      accept();
    }
    Out o;
    o.port = m.port;
    o.src = dir_.self(m.port);
    o.dst = m.addr;
    o.h = wire::status_header(p.h, dir_.config().id, held, uint16_t(terms));
    o.body = std::move(bitmap);
    out.send(std::move(o));
    ++stats_.statuses_sent;
  };
  if (v.job->pooled && v.pool_gen != v.job->pooled->generation()) return drop(Drop::UNKNOWN_SOURCE);
  if (const Slot* s = find(key, v.pool_gen)) {
    if (!wire::same_descriptor(s->desc, p.h)) return refuse(Drop::DESCRIPTOR_MISMATCH, p, v, m, out);
    return status(s->has_rank(m.id), s->terms, missing_bitmap(*s));
  }
  const ResultLog::Memory mem = recall(key, v.pool_gen);
  if (mem.record) {
    if (!wire::same_descriptor(mem.record->h, p.h)) return refuse(Drop::DESCRIPTOR_MISMATCH, p, v, m, out);
    return resend(*mem.record, v, out);
  }
  switch (mem.known) {
    case ResultLog::Known::EXPIRED: return refuse(Drop::RESULT_EXPIRED, p, v, m, out);
    case ResultLog::Known::ABANDONED: return refuse(Drop::ABANDONED, p, v, m, out);
    case ResultLog::Known::NOTHING:
    case ResultLog::Known::RETAINED: break;  // (a retained result was answered above)
  }
  status(false, 0, nullptr);
}

std::shared_ptr<std::vector<uint8_t>> Reducer::missing_bitmap(const Slot& s) const {
  const size_t bytes = wire::abandoned_bitmap_bytes(s.desc.group);
  if (bytes > wire::max_body(mtu_)) return nullptr;
  auto missing = std::make_shared<std::vector<uint8_t>>(bytes, 0);
  for (const Member& m : s.job->local_members())
    if (m.id < s.desc.group && !s.has_rank(m.id)) (*missing)[m.id >> 3] |= uint8_t(1u << (m.id & 7));
  return missing;
}

// A slot that has every contribution but is still open: its completion ran
// out of memory (nothing of it had changed). A repeat of any contribution
// tries it again.
void Reducer::retry_completion(Slot& s, uint64_t now_ns, Sink& out) {
  drop(Drop::DUPLICATE);
  complete(s, now_ns, out);
}

// Every contribution is in. A root finalizes the RESULT into the sink's
// buffer (the frame it is sent from); a leaf sends its PARTIAL and waits.
void Reducer::complete(Slot& s, uint64_t now_ns, Sink& out) {
  if (dir_.config().role == Role::LEAF) {
    send_partial(s, false, out);
    s.state = State::WAIT_PARENT;
    s.t_partial = now_ns;
    if (dir_.config().partial_retry_ms) waiting_.emplace_back(s.self, s.gen);
    return;
  }
  wire::Header h = s.desc;
  h.kind = wire::Kind::RESULT;
  h.sender = dir_.config().id;
  h.terms = s.desc.group;
  h.count = uint16_t(s.lanes());
  h.encoding = wire::Encoding::OUT_DTYPE;
  h.flags = uint8_t(s.desc.flags & wire::hflag::LAST_CHUNK);
  h.status = 0;
  const size_t elems = size_t(s.lanes()) * info(s.desc.out_dtype).bytes;
  uint8_t* body = out.result_buffer(elems + s.lanes());
  uint8_t* flags = body + elems;
  s.acc->finalize(body, flags);
  uint8_t status = 0;
  for (uint32_t i = 0; i < s.lanes(); ++i) status |= flags[i];
  h.status = status;
  if (status) h.flags |= wire::hflag::SIDEBAND;
  finish(s, h, body, status ? elems + s.lanes() : elems, now_ns, out);  // no sideband when no element has a flag
}

// The op has its RESULT (`h`, and `len` bytes of body in the sink's result
// buffer): its bytes go to the log before they go out (the buffer leaves
// with them), then to every member and child of the job; the slot is free.
// The slot is let go before the copies leave: should sending fail half way
// (no memory), the result is retained and a rank that lacks it asks again.
void Reducer::finish(Slot& s, const wire::Header& h, const uint8_t* body, size_t len, uint64_t now_ns, Sink& out) {
  ++stats_of_[s.job->index]->completed;
  retain(s, h, body, len, now_ns);
  release(s);
  const std::span<const Dest> to = s.job->dests();
  stats_.results_sent += to.size();
  out.send_result(h, len, to);
}

// Cost per op: one copy of the body (the RESULT's size) into the log, and
// when the log is full, one eviction (a table entry rewritten, a tombstone).
void Reducer::retain(const Slot& s, const wire::Header& h, const uint8_t* body, size_t len, uint64_t now_ns) {
  if (!log_.fits(len)) {  // no room at all (retention_mib 0): let go at once
    ++stats_of_[s.job->index]->expired;
    ++stats_.evicted_for_room;
    log_.tombstone(s.key, ResultLog::Known::EXPIRED, s.pool_gen);
    return;
  }
  while (!log_.has_room(len)) let_go_oldest(true);
  log_.push(s.key, s.job->index, h, body, len, now_ns, s.pool_gen);
  ++stats_.results_retained;
}

// The oldest retained result goes: after retention_ms, or early when the log
// needs its room. A retransmission for it is told RESULT_EXPIRED from now on.
void Reducer::let_go_oldest(bool for_room) {
  const ResultLog::Record& r = *log_.oldest();
  ++stats_of_[r.job_index]->expired;
  if (for_room) ++stats_.evicted_for_room;
  log_.pop_oldest();  // tombstones its key
  --stats_.results_retained;
}

void Reducer::send_partial(Slot& s, bool retransmit, Sink& out) {
  const ParentConfig& parent = *dir_.config().parent;
  wire::Header h = s.desc;
  h.kind = wire::Kind::PARTIAL;
  h.sender = dir_.config().id;
  h.terms = uint16_t(s.terms);
  h.status = 0;
  h.flags = uint8_t((s.desc.flags & wire::hflag::LAST_CHUNK) | (retransmit ? wire::hflag::RETRANSMIT : 0));
  auto emit = [&](const wire::Header& hh, std::shared_ptr<const std::vector<uint8_t>> body) {
    Out o;
    o.port = parent.port;
    o.src = dir_.self(parent.port);
    o.dst = parent.addr;  // at the parent's port for this chunk's shard (proto/steer.hpp)
    o.dst.port = wire::shard_port(parent.addr.port, wire::shard_of(hh, parent.shards));
    o.h = hh;
    o.body = std::move(body);
    out.send(std::move(o));
    ++stats_.partials_sent;
  };
  const bool fp32_policy = is_float(s.desc.dtype) && s.desc.policy != Policy::KULISCH_FIXED;
  const uint32_t osz = info(s.desc.out_dtype).bytes;
  std::vector<LaneExact> lanes;
  if (!fp32_policy && s.desc.transport != PartialTransport::ROUNDED) {
    lanes.resize(s.lanes());
    s.acc->state(lanes.data());
    auto body = std::make_shared<std::vector<uint8_t>>(size_t(s.lanes()) * osz);
    if (s.desc.transport == PartialTransport::AUTO &&
        lanes_fit_format(lanes.data(), s.lanes(), unit_exp(s.desc.dtype), s.desc.out_dtype, body->data())) {
      h.encoding = wire::Encoding::OUT_DTYPE;
      h.count = uint16_t(s.lanes());
      return emit(h, std::move(body));
    }
    for (auto& f : wire::kulisch_fragments(lanes.data(), s.lanes(), wire::max_body(mtu_))) {
      wire::Header fh = h;
      fh.encoding = wire::Encoding::KULISCH;
      fh.count = f.count;
      emit(fh, std::make_shared<const std::vector<uint8_t>>(std::move(f.body)));
    }
    return;
  }
  // ROUNDED (and every FP32-policy partial): the rounded sum, flags in a sideband.
  auto body = std::make_shared<std::vector<uint8_t>>(size_t(s.lanes()) * osz + s.lanes());
  uint8_t* flags = body->data() + size_t(s.lanes()) * osz;
  s.acc->finalize(body->data(), flags);
  uint8_t any = 0;
  for (uint32_t i = 0; i < s.lanes(); ++i) any |= flags[i];
  if (!any) body->resize(size_t(s.lanes()) * osz);
  h.encoding = wire::Encoding::OUT_DTYPE;
  h.count = uint16_t(s.lanes());
  if (any) h.flags |= wire::hflag::SIDEBAND;
  emit(h, std::move(body));
}

// A leaf passes its parent's RESULT on, from itself, with the parent's body
// (and sideband) unchanged.
void Reducer::forward_parent_result(Slot& s, const wire::Parsed& p, uint64_t now_ns, Sink& out) {
  if (!wire::same_descriptor(s.desc, p.h) || !wire::same_extent(s.desc, p.h) || p.h.count != s.lanes())
    return drop(Drop::DESCRIPTOR_MISMATCH);
  const size_t side = p.sideband ? p.h.count : 0;
  uint8_t* body = out.result_buffer(p.payload_len + side);
  std::memcpy(body, p.payload, p.payload_len);
  if (side) std::memcpy(body + p.payload_len, p.sideband, side);
  wire::Header h = p.h;
  h.sender = dir_.config().id;
  h.flags &= uint8_t(~wire::hflag::RETRANSMIT);
  accept();
  finish(s, h, body, p.payload_len + side, now_ns, out);
}

// A chunk open past op_timeout_ms cannot complete: every member of this
// switch whose contribution arrived is waiting for it, and is told (NACK
// OP_ABANDONED: the contributions that arrived in `terms`, the members that
// had not in a bitmap); members that never contributed are not. Its key is
// tombstoned, so a late packet for it is told too and counts nothing.
// The chunk is given up: by this switch (its op_timeout_ms or
// peer_timeout_ms), or because the switch above or below it gave it up
// (`told`, whose bitmap of missing ranks joins this switch's own).
// Every member of this switch that contributed is told, with the ranks known
// missing; so is every other switch of the tree the chunk involves, which
// would otherwise wait for it (PROTOCOL.md, "The switch stalls").
void Reducer::abandon(Slot& s, Sink& out, const Told& told) {
  const Job& job = *s.job;
  // A pooled job released since the slot opened has no members left to tell.
  if (job.pooled && job.pooled->generation() != s.pool_gen) return give_up(s);
  ++stats_of_[s.job->index]->timed_out;
  // Without the bitmap when it would not fit a frame (terms still counts).
  const std::shared_ptr<std::vector<uint8_t>> missing = missing_bitmap(s);
  if (missing && told.missing.size() == missing->size())
    for (size_t i = 0; i < missing->size(); ++i) (*missing)[i] |= told.missing[i];
  const auto tell = [&](const Member& m) {
    Out o = nack(dir_, s.desc, wire::NackReason::OP_ABANDONED, m);
    o.h.terms = uint16_t(s.terms);
    o.body = missing;
    out.send(std::move(o));
    ++stats_.nacks_sent;
  };
  for (const Member& m : job.local_members())
    if (s.has_rank(m.id)) tell(m);
  for (const Member& c : job.children)
    if (told.by_child != &c) tell(c);
  if (const auto& parent = dir_.config().parent; parent && !told.by_parent) {
    Out o = nack(dir_, s.desc, wire::NackReason::OP_ABANDONED,
                 Member{job.cfg->id, dir_.config().id, parent->port, parent->addr, 1, false});
    o.dst.port = wire::shard_port(parent->addr.port, wire::shard_of(s.desc, parent->shards));
    o.h.terms = uint16_t(s.terms);
    o.body = missing;
    out.send(std::move(o));
    ++stats_.nacks_sent;
  }
  log_.tombstone(s.key, ResultLog::Known::ABANDONED, s.pool_gen);
  release(s);
}

void Reducer::abandon(Slot& s, Sink& out) { abandon(s, out, Told{}); }

void Reducer::drain() {
  if (draining_) return;
  draining_ = true;
  drain_limit_.assign(dir_.all_jobs().size(), std::nullopt);
  for (const Job* j : dir_.all_jobs()) drain_limit_[j->index] = dir_.first_fresh_op(*j);
}

bool Reducer::before_drain(const Job& job, uint32_t op) const {
  const std::optional<uint32_t>& limit = drain_limit_[job.index];
  return limit && int32_t(op - *limit) < 0;  // serial order (RFC 1982), as sessions count
}

void Reducer::abandon_all(Sink& out) {
  while (oldest_open_ >= 0) abandon(*slots_[size_t(oldest_open_)], out);
  while (oldest_peer_ >= 0) abandon(*slots_[size_t(oldest_peer_)], out);
}

// Another switch of the tree gave a chunk up (NACK OP_ABANDONED from the
// parent, or from a child): so does this one, at once, if it holds it open.
void Reducer::on_peer_abandoned(const wire::Parsed& p, const Verdict& v, Sink& out) {
  const SlotKey key{p.h.job, p.h.op, p.h.chunk};
  Slot* s = find(key, generation(*v.job));
  if (!s) return drop(Drop::STALE_RESULT);  // done, given up already, or never opened here
  accept();
  abandon(*s, out, Told{v.from_parent, v.from_parent ? nullptr : v.member, {p.payload, p.payload_len}});
}

// The two lists of open slots, each in the order the slots opened: those
// this switch judges by op_timeout_ms, and those that wait only for another
// switch, judged by peer_timeout_ms (moved there, oldest first, when their
// op_timeout_ms passed: the peer list stays in opening order too).
void Reducer::link_newest(Slot& s) {
  int32_t& oldest = s.waits_on_peer ? oldest_peer_ : oldest_open_;
  int32_t& newest = s.waits_on_peer ? newest_peer_ : newest_open_;
  s.older = newest;
  s.newer = -1;
  (newest >= 0 ? slots_[size_t(newest)]->newer : oldest) = s.self;
  newest = s.self;
}

void Reducer::unlink(Slot& s) {
  int32_t& oldest = s.waits_on_peer ? oldest_peer_ : oldest_open_;
  int32_t& newest = s.waits_on_peer ? newest_peer_ : newest_open_;
  (s.older >= 0 ? slots_[size_t(s.older)]->newer : oldest) = s.newer;
  (s.newer >= 0 ? slots_[size_t(s.newer)]->older : newest) = s.older;
}

// Every contribution this switch's own members owe is in: what is missing is
// another switch's (a leaf's parent's RESULT, a root's child's PARTIAL).
bool Reducer::waits_only_on_peers(const Slot& s) const {
  if (s.state == State::WAIT_PARENT) return true;
  if (s.job->children.empty()) return false;
  for (const Member& m : s.job->local_members())
    if (!s.has_rank(m.id)) return false;
  return true;
}

void Reducer::release(Slot& s) {
  index_.erase(s.key);
  unlink(s);
  s.state = State::FREE;
  free_.push_back(s.self);
  --stats_of_[s.job->index]->in_flight;
  --stats_.slots_in_use;
}

// Open slots of pooled jobs released since they opened: nobody can complete
// them (their ranks are unbound), so they are given up now, silently, rather
// than after op_timeout_ms. Looked at every 100 ms; costs a walk of the open slots.
void Reducer::abandon_released() {
  for (const int32_t head : {oldest_open_, oldest_peer_})
    for (int32_t i = head; i >= 0;) {
      Slot& s = *slots_[size_t(i)];
      i = s.newer;
      if (s.job->pooled && s.job->pooled->generation() != s.pool_gen) give_up(s);
    }
}

void Reducer::give_up(Slot& s) {
  ++stats_of_[s.job->index]->timed_out;
  log_.tombstone(s.key, ResultLog::Known::ABANDONED, s.pool_gen);
  release(s);
}

void Reducer::expire(uint64_t now_ns, Sink& out) {
  pool_.tick(now_ns, sessions_);
  if (!dir_.pools().empty() && now_ns >= next_sweep_ns_) {
    next_sweep_ns_ = now_ns + 100 * 1000000ull;
    abandon_released();
  }
  const uint64_t keep = uint64_t(dir_.config().retention_ms) * 1000000;
  for (const ResultLog::Record* r = log_.oldest(); r && r->t_done + keep <= now_ns; r = log_.oldest())
    let_go_oldest(false);
  // A leaf whose parent's RESULT is late sends its PARTIAL again (the parent
  // answers a RETRANSMIT for a completed op with the RESULT).
  const uint64_t retry = uint64_t(dir_.config().partial_retry_ms) * 1000000;
  if (retry) {
    size_t kept = 0;
    for (const auto& [idx, gen] : waiting_) {
      Slot& s = *slots_[size_t(idx)];
      if (s.state != State::WAIT_PARENT || s.gen != gen) continue;  // done, or the slot holds another op now
      if (s.t_partial + retry <= now_ns) {
        send_partial(s, true, out);
        s.t_partial = now_ns;
        ++stats_.resent;
      }
      waiting_[kept++] = {idx, gen};
    }
    waiting_.resize(kept);
  }
  const uint64_t timeout = uint64_t(dir_.config().op_timeout_ms) * 1000000;
  if (timeout == 0) return;
  const uint64_t peer_timeout = std::max(timeout, uint64_t(dir_.config().peer_timeout_ms) * 1000000);
  while (oldest_open_ >= 0 && slots_[size_t(oldest_open_)]->t_open + timeout <= now_ns) {
    Slot& s = *slots_[size_t(oldest_open_)];
    if (peer_timeout > timeout && waits_only_on_peers(s)) {  // the other switch judges it
      unlink(s);
      s.waits_on_peer = true;
      link_newest(s);
      continue;
    }
    abandon(s, out);
  }
  while (oldest_peer_ >= 0 && slots_[size_t(oldest_peer_)]->t_open + peer_timeout <= now_ns)
    abandon(*slots_[size_t(oldest_peer_)], out);
}

}  // namespace prism::sw
