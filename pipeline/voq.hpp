// VOQ rings and the arbiter. A VOQ ring per (input port, shard) carries
// admitted packets from RX to the shard's reducer; the reducer's arbiter
// decides which input it serves first each pass. The arbiters exist to vary
// the arrival order on purpose (round robin, seeded random, reverse), so
// the reproducibility of a policy can be tested against the order.
#pragma once

#include <rte_ring.h>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "config/config.hpp"

namespace prism::pipe {

class Arbiter {
 public:
  Arbiter(ArbiterMode mode, uint32_t inputs, uint64_t seed);
  // The inputs (indices) in the order this pass serves them.
  std::span<const uint32_t> pass();
  ArbiterMode mode() const { return mode_; }

 private:
  ArbiterMode mode_;
  std::vector<uint32_t> order_;
  uint32_t next_ = 0;
  std::mt19937_64 rng_;
};

// One input of a shard: a VOQ ring and the switch port whose packets it carries.
struct VoqInput {
  rte_ring* ring;
  uint16_t port;
};

}  // namespace prism::pipe
