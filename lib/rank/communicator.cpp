// The Communicator: ops in call order, chunked to the path MTU, a window of
// chunks in flight, retransmission timers, RESULT reassembly, NACKs turned
// into errors. One global chunk order for every rank (op by op, chunk by
// chunk ascending) and a window no larger than the job's slot quota: the
// chunks open at the switch are then always within one window of the
// slowest chunk some rank still waits for, so the quota can always complete
// them (docs/PROTOCOL.md, "Writing a client").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "arith/op.hpp"
#include "proto/packet.hpp"
#include "rank/comm_impl.hpp"

namespace prism {

using rank::Op;

// prism.hpp mirrors the wire codes so that it needs no internal header: the
// two must agree (the library casts one to the other).

namespace {

uint64_t now_ns() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::string list_chunks(const Op& op, size_t limit) {
  std::string s;
  size_t n = 0, shown = 0;
  for (uint32_t c = 0; c < op.nchunks; ++c) {
    if (op.chunks[c].done) continue;
    if (shown < limit) {
      s.append(shown ? ", " : "").append(std::to_string(c));
      ++shown;
    }
    ++n;
  }
  if (n > shown) s += ", …";
  return s;
}

// The arguments, checked before the socket is bound: a bad one is
// INVALID_ARGUMENT even while another communicator holds the address.
const Endpoints& checked(const Endpoints& e, const Tuning& t) {
  if (e.group == 0) throw Error(Errc::INVALID_ARGUMENT, "the job's group (R) must be 1 or more");
  if (e.rank >= e.group)
    throw Error(Errc::INVALID_ARGUMENT,
                "rank " + std::to_string(e.rank) + " is not below the group size " + std::to_string(e.group));
  if (t.timeout_ms == 0) throw Error(Errc::INVALID_ARGUMENT, "timeout_ms must be above 0");
  if (e.switch_shards < 1 || e.switch_shards > 64)
    throw Error(Errc::INVALID_ARGUMENT,
                "switch_shards " + std::to_string(e.switch_shards) + ": give the switch's reducers.shards (1..64)");
  if (uint32_t(e.switch_port) + e.switch_shards - 1 > 65535)
    throw Error(Errc::INVALID_ARGUMENT, "the switch's shard ports " + std::to_string(e.switch_port) + " + 0.." +
                                            std::to_string(e.switch_shards - 1) +
                                            " run past 65535: check switch_port and switch_shards");
  return e;
}

}  // namespace

Communicator::Impl::Impl(const Endpoints& e, const Tuning& t)
    : ep(checked(e, t)),
      tune(t),
      link(e.local_ip, e.local_port, e.switch_ip, e.switch_port, t.gso),
      rtt(uint64_t(t.rto_initial_ms) * 1000000, uint64_t(t.rto_min_ms) * 1000000, uint64_t(t.rto_max_ms) * 1000000),
      next_op(t.first_op) {
  // The quota can always complete a window (docs/PROTOCOL.md, Windows and pacing).
  // Adaptive: the job's ranks share the switch port's receive ring (and the
  // kernel queues before it), so R windows together stay within kPortBudget.
  window_cap = t.window ? t.window : std::clamp<uint32_t>(kPortBudget / e.group, kMinCap, kAutoWindowMax);
  if (e.slot_quota && e.slot_quota < window_cap) window_cap = e.slot_quota;
  window = t.window ? window_cap : std::min(kAutoWindowStart, window_cap);
  mtu = link.path_mtu();
  link.size_buffers(window_cap, mtu);
  heads.resize(kMaxBatch);
  batch.reserve(kMaxBatch);
  timers.assign(e.switch_shards, {});
  oldest_due.assign(e.switch_shards, {nullptr, 0});
  if (t.join) join();
}

std::string Communicator::Impl::switch_where() const {
  std::string s = ep.switch_ip + ":" + std::to_string(ep.switch_port);
  if (ep.switch_shards > 1) s += "-" + std::to_string(ep.switch_port + ep.switch_shards - 1);
  return s;
}

std::string Communicator::Impl::who(const Op& op) const {
  return std::string(op.reduce ? "reduce" : "allreduce") + " op " + std::to_string(op.op) + " (job " +
         std::to_string(ep.job) + ", rank " + std::to_string(ep.rank) + ")";
}

uint32_t Communicator::Impl::chunk_elems_for(size_t in_bytes, size_t out_bytes) const {
  if (tune.chunk_elems) return tune.chunk_elems;
  // A RESULT may carry a sideband byte per element: size the chunk for it.
  const size_t body = mtu - wire::kIpv4MinSize - wire::kUdpSize - wire::kHeaderSize;
  return uint32_t(std::min<size_t>(65535, body / std::max(in_bytes, out_bytes + 1)));
}

uint32_t Communicator::Impl::start(const void* in, void* out, size_t count, Format dtype, const OpOptions& o,
                                   bool reduce, uint16_t root) {
  const Format f = dtype;
  if (!format_from_code(uint8_t(dtype)))
    throw Error(Errc::INVALID_ARGUMENT, "unknown dtype code " + std::to_string(int(dtype)));
  const Format of = o.out_given ? o.out : (is_float(f) ? Format::FP32 : Format::INT32);
  if (!format_from_code(uint8_t(of)))
    throw Error(Errc::INVALID_ARGUMENT, "unknown output dtype code " + std::to_string(int(o.out)));
  if (!policy_from_code(uint8_t(o.policy)) || !transport_from_code(uint8_t(o.transport)) ||
      !exceptions_from_code(uint8_t(o.exceptions)))
    throw Error(Errc::INVALID_ARGUMENT, "unknown policy, transport or overflow code");
  if (reduce && root >= ep.group)
    throw Error(Errc::INVALID_ARGUMENT,
                "reduce root " + std::to_string(root) + " is not a rank of the group of " + std::to_string(ep.group));
  const size_t ib = info(f).bytes, ob = info(of).bytes;
  const bool keep = !reduce || root == ep.rank;
  if (count && !in) throw Error(Errc::INVALID_ARGUMENT, "the input buffer is null");
  if (count && keep && !out)
    throw Error(Errc::INVALID_ARGUMENT, "the output buffer is null (this rank receives the result)");
  if (count && keep) {
    const auto* a = static_cast<const uint8_t*>(in);
    const auto* b = static_cast<const uint8_t*>(out);
    const bool overlap = a < b + count * ob && b < a + count * ib;
    if (overlap && !(a == b && ib == ob))
      throw Error(Errc::INVALID_ARGUMENT,
                  "the input and output buffers overlap: in place needs the same buffer and formats of the same "
                  "width (" +
                      std::string(info(f).name) + " in, " + info(of).name + " out)");
  }
  const uint32_t C = chunk_elems_for(ib, ob);
  if (C == 0 || wire::kFrameOverhead - wire::kEthSize + size_t(C) * std::max(ib, ob + 1) > mtu)
    throw Error(Errc::INVALID_ARGUMENT, "chunk_elems " + std::to_string(C) + " of " + info(f).name +
                                            " does not fit the path MTU of " + std::to_string(mtu) +
                                            " bytes towards the switch (leave chunk_elems 0 to choose it)");
  OpDesc d;
  d.dtype = f;
  d.out = of;
  d.policy = o.policy;
  d.exceptions = o.exceptions;
  d.group = ep.group;
  d.lanes = C;
  if (auto e = admission_error(d, kMaxWidth)) throw Error(Errc::INVALID_ARGUMENT, *e);
  if (count && (count + C - 1) / C > UINT32_MAX)
    throw Error(Errc::INVALID_ARGUMENT, "the op has more than 2^32 chunks: split it");

  auto op = std::make_unique<Op>();
  op->op = next_op++;
  op->reduce = reduce;
  op->in = static_cast<const uint8_t*>(in);
  op->out = keep ? static_cast<uint8_t*>(out) : nullptr;
  op->count = count;
  op->C = C;
  op->in_bytes = ib;
  op->out_bytes = ob;
  op->nchunks = uint32_t((count + C - 1) / C);
  op->chunks.assign(op->nchunks, rank::Chunk{});
  wire::Header& h = op->desc;
  h.kind = wire::Kind::CONTRIB;
  h.job = ep.job;
  h.op = op->op;
  h.sender = ep.rank;
  h.group = ep.group;
  h.terms = 1;
  h.dtype = f;
  h.out_dtype = of;
  h.policy = d.policy;
  h.encoding = wire::Encoding::DTYPE;
  h.transport = o.transport;
  h.exceptions = d.exceptions;
  op->t_start = op->t_progress = now_ns();
  op->report.op = op->op;
  ++stats.ops;
  const uint32_t id = op->op;
  if (op->nchunks == 0) {
    op->finished = true;
  } else {
    sendq.push_back(op.get());
    op->queued = true;
  }
  ops.emplace(id, std::move(op));
  return id;
}

// Takes a chunk out of the window (it completed, or its op failed).
void Communicator::Impl::leave_window(Op& op, uint32_t c) {
  rank::Chunk& ch = op.chunks[c];
  if (ch.at == rank::Chunk::kNotInFlight) return;
  const uint32_t i = ch.at;
  inflight[i] = inflight.back();
  inflight[i].op->chunks[inflight[i].chunk].at = i;
  inflight.pop_back();
  ch.at = rank::Chunk::kNotInFlight;
}

void Communicator::Impl::finish(Op& op, uint64_t t) {
  op.finished = true;
  op.report.seconds = double(t - op.t_start) * 1e-9;
}

// The adaptive window (Tuning::window 0), as TCP's congestion window: it
// doubles with each window of RESULTs taken without a loss until the first
// loss, then grows by a quarter per such window; a loss (a chunk the switch
// lacked: a queue overflowed on the way, the switch port's ring or a socket
// buffer; or a NO_FREE_SLOT) halves it, at most once per round trip.
void Communicator::Impl::window_grow() {
  if (tune.window || ++clean_results < window) return;
  clean_results = 0;
  window = std::min(window_cap, window + (slow_start ? window : std::max<uint32_t>(1, window / 4)));
}

void Communicator::Impl::window_cut(uint64_t t) {
  if (tune.window || t < last_cut + std::max<uint64_t>(rtt.rto_unclamped(), 1000000)) return;
  last_cut = t;
  slow_start = false;
  clean_results = 0;
  window = std::max(std::min(kMinWindow, window_cap), window / 2);
}

void Communicator::Impl::fail(Op& op, Error e) {
  if (op.finished) return;
  for (uint32_t c = 0; c < op.nchunks; ++c) leave_window(op, c);
  op.error = std::make_unique<Error>(std::move(e));
  op.finished = true;
  ++stats.ops_failed;
  if (op.queued) sendq.erase(std::remove(sendq.begin(), sendq.end(), &op), sendq.end());
  op.queued = false;
}

void Communicator::Impl::queue(Op& op, uint32_t c, Send what) {
  wire::Header h = op.desc;
  h.chunk = c;
  const size_t first = size_t(c) * op.C;
  h.count = uint16_t(std::min<size_t>(op.C, op.count - first));
  h.flags = uint8_t((c + 1 == op.nchunks ? wire::hflag::LAST_CHUNK : 0) |
                    (what == Send::RETRANSMIT ? wire::hflag::RETRANSMIT : 0));
  const size_t k = batch.size();
  batch.push_back({&op, c, what});
  if (what == Send::QUERY) {
    wire::put_header(wire::query_header(h), heads[k].data());
    dgrams[k] = {heads[k].data(), wire::kHeaderSize, nullptr, 0, port_of(op.op, c)};
    return;
  }
  wire::put_header(h, heads[k].data());
  dgrams[k] = {heads[k].data(), wire::kHeaderSize, op.in + first * op.in_bytes, size_t(h.count) * op.in_bytes,
               port_of(op.op, c)};
}

// What the window's timers and the RESULTs so far say (rank::ShardTimer):
// chunks the switch lacks are re-sent; suspects are asked about.
// When each of a chunk's timers runs out (rank::ShardTimer): its QUERY's
// answer is overdue, it is late with no evidence, it is a RACK suspect.
Communicator::Impl::Timers Communicator::Impl::timers_of(const rank::Chunk& ch, const rank::ShardTimer& st) const {
  Timers d;
  if (ch.query_ns) d.asked_until = ch.query_ns + query_timeout();
  d.late_at = std::max({ch.sent_ns, ch.wait_ns, ch.query_ns}) + rtt.timeout(ch.tries + st.level);
  if (st.rack_seq > ch.seq) d.suspect_at = ch.sent_ns + st.rack_rtt + uint64_t(rtt.srtt() / 4);
  return d;
}

void Communicator::Impl::due_chunks(uint64_t t) {
  for (auto& d : oldest_due) d.op = nullptr;
  for (const auto& f : inflight) {
    if (batch.size() + oldest_due.size() >= kMaxBatch) break;
    rank::Chunk& ch = f.op->chunks[f.chunk];
    if (ch.resend) {
      queue(*f.op, f.chunk, Send::RETRANSMIT);
      continue;
    }
    const Timers d = timers_of(ch, timer_of(f.op->op, f.chunk));
    if (t < d.asked_until) continue;  // a QUERY about it is on its way
    const bool suspect = t >= d.suspect_at, late = t >= d.late_at;
    if (!suspect && !late) continue;
    if (ch.unanswered >= kQueryTries) {  // no STATUS came back (loss, or a switch without queries): re-send
      window_cut(t);
      queue(*f.op, f.chunk, Send::RETRANSMIT);
    } else if (suspect) {
      queue(*f.op, f.chunk, Send::QUERY);
    } else {
      InFlight& o = oldest_due[wire::shard_of(ep.job, f.op->op, f.chunk, ep.switch_shards)];
      // The oldest not yet asked about since its last send, else the oldest: a
      // HELD for one chunk must not keep another, lost, from being asked about.
      const rank::Chunk* oc = o.op ? &o.op->chunks[o.chunk] : nullptr;
      if (!oc || std::pair(ch.query_ns != 0, ch.seq) < std::pair(oc->query_ns != 0, oc->seq)) o = f;
    }
  }
  for (uint32_t s = 0; s < oldest_due.size(); ++s) {
    const InFlight& o = oldest_due[s];
    if (!o.op) continue;
    queue(*o.op, o.chunk, Send::QUERY);
    wait_from(*o.op, o.chunk, t);  // the shard's chunks sent after it wait for this answer
  }
}

// Sends what is due: chunks lost, QUERYs for chunks late, then new chunks
// while the window has room, in the one global chunk order.
void Communicator::Impl::send_due(uint64_t t) {
  batch.clear();
  due_chunks(t);
  size_t room = window > inflight.size() ? window - inflight.size() : 0;
  while (room && batch.size() < kMaxBatch && !sendq.empty()) {
    Op& op = *sendq.front();
    queue(op, op.next_new, Send::NEW);
    --room;
    if (++op.next_new == op.nchunks) {
      sendq.pop_front();
      op.queued = false;
    }
  }
  if (batch.empty()) return;
  const size_t sent = link.send(dgrams.data(), batch.size());
  for (size_t i = 0; i < sent; ++i) {
    const Pending& b = batch[i];
    rank::Chunk& ch = b.op->chunks[b.chunk];
    ++stats.packets_sent;
    stats.bytes_sent += dgrams[i].head_len + dgrams[i].body_len;
    if (b.what == Send::QUERY) {
      ch.query_ns = t;
      ch.waited = true;
      ++ch.unanswered;
      ++stats.queries;
      continue;
    }
    ch.sent_ns = t;
    ch.seq = ++send_seq;
    ch.query_ns = 0;
    ch.unanswered = 0;
    ch.resend = false;
    ++ch.tries;
    if (b.what == Send::RETRANSMIT) {
      ++stats.retransmits;
      ++b.op->report.retransmits;
    } else {
      if (b.chunk == 0) b.op->t_progress = t;  // its timeout counts from its first send, not its call
      ++stats.chunks;
      ++b.op->report.chunks;
      ch.at = uint32_t(inflight.size());
      inflight.push_back({b.op, b.chunk});
    }
  }
  // The kernel's queue was full: new chunks it did not take go back to the
  // front of the order (last first, so the earliest op ends up in front); a
  // loss it did not take is re-sent next round.
  for (size_t i = batch.size(); i-- > sent;) {
    const Pending& b = batch[i];
    if (b.what == Send::QUERY) continue;  // its timer asks again
    if (b.what == Send::RETRANSMIT) {
      b.op->chunks[b.chunk].resend = true;
      continue;
    }
    if (!b.op->queued) {
      sendq.push_front(b.op);
      b.op->queued = true;
    }
    b.op->next_new = b.chunk;
  }
}

void Communicator::Impl::on_result(Op& op, const wire::Parsed& p, uint64_t t) {
  const uint32_t c = p.h.chunk;
  if (c >= op.nchunks) return void(++stats.stray);
  const size_t first = size_t(c) * op.C;
  const size_t n = std::min<size_t>(op.C, op.count - first);
  if (p.h.count != n || p.h.out_dtype != op.desc.out_dtype || p.h.dtype != op.desc.dtype ||
      p.h.policy != op.desc.policy || p.h.group != op.desc.group)
    return void(++stats.stray);  // not an answer to what this rank sent
  if (!switch_id) switch_id = p.h.sender;
  rank::Chunk& ch = op.chunks[c];
  if (ch.done) return void(++stats.duplicate_results);
  if (op.out) std::memcpy(op.out + first * op.out_bytes, p.payload, n * op.out_bytes);
  if (p.sideband)
    for (size_t i = 0; i < n; ++i) {
      op.report.overflow += (p.sideband[i] & flag::OVERFLOW) != 0;
      op.report.invalid += (p.sideband[i] & flag::INVALID) != 0;
      op.report.nan_input += (p.sideband[i] & flag::NAN_INPUT) != 0;
    }
  ch.done = true;
  ch.resend = false;
  // Karn: a retransmitted chunk's round trip is ambiguous; one that was asked
  // about or held up measures another rank's delay, not the path's.
  if (ch.tries == 1 && !ch.waited) rtt.sample(t - ch.sent_ns);
  rank::ShardTimer& st = timer_of(op.op, c);
  if (ch.seq > st.rack_seq) {
    st.rack_seq = ch.seq;
    st.rack_rtt = t - ch.sent_ns;
  }
  st.level = 0;  // the shard moves: no rank is holding it up
  leave_window(op, c);
  window_grow();
  ++stats.results;
  op.t_progress = t;
  if (++op.completed == op.nchunks) finish(op, t);
}

void Communicator::Impl::on_nack(Op& op, const wire::Parsed& p, const uint8_t* body, size_t body_len) {
  const uint32_t c = p.h.chunk;
  const uint8_t reason = p.h.status;
  if (c >= op.nchunks || op.chunks[c].done) return;  // an answer to a repeat of a chunk already complete
  const auto r = wire::NackReason(reason);
  if (r == wire::NackReason::NO_FREE_SLOT) {
    ++stats.no_slot_retries;  // its timer sends it again after a back-off
    window_cut(now_ns());
    return;
  }
  if (r == wire::NackReason::MALFORMED && (link.gso() || op.chunks[c].seq <= gso_given_up_at)) {
    // This library sends nothing malformed: the switch saw a GSO message cut
    // short (a path that passed it unsegmented to a port that truncates,
    // PROTOCOL.md, Reaching the switch). Plain datagrams from now on (a NACK
    // for another message sent before that is the same news); the chunks
    // lost with it are asked about and re-sent as usual.
    if (link.gso()) {
      link.give_up_gso();
      gso_given_up_at = send_seq;
    }
    op.chunks[c].resend = true;
    return;
  }
  const std::string where = who(op) + ", chunk " + std::to_string(c) + " of " + std::to_string(op.nchunks);
  if (reason == kOpAbandoned) {
    std::string missing;
    size_t named = 0;
    for (uint32_t rk = 0; rk < ep.group && size_t(rk / 8) < body_len; ++rk)
      if (body[rk / 8] & (1u << (rk % 8))) {
        missing.append(named++ ? ", " : "").append(std::to_string(rk));
      }
    std::string msg = where + ": the switch abandoned the op (op_timeout_ms passed before every contribution arrived)";
    if (body_len) {
      msg += ": " + std::to_string(p.h.terms) + " of " + std::to_string(ep.group) + " contributions arrived";
      if (named) msg += "; missing rank" + std::string(named > 1 ? "s " : " ") + missing;
      const size_t behind = size_t(ep.group) - p.h.terms - named;
      if (behind) msg += (named ? ", and " : "; missing ") + std::to_string(behind) + " from child switches";
    }
    msg += ". A rank died or called a different collective: fail this collective and restart the job";
    return fail(op, Error(Errc::ABANDONED, msg, op.op, reason));
  }
  const char* doc = reason >= 1 && reason <= wire::kNackReasonCount ? prism::doc(r) : "an unknown reason";
  const char* nm = reason >= 1 && reason <= wire::kNackReasonCount ? wire::name(r) : "unknown";
  fail(op, Error(Errc::REFUSED, where + ": the switch refused it: " + nm + " (" + std::to_string(reason) + "): " + doc,
                 op.op, reason));
}

// A QUERY answered (rank::ShardTimer). HELD: the switch has this rank's
// contribution and waits for others: every timer of the shard restarts, a
// little longer each time. MISSING: the contribution was lost: re-send it,
// and every chunk of the shard sent with it or before.
void Communicator::Impl::on_status(Op& op, const wire::Parsed& p, uint64_t t) {
  const uint32_t c = p.h.chunk;
  if (c >= op.nchunks) return void(++stats.stray);
  rank::Chunk& q = op.chunks[c];
  q.unanswered = 0;
  rank::ShardTimer& st = timer_of(op.op, c);
  if (p.h.status == wire::qstatus::HELD) {
    ++stats.status_held;
    wait_from(op, c, t);
    st.level = std::min<uint32_t>(st.level + 1, kMaxLevel);
    std::string missing;
    size_t named = 0;
    for (uint32_t rk = 0; rk < ep.group && size_t(rk / 8) < p.payload_len; ++rk)
      if (p.payload[rk / 8] & (1u << (rk % 8))) missing.append(named++ ? ", " : "").append(std::to_string(rk));
    waiting_for = "the switch holds this rank's contribution to chunk " + std::to_string(c) + " and has " +
                  std::to_string(p.h.terms) + " of " + std::to_string(ep.group);
    if (named) waiting_for += "; it waits for rank" + std::string(named > 1 ? "s " : " ") + missing;
    return;
  }
  ++stats.status_missing;
  if (q.done) return;
  window_cut(t);
  // Lost: it, and what this rank sent to the shard with it or before that is late too.
  const uint32_t shard = wire::shard_of(ep.job, op.op, c, ep.switch_shards);
  for (const auto& f : inflight) {
    rank::Chunk& ch = f.op->chunks[f.chunk];
    if (&ch == &q ||
        (ch.seq <= q.seq && !ch.query_ns && wire::shard_of(ep.job, f.op->op, f.chunk, ep.switch_shards) == shard &&
         t >= ch.sent_ns + rtt.timeout(ch.tries)))
      ch.resend = true;
  }
}

// Restarts the timers of the chunks sent to (op, c)'s shard with it or after
// it: while the switch waits for others on c, it waits on them too.
void Communicator::Impl::wait_from(const Op& op, uint32_t c, uint64_t t) {
  const uint64_t from = op.chunks[c].seq;
  const uint32_t shard = wire::shard_of(ep.job, op.op, c, ep.switch_shards);
  for (const auto& f : inflight) {
    rank::Chunk& ch = f.op->chunks[f.chunk];
    if (ch.seq >= from && wire::shard_of(ep.job, f.op->op, f.chunk, ep.switch_shards) == shard) {
      ch.wait_ns = t;
      ch.waited = true;
    }
  }
}

void Communicator::Impl::receive(int wait_ms, uint64_t t) {
  const size_t n = link.receive(wait_ms);
  if (n) t = now_ns();
  for (size_t i = 0; i < n; ++i) {
    const size_t len = link.length(i);
    ++stats.packets_received;
    stats.bytes_received += len;
    wire::Parsed p;
    if (len == 0 || wire::parse_message({link.data(i), len}, &p, false) != wire::Refusal::OK || p.h.job != ep.job) {
      ++stats.stray;
      continue;
    }
    // RESULT, NACK and STATUS come from the switch under its id: once it is
    // known, one under another sender is someone else's (F4).
    if (switch_id && p.h.sender != *switch_id) {
      ++stats.stray;
      continue;
    }
    auto it = ops.find(p.h.op);
    if (p.h.kind == wire::Kind::NACK) {
      // A NACK with no descriptor answers a JOIN (its op is a nonce, not an op number).
      if (uint8_t(p.h.dtype) == 0) {
        ++stats.stray;
        continue;
      }
      ++stats.nacks;
      ++stats.nack_by_reason[p.h.status & 15];
      if (it != ops.end() && !it->second->finished)
        on_nack(*it->second, p, link.data(i) + wire::kHeaderSize, len - wire::kHeaderSize);
      continue;
    }
    if (p.h.kind == wire::Kind::STATUS) {
      if (it != ops.end() && !it->second->finished)
        on_status(*it->second, p, t);
      else
        ++stats.stray;
      continue;
    }
    if (p.h.kind != wire::Kind::RESULT) {
      ++stats.stray;
      continue;
    }
    if (it == ops.end()) {
      ++stats.stray;
      continue;
    }
    if (it->second->finished) {
      ++stats.duplicate_results;
      continue;
    }
    on_result(*it->second, p, t);
  }
}

void Communicator::Impl::check_deadlines(uint64_t t) {
  const uint64_t limit = uint64_t(tune.timeout_ms) * 1000000;
  for (auto& [id, op] : ops) {
    if (op->finished || op->next_new == 0 || t < op->t_progress + limit) continue;
    Op& o = *op;
    size_t missing = 0;
    uint32_t tries = 0;
    for (uint32_t c = 0; c < o.nchunks; ++c)
      if (!o.chunks[c].done) ++missing, tries = std::max(tries, o.chunks[c].tries);
    std::string msg = who(o) + ": no RESULT for " + std::to_string(missing) + " of " + std::to_string(o.nchunks) +
                      " chunks (" + list_chunks(o, 8) + ") in " + std::to_string(tune.timeout_ms) +
                      " ms, each sent up to " + std::to_string(tries) + " times to the switch at " + switch_where();
    if (!waiting_for.empty())
      msg += ". Last news from the switch: " + waiting_for +
             ". A rank of the job never sent these chunks (it died, "
             "or called a different collective)";
    else if (stats.results == 0 && stats.nacks == 0)
      msg += ". The switch never answered this rank: is it running, does its config register this rank at " +
             (ep.local_ip.empty() ? std::string("this host") : ep.local_ip) + ":" + std::to_string(ep.local_port) +
             " with this host's MAC, and is the rank on the switch port's network?";
    else
      msg +=
          ". Another rank of the job never sent these chunks (it died, or called a different collective), or "
          "the network loses every copy";
    fail(o, Error(Errc::TIMEOUT, msg, o.op));
  }
}

// One round: send what is due, wait for answers until the next timer (at
// most `max_wait_ms`), take them.
void Communicator::Impl::progress(int max_wait_ms) {
  uint64_t t = now_ns();
  send_due(t);
  check_deadlines(t);
  int wait = 0;
  if (max_wait_ms > 0) {
    uint64_t next = t + uint64_t(max_wait_ms) * 1000000;
    for (const auto& f : inflight) {
      const rank::Chunk& ch = f.op->chunks[f.chunk];
      if (ch.resend) next = t;
      const Timers d = timers_of(ch, timer_of(f.op->op, f.chunk));
      next = std::min(next, t < d.asked_until ? d.asked_until : std::min(d.late_at, d.suspect_at));
    }
    if (!sendq.empty() && inflight.size() < window) next = t;  // the kernel's queue was full: try again soon
    wait = next > t ? int(std::max<uint64_t>(1, (next - t + 999999) / 1000000)) : 0;
  }
  receive(wait, t);
}

rank::Op& Communicator::Impl::op_of(const Request& r, uint64_t id) {
  auto it = ops.find(uint32_t(id));
  if (!r.valid() || it == ops.end())
    throw Error(Errc::INVALID_ARGUMENT, "wait or test on a request that is spent or not from this communicator");
  return *it->second;
}

OpReport Communicator::Impl::take(uint32_t id) {
  auto it = ops.find(id);
  std::unique_ptr<Op> op = std::move(it->second);
  ops.erase(it);
  if (op->error) throw Error(*op->error);
  return op->report;
}

// ---------------------------------------------------------------- public

Communicator::Communicator(const Endpoints& e, Tuning t) : impl_(std::make_unique<Impl>(e, t)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    if (impl_) impl_->leave();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
Communicator::~Communicator() {
  if (impl_) impl_->leave();
}

Request Communicator::iallreduce(const void* in, void* out, size_t count, Format dtype, const OpOptions& o) {
  const uint32_t id = impl_->start(in, out, count, dtype, o, false, 0);
  impl_->progress(0);
  return Request(this, id, id);
}

Request Communicator::ireduce(const void* in, void* out, size_t count, Format dtype, uint16_t root,
                              const OpOptions& o) {
  const uint32_t id = impl_->start(in, out, count, dtype, o, true, root);
  impl_->progress(0);
  return Request(this, id, id);
}

OpReport Communicator::allreduce(const void* in, void* out, size_t count, Format dtype, const OpOptions& o) {
  Request r = iallreduce(in, out, count, dtype, o);
  return wait(r);
}

OpReport Communicator::reduce(const void* in, void* out, size_t count, Format dtype, uint16_t root,
                              const OpOptions& o) {
  Request r = ireduce(in, out, count, dtype, root, o);
  return wait(r);
}

OpReport Communicator::wait(Request& r) {
  if (r.comm_ != this) throw Error(Errc::INVALID_ARGUMENT, "wait on a request of another communicator");
  Op& op = impl_->op_of(r, r.id_);
  while (!op.finished) impl_->progress(50);
  r = Request();
  return impl_->take(op.op);
}

bool Communicator::test(Request& r) {
  if (r.comm_ != this) throw Error(Errc::INVALID_ARGUMENT, "test on a request of another communicator");
  Op& op = impl_->op_of(r, r.id_);
  if (!op.finished) impl_->progress(0);
  return op.finished;
}

const Stats& Communicator::stats() const {
  Stats& s = impl_->stats;
  s.rtt_min_us = double(impl_->rtt.min()) / 1e3;
  s.rtt_max_us = double(impl_->rtt.max()) / 1e3;
  s.rtt_srtt_us = impl_->rtt.srtt() / 1e3;
  s.rto_us = double(impl_->rtt.rto()) / 1e3;
  const rank::UdpLink::Counters& c = impl_->link.counters();
  s.gso_sends = c.gso_sends;
  s.gso_datagrams = c.gso_datagrams;
  s.gso_refused = impl_->link.gso_refused();
  s.gro_buffers = c.gro_buffers;
  s.gro_datagrams = c.gro_datagrams;
  s.send_calls = c.syscalls_send;
  s.receive_calls = c.syscalls_receive;
  return s;
}
const Endpoints& Communicator::endpoints() const { return impl_->ep; }
uint32_t Communicator::next_op() const { return impl_->next_op; }
uint32_t Communicator::session_nonce() const { return impl_->nonce; }
uint32_t Communicator::window() const { return impl_->window; }
uint32_t Communicator::chunk_elems(Format dtype, const OpOptions& o) const {
  const Format f = dtype;
  const Format of = o.out_given ? o.out : (is_float(f) ? Format::FP32 : Format::INT32);
  return impl_->chunk_elems_for(info(f).bytes, info(of).bytes);
}

size_t format_bytes(Format f) { return format_from_code(uint8_t(f)) ? info(f).bytes : 0; }
const char* format_name(Format f) { return format_from_code(uint8_t(f)) ? info(f).name : "?"; }

}  // namespace prism
