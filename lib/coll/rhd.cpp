#include "coll/rhd.hpp"

#include <algorithm>
#include <bit>
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

// The group's shape: q = 2^floor(log2 p) ranks run the power-of-two
// algorithm, r = p - q pairs fold first. v is this rank's number among the
// q (-1 for an odd rank of the fold).
// Which rank of a fold pair (2i, 2i+1) is in the block: the even one, or,
// for a reduce or broadcast whose root is an odd rank below 2r, the odd ones
// (the seed's broadcast: the root's parity decides).
struct Shape {
  int p, rank, q, r, m, parity, v;
  Shape(const Links& t, int root) : p(t.size()), rank(t.rank()), q(0), r(0), m(0), parity(0), v(-1) {
    q = int(std::bit_floor(unsigned(p)));
    r = p - q;
    m = std::countr_zero(unsigned(q));
    if (root >= 0 && root < 2 * r) parity = root % 2;
    v = v_of(rank);
  }
  int v_of(int x) const { return x >= 2 * r ? x - r : x % 2 == parity ? x / 2 : -1; }
  int rank_of(int u) const { return u < r ? 2 * u + parity : u + r; }
  bool folded() const { return v < 0; }                  // the fold pair's rank outside the block
  bool folds() const { return v >= 0 && rank < 2 * r; }  // the fold pair's rank in the block
};

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// node adds fp32 partials as they come (FP32_ARRIVAL), in RHD's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

// A round's vector: units (one accumulator each, contiguous, in order),
// grouped into the q segments the halving steps split. Allreduce and reduce:
// one unit per segment, the split of n over q. Reduce-scatter and allgather:
// one unit per rank (its piece of its block), segment v the units of the
// ranks numbered v: two for a fold pair, so every segment is whole blocks.
struct Layout {
  std::vector<size_t> at;   // unit u's elements: [at[u], at[u+1])
  std::vector<size_t> seg;  // segment s's units: [seg[s], seg[s+1])
  size_t elem(size_t s) const { return at[seg[s]]; }
  size_t n() const { return at.back(); }

  void even(size_t n_, const Shape& sh) {
    const size_t q = size_t(sh.q);
    at.resize(q + 1);
    seg.resize(q + 1);
    for (size_t s = 0; s <= q; ++s) {
      at[s] = rhd_segment_start(n_, q, s);
      seg[s] = s;
    }
  }
  void pieces(const detail::BlockRounds& br, size_t j, const Shape& sh) {
    br.starts(j, at);
    seg.resize(size_t(sh.q) + 1);
    for (int s = 0; s < sh.q; ++s) seg[size_t(s)] = size_t(sh.rank_of(s));
    seg[size_t(sh.q)] = size_t(sh.p);
  }
};

// A round's accumulators (null for an empty unit) and the scratch its
// partials use.
struct Block {
  const ReduceOp& op;
  int p;
  AccCache& cache;
  const Layout* lay = nullptr;
  std::vector<size_t> at;     // the layout the accumulators were made for
  std::vector<AccLease> acc;  // from the group's accumulator cache
  Reused<LaneExact> lanes;    // from the group's buffer cache
  Reused<double> doubles;

  Block(const ReduceOp& op_, Links& t)
      : op(op_), p(t.size()), cache(t.accumulators()), lanes(t.buffers()), doubles(t.buffers()) {}

  void reset(const Layout& l) {
    lay = &l;
    if (l.at != at) {
      at = l.at;
      acc.clear();
      acc.resize(at.size() - 1);
      for (size_t u = 0; u + 1 < at.size(); ++u)
        if (at[u + 1] > at[u]) acc[u] = AccLease(cache, node_desc(op, p, uint32_t(at[u + 1] - at[u])));  // empty
    } else {
      for (auto& a : acc)
        if (a) a->reset();
    }
  }
  void add(size_t u, const uint8_t* src, int index) {
    if (acc[u]) acc[u]->add(src, uint32_t(index));
  }
  // The most bytes segments [lo, hi)'s partials take.
  size_t max_bytes(size_t lo, size_t hi) const {
    size_t b = 0;
    for (size_t u = lay->seg[lo]; u < lay->seg[hi]; ++u)
      if (acc[u]) b += 4 + max_partial_bytes(uint32_t(at[u + 1] - at[u]));
    return b;
  }
  // Segments [lo, hi)'s partials, each unit's as [uint32 length, little-endian][partial].
  // Returns the message's length: the first bytes of msg (which only grows).
  size_t encode(size_t lo, size_t hi, std::vector<uint8_t>& msg) {
    if (msg.size() < max_bytes(lo, hi)) msg.resize(max_bytes(lo, hi));
    size_t at_ = 0;
    for (size_t u = lay->seg[lo]; u < lay->seg[hi]; ++u) {
      if (!acc[u]) continue;
      uint8_t* h = msg.data() + at_;
      const uint32_t l = uint32_t(encode_partial(*acc[u], op, PartialScratch{lanes, doubles}, h + 4));
      h[0] = uint8_t(l), h[1] = uint8_t(l >> 8), h[2] = uint8_t(l >> 16), h[3] = uint8_t(l >> 24);
      at_ += 4 + l;
    }
    return at_;
  }
  void merge(size_t lo, size_t hi, const uint8_t* msg, size_t len, int from) {
    size_t at_ = 0;
    for (size_t u = lay->seg[lo]; u < lay->seg[hi]; ++u) {
      if (!acc[u]) continue;
      if (len - at_ < 4) short_message(from, len);
      const uint32_t l = uint32_t(msg[at_]) | uint32_t(msg[at_ + 1]) << 8 | uint32_t(msg[at_ + 2]) << 16 |
                         uint32_t(msg[at_ + 3]) << 24;
      at_ += 4;
      if (len - at_ < l) short_message(from, len);
      merge_partial(*acc[u], op, msg + at_, l, from, PartialScratch{lanes, doubles});
      at_ += l;
    }
    if (at_ != len) short_message(from, len);
  }
  // Segment s's one rounding, into the round's results.
  void finalize(size_t s, uint8_t* o, uint8_t* fl, size_t osz) {
    for (size_t u = lay->seg[s]; u < lay->seg[s + 1]; ++u)
      if (acc[u]) acc[u]->finalize(o + at[u] * osz, fl + at[u]);
  }
  [[noreturn]] void short_message(int from, size_t len) const {
    throw CollectiveError("rhd: rank " + std::to_string(from) + " sent a message of " + std::to_string(len) +
                          " bytes that is not this block's partials (" + std::to_string(at.back()) +
                          " elements): every rank must call it with the same op, count and root");
  }
};

// The steps every RHD collective is made of, over one round: the fold and
// the halving exchanges (partials), the doubling exchanges, the unfold and
// the scatter / gather inside fold pairs (results: esz bytes per element at
// o, with a flag byte per element at fl unless fl is null).
struct Steps {
  Links& t;
  const Shape& sh;
  const char* what;
  const Layout& lay;
  uint8_t* o = nullptr;
  uint8_t* fl = nullptr;
  size_t esz = 0;
  Reused<uint8_t> msg, res, rx;  // from the group's buffer cache

  Steps(Links& t_, const Shape& sh_, const char* what_, const Layout& lay_)
      : t(t_), sh(sh_), what(what_), lay(lay_), msg(t_.buffers()), res(t_.buffers()), rx(t_.buffers()) {}

  void results(uint8_t* o_, uint8_t* fl_, size_t esz_, size_t partial_bytes) {
    o = o_;
    fl = fl_;
    esz = esz_;
    rx.resize(std::max(partial_bytes, lay.n() * (esz + 1)));
  }

  // Fold: an odd rank 2i+1 < 2r sends its whole partial to 2i, which adds it.
  void fold(Block& b) {
    const size_t q = size_t(sh.q);
    if (sh.folded()) {
      const size_t len = b.encode(0, q, msg);
      t.send(sh.rank ^ 1, msg.data(), len);
    } else if (sh.folds()) {
      b.merge(0, q, rx.data(), t.recv(sh.rank ^ 1, rx.data(), rx.size()), sh.rank ^ 1);
    }
  }

  // Vector halving: exchanges with v ^ 2^k, k = 0..m-1 (distance doubling:
  // v ends owning segment bitreverse(v)) or k = m-1..0 (distance halving: v
  // ends owning segment v, in order). Returns the segment v owns.
  size_t halve(Block& b, bool distance_doubling) {
    size_t lo = 0, hi = size_t(sh.q);
    for (int i = 0; i < sh.m; ++i) {
      const int k = distance_doubling ? i : sh.m - 1 - i;
      const int peer = sh.rank_of(sh.v ^ (1 << k));
      const size_t mid = (lo + hi) / 2;
      const bool low = (sh.v >> k & 1) == 0;
      const size_t klo = low ? lo : mid, khi = low ? mid : hi;
      const size_t slo = low ? mid : lo, shi = low ? hi : mid;
      const size_t len = b.encode(slo, shi, msg);
      const size_t got = t.sendrecv(peer, msg.data(), len, peer, rx.data(), rx.size());
      b.merge(klo, khi, rx.data(), got, peer);
      lo = klo;
      hi = khi;
    }
    return lo;
  }

  void send_results(int to, size_t e0, size_t e1) {
    const auto [data, len] = detail::results_message(o + e0 * esz, fl ? fl + e0 : nullptr, esz, e1 - e0, res);
    t.send(to, data, len);
  }
  void take_results(int from, size_t got, size_t e0, size_t e1) {
    if (!detail::unpack_results(rx.data(), got, esz, e1 - e0, o + e0 * esz, fl ? fl + e0 : nullptr))
      throw CollectiveError(std::string(what) + ": rank " + std::to_string(from) + " sent a result range of " +
                            std::to_string(got) + " bytes for " + std::to_string(e1 - e0) + " elements of " +
                            std::to_string(esz) + " bytes" + (fl ? " (and their flags)" : "") +
                            ": every rank must call it with the same op (element size), count and root");
  }
  void recv_results(int from, size_t e0, size_t e1) { take_results(from, t.recv(from, rx.data(), rx.size()), e0, e1); }
  // A fold pair's exchanges of results: rank u's unit, or the whole vector.
  void send_unit(int to, int u) { send_results(to, lay.at[size_t(u)], lay.at[size_t(u) + 1]); }
  void recv_unit(int from, int u) { recv_results(from, lay.at[size_t(u)], lay.at[size_t(u) + 1]); }

  // Vector doubling from segment s: exchanges with v ^ 2^k, k = 0..m-1
  // (distance doubling, after a distance-halving reduce-scatter) or
  // m-1..0. vroot >= 0 (distance halving only): a gather to vroot instead,
  // a rank sending its range towards the root once and going idle.
  void double_up(size_t s, bool distance_doubling, int vroot) {
    size_t lo = s, hi = s + 1;
    const int d = vroot < 0 ? 0 : sh.v ^ vroot;
    for (int i = 0; i < sh.m; ++i) {
      const int k = distance_doubling ? i : sh.m - 1 - i;
      const int peer = sh.rank_of(sh.v ^ (1 << k));
      const size_t w = hi - lo;
      const bool low = (sh.v >> k & 1) == 0;
      const size_t plo = low ? hi : lo - w, phi = plo + w;
      if (vroot < 0) {
        const auto [data, len] = detail::results_message(o + lay.elem(lo) * esz, fl ? fl + lay.elem(lo) : nullptr, esz,
                                                         lay.elem(hi) - lay.elem(lo), res);
        take_results(peer, t.sendrecv(peer, data, len, peer, rx.data(), rx.size()), lay.elem(plo), lay.elem(phi));
      } else if (d >> k & 1) {
        send_results(peer, lay.elem(lo), lay.elem(hi));  // to the root's side, then idle
        return;
      } else {
        recv_results(peer, lay.elem(plo), lay.elem(phi));
      }
      lo = std::min(lo, plo);
      hi = std::max(hi, phi);
    }
  }
};

size_t admission_lanes(size_t n) { return std::max<size_t>(n, 1); }

}  // namespace

size_t rhd_segment_start(size_t n, size_t q, size_t s) { return coll_block_start(n, int(q), int(s)); }

namespace {

// Allreduce (root < 0) or reduce to `root`: fold, reduce-scatter, then
// allgather and unfold, or gather to the root.
void run(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root,
         const char* what) {
  assert(root < t.size());  // check_call's (formats, root, buffers)
  const Shape sh(t, root);
  node_desc(op, sh.p, uint32_t(admission_lanes(std::min<size_t>(count, kRhdBlock))));  // admission first
  if (count == 0) return;
  const bool all = root < 0, mine = all || sh.rank == root;
  assert(!mine || out);
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t full = std::min<size_t>(count, kRhdBlock);
  Layout lay;
  Block b(op, t);
  Steps st(t, sh, what, lay);
  std::vector<uint8_t> fl(full), scratch(mine ? 0 : full * osz);
  const size_t q = size_t(sh.q);
  for (size_t off = 0; off < count; off += kRhdBlock) {
    const size_t n = std::min<size_t>(count - off, kRhdBlock);
    lay.even(n, sh);
    b.reset(lay);
    for (size_t u = 0; u < q; ++u) b.add(u, src + (off + lay.at[u]) * isz, sh.rank);
    st.results(mine ? dst + off * osz : scratch.data(), fl.data(), osz, b.max_bytes(0, q));
    st.fold(b);
    if (sh.folded()) {
      if (all) st.recv_results(sh.rank ^ 1, 0, n);  // the unfold
    } else {
      const size_t s = st.halve(b, true);
      b.finalize(s, st.o, fl.data(), osz);
      st.double_up(s, false, all ? -1 : sh.v_of(root));
      if (all && sh.folds()) st.send_results(sh.rank ^ 1, 0, n);  // unfold
    }
    if (mine && flags) std::memcpy(flags + off, fl.data(), n);
  }
}

}  // namespace

void rhd_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  run(t, in, count, op, out, flags, -1, "rhd allreduce");
}

void rhd_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root) {
  assert(root >= 0);  // check_call's
  run(t, in, count, op, out, flags, root, "rhd reduce");
}

void rhd_reduce_scatter(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  const Shape sh(t, -1);
  const detail::BlockRounds br(count, sh.p, kRhdBlock);
  node_desc(op, sh.p, uint32_t(admission_lanes(std::min(br.piece, br.len(0)))));  // admission first
  if (count == 0) return;
  assert(!br.len(sh.rank) || out);  // check_call's
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  Layout lay;
  Block b(op, t);
  Steps st(t, sh, "rhd reduce-scatter", lay);
  std::vector<uint8_t> res, fl;
  for (size_t j = 0; j < br.rounds(); ++j) {
    lay.pieces(br, j, sh);
    b.reset(lay);
    for (int u = 0; u < sh.p; ++u) b.add(size_t(u), src + br.first(j, u) * isz, sh.rank);
    res.resize(lay.n() * osz);
    fl.resize(lay.n());
    st.results(res.data(), fl.data(), osz, b.max_bytes(0, size_t(sh.q)));
    st.fold(b);
    if (sh.folded()) {
      st.recv_unit(sh.rank ^ 1, sh.rank);  // the scatter: its block from its pair
    } else {
      const size_t s = st.halve(b, false);  // distance halving: segment v, in rank order
      b.finalize(s, res.data(), fl.data(), osz);
      if (sh.folds()) st.send_unit(sh.rank ^ 1, sh.rank ^ 1);
    }
    const size_t e = br.len(j, sh.rank), e0 = lay.at[size_t(sh.rank)];
    if (e == 0) continue;
    std::memcpy(dst + j * br.piece * osz, res.data() + e0 * osz, e * osz);
    if (flags) std::memcpy(flags + j * br.piece, fl.data() + e0, e);
  }
}

void rhd_allgather(Links& t, const void* my_block, void* out, size_t count, size_t elem_bytes) {
  const char* what = "rhd allgather";
  const Shape sh(t, -1);
  assert(elem_bytes >= 1);  // check_call's (a format's)
  if (count == 0) return;
  assert(out);
  const detail::BlockRounds br(count, sh.p, kRhdBlock);
  const auto* mine = static_cast<const uint8_t*>(my_block);
  auto* dst = static_cast<uint8_t*>(out);
  Layout lay;
  Steps st(t, sh, what, lay);
  std::vector<uint8_t> stage;
  for (size_t j = 0; j < br.rounds(); ++j) {
    lay.pieces(br, j, sh);
    stage.resize(lay.n() * elem_bytes);
    st.results(stage.data(), nullptr, elem_bytes, 0);
    const size_t e = br.len(j, sh.rank);
    if (e)
      std::memcpy(stage.data() + lay.at[size_t(sh.rank)] * elem_bytes, mine + j * br.piece * elem_bytes,
                  e * elem_bytes);
    if (sh.folded()) {
      st.send_unit(sh.rank ^ 1, sh.rank);  // its block to its pair
      st.recv_results(sh.rank ^ 1, 0, lay.n());
    } else {
      if (sh.folds()) st.recv_unit(sh.rank ^ 1, sh.rank ^ 1);
      st.double_up(size_t(sh.v), true, -1);  // distance doubling from segment v
      if (sh.folds()) st.send_results(sh.rank ^ 1, 0, lay.n());
    }
    for (int u = 0; u < sh.p; ++u)
      if (const size_t l = br.len(j, u))
        std::memcpy(dst + br.first(j, u) * elem_bytes, stage.data() + lay.at[size_t(u)] * elem_bytes, l * elem_bytes);
  }
}
void rhd_broadcast(Links& t, void* data, size_t bytes, int root) {
  assert(root >= 0 && root < t.size());  // check_call's
  const Shape sh(t, root);
  const int vroot = sh.v_of(root);
  constexpr size_t kSegment = size_t(kRhdBlock) * 4;
  auto* buf = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += kSegment) {
    const size_t len = std::min(kSegment, bytes - off);
    uint8_t* seg = buf + off;
    auto take = [&](int from) {
      const size_t got = t.recv(from, seg, len);
      if (got != len)
        throw CollectiveError("rhd broadcast: rank " + std::to_string(from) + " sent a segment of " +
                              std::to_string(got) + " bytes, not " + std::to_string(len) +
                              ": every rank must call it with the same size and root");
    };
    if (sh.v < 0) {  // outside the block: the pair's block rank sends once at the end
      take(sh.rank ^ 1);
      continue;
    }
    const int d = sh.v ^ vroot;
    for (int k = sh.m - 1; k >= 0; --k) {  // distance halving inside the block
      const int low = d & ((2 << k) - 1);
      if (low == (1 << k)) take(sh.rank_of(sh.v ^ (1 << k)));
      if (low == 0) t.send(sh.rank_of(sh.v ^ (1 << k)), seg, len);
    }
    if (sh.rank < 2 * sh.r) t.send(sh.rank ^ 1, seg, len);
  }
}

void run_rhd(Context& ctx, const Call& c) {
  Links& t = *ctx.links;
  const CallScope call(t, c, Algorithm::RHD);  // every message of the call carries its tag (links.hpp)
  switch (c.coll) {
    case Collective::ALLREDUCE: return rhd_allreduce(t, c.in, c.count, c.op, c.out, c.flags);
    case Collective::REDUCE: return rhd_reduce(t, c.in, c.count, c.op, c.out, c.flags, c.root);
    case Collective::BROADCAST: return rhd_broadcast(t, c.out, c.count * info(c.op.dtype).bytes, c.root);
    case Collective::REDUCE_SCATTER: return rhd_reduce_scatter(t, c.in, c.count, c.op, c.out, c.flags);
    case Collective::ALLGATHER: return rhd_allgather(t, c.in, c.out, c.count, info(c.op.dtype).bytes);
    case Collective::BARRIER: break;
  }
  throw std::logic_error("rhd: kAlgorithms offers a collective run_rhd does not run");
}

std::optional<double> predict_rhd(const Problem& pr, const CostParams& c, size_t) {
  using namespace model;
  const double n = double(pr.count) * double(pr.elem_bytes);
  const int k = floor_log2(pr.p), q = 1 << k;
  const double f = pr.p != q ? 1 : 0, B = blocks(pr.count, kRhdBlock), half = double(q - 1) / q;
  const double lanes = block_lanes(pr, kRhdBlock);
  const Rates r = rates(c, lanes);
  // The seed's reduce-scatter (and, with `rate` = beta, allgather) for p not a power of two: the
  // fold, k halving steps, the odd ranks' blocks. Step i moves at most 2^(k-i) + min(r, 2^(k-i))
  // rank blocks (a folded pair's segment is two): the seed's ceil(p / 2^i) where the pairs spread
  // evenly, within its bounds otherwise.
  const auto uneven = [&](double fold, double rate, double last) {
    const int extra = pr.p - q;
    double t = B * c.alpha + n * fold;
    for (int i = 1; i <= k; ++i) {
      const int h = 1 << (k - i);
      t += B * c.alpha + double(h + std::min(extra, h)) / pr.p * n * rate;
    }
    return t + B * c.alpha + n / pr.p * last;
  };
  // The partials on the critical path: the fold's (the odd rank's own input)
  // and the halving steps' sums; at a power of two the first step's half is
  // the rank's own input.
  const double partials = f ? n * r.first + half * n * r.reduce : n / 2 * r.first + (half - 0.5) * n * r.reduce;
  std::optional<double> path;
  double waits = 0;  // messages waited for, one after another (each alpha)
  switch (pr.coll) {
    case Collective::ALLREDUCE:
      waits = (2 * k + 2 * f) * B, path = waits * c.alpha + partials + (f + half) * n * r.result;
      break;
    case Collective::REDUCE: waits = (2 * k + f) * B, path = waits * c.alpha + partials + half * n * r.result; break;
    case Collective::BROADCAST:
      waits = ceil_log2(pr.p) * blocks(size_t(n), kRhdBlock * 4), path = waits * c.alpha + ceil_log2(pr.p) * n * r.raw;
      break;
    case Collective::REDUCE_SCATTER:
      waits = (k + 2 * f) * B, path = f ? uneven(r.first, r.reduce, r.result) : waits * c.alpha + partials;
      break;
    case Collective::ALLGATHER:
      waits = (k + 2 * f) * B, path = f ? uneven(r.raw, r.raw, r.raw) : waits * c.alpha + half * n * r.raw;
      break;
    case Collective::BARRIER: break;
  }
  // Of the p - 1 partials per element, the fold's r and half of the rest carry one rank's own input.
  const double own = (pr.p - q) + (q - (pr.p - q)) / 2.0;
  // The gather of reduce's result blocks to the root is work too.
  return host(pr, c, path, waits, own, lanes, pr.coll == Collective::REDUCE ? n * r.result : 0);
}

}  // namespace prism::coll
