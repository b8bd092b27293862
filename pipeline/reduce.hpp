// A reducer shard: its arbiter over the VOQ rings (one per input port), the
// work it does with each burst, and the Emitter its frames leave through.
// The switch's work is ReducerWork (sw::Reducer: slots, accumulators,
// RESULTs); the bench brings baselines of its own (forward-only, the ideal
// reducer) as other ShardWork.
#pragma once

#include <rte_prefetch.h>

#include <atomic>
#include <memory>
#include <utility>
#include <vector>

#include "emit.hpp"
#include "stage.hpp"
#include "switch/reducer.hpp"
#include "voq.hpp"

namespace prism::pipe {

class ShardWork {
 public:
  virtual ~ShardWork() = default;
  // A burst of admitted packets that came in on switch port `in_port`;
  // takes every mbuf (frees or forwards it).
  virtual void serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_ns, Emitter& out) = 0;
  // Every millisecond, on the shard's lcore.
  virtual void tick(uint64_t now_ns, Emitter& out) = 0;
  // The shard's reducer, when the work is the switch's.
  virtual const sw::Reducer* reducer() const { return nullptr; }
  // A graceful stop (sw::Reducer::drain, abandon_all): no new ops; then give up what is open.
  virtual void drain() {}
  virtual void abandon_all(Emitter&) {}
};

// What a shard's work is told when it is made.
struct WorkContext {
  uint32_t shard;
  const sw::Directory& dir;
  uint32_t slots;
  bool prefetch;             // RX runs on another lcore: fetch the packets' lines ahead
  size_t result_mtu = 9000;  // the smallest IP MTU of the ports (a RESULT must fit it)
};

// Prefetching for packets written on another lcore: their metadata and both
// lines of each mbuf's header (the bulk free reads the reference count,
// segments and pool), then the elements of one packet while another is added.
inline void prefetch_elements(rte_mbuf* m) {
  const Meta* mt = meta(m);
  for (size_t off = 0; off < mt->p.payload_len; off += RTE_CACHE_LINE_SIZE) rte_prefetch0(mt->p.payload + off);
}
inline void prefetch_burst(rte_mbuf** burst, unsigned n) {
  for (unsigned k = 0; k < n; ++k) {
    rte_prefetch0(meta(burst[k]));
    rte_prefetch0(burst[k]);
    rte_prefetch0(&burst[k]->cacheline1);
  }
  if (n) prefetch_elements(burst[0]);
}

// The switch: each packet to the shard's sw::Reducer.
class ReducerWork final : public ShardWork {
 public:
  explicit ReducerWork(const WorkContext& c);
  void serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_ns, Emitter& out) override;
  void tick(uint64_t now_ns, Emitter& out) override { red_.tick(now_ns, out); }
  const sw::Reducer* reducer() const override { return &red_; }
  void drain() override { red_.drain(); }
  void abandon_all(Emitter& out) override { red_.abandon_all(out); }

 private:
  sw::Reducer red_;
  bool prefetch_;
};

struct ReduceCounters {
  Counter dequeued, bursts, backpressured, ticks;
};
inline constexpr CounterField<ReduceCounters> kReduceCounters[] = {
    {"dequeued", "packets taken from the shard's inputs", &ReduceCounters::dequeued},
    {"bursts", "bursts served", &ReduceCounters::bursts},
    {"backpressured", "polls skipped because frames waited for TX room", &ReduceCounters::backpressured},
    {"ticks", "millisecond ticks (retention, retries, timeouts)", &ReduceCounters::ticks},
};

class ReduceStage final : public Stage {
 public:
  // `inputs`: the VOQ rings it drains, by its arbiter's order (none when
  // one lcore runs every stage and RX hands bursts over with take()).
  // `ports`: one more than the highest switch port id.
  ReduceStage(uint32_t shard, std::unique_ptr<ShardWork> work, std::unique_ptr<Emitter> out,
              std::vector<VoqInput> inputs, ArbiterMode mode, uint64_t seed, uint64_t tsc_hz, uint16_t ports);
  const char* kind() const override { return "reduce"; }
  unsigned poll(uint64_t now_tsc) override;
  bool drained() const override { return out_->drained(); }
  // Run to completion: a burst from RX on this lcore. Takes them all.
  void take(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_tsc);
  // False while the frames already made wait for TX room: RX then takes no
  // more (the same backpressure a full TX ring gives).
  bool ready() { return out_->flush(); }

  uint32_t shard() const { return shard_; }
  const ShardWork& work() const { return *work_; }
  const Emitter& emitter() const { return *out_; }
  const ReduceCounters& counters() const { return c_; }
  ArbiterMode arbiter() const { return arb_.mode(); }
  // Packets served from each switch port (by port id; 0 past the end).
  uint64_t served(uint16_t port) const { return port < served_n_ ? served_[port].get() : 0; }
  // A copy of the reducer's statistics (and its jobs'), refreshed by the
  // owning lcore every tick; empty when the work has no reducer.
  sw::ReducerStats snapshot(std::vector<std::pair<uint32_t, sw::JobStats>>* jobs = nullptr) const;
  // A graceful stop: the runtime's phase (0 running, 1 draining, 2 abandoning), which the
  // shard acts on from its own lcore at its next poll; seen() is the last phase it acted on.
  void follow(const std::atomic<int>* phase) { phase_ = phase; }
  int seen() const { return seen_.load(std::memory_order_acquire); }

 private:
  void serve(uint16_t in_port, rte_mbuf** burst, unsigned n, uint64_t now_ns);
  void refresh_snapshot();
  void on_phase(int phase);
  uint32_t shard_;
  const std::atomic<int>* phase_ = nullptr;
  std::atomic<int> seen_{0};
  std::unique_ptr<ShardWork> work_;
  std::unique_ptr<Emitter> out_;
  std::vector<VoqInput> in_;
  Arbiter arb_;
  uint64_t tsc_hz_, next_tick_ = 0;
  double ns_per_tsc_;
  ReduceCounters c_;
  std::unique_ptr<Counter[]> served_;  // by switch port id
  uint16_t served_n_ = 0;
  mutable std::atomic<uint32_t> seq_{0};
  sw::ReducerStats snap_;
  std::vector<std::pair<uint32_t, sw::JobStats>> snap_jobs_;
};

}  // namespace prism::pipe
