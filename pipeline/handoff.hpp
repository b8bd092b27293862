// How RX hands admitted packets on to the reducer shards: through the VOQ
// rings (staged), or by calling the shard on this lcore (run to completion).
// Chosen when the graph is wired (runtime.cpp); RX only calls put().
#pragma once

#include <rte_ring.h>

#include <vector>

#include "reduce.hpp"

namespace prism::pipe {

class Handoff {
 public:
  virtual ~Handoff() = default;
  // False while what was handed on cannot move on (its frames wait for TX
  // room): RX then takes no more from its port.
  virtual bool ready() = 0;
  // Hands on burst[0, n), packet i to shard[i]; returns how many it took,
  // from the front (the rest stay with RX for the next pass).
  virtual unsigned put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) = 0;
};

// One ring operation per run of packets for the same shard: a ring's head
// and tail move once per run, not once per packet (they are shared with
// the reducer's lcore).
class VoqHandoff final : public Handoff {
 public:
  explicit VoqHandoff(std::vector<rte_ring*> by_shard) : voq_(std::move(by_shard)) {}
  bool ready() override { return true; }  // a full ring takes fewer: RX keeps the rest
  unsigned put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) override;

 private:
  std::vector<rte_ring*> voq_;
};

class DirectHandoff final : public Handoff {
 public:
  DirectHandoff(std::vector<ReduceStage*> shards, uint16_t in_port) : shards_(std::move(shards)), port_(in_port) {}
  bool ready() override;
  unsigned put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) override;

 private:
  std::vector<ReduceStage*> shards_;
  uint16_t port_;
};

}  // namespace prism::pipe
