#include "coll/ring.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace prism::coll {
namespace {

// As binomial.cpp: FP32_BINOMIAL's accumulator has no lossless state, so a
// rank adds fp32 partials as they come (FP32_ARRIVAL), in the ring's order.
OpDesc node_desc(const ReduceOp& op, int p, uint32_t lanes) {
  OpDesc d = block_desc(op, uint32_t(p), lanes);
  if (d.policy == Policy::FP32_BINOMIAL) d.policy = Policy::FP32_ARRIVAL;
  return d;
}

size_t seg_start(size_t n, size_t p, size_t s) { return s * (n / p) + std::min(s, n % p); }

[[noreturn]] void wrong_length(int from, size_t got, size_t want) {
  throw CollectiveError("ring allreduce: rank " + std::to_string(from) + " sent a result segment of " +
                        std::to_string(got) + " bytes, expected " + std::to_string(want) +
                        ": every rank must call it with the same op and count");
}

}  // namespace

void ring_allreduce(Transport& t, const void* in, size_t count, const ReduceOp& op, void* out, uint8_t* flags) {
  for (Format f : {op.dtype, op.out})
    if (!format_from_code(uint8_t(f)))
      throw std::invalid_argument("ring allreduce: format code " + std::to_string(unsigned(f)) + " is not a format");
  const int p = t.size(), r = t.rank();
  const size_t full = std::min<size_t>(count, kRingBlock);
  node_desc(op, p, uint32_t(std::max<size_t>(full, 1)));  // admission, before any message
  if (count == 0) return;
  if (!out) throw std::invalid_argument("ring allreduce: every rank needs an output buffer");
  const size_t isz = info(op.dtype).bytes, osz = info(op.out).bytes, q = size_t(p);
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  std::vector<std::unique_ptr<Accumulator>> acc(q);
  std::vector<LaneExact> lanes;
  std::vector<uint8_t> fl(full), msg,
      rx(std::max(max_partial_bytes(uint32_t(full / q + 1)), (full / q + 1) * (osz + 1)));
  size_t n = 0;
  for (size_t off = 0; off < count; off += kRingBlock) {
    const size_t nb = std::min<size_t>(count - off, kRingBlock);
    auto start = [&](size_t s) { return seg_start(nb, q, s); };
    auto len = [&](size_t s) { return start(s + 1) - start(s); };
    if (nb != n) {
      n = nb;
      for (size_t s = 0; s < q; ++s) acc[s] = len(s) ? make_accumulator(node_desc(op, p, uint32_t(len(s)))) : nullptr;
    }
    for (size_t s = 0; s < q; ++s)
      if (acc[s]) {
        acc[s]->reset();
        acc[s]->add(src + (off + start(s)) * isz, uint32_t(r));
      }
    for (int k = 0; k + 1 < p; ++k) {  // reduce-scatter
      const size_t ss = size_t((r - k + 2 * p) % p), rs = size_t((r - k - 1 + 2 * p) % p);
      if (acc[ss]) encode_partial(*acc[ss], op, lanes, msg);
      size_t got = 0;
      if (acc[ss] && acc[rs])
        got = t.sendrecv(next, msg.data(), msg.size(), prev, rx.data(), rx.size());
      else if (acc[ss])
        t.send(next, msg.data(), msg.size());
      else if (acc[rs])
        got = t.recv(prev, rx.data(), rx.size());
      if (acc[rs]) merge_partial(*acc[rs], op, rx.data(), got, prev, lanes);
    }
    uint8_t* o = dst + off * osz;
    const size_t own = size_t((r + 1) % p);
    if (acc[own]) acc[own]->finalize(o + start(own) * osz, fl.data() + start(own));
    for (int k = 0; k + 1 < p; ++k) {  // allgather
      const size_t ss = size_t((r + 1 - k + 2 * p) % p), rs = size_t((r - k + 2 * p) % p);
      const size_t sl = len(ss), rl = len(rs);
      if (sl) {
        msg.resize(sl * (osz + 1));
        std::memcpy(msg.data(), o + start(ss) * osz, sl * osz);
        std::memcpy(msg.data() + sl * osz, fl.data() + start(ss), sl);
      }
      size_t got = 0;
      if (sl && rl)
        got = t.sendrecv(next, msg.data(), msg.size(), prev, rx.data(), rx.size());
      else if (sl)
        t.send(next, msg.data(), msg.size());
      else if (rl)
        got = t.recv(prev, rx.data(), rx.size());
      if (rl) {
        if (got != rl * (osz + 1)) wrong_length(prev, got, rl * (osz + 1));
        std::memcpy(o + start(rs) * osz, rx.data(), rl * osz);
        std::memcpy(fl.data() + start(rs), rx.data() + rl * osz, rl);
      }
    }
    if (flags) std::memcpy(flags + off, fl.data(), nb);
  }
}

}  // namespace prism::coll
