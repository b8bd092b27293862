#include "coll/chain.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "coll/acc_cache.hpp"
#include "coll/algorithms.hpp"
#include "coll/blocks.hpp"
#include "coll/buffer_cache.hpp"
#include "coll/call_tag.hpp"

namespace prism::coll {
namespace {

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// rank adds fp32 partials as they come (FP32_ARRIVAL), in the chain's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

[[noreturn]] void wrong_length(const char* what, int from, size_t got, size_t want) {
  throw CollectiveError(std::string(what) + ": rank " + std::to_string(from) + " sent a segment of " +
                        std::to_string(got) + " bytes, expected " + std::to_string(want) +
                        ": every rank must call it with the same op, count and segments");
}

}  // namespace

size_t chain_segment_start(size_t n, size_t m, size_t s) {
  const size_t base = n / m, extra = n % m;
  return s * base + std::min(s, extra);
}

void chain_reduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                  size_t segments) {
  assert(segments >= 1);  // run_chain's
  const int p = t.size(), r = t.rank();
  const size_t m = segments;
  const size_t big = count / m + (count % m ? 1 : 0);
  node_desc(op, p, uint32_t(std::max<size_t>(big, 1)));  // admission, before any message
  if (count == 0) return;
  assert(r != 0 || out);  // check_call's
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  AccLease acc;  // from the group's accumulator cache (a KULISCH one is ~59 bytes a lane: made per call, page faults)
  Reused<LaneExact> lanes(t.buffers());  // from the group's buffer cache
  Reused<double> doubles(t.buffers());
  Reused<uint8_t> msg(t.buffers()), rx(t.buffers());
  rx.resize(r + 1 < p ? max_partial_bytes(uint32_t(big)) : 0);
  for (size_t s = 0; s < m; ++s) {
    const size_t lo = chain_segment_start(count, m, s), n = chain_segment_start(count, m, s + 1) - lo;
    if (n == 0) continue;
    if (!acc || acc->desc().lanes != n)
      acc = AccLease(t.accumulators(), node_desc(op, p, uint32_t(n)));  // empty
    else
      acc->reset();
    acc->add(src + lo * isz, uint32_t(r));
    if (r + 1 < p) {  // the partial of ranks r+1..p-1
      const size_t len = t.recv(r + 1, rx.data(), rx.size());
      merge_partial(*acc, op, rx.data(), len, r + 1, PartialScratch{lanes, doubles});
    }
    if (r > 0) {
      const size_t len = encode_partial(*acc, op, PartialScratch{lanes, doubles}, msg);
      t.send(r - 1, msg.data(), len);
    } else {
      acc->finalize(dst + lo * osz, flags ? flags + lo : nullptr);
    }
  }
}

void chain_broadcast(Links& t, void* data, size_t bytes, size_t segments) {
  assert(segments >= 1);  // run_chain's
  const int p = t.size(), r = t.rank();
  auto* d = static_cast<uint8_t*>(data);
  for (size_t s = 0; s < segments; ++s) {
    const size_t lo = chain_segment_start(bytes, segments, s), n = chain_segment_start(bytes, segments, s + 1) - lo;
    if (n == 0) continue;
    if (r > 0) {
      const size_t got = t.recv(r - 1, d + lo, n);
      if (got != n) wrong_length("chain broadcast", r - 1, got, n);
    }
    if (r + 1 < p) t.send(r + 1, d + lo, n);
  }
}

void chain_allreduce(Links& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags,
                     size_t segments) {
  assert(segments >= 1 && (out || !count));  // run_chain's and check_call's
  const int p = t.size(), r = t.rank();
  std::vector<uint8_t> fl(r == 0 ? count : 0);
  chain_reduce(t, in, count, op, out, fl.data(), segments);
  // Segment by segment, up the chain: [its elements of op.out][their flags,
  // when one is set] (blocks.hpp's results_message), forwarded as received.
  const size_t osz = info(op.out).bytes, m = segments;
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<uint8_t> buf((count / m + 1) * (osz + 1)), own_flags(r != 0 && !flags ? count / m + 1 : 0);
  for (size_t s = 0; s < m; ++s) {
    const size_t lo = chain_segment_start(count, m, s), n = chain_segment_start(count, m, s + 1) - lo;
    if (n == 0) continue;
    const uint8_t* data = buf.data();
    size_t len;
    if (r == 0) {
      std::tie(data, len) = detail::results_message(dst + lo * osz, fl.data() + lo, osz, n, buf);
    } else {
      len = t.recv(r - 1, buf.data(), buf.size());
      if (!detail::unpack_results(buf.data(), len, osz, n, dst + lo * osz, flags ? flags + lo : own_flags.data()))
        throw CollectiveError("chain allreduce: rank " + std::to_string(r - 1) + " sent a segment of " +
                              std::to_string(len) + " bytes, expected " + std::to_string(n * osz) + " or " +
                              std::to_string(n * (osz + 1)) +
                              " with flags: every rank must call it with the same op, count and segments");
    }
    if (r + 1 < p) t.send(r + 1, data, len);
  }
  if (r == 0 && flags && count) std::memcpy(flags, fl.data(), count);
}

double chain_model_time(double n, int p, double m, double t_start, double t_byte) {
  return (t_start + n / m * t_byte) * (double(p) + m - 2);
}

size_t chain_optimal_segments(size_t n, int p, double t_start, double t_byte) {
  if (n <= 1 || p <= 2) return 1;
  const double x = std::sqrt(double(n) * double(p - 2) * t_byte / t_start);
  if (!(x >= 1)) return 1;  // also a NaN (t_start = t_byte = 0)
  if (x >= double(n)) return n;
  const size_t lo = size_t(std::floor(x)), hi = lo + 1;
  if (hi > n) return lo;
  const double tl = chain_model_time(double(n), p, double(lo), t_start, t_byte);
  const double th = chain_model_time(double(n), p, double(hi), t_start, t_byte);
  return th < tl ? hi : lo;
}

namespace {

// T_start and T_byte of the chain's model for this collective, with gamma at
// segments of `lanes` lanes. The pipeline's pace is its slowest hop: one that
// passes a sum on (p >= 3), or at p = 2 the one hop, rank 1's own input.
std::optional<std::pair<double, double>> chain_terms(const Problem& pr, const CostParams& c, double lanes) {
  const model::Rates r = model::rates(c, lanes);
  const double hop = pr.p >= 3 ? r.reduce : r.first;
  switch (pr.coll) {
    case Collective::REDUCE: return std::pair{c.alpha, hop};
    case Collective::BROADCAST: return std::pair{c.alpha, r.raw};
    case Collective::ALLREDUCE: return std::pair{2 * c.alpha, hop + r.result};
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER:
    case Collective::BARRIER: break;
  }
  return std::nullopt;
}

}  // namespace

size_t chain_default_segments(size_t count) {
  return std::max<size_t>(8, (count + kChainMaxSegment - 1) / kChainMaxSegment);
}

size_t model_segments(const Problem& pr, const CostParams& c) {
  // gamma depends on the segment's size, the segment on gamma: the seed's m at
  // the largest segment's gamma, then once more at the segment that gives.
  const size_t bytes = pr.count * pr.elem_bytes;
  const size_t fewest = (pr.count + kChainMaxSegment - 1) / kChainMaxSegment;  // bounded memory
  size_t m = fewest;
  for (int round = 0; round < 2; ++round) {
    const auto terms = chain_terms(pr, c, double(pr.count) / double(std::max<size_t>(1, m)));
    if (!terms) return 1;
    m = chain_optimal_segments(bytes, pr.p, terms->first, terms->second);
    m = std::clamp<size_t>(std::max(m, fewest), 1, std::max<size_t>(1, pr.count));
  }
  return m;
}

void run_chain(Context& ctx, const Call& c) {
  Links& t = *ctx.links;
  const CallScope call(t, c, Algorithm::CHAIN);  // every message of the call carries its tag (links.hpp)
  const size_t m = c.segments ? c.segments : chain_default_segments(c.count);
  switch (c.coll) {
    case Collective::ALLREDUCE: return chain_allreduce(t, c.in, c.count, c.op, c.out, c.flags, m);
    case Collective::REDUCE: return chain_reduce(t, c.in, c.count, c.op, c.out, c.flags, m);
    case Collective::BROADCAST: return chain_broadcast(t, c.out, c.count * info(c.op.dtype).bytes, m);
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER:
    case Collective::BARRIER: break;
  }
  throw std::logic_error("chain: kAlgorithms offers a collective run_chain does not run");
}

std::optional<double> predict_chain(const Problem& pr, const CostParams& c, size_t segments) {
  if (!chain_terms(pr, c, 1)) return std::nullopt;
  if (!segments) segments = model_segments(pr, c);
  const double lanes = double(pr.count) / double(segments);
  const auto terms = chain_terms(pr, c, lanes);
  const double n = double(pr.count) * double(pr.elem_bytes);
  // Each of the p + m - 2 stages waits for a message (allreduce: two, its reduce and its broadcast).
  const double waits = (pr.coll == Collective::ALLREDUCE ? 2 : 1) * (pr.p + double(segments) - 2);
  return model::host(pr, c, chain_model_time(n, pr.p, double(segments), terms->first, terms->second), waits, 1, lanes);
}

}  // namespace prism::coll
