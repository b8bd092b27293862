#include "coll/binomial.hpp"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coll/acc_cache.hpp"
#include "coll/algorithms.hpp"
#include "coll/buffer_cache.hpp"
#include "coll/call_tag.hpp"

namespace prism::coll {
namespace {

// The tree over relabelled ranks v = (rank - root) mod p: v's parent is
// v - 2^k for k its lowest set bit; its children are v + 2^k for every k
// below that bit (every k for the root) with v + 2^k < p.
struct Tree {
  int p, root, v;
  Tree(const Links& t, int root_) : p(t.size()), root(root_), v(0) {
    assert(root >= 0 && root < p);  // check_call's
    v = (t.rank() - root + p) % p;
  }
  int rank_of(int u) const { return (u + root) % p; }
  // The steps: 2^k < p.
  int steps() const { return p <= 1 ? 0 : std::bit_width(unsigned(p - 1)); }
  // The step at which v sends to its parent (its lowest set bit), or steps() for the root.
  int send_step() const { return v == 0 ? steps() : std::countr_zero(unsigned(v)); }
};

// The accumulator a tree node folds with: FP32_BINOMIAL's order is the
// tree's own, so a node adds its children's fp32 partials as they come
// (FP32_ARRIVAL's lossless fp32 state), in the seed's step order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

// One message down the tree: the root sends its `len` bytes at `buf`; any
// other rank receives at most `len` bytes there from its parent and passes
// them on. Returns the message's length.
size_t tree_broadcast(Links& t, const Tree& tr, uint8_t* buf, size_t len) {
  const int top = tr.send_step();
  if (tr.v != 0) len = t.recv(tr.rank_of(tr.v - (1 << top)), buf, len);
  for (int k = top - 1; k >= 0; --k)  // the reduce's steps backwards
    if (tr.v + (1 << k) < tr.p) t.send(tr.rank_of(tr.v + (1 << k)), buf, len);
  return len;
}

std::string parent_text(const Tree& tr) { return "rank " + std::to_string(tr.rank_of(tr.v - (1 << tr.send_step()))); }

}  // namespace

void binomial_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags, int root) {
  const Tree tr(t, root);
  const uint32_t full = uint32_t(std::min<size_t>(count, kBinomialBlock));
  const OpDesc d = node_desc(op, tr.p, std::max<uint32_t>(full, 1));  // admission, before any message
  if (count == 0) return;
  assert(tr.v != 0 || out);  // check_call's
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  AccLease acc(t.accumulators(), d);     // from the group's accumulator cache
  Reused<LaneExact> lanes(t.buffers());  // from the group's buffer cache
  Reused<double> doubles(t.buffers());
  Reused<uint8_t> msg(t.buffers()), rx(t.buffers());
  rx.resize(max_partial_bytes(full));
  const int top = tr.send_step();
  for (size_t off = 0; off < count; off += kBinomialBlock) {
    const uint32_t n = uint32_t(std::min<size_t>(count - off, kBinomialBlock));
    if (acc->desc().lanes != n)
      acc = AccLease(t.accumulators(), node_desc(op, tr.p, n));  // the last, shorter block (empty)
    else
      acc->reset();
    acc->add(src + off * isz, uint32_t(tr.v));
    for (int k = 0; k < top; ++k) {  // receive x_{v+2^k}, lowest step first
      const int child = tr.v + (1 << k);
      if (child >= tr.p) continue;
      const int from = tr.rank_of(child);
      const size_t len = t.recv(from, rx.data(), rx.size());
      merge_partial(*acc, op, rx.data(), len, from, PartialScratch{lanes, doubles});
    }
    if (tr.v != 0) {  // send x_v to v - 2^top and go idle for this block
      const size_t len = encode_partial(*acc, op, PartialScratch{lanes, doubles}, msg);
      t.send(tr.rank_of(tr.v - (1 << top)), msg.data(), len);
    } else {
      acc->finalize(dst + off * osz, flags ? flags + off : nullptr);
    }
  }
}

void binomial_broadcast(Links& t, void* data, size_t bytes, int root) {
  const Tree tr(t, root);
  constexpr size_t kSegment = size_t(kBinomialBlock) * 4;
  auto* p = static_cast<uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += kSegment) {
    const size_t len = std::min(kSegment, bytes - off);
    if (tree_broadcast(t, tr, p + off, len) != len)
      throw CollectiveError("binomial broadcast: " + parent_text(tr) + " sent a shorter segment than the " +
                            std::to_string(len) +
                            " bytes expected: every rank must call it with the same size and root");
  }
}

void binomial_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                        int root) {
  const Tree tr(t, root);
  assert(out || !count);  // check_call's
  std::vector<uint8_t> fl(tr.v == 0 ? count : 0);
  binomial_reduce(t, in, count, op, out, fl.data(), root);
  // Block by block: [1 if flags follow][the block's elements of op.out][its flags].
  const size_t osz = info(op.out).bytes;
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<uint8_t> buf(1 + size_t(kBinomialBlock) * (osz + 1));
  for (size_t off = 0; off < count; off += kBinomialBlock) {
    const size_t n = std::min<size_t>(count - off, kBinomialBlock);
    size_t len = 1 + n * osz;
    if (tr.v == 0) {
      const bool any = std::any_of(fl.begin() + off, fl.begin() + off + n, [](uint8_t f) { return f != 0; });
      buf[0] = any;
      std::memcpy(buf.data() + 1, dst + off * osz, n * osz);
      if (any) std::memcpy(buf.data() + len, fl.data() + off, n);
      tree_broadcast(t, tr, buf.data(), len + (any ? n : 0));
      continue;
    }
    const size_t got = tree_broadcast(t, tr, buf.data(), buf.size());
    const bool any = got > 0 && buf[0];
    if (got != len + (any ? n : 0))
      throw CollectiveError("binomial allreduce: " + parent_text(tr) + " sent a result block of " +
                            std::to_string(got) + " bytes for " + std::to_string(n) + " " + name(op.out) +
                            " elements: every rank must call it with the same op, count and root");
    std::memcpy(dst + off * osz, buf.data() + 1, n * osz);
    if (flags) {
      if (any)
        std::memcpy(flags + off, buf.data() + len, n);
      else
        std::memset(flags + off, 0, n);
    }
  }
  if (tr.v == 0 && flags && count) std::memcpy(flags, fl.data(), count);
}

void run_binomial(Context& ctx, const Call& c) {
  Links& t = *ctx.links;
  const CallScope call(t, c, Algorithm::BINOMIAL);  // every message of the call carries its tag (links.hpp)
  switch (c.coll) {
    case Collective::ALLREDUCE: return binomial_allreduce(t, c.in, c.count, c.op, c.out, c.flags);
    case Collective::REDUCE: return binomial_reduce(t, c.in, c.count, c.op, c.out, c.flags, c.root);
    case Collective::BROADCAST: return binomial_broadcast(t, c.out, c.count * info(c.op.dtype).bytes, c.root);
    case Collective::BARRIER: {  // an allreduce of one int32: nobody has the sum before everybody sent
      const ReduceOp count{Format::INT32, Format::INT32, Policy::KULISCH_FIXED, Exceptions::IEEE};
      int32_t one = 1, all = 0;
      return binomial_allreduce(t, &one, 1, count, &all, nullptr);
    }
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER: break;
  }
  throw std::logic_error("binomial: kAlgorithms offers a collective run_binomial does not run");
}

// Sends do not wait for the receiver: the blocks stream down the tree, and
// alpha is paid once per level, as the seed counts it. The root's first
// partial (level 0) is one rank's own input.
std::optional<double> predict_binomial(const Problem& pr, const CostParams& c, size_t) {
  using namespace model;
  const double n = double(pr.count) * double(pr.elem_bytes), L = ceil_log2(pr.p);
  const double lanes = block_lanes(pr, kBinomialBlock);
  const Rates r = rates(c, lanes);
  // The children encode the next block while the root merges this one: on
  // the root's path, each partial's bytes and its merge.
  const double w1 = c.partial_ratio_single < 0 ? c.partial_ratio : c.partial_ratio_single;
  const double merge = c.partial_ratio * c.beta + c.merge_share * (r.reduce - c.partial_ratio * c.beta);
  const double merge1 = w1 * c.beta + c.merge_share_single * (r.first - w1 * c.beta);
  // Each block is a message at every level: the root takes L of them a block,
  // and gives L. A block costs the stream's gap (and, with more ranks on a
  // host than cores, sometimes a wake-up: each is a message waited for).
  const double B = blocks(pr.count, kBinomialBlock), segs = blocks(size_t(n), size_t(kBinomialBlock) * 4);
  const double g = c.gap;
  const double reduce = L * (c.alpha + B * g) + n * merge1 + (L - 1) * n * merge;
  std::optional<double> path;
  double waits = 0;
  switch (pr.coll) {
    case Collective::REDUCE: waits = L * (1 + B), path = reduce; break;
    case Collective::BROADCAST: waits = L * (1 + segs), path = L * (c.alpha + segs * g + n * r.raw); break;
    case Collective::ALLREDUCE: waits = 2 * L * (1 + B), path = reduce + L * (c.alpha + B * g + n * r.result); break;
    case Collective::BARRIER: waits = 2 * L, path = 2 * L * c.alpha; break;
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER: break;
  }
  return host(pr, c, path, waits, double(pr.p / 2), lanes);
}

}  // namespace prism::coll
