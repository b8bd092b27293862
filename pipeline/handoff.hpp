// How RX hands admitted packets on to the reducer shards: through the VOQ
// rings (staged), or by calling the shard on this lcore (run to completion).
// Chosen when the graph is wired (runtime.cpp); RX only calls put().
#pragma once

#include <rte_ring.h>

#include <vector>

#include "reduce.hpp"

namespace prism::pipe {

// Shared nothing: where an RX stage's admitted packets went. A device that
// steers (steer.hpp) leaves `dispatched` at 0.
struct RouteCounters {
  Counter local, dispatched, inbox_full;
};
inline constexpr CounterField<RouteCounters> kRouteCounters[] = {
    {"local", "admitted packets of this lcore's own shards (steered to it, or on the only queue)",
     &RouteCounters::local},
    {"dispatched", "admitted packets of another lcore's shards, passed to it through its inbox ring",
     &RouteCounters::dispatched},
    {"inbox_full", "hand-ons cut short because another lcore's inbox ring was full", &RouteCounters::inbox_full},
};

class Handoff {
 public:
  virtual ~Handoff() = default;
  virtual const RouteCounters* route() const { return nullptr; }
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

// `shards` by shard id: this lcore's, null for any other's.
class DirectHandoff final : public Handoff {
 public:
  DirectHandoff(std::vector<ReduceStage*> shards, uint16_t in_port) : shards_(std::move(shards)), port_(in_port) {}
  bool ready() override;
  unsigned put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) override;

 private:
  std::vector<ReduceStage*> shards_;
  uint16_t port_;
};

// Shared nothing: packets of this lcore's shards go on through `local`
// (DirectHandoff, or VoqHandoff for an arbiter), those of another lcore's
// to that lcore's inbox ring (multi-producer: every lcore may feed it).
// Cache-line aligned: its counters are written by its RX stage's lcore, and
// the next RX stage's may be another lcore's.
class alignas(RTE_CACHE_LINE_SIZE) RouteHandoff final : public Handoff {
 public:
  // `owner[shard]`: the lcore index that owns it; `inbox[lcore index]`.
  RouteHandoff(std::unique_ptr<Handoff> local, std::vector<uint16_t> owner, uint16_t self, std::vector<rte_ring*> inbox)
      : local_(std::move(local)), owner_(std::move(owner)), self_(self), inbox_(std::move(inbox)) {}
  const RouteCounters* route() const override { return &c_; }
  bool ready() override { return local_->ready(); }
  unsigned put(rte_mbuf** burst, const uint16_t* shard, unsigned n, uint64_t now_tsc) override;

 private:
  std::unique_ptr<Handoff> local_;
  std::vector<uint16_t> owner_;
  uint16_t self_;
  std::vector<rte_ring*> inbox_;
  RouteCounters c_;
};

}  // namespace prism::pipe
