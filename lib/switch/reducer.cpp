#include "switch/reducer.hpp"

#include <algorithm>

namespace prism::sw {
namespace {

class MapIndex final : public SlotIndex {
 public:
  int32_t find(const SlotKey& k) const override {
    auto it = m_.find(k);
    return it == m_.end() ? -1 : it->second;
  }
  bool insert(const SlotKey& k, int32_t slot) override { return m_.emplace(k, slot).second; }
  void erase(const SlotKey& k) override { m_.erase(k); }

 private:
  std::unordered_map<SlotKey, int32_t, SlotKeyHash> m_;
};

constexpr size_t kTombstones = 1 << 16;  // recently expired keys, for RESULT_EXPIRED

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

std::unique_ptr<SlotIndex> make_map_index() { return std::make_unique<MapIndex>(); }

RecentKeys::RecentKeys(size_t capacity) : fifo_(capacity) {
  size_t n = 16, bits = 4;
  while (n < 2 * capacity) n <<= 1, ++bits;  // at most half full
  table_.assign(n, Entry{});
  mask_ = n - 1;
  shift_ = 64 - bits;
}

long RecentKeys::find(const SlotKey& k) const {
  for (size_t i = home(k);; i = (i + 1) & mask_) {
    if (!table_[i].used) return -1;
    if (table_[i].key == k) return long(i);
  }
}

void RecentKeys::insert(const SlotKey& k) {
  if (fifo_.empty() || contains(k)) return;
  if (count_ == fifo_.size()) {  // full: forget the oldest
    const long at = find(fifo_[head_]);
    if (at >= 0) erase_at(size_t(at));
    head_ = fifo_at(head_ + 1);
    --count_;
    prefetch(fifo_[head_]);  // the next insert forgets this one
  }
  size_t i = home(k);
  while (table_[i].used) i = (i + 1) & mask_;
  table_[i] = Entry{k, 1};
  fifo_[fifo_at(head_ + count_)] = k;
  ++count_;
}

// Backward-shift deletion: later keys of the same probe run move up, so a
// lookup never stops early at the hole.
void RecentKeys::erase_at(size_t i) {
  size_t j = i;
  for (;;) {
    j = (j + 1) & mask_;
    if (!table_[j].used) break;
    const size_t h = home(table_[j].key);
    // table_[j] may fill the hole at i unless its home lies in (i, j] (cyclically).
    const bool in_between = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (in_between) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i].used = 0;
}

struct Reducer::Slot {
  int32_t self = -1;  // index in slots_
  SlotKey key{};
  State state = State::FREE;
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
  uint64_t t_open = 0, t_done = 0, t_partial = 0;
  // The RESULT's header. Its body is made from the accumulator each time it
  // is sent (finalize is a function of the exact state: every copy has the
  // same bits), except at a leaf, which keeps the parent's body here.
  wire::Header result_h;
  std::vector<uint8_t> parent_body;
  uint32_t lanes() const { return acc_desc.lanes; }
  // Opens the slot for op chunk `k` with descriptor `h` (its accumulator `d`),
  // keeping the memory of the op before it where it can.
  void start(const SlotKey& k, const Job& j, const wire::Header& h, const OpDesc& d, uint64_t now_ns);
};

void Reducer::Slot::start(const SlotKey& k, const Job& j, const wire::Header& h, const OpDesc& d, uint64_t now_ns) {
  key = k;
  state = State::OPEN;
  job = &j;
  desc = h;
  const bool same = acc && acc_desc.dtype == d.dtype && acc_desc.out == d.out && acc_desc.policy == d.policy &&
                    acc_desc.exceptions == d.exceptions && acc_desc.group == d.group && acc_desc.lanes == d.lanes;
  if (same)
    acc->reset();
  else
    acc = make_accumulator(d);
  acc_desc = d;
  ranks_seen.assign((size_t(j.cfg->group) + 63) / 64, 0);
  children_seen.assign((j.child_of_id.size() + 63) / 64, 0);
  for (auto& st : staged) st.clear();
  staged.resize(j.children.size());
  staged_seen.resize(j.children.size());
  for (auto& ss : staged_seen) ss.clear();
  staged_count.assign(j.children.size(), 0);
  terms = 0;
  expected = uint32_t(j.members.size());
  for (const auto& c : j.children) expected += c.terms;
  t_open = now_ns;
}

Reducer::Reducer(const Directory& dir, uint32_t slots, std::unique_ptr<SlotIndex> index, size_t mtu)
    : dir_(dir), index_(std::move(index)), tombstones_(kTombstones), mtu_(mtu) {
  slots_.reserve(slots);
  for (uint32_t i = 0; i < slots; ++i) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->self = int32_t(i);
  }
  for (int32_t i = int32_t(slots) - 1; i >= 0; --i) free_.push_back(i);
  for (const auto& j : dir.config().jobs) jobs_[j.id];
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
    if (s->state == State::OPEN || s->state == State::WAIT_PARENT) v.push_back({s->key, s->terms, s->expected});
  return v;
}

Reducer::Slot* Reducer::find(const SlotKey& k) {
  int32_t& hint = cache_[cache_at(k)];
  if (hint >= 0) {
    Slot* s = slots_[size_t(hint)].get();
    if (s->state != State::FREE && s->key == k) return s;
  }
  tombstones_.prefetch(k);  // a key without a live slot is looked up there next (open)
  const int32_t i = index_->find(k);
  if (i < 0) return nullptr;
  hint = i;
  return slots_[size_t(i)].get();
}

void Reducer::refuse(Drop d, const wire::Parsed& p, const Member& from, Sink& out) {
  drop(d);
  if (const auto r = nack_for(d)) {
    out.send(nack(dir_, p, *r, from));
    ++stats_.nacks_sent;
  }
}

Reducer::Slot* Reducer::open(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const wire::Header& h = p.h;
  const Job& job = *v.job;
  const Member& from = *v.member;
  const SlotKey key{h.job, h.op, h.chunk};
  const auto refused = [&](Drop d) {
    refuse(d, p, from, out);
    return nullptr;
  };
  if (tombstones_.contains(key))  // the op completed and its result expired
    return refused((h.flags & wire::hflag::RETRANSMIT) ? Drop::RESULT_EXPIRED : Drop::LATE);
  if (h.group != job.cfg->group) return refused(Drop::DESCRIPTOR_MISMATCH);
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
  if (const auto w = exact_width_needed(d); w && *w > dir_.config().kulisch_width) return refused(Drop::TOO_NARROW);
  JobStats& js = *stats_of_[job.index];
  const int32_t idx = free_.empty() ? -1 : free_.back();
  // The index may be full before the slots are (a hash table fills before 100%).
  if ((job.cfg->slot_quota && js.in_flight >= job.cfg->slot_quota) || idx < 0 || !index_->insert(key, idx)) {
    ++js.quota_refused;
    return refused(Drop::NO_FREE_SLOT);
  }
  free_.pop_back();
  cache_[cache_at(key)] = idx;
  Slot& s = *slots_[size_t(idx)];
  s.start(key, job, h, d, now_ns);
  ++js.opened;
  ++js.in_flight;
  ++stats_.slots_in_use;
  stats_.slots_high = std::max(stats_.slots_high, stats_.slots_in_use);
  return &s;
}

void Reducer::on_packet(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  ++stats_.packets;
  const SlotKey key{p.h.job, p.h.op, p.h.chunk};
  Slot* s = find(key);
  if (v.from_parent) {
    ++stats_.parent_results;
    if (!s) return drop(Drop::STALE_RESULT);
    if (s->state == State::DONE) return drop(Drop::DUPLICATE);
    if (s->state != State::WAIT_PARENT) return drop(Drop::STALE_RESULT);
    return forward_parent_result(*s, p, now_ns, out);
  }
  if (p.h.kind == wire::Kind::CONTRIB)
    ++stats_.contribs;
  else
    ++stats_.partials;
  if (!s) {
    s = open(p, v, now_ns, out);
    if (!s) return;
  }
  if (p.h.kind == wire::Kind::CONTRIB)
    contribute(*s, p, v, now_ns, out);
  else
    merge_partial(*s, p, v, now_ns, out);
}

void Reducer::contribute(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const wire::Header& h = p.h;
  const Member& m = *v.member;
  if (s.state != State::OPEN) return repeat(s, p, m, out);
  if (!wire::same_descriptor(s.desc, h) || h.count != s.lanes()) return refuse(Drop::DESCRIPTOR_MISMATCH, p, m, out);
  if (test_set(s.ranks_seen, m.id)) return drop(Drop::DUPLICATE);
  s.acc->add(p.payload, m.id);
  stats_.elements += s.lanes();
  if (++s.terms == s.expected) complete(s, now_ns, out);
}

void Reducer::merge_partial(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out) {
  const wire::Header& h = p.h;
  const Member& c = *v.member;
  if (s.state != State::OPEN) return repeat(s, p, c, out);
  if (!wire::same_descriptor(s.desc, h) || p.chunk_lanes != s.lanes() || h.terms != c.terms)
    return refuse(Drop::DESCRIPTOR_MISMATCH, p, c, out);
  const uint32_t ci = uint32_t(s.job->child_of_id[c.id]);
  if (s.children_seen[c.id >> 6] & (uint64_t(1) << (c.id & 63))) return drop(Drop::DUPLICATE);
  const int unit = unit_exp(s.desc.dtype);
  if (h.encoding == wire::Encoding::OUT_DTYPE) {
    std::vector<LaneExact> lanes(s.lanes());
    if (lanes_from_elements(h.out_dtype, p.payload, h.count, unit, lanes.data()) != PartialError::None)
      return refuse(Drop::BAD_PARTIAL, p, c, out);
    if (p.sideband)
      for (uint32_t i = 0; i < s.lanes(); ++i) lanes[i].side |= side_from_status(p.sideband[i]);
    if (!s.acc->add_exact(lanes.data())) return refuse(Drop::BAD_PARTIAL, p, c, out);
  } else {  // Kulisch fragment: stage until every lane of the chunk is in
    auto& st = s.staged[ci];
    auto& seen = s.staged_seen[ci];
    if (st.empty()) {
      st.assign(s.lanes(), LaneExact{});
      seen.assign((size_t(s.lanes()) + 63) / 64, 0);
    }
    for (uint32_t i = p.first_lane; i < uint32_t(p.first_lane) + h.count; ++i)
      if (seen[i >> 6] & (uint64_t(1) << (i & 63))) return drop(Drop::DUPLICATE);  // a repeated fragment
    if (wire::decode_fragment(p, st.data()) != PartialError::None) return refuse(Drop::BAD_PARTIAL, p, c, out);
    for (uint32_t i = p.first_lane; i < uint32_t(p.first_lane) + h.count; ++i) test_set(seen, i);
    s.staged_count[ci] += h.count;
    if (s.staged_count[ci] < s.lanes()) return;
    const bool ok = s.acc->add_exact(st.data());
    st.clear();
    if (!ok) {
      s.staged_count[ci] = 0;
      return refuse(Drop::BAD_PARTIAL, p, c, out);
    }
  }
  test_set(s.children_seen, c.id);
  stats_.elements += uint64_t(s.lanes()) * c.terms;
  s.terms += c.terms;
  if (s.terms == s.expected) complete(s, now_ns, out);
}

// A packet for an op that is no longer open: a RETRANSMIT for a completed op
// means its sender lost the RESULT (send it again, to it only); anything else
// is a repeat.
void Reducer::repeat(Slot& s, const wire::Parsed& p, const Member& from, Sink& out) {
  if (s.state == State::DONE && (p.h.flags & wire::hflag::RETRANSMIT)) {
    send_result(s, {&s.job->dest_of(from), 1}, true, out);
    ++stats_.resent;
    return;
  }
  drop(Drop::DUPLICATE);
}

void Reducer::complete(Slot& s, uint64_t now_ns, Sink& out) {
  if (dir_.config().role == Role::LEAF) {
    send_partial(s, false, out);
    s.state = State::WAIT_PARENT;
    s.t_partial = now_ns;
    waiting_.push_back(s.self);
    return;
  }
  s.result_h = s.desc;
  s.result_h.kind = wire::Kind::RESULT;
  s.result_h.sender = dir_.config().id;
  s.result_h.terms = s.desc.group;
  s.result_h.count = uint16_t(s.lanes());
  s.result_h.encoding = wire::Encoding::OUT_DTYPE;
  s.result_h.flags = uint8_t(s.desc.flags & wire::hflag::LAST_CHUNK);
  deliver(s, now_ns, out);
}

// The op has its RESULT: retain it for retransmissions and send it to every
// member and child of the job.
void Reducer::deliver(Slot& s, uint64_t now_ns, Sink& out) {
  s.state = State::DONE;
  s.t_done = now_ns;
  done_fifo_.emplace_back(now_ns, s.self);
  JobStats& js = *stats_of_[s.job->index];
  ++js.completed;
  --js.in_flight;
  send_result(s, s.job->result_dests, false, out);
}

// The RESULT's body is made here, into the sink's buffer (the frame it is
// sent from): finalized from the accumulator at a root, the parent's body
// at a leaf. Its status and sideband follow from the flags.
void Reducer::send_result(Slot& s, std::span<const Dest> to, bool retransmit, Sink& out) {
  wire::Header h = s.result_h;
  size_t len;
  if (dir_.config().role == Role::LEAF) {
    len = s.parent_body.size();
    std::copy(s.parent_body.begin(), s.parent_body.end(), out.result_buffer(len));
  } else {
    const size_t elems = size_t(s.lanes()) * info(s.desc.out_dtype).bytes;
    uint8_t* body = out.result_buffer(elems + s.lanes());
    uint8_t* flags = body + elems;
    s.acc->finalize(body, flags);
    uint8_t status = 0;
    for (uint32_t i = 0; i < s.lanes(); ++i) status |= flags[i];
    h.status = status;
    if (status) h.flags |= wire::hflag::SIDEBAND;
    len = status ? elems + s.lanes() : elems;  // no sideband when no element has a flag
  }
  if (retransmit) h.flags |= wire::hflag::RETRANSMIT;
  out.send_result(h, len, to);
  stats_.results_sent += to.size();
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
    o.dst = parent.addr;
    o.h = hh;
    o.body = std::move(body);
    out.send(std::move(o));
    ++stats_.partials_sent;
  };
  const bool fp32_policy = is_float(s.desc.dtype) && s.desc.policy != Policy::KULISCH_FIXED;
  const uint32_t osz = info(s.desc.out_dtype).bytes;
  std::vector<LaneExact> lanes;
  if (!fp32_policy && s.desc.transport != Transport::ROUNDED) {
    lanes.resize(s.lanes());
    s.acc->state(lanes.data());
    auto body = std::make_shared<std::vector<uint8_t>>(size_t(s.lanes()) * osz);
    if (s.desc.transport == Transport::AUTO &&
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

void Reducer::forward_parent_result(Slot& s, const wire::Parsed& p, uint64_t now_ns, Sink& out) {
  if (!wire::same_descriptor(s.desc, p.h) || p.h.count != s.lanes()) return drop(Drop::DESCRIPTOR_MISMATCH);
  s.parent_body.assign(p.payload, p.payload + p.payload_len);
  if (p.sideband) s.parent_body.insert(s.parent_body.end(), p.sideband, p.sideband + p.h.count);
  s.result_h = p.h;
  s.result_h.sender = dir_.config().id;
  s.result_h.flags &= uint8_t(~wire::hflag::RETRANSMIT);
  deliver(s, now_ns, out);
}

void Reducer::release(Slot& s, bool tombstone) {
  index_->erase(s.key);
  if (tombstone) tombstones_.insert(s.key);
  s.state = State::FREE;
  free_.push_back(s.self);
  --stats_.slots_in_use;
}

void Reducer::tick(uint64_t now_ns, Sink& out) {
  const uint64_t keep = uint64_t(dir_.config().retention_ms) * 1000000;
  while (!done_fifo_.empty() && done_fifo_.front().first + keep <= now_ns) {
    const auto [t, idx] = done_fifo_.front();
    done_fifo_.pop_front();
    if (idx < 0) continue;
    Slot& s = *slots_[size_t(idx)];
    if (s.state != State::DONE || s.t_done != t) continue;  // already recycled
    ++stats_of_[s.job->index]->expired;
    release(s, true);
  }
  // A leaf whose parent's RESULT is late sends its PARTIAL again (the parent
  // answers a RETRANSMIT for a completed op with the RESULT).
  const uint64_t retry = uint64_t(dir_.config().partial_retry_ms) * 1000000;
  if (retry) {
    size_t keep = 0;
    for (int32_t idx : waiting_) {
      Slot& s = *slots_[size_t(idx)];
      if (s.state != State::WAIT_PARENT) continue;
      if (s.t_partial + retry <= now_ns) {
        send_partial(s, true, out);
        s.t_partial = now_ns;
        ++stats_.resent;
      }
      waiting_[keep++] = idx;
    }
    waiting_.resize(keep);
  }
  const uint64_t timeout = uint64_t(dir_.config().op_timeout_ms) * 1000000;
  if (timeout == 0) return;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if ((s.state == State::OPEN || s.state == State::WAIT_PARENT) && s.t_open + timeout <= now_ns) {
      JobStats& js = *stats_of_[s.job->index];
      ++js.timed_out;
      --js.in_flight;
      release(s, false);
    }
  }
}

}  // namespace prism::sw
