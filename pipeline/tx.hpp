// TX: sends one port's frames to its device. Frames come from the port's TX
// ring (staged: reducers on other lcores) or straight from an Emitter on this
// lcore (send(): run to completion, no ring). Frames the device did not take
// wait here, in order, and nothing new is taken until they are out.
#pragma once

#include <rte_ring.h>
#include <rte_spinlock.h>

#include "stage.hpp"

namespace prism::pipe {

struct TxCounters {
  Counter packets, bytes, retries;
};
inline constexpr CounterField<TxCounters> kTxCounters[] = {
    {"packets", "frames the device took", &TxCounters::packets},
    {"bytes", "bytes of those frames", &TxCounters::bytes},
    {"retries", "bursts the device did not take whole (sent again later)", &TxCounters::retries},
};

// Bursts a TX stage may send in one poll when its ring holds them.
inline constexpr unsigned kTxBurstsPerPoll = 4;

class TxStage final : public Stage {
 public:
  // `ring`: the port's TX ring, or null when only send() feeds this stage.
  // `linearize`: the device cannot send chained mbufs (a fan-out's shared
  // payload is then copied behind each header here).
  // `queue`: the device's TX queue; `lock`: held around each burst when
  // lcores share that queue (the device has fewer TX queues than lcores).
  TxStage(uint16_t cfg_port, uint16_t dpdk_port, rte_ring* ring, bool linearize, uint16_t queue = 0,
          rte_spinlock_t* lock = nullptr);
  ~TxStage() override;
  const char* kind() const override { return "tx"; }
  unsigned poll(uint64_t now_tsc) override;
  // Nothing left to send, or nowhere to send it (the link is down).
  bool drained() const override {
    return (pending_at_ == pending_n_ && (!ring_ || rte_ring_empty(ring_))) || !link_.last();
  }
  const TxCounters& counters() const { return c_; }
  uint16_t port() const { return cfg_port_; }
  uint16_t queue() const { return queue_; }
  // Run to completion: sends frames made on this lcore straight to the
  // device, behind what the ring already gave it. Returns how many it took.
  unsigned send(rte_mbuf** m, unsigned n);

 private:
  // One rte_eth_tx_burst of k <= kBurst frames (linearized first where the
  // device cannot send chains), counted; returns how many the device took.
  uint16_t burst(rte_mbuf** m, uint16_t k);
  uint16_t cfg_port_, dpdk_port_, queue_;
  rte_spinlock_t* lock_;
  rte_ring* ring_;
  bool linearize_;
  rte_mbuf* pending_[kBurst];  // taken from the ring, not yet taken by the device
  uint16_t pending_n_ = 0, pending_at_ = 0;
  TxCounters c_;
  LinkWatch link_;
};

}  // namespace prism::pipe
