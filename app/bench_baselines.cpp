#include "bench_baselines.hpp"

#include <algorithm>

#include "arith/kernels.hpp"

namespace prism::bench {

// The same prefetching as the reducer's own path. The elements it writes
// are the running sum of what this shard has seen since rank 0's last
// contribution.
void IdealWork::serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t, pipe::Emitter& out) {
  const Kernels& k = best_kernels();
  if (prefetch_) pipe::prefetch_burst(burst, n);
  for (unsigned j = 0; j < n; ++j) {
    if (prefetch_ && j + 1 < n) pipe::prefetch_elements(burst[j + 1]);
    const wire::Parsed& p = pipe::meta(burst[j])->p;
    const Format f = p.h.dtype;
    if (!is_float(f) || p.h.encoding != wire::Encoding::DTYPE) continue;
    const uint32_t count = p.h.count;
    if (acc_.size() < count) acc_.resize(count, 0.0f);
    // Rank 0's contribution starts the sum again, as an op's first term
    // starts its slot: the lanes hold sums of about R terms, in range.
    if (p.h.sender == 0) std::fill_n(acc_.begin(), count, 0.0f);
    auto* body = const_cast<uint8_t*>(p.payload);
    if (f == Format::FP32) {
      k.add_f32_out(acc_.data(), body, body, count);  // one pass: add, then the sum over the elements
    } else {
      k.add_f32(f, acc_.data(), body, count);
      k.round_f32(f, acc_.data(), count, body);  // false (a special or an overflow) leaves garbage: fine here
    }
  }
  for (unsigned j = 0; j < n; ++j) out.forward(in_port, burst[j]);
}

}  // namespace prism::bench
