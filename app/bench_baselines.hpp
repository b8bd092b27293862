// The bench's two baselines, as the reducer shards' work in place of the
// switch's (pipe::RunOptions::work). Neither is a switch:
//   ForwardWork  every admitted packet goes back out of its input port
//                unchanged, with no slot and no arithmetic;
//   IdealWork    the same, after the data work that any reducer must do for
//                a contribution and nothing else: its elements added into
//                one accumulator that stays in this lcore's L1, and a result
//                body written from it over the packet's own elements (the
//                cheapest buffer a result can have); for fp32 both in one
//                pass (add_f32_out), for the narrower formats add_f32 then
//                round_f32. No slot, lookup, header, fan-out or check: a
//                ceiling for any reducer on the same packets, lcores and
//                devices. Float formats; what it sends is well formed but
//                for its UDP checksum.
#pragma once

#include <vector>

#include "reduce.hpp"

namespace prism::bench {

class ForwardWork final : public pipe::ShardWork {
 public:
  // Forward-only does not touch the mbufs on this lcore (each line read
  // here is one RX must take back): the input port says where they go.
  void serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t, pipe::Emitter& out) override {
    for (unsigned j = 0; j < n; ++j) out.forward(in_port, burst[j]);
  }
  void tick(uint64_t, pipe::Emitter&) override {}
};

class IdealWork final : public pipe::ShardWork {
 public:
  explicit IdealWork(bool prefetch) : prefetch_(prefetch) {}
  void serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t, pipe::Emitter& out) override;
  void tick(uint64_t, pipe::Emitter&) override {}

 private:
  bool prefetch_;
  std::vector<float> acc_;
};

}  // namespace prism::bench
