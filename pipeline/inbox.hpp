// An lcore's inbox, in the shared-nothing layout: the packets of its shards
// that another lcore's RX received (the device did not steer them to this
// lcore's queue) come in through one multi-producer ring and go on to the
// shards as RX's own would (each packet's port and shard are in its Meta).
#pragma once

#include <rte_ring.h>

#include <memory>
#include <vector>

#include "handoff.hpp"
#include "stage.hpp"

namespace prism::pipe {

struct InboxCounters {
  Counter packets, backpressure;
};
inline constexpr CounterField<InboxCounters> kInboxCounters[] = {
    {"packets", "packets other lcores passed to this one's shards", &InboxCounters::packets},
    {"backpressure", "polls skipped while this lcore's shards could not take more", &InboxCounters::backpressure},
};

class InboxStage final : public Stage {
 public:
  // `local[port id]`: how packets that came in on that switch port reach this lcore's shards.
  InboxStage(unsigned lcore, rte_ring* ring, std::vector<std::unique_ptr<Handoff>> local)
      : lcore_(lcore), ring_(ring), local_(std::move(local)) {}
  ~InboxStage() override;
  const char* kind() const override { return "inbox"; }
  unsigned poll(uint64_t now_tsc) override;
  bool drained() const override { return at_ == n_ && rte_ring_empty(ring_); }
  const InboxCounters& counters() const { return c_; }
  unsigned lcore() const { return lcore_; }

 private:
  bool hand_on(uint64_t now_tsc);
  unsigned lcore_;
  rte_ring* ring_;
  std::vector<std::unique_ptr<Handoff>> local_;
  rte_mbuf* burst_[kBurst];
  uint16_t shard_[kBurst];
  uint16_t n_ = 0, at_ = 0;
  InboxCounters c_;
};

}  // namespace prism::pipe
