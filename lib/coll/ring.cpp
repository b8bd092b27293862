#include "coll/ring.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/acc_cache.hpp"
#include "coll/algorithms.hpp"
#include "coll/blocks.hpp"
#include "coll/buffer_cache.hpp"
#include "coll/call_tag.hpp"

namespace prism::coll {
namespace {

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// rank adds fp32 partials as they come (FP32_ARRIVAL), in the ring's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

// The ring's steps over one round of p segments ([at[s], at[s+1]) of the
// round's vector; an empty one is neither sent nor received). `shift` c
// says where segments end: after the reduce-scatter rank r owns segment
// (r + c) mod p, and the allgather starts from it (the allreduce: c = 1,
// the collectives: c = 0, each rank its own block).
struct Ring {
  Links& t;
  const char* what;
  int p, r, next, prev;
  std::vector<size_t> at;
  std::vector<AccLease> acc;  // from the group's accumulator cache
  Reused<LaneExact> lanes;    // from the group's buffer cache
  Reused<double> doubles;
  Reused<uint8_t> msg, rx;

  Ring(Links& t_, const char* what_)
      : t(t_),
        what(what_),
        p(t_.size()),
        r(t_.rank()),
        next((r + 1) % p),
        prev((r + p - 1) % p),
        lanes(t_.buffers()),
        doubles(t_.buffers()),
        msg(t_.buffers()),
        rx(t_.buffers()) {}

  size_t seg(int s) const { return size_t(((s % p) + p) % p); }
  size_t len(size_t s) const { return at[s + 1] - at[s]; }

  // A new round's layout; accumulators (when op) empty, taken again when it changed.
  void layout(const std::vector<size_t>& at_, const ReduceOp* op, size_t esz) {
    size_t most = 0;
    for (size_t s = 0; s + 1 < at_.size(); ++s) most = std::max(most, at_[s + 1] - at_[s]);
    rx.resize(std::max(op ? max_partial_bytes(uint32_t(most)) : 0, most * (esz + 1)));
    if (op && at_ != at) {
      acc.clear();
      acc.resize(size_t(p));
      for (size_t s = 0; s < size_t(p); ++s)
        if (at_[s + 1] > at_[s]) acc[s] = AccLease(t.accumulators(), node_desc(*op, p, uint32_t(at_[s + 1] - at_[s])));
    } else {
      for (auto& a : acc)
        if (a) a->reset();
    }
    at = at_;
  }

  // p-1 steps: r sends its partial of segment (r + c - 1 - k) to r+1 and adds
  // the one of (r + c - 2 - k) from r-1.
  void reduce_scatter(const ReduceOp& op, int c) {
    for (int k = 0; k + 1 < p; ++k) {
      const size_t ss = seg(r + c - 1 - k), rs = seg(r + c - 2 - k);
      const size_t len = acc[ss] ? encode_partial(*acc[ss], op, PartialScratch{lanes, doubles}, msg) : 0;
      size_t got = 0;
      if (acc[ss] && acc[rs])
        got = t.sendrecv(next, msg.data(), len, prev, rx.data(), rx.size());
      else if (acc[ss])
        t.send(next, msg.data(), len);
      else if (acc[rs])
        got = t.recv(prev, rx.data(), rx.size());
      if (acc[rs]) merge_partial(*acc[rs], op, rx.data(), got, prev, PartialScratch{lanes, doubles});
    }
  }

  // p-1 steps: r sends segment (r + c - k)'s results (esz bytes an element
  // at o, then flags at fl unless null) to r+1, takes (r + c - 1 - k) from r-1.
  void allgather(int c, uint8_t* o, uint8_t* fl, size_t esz) {
    for (int k = 0; k + 1 < p; ++k) {
      const size_t ss = seg(r + c - k), rs = seg(r + c - 1 - k);
      const size_t sl = len(ss), rl = len(rs);
      const auto [sdata, slen] =
          sl ? detail::results_message(o + at[ss] * esz, fl ? fl + at[ss] : nullptr, esz, sl, msg)
             : std::pair<const uint8_t*, size_t>{nullptr, 0};
      size_t got = 0;
      if (sl && rl)
        got = t.sendrecv(next, sdata, slen, prev, rx.data(), rx.size());
      else if (sl)
        t.send(next, sdata, slen);
      else if (rl)
        got = t.recv(prev, rx.data(), rx.size());
      if (rl && !detail::unpack_results(rx.data(), got, esz, rl, o + at[rs] * esz, fl ? fl + at[rs] : nullptr))
        throw CollectiveError(std::string(what) + ": rank " + std::to_string(prev) + " sent a result segment of " +
                              std::to_string(got) + " bytes, expected " + std::to_string(rl * esz) +
                              (fl ? " or " + std::to_string(rl * (esz + 1)) + " with flags" : std::string()) +
                              ": every rank must call it with the same op (element size) and count");
    }
  }
};

}  // namespace

void ring_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  const int p = t.size(), r = t.rank();
  const size_t block = ring_block(p);
  const size_t full = std::min<size_t>(count, block);
  node_desc(op, p, uint32_t(std::max<size_t>(full, 1)));  // admission, before any message
  if (count == 0) return;
  assert(out);  // check_call's (formats, buffers)
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  Ring ring(t, "ring allreduce");
  std::vector<uint8_t> fl(full);
  std::vector<size_t> at(size_t(p) + 1);
  for (size_t off = 0; off < count; off += block) {
    const size_t nb = std::min<size_t>(count - off, block);
    for (int s = 0; s <= p; ++s) at[size_t(s)] = coll_block_start(nb, p, s);
    ring.layout(at, &op, osz);
    for (size_t s = 0; s < size_t(p); ++s)
      if (ring.acc[s]) ring.acc[s]->add(src + (off + at[s]) * isz, uint32_t(r));
    ring.reduce_scatter(op, 1);
    uint8_t* o = dst + off * osz;
    const size_t own = ring.seg(r + 1);
    if (ring.acc[own]) ring.acc[own]->finalize(o + at[own] * osz, fl.data() + at[own]);
    ring.allgather(1, o, fl.data(), osz);
    if (flags) std::memcpy(flags + off, fl.data(), nb);
  }
}

void ring_reduce_scatter(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  const char* what = "ring reduce-scatter";
  const int p = t.size(), r = t.rank();
  const detail::BlockRounds br(count, p, ring_block(p));
  node_desc(op, p, uint32_t(std::max<size_t>(std::min(br.piece, br.len(0)), 1)));  // admission first
  if (count == 0) return;
  assert(!br.len(r) || out);  // check_call's
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  Ring ring(t, what);
  std::vector<uint8_t> fl(br.piece);
  std::vector<size_t> at;
  for (size_t j = 0; j < br.rounds(); ++j) {
    br.starts(j, at);
    ring.layout(at, &op, osz);
    for (int s = 0; s < p; ++s)
      if (auto& a = ring.acc[size_t(s)]) a->add(src + br.first(j, s) * isz, uint32_t(r));
    ring.reduce_scatter(op, 0);
    if (auto& a = ring.acc[size_t(r)]) {
      a->finalize(dst + j * br.piece * osz, fl.data());
      if (flags) std::memcpy(flags + j * br.piece, fl.data(), br.len(j, r));
    }
  }
}

void ring_allgather(Links& t, const void* my_block, void* out, size_t count, size_t elem_bytes) {
  const char* what = "ring allgather";
  assert(elem_bytes >= 1);  // check_call's (a format's)
  if (count == 0) return;
  assert(out);
  const int p = t.size(), r = t.rank();
  const detail::BlockRounds br(count, p, ring_block(p));
  const auto* mine = static_cast<const uint8_t*>(my_block);
  auto* dst = static_cast<uint8_t*>(out);
  Ring ring(t, what);
  std::vector<uint8_t> stage;
  std::vector<size_t> at;
  for (size_t j = 0; j < br.rounds(); ++j) {
    br.starts(j, at);
    ring.layout(at, nullptr, elem_bytes);
    stage.resize(at.back() * elem_bytes);
    if (const size_t e = br.len(j, r))
      std::memcpy(stage.data() + at[size_t(r)] * elem_bytes, mine + j * br.piece * elem_bytes, e * elem_bytes);
    ring.allgather(0, stage.data(), nullptr, elem_bytes);
    for (int u = 0; u < p; ++u)
      if (const size_t l = br.len(j, u))
        std::memcpy(dst + br.first(j, u) * elem_bytes, stage.data() + at[size_t(u)] * elem_bytes, l * elem_bytes);
  }
}

void run_ring(Context& ctx, const Call& c) {
  Links& t = *ctx.links;
  const CallScope call(t, c, Algorithm::RING);  // every message of the call carries its tag (links.hpp)
  switch (c.coll) {
    case Collective::ALLREDUCE: return ring_allreduce(t, c.in, c.count, c.op, c.out, c.flags);
    case Collective::REDUCE_SCATTER: return ring_reduce_scatter(t, c.in, c.count, c.op, c.out, c.flags);
    case Collective::ALLGATHER: return ring_allgather(t, c.in, c.out, c.count, info(c.op.dtype).bytes);
    case Collective::REDUCE:
    case Collective::BROADCAST:
    case Collective::BARRIER: break;
  }
  throw std::logic_error("ring: kAlgorithms offers a collective run_ring does not run");
}

std::optional<double> predict_ring(const Problem& pr, const CostParams& c, size_t) {
  using namespace model;
  const double n = double(pr.count) * double(pr.elem_bytes);
  const double steps = pr.p - 1, B = blocks(pr.count, ring_block(pr.p)), frac = steps / pr.p;
  const double lanes = block_lanes(pr, ring_block(pr.p));
  const Rates r = rates(c, lanes);
  // The reduce-scatter's first step passes the rank's own input on, the others sums.
  const double partials = n / pr.p * r.first + (steps - 1) / pr.p * n * r.reduce;
  std::optional<double> path;
  double waits = 0;  // messages waited for, one after another (each alpha)
  switch (pr.coll) {
    case Collective::ALLREDUCE: waits = 2 * steps * B, path = waits * c.alpha + partials + frac * n * r.result; break;
    case Collective::REDUCE_SCATTER: waits = steps * B, path = waits * c.alpha + partials; break;
    case Collective::ALLGATHER: waits = steps * B, path = waits * c.alpha + frac * n * r.raw; break;
    case Collective::REDUCE:
    case Collective::BROADCAST:
    case Collective::BARRIER: break;
  }
  return host(pr, c, path, waits, 1, lanes);
}

}  // namespace prism::coll
