#include "voq.hpp"

#include <algorithm>

namespace prism::pipe {

Arbiter::Arbiter(ArbiterMode mode, uint32_t inputs, uint64_t seed) : mode_(mode), order_(inputs), rng_(seed) {
  for (uint32_t i = 0; i < inputs; ++i) order_[i] = i;
  if (mode_ == ArbiterMode::REVERSE) std::reverse(order_.begin(), order_.end());
}

std::span<const uint32_t> Arbiter::pass() {
  const uint32_t n = uint32_t(order_.size());
  switch (mode_) {
    case ArbiterMode::ROUND_ROBIN:  // each pass starts one input further on
      for (uint32_t k = 0; k < n; ++k) order_[k] = (next_ + k) % n;
      next_ = n ? (next_ + 1) % n : 0;
      break;
    case ArbiterMode::RANDOM: std::shuffle(order_.begin(), order_.end(), rng_); break;
    case ArbiterMode::REVERSE: break;  // fixed, last input first
  }
  return order_;
}

}  // namespace prism::pipe
