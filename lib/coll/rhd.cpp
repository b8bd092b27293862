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
struct Shape {
  int p, rank, q, r, m, v;
  explicit Shape(const Transport& t) : p(t.size()), rank(t.rank()), q(0), r(0), m(0), v(-1) {
    q = int(std::bit_floor(unsigned(p)));
    r = p - q;
    m = std::countr_zero(unsigned(q));
    if (rank >= 2 * r)
      v = rank - r;
    else if (rank % 2 == 0)
      v = rank / 2;
  }
  int rank_of(int u) const { return u < r ? 2 * u : u + r; }
};

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// node adds fp32 partials as they come (FP32_ARRIVAL), in RHD's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

void check_format(Format f) {
  if (!format_from_code(uint8_t(f)))
    throw std::invalid_argument("rhd allreduce: format code " + std::to_string(unsigned(f)) + " is not a format");
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
    throw CollectiveError("rhd allreduce: rank " + std::to_string(from) + " sent a message of " + std::to_string(len_) +
                          " bytes that is not this block's partials (" + std::to_string(n) +
                          " elements): every rank must call it with the same op and count");
  }
};

}  // namespace

size_t rhd_segment_start(size_t n, size_t q, size_t s) {
  const size_t base = n / q, extra = n % q;
  return s * base + std::min(s, extra);
}

void rhd_allreduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  const Shape sh(t);
  check_format(op.dtype);
  check_format(op.out);
  node_desc(op, sh.p, uint32_t(std::max<size_t>(std::min<size_t>(count, kRhdBlock), 1)));  // admission first
  if (count == 0) return;
  if (!out) throw std::invalid_argument("rhd allreduce: every rank needs an output buffer");
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  const size_t full = std::min<size_t>(count, kRhdBlock);
  Block b(op, sh.p);
  std::vector<uint8_t> fl(full), msg, res;
  std::vector<uint8_t> rx;
  const bool folded = sh.v < 0;                        // the odd rank of a fold pair
  const bool folds = sh.v >= 0 && sh.rank < 2 * sh.r;  // the even rank of a fold pair
  for (size_t off = 0; off < count; off += kRhdBlock) {
    const size_t n = std::min<size_t>(count - off, kRhdBlock);
    const size_t q = size_t(sh.q);
    b.reset(n, q);
    b.add(src + off * isz, isz, sh.rank);
    uint8_t* o = dst + off * osz;
    rx.resize(std::max(b.max_bytes(0, q), n * (osz + 1)));
    auto take_result = [&](size_t got, int from, size_t lo, size_t hi) {
      const size_t e0 = b.start(lo), e = b.start(hi) - e0;
      if (got != e * (osz + 1))
        throw CollectiveError("rhd allreduce: rank " + std::to_string(from) + " sent a result range of " +
                              std::to_string(got) + " bytes for " + std::to_string(e) + " " + name(op.out) +
                              " elements: every rank must call it with the same op and count");
      std::memcpy(o + e0 * osz, rx.data(), e * osz);
      std::memcpy(fl.data() + e0, rx.data() + e * osz, e);
    };
    auto result_msg = [&](size_t lo, size_t hi) {
      const size_t e0 = b.start(lo), e = b.start(hi) - e0;
      res.resize(e * (osz + 1));
      std::memcpy(res.data(), o + e0 * osz, e * osz);
      std::memcpy(res.data() + e * osz, fl.data() + e0, e);
    };
    if (folded) {  // fold: send everything to the even rank, get the result back
      b.encode(0, q, msg);
      t.send(sh.rank - 1, msg.data(), msg.size());
      take_result(t.recv(sh.rank - 1, rx.data(), rx.size()), sh.rank - 1, 0, q);
    } else {
      if (folds) b.merge(0, q, rx.data(), t.recv(sh.rank + 1, rx.data(), rx.size()), sh.rank + 1);
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
      for (int k = sh.m - 1; k >= 0; --k) {  // allgather: doubling, distance halving
        const int peer = sh.rank_of(sh.v ^ (1 << k));
        const size_t w = hi - lo;
        const bool low = (sh.v >> k & 1) == 0;
        const size_t plo = low ? hi : lo - w, phi = plo + w;
        result_msg(lo, hi);
        take_result(t.sendrecv(peer, res.data(), res.size(), peer, rx.data(), rx.size()), peer, plo, phi);
        lo = std::min(lo, plo);
        hi = std::max(hi, phi);
      }
      if (folds) {  // unfold
        result_msg(0, q);
        t.send(sh.rank + 1, res.data(), res.size());
      }
    }
    if (flags) std::memcpy(flags + off, fl.data(), n);
  }
}

}  // namespace prism::coll
