#include "coll/rhd.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

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
  Shape(const Transport& t, int root) : p(t.size()), rank(t.rank()), q(0), r(0), m(0), parity(0), v(-1) {
    q = int(std::bit_floor(unsigned(p)));
    r = p - q;
    m = std::countr_zero(unsigned(q));
    if (root >= 0 && root < 2 * r) parity = root % 2;
    v = v_of(rank);
  }
  int v_of(int x) const { return x >= 2 * r ? x - r : x % 2 == parity ? x / 2 : -1; }
  int rank_of(int u) const { return u < r ? 2 * u + parity : u + r; }
};

[[noreturn]] void bad_root(const char* what, int root, int p) {
  throw std::invalid_argument(std::string(what) + ": root " + std::to_string(root) + " is not a rank of a group of " +
                              std::to_string(p) + " (0.." + std::to_string(p - 1) + ")");
}

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// node adds fp32 partials as they come (FP32_ARRIVAL), in RHD's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

void check_format(Format f) {
  if (!format_from_code(uint8_t(f)))
    throw std::invalid_argument("rhd: format code " + std::to_string(unsigned(f)) + " is not a format");
}

// One block: its segments' accumulators (null for an empty segment) and
// the scratch its messages use.
struct Block {
  const ReduceOp& op;
  int p;
  size_t n = 0, q = 0;
  std::vector<std::unique_ptr<Accumulator>> acc;
  std::vector<LaneExact> lanes;
  std::vector<uint8_t> part;

  Block(const ReduceOp& op_, int p_) : op(op_), p(p_) {}
  size_t start(size_t s) const { return rhd_segment_start(n, q, s); }
  size_t len(size_t s) const { return start(s + 1) - start(s); }

  void reset(size_t n_, size_t q_) {
    if (n_ != n || q_ != q) {
      n = n_;
      q = q_;
      acc.clear();
      acc.resize(q);
      for (size_t s = 0; s < q; ++s)
        if (len(s)) acc[s] = make_accumulator(node_desc(op, p, uint32_t(len(s))));
    }
    for (auto& a : acc)
      if (a) a->reset();
  }
  void add(const uint8_t* src, size_t isz, int index) {
    for (size_t s = 0; s < q; ++s)
      if (acc[s]) acc[s]->add(src + start(s) * isz, uint32_t(index));
  }
  // The most bytes a range's partials take.
  size_t max_bytes(size_t lo, size_t hi) const {
    size_t b = 0;
    for (size_t s = lo; s < hi; ++s)
      if (len(s)) b += 4 + max_partial_bytes(uint32_t(len(s)));
    return b;
  }
  // Segments [lo, hi)'s partials, each as [uint32 length, little-endian][partial].
  void encode(size_t lo, size_t hi, std::vector<uint8_t>& msg) {
    msg.clear();
    for (size_t s = lo; s < hi; ++s) {
      if (!acc[s]) continue;
      encode_partial(*acc[s], op, lanes, part);
      const uint32_t l = uint32_t(part.size());
      const uint8_t h[4] = {uint8_t(l), uint8_t(l >> 8), uint8_t(l >> 16), uint8_t(l >> 24)};
      msg.insert(msg.end(), h, h + 4);
      msg.insert(msg.end(), part.begin(), part.end());
    }
  }
  void merge(size_t lo, size_t hi, const uint8_t* msg, size_t len_, int from) {
    size_t at = 0;
    for (size_t s = lo; s < hi; ++s) {
      if (!acc[s]) continue;
      if (len_ - at < 4) short_message(from, len_);
      const uint32_t l =
          uint32_t(msg[at]) | uint32_t(msg[at + 1]) << 8 | uint32_t(msg[at + 2]) << 16 | uint32_t(msg[at + 3]) << 24;
      at += 4;
      if (len_ - at < l) short_message(from, len_);
      merge_partial(*acc[s], op, msg + at, l, from);
      at += l;
    }
    if (at != len_) short_message(from, len_);
  }
  void merge_partial(Accumulator& a, const ReduceOp& o, const uint8_t* m, size_t l, int from) {
    prism::coll::merge_partial(a, o, m, l, from, lanes);
  }
  [[noreturn]] void short_message(int from, size_t len_) const {
    throw CollectiveError("rhd: rank " + std::to_string(from) + " sent a message of " + std::to_string(len_) +
                          " bytes that is not this block's partials (" + std::to_string(n) +
                          " elements): every rank must call it with the same op, count and root");
  }
};

}  // namespace

size_t rhd_segment_start(size_t n, size_t q, size_t s) {
  const size_t base = n / q, extra = n % q;
  return s * base + std::min(s, extra);
}

namespace {

// Allreduce (root < 0) or reduce to `root`: fold, reduce-scatter, then
// allgather and unfold, or gather to the root.
void run(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root,
         const char* what) {
  const int p = t.size();
  if (root >= p) bad_root(what, root, p);
  const Shape sh(t, root);
  check_format(op.dtype);
  check_format(op.out);
  node_desc(op, sh.p, uint32_t(std::max<size_t>(std::min<size_t>(count, kRhdBlock), 1)));  // admission first
  if (count == 0) return;
  const bool all = root < 0, mine = all || sh.rank == root;
  if (mine && !out)
    throw std::invalid_argument(std::string(what) + (all ? ": every rank" : ": the root") + " needs an output buffer");
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t full = std::min<size_t>(count, kRhdBlock);
  Block b(op, sh.p);
  std::vector<uint8_t> fl(full), msg, res, rx, scratch(mine ? 0 : full * osz);
  const bool folded = sh.v < 0;                        // the fold pair's rank outside the block
  const bool folds = sh.v >= 0 && sh.rank < 2 * sh.r;  // the fold pair's rank in the block
  const int vroot = all ? 0 : sh.v_of(root);
  for (size_t off = 0; off < count; off += kRhdBlock) {
    const size_t n = std::min<size_t>(count - off, kRhdBlock);
    const size_t q = size_t(sh.q);
    b.reset(n, q);
    b.add(src + off * isz, isz, sh.rank);
    uint8_t* o = mine ? dst + off * osz : scratch.data();
    rx.resize(std::max(b.max_bytes(0, q), n * (osz + 1)));
    auto take_result = [&](size_t got, int from, size_t lo, size_t hi) {
      const size_t e0 = b.start(lo), e = b.start(hi) - e0;
      if (got != e * (osz + 1))
        throw CollectiveError(std::string(what) + ": rank " + std::to_string(from) + " sent a result range of " +
                              std::to_string(got) + " bytes for " + std::to_string(e) + " " + name(op.out) +
                              " elements: every rank must call it with the same op, count and root");
      if (e == 0) return;
      std::memcpy(o + e0 * osz, rx.data(), e * osz);
      std::memcpy(fl.data() + e0, rx.data() + e * osz, e);
    };
    auto result_msg = [&](size_t lo, size_t hi) {
      const size_t e0 = b.start(lo), e = b.start(hi) - e0;
      res.resize(e * (osz + 1));
      if (e == 0) return;  // an empty segment (n < q)
      std::memcpy(res.data(), o + e0 * osz, e * osz);
      std::memcpy(res.data() + e * osz, fl.data() + e0, e);
    };
    const int pair = sh.rank ^ 1;
    if (folded) {  // fold: send everything to the pair's block rank (allreduce: get the result back)
      b.encode(0, q, msg);
      t.send(pair, msg.data(), msg.size());
      if (all) take_result(t.recv(pair, rx.data(), rx.size()), pair, 0, q);
    } else {
      if (folds) b.merge(0, q, rx.data(), t.recv(pair, rx.data(), rx.size()), pair);
      size_t lo = 0, hi = q;
      for (int k = 0; k < sh.m; ++k) {  // reduce-scatter: halving, distance doubling
        const int peer = sh.rank_of(sh.v ^ (1 << k));
        const size_t mid = (lo + hi) / 2;
        const bool low = (sh.v >> k & 1) == 0;
        const size_t klo = low ? lo : mid, khi = low ? mid : hi;
        const size_t slo = low ? mid : lo, shi = low ? hi : mid;
        b.encode(slo, shi, msg);
        const size_t got = t.sendrecv(peer, msg.data(), msg.size(), peer, rx.data(), rx.size());
        b.merge(klo, khi, rx.data(), got, peer);
        lo = klo;
        hi = khi;
      }
      if (b.acc[lo]) b.acc[lo]->finalize(o + b.start(lo) * osz, fl.data() + b.start(lo));
      const int d = sh.v ^ vroot;
      for (int k = sh.m - 1; k >= 0; --k) {      // allgather / gather: doubling, distance halving
        if (!all && (d >> (k + 1)) != 0) break;  // gather: sent its range already
        const int peer = sh.rank_of(sh.v ^ (1 << k));
        const size_t w = hi - lo;
        const bool low = (sh.v >> k & 1) == 0;
        const size_t plo = low ? hi : lo - w, phi = plo + w;
        result_msg(lo, hi);
        if (all) {
          take_result(t.sendrecv(peer, res.data(), res.size(), peer, rx.data(), rx.size()), peer, plo, phi);
        } else if (d >> k & 1) {
          t.send(peer, res.data(), res.size());  // to the root's side, then idle
          continue;
        } else {
          take_result(t.recv(peer, rx.data(), rx.size()), peer, plo, phi);
        }
        lo = std::min(lo, plo);
        hi = std::max(hi, phi);
      }
      if (all && folds) {  // unfold
        result_msg(0, q);
        t.send(pair, res.data(), res.size());
      }
    }
    if (mine && flags) std::memcpy(flags + off, fl.data(), n);
  }
}

}  // namespace

void rhd_allreduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  run(t, in, count, op, out, flags, -1, "rhd allreduce");
}

void rhd_reduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root) {
  if (root < 0) bad_root("rhd reduce", root, t.size());
  run(t, in, count, op, out, flags, root, "rhd reduce");
}

void rhd_broadcast(Transport& t, void* data, size_t bytes, int root) {
  if (root < 0 || root >= t.size()) bad_root("rhd broadcast", root, t.size());
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

}  // namespace prism::coll
