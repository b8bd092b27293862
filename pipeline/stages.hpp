// The switch's DPDK stages. Each is thin: it moves mbufs between ports and
// rings and calls lib/ (wire::parse, sw::admit, sw::Reducer) for everything
// else. A stage is polled by exactly one lcore; stages never lock.
//
//   port --RX--> parse/admit --VOQ ring [port][shard]--> arbiter --> reducer shard
//        <--TX-- tx ring [port] <------------------------------------ RESULT / PARTIAL / NACK
//
// Backpressure: a stage that cannot hand its burst on keeps it and stops
// pulling more (RX stops polling its port), so a full ring never drops
// silently. Every drop has a reason and a counter.
#pragma once

#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "proto/packet.hpp"
#include "switch/reducer.hpp"

namespace prism::pipe {

inline constexpr uint16_t kBurst = 32;

// What RX learned about a packet, carried in the mbuf's private area so the
// reducer does not parse it again. The Parsed pointers point into the mbuf.
// (The input port is not here: the VOQ ring a packet arrives on says it.)
//
// A RESULT's frame queued for egress replication carries its fan-out here
// instead (and the fan-out flag, fanout_flag(), in ol_flags): the reducer
// builds one frame per port, for the port's first destination, and the
// port's TX stage copies it for the port's other destinations, as a switch's
// replication engine does after its pipeline. Each copy is then made on the
// lcore that sends it, in buffers that lcore frees.
struct Replication {
  const sw::Dest* dests;  // the job's result destinations (the directory's: they outlive the runtime's frames)
  wire::SharedPart sh;
  uint16_t n;      // dests[0, n): copies go to those on the frame's port, after dests[first]
  uint16_t first;  // whose frame this is
  uint16_t ip_id;  // dests[i]'s copy has IPv4 id ip_id + i
};
struct Meta {
  wire::Parsed p;
  sw::Verdict v;
  Replication f;
};
inline Meta* meta(rte_mbuf* m) { return static_cast<Meta*>(rte_mbuf_to_priv(m)); }
inline constexpr uint16_t kPrivSize = uint16_t((sizeof(Meta) + RTE_MBUF_PRIV_ALIGN - 1) & ~(RTE_MBUF_PRIV_ALIGN - 1));
// The mbuf dynamic flag that marks a frame carrying a Replication (registered
// with DPDK on first use; throws if it cannot be).
uint64_t fanout_flag();

// A counter one lcore writes and the telemetry thread reads.
struct Counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n = 1) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

// Polls a port's link state every millisecond: a port whose link is down is
// not polled (a memif peer that went away unmaps the shared rings).
class LinkWatch {
 public:
  bool up(uint16_t dpdk_port, uint64_t now_tsc);
  bool last() const { return up_; }

 private:
  uint64_t next_ = 0;
  bool up_ = true;
};

// Cache-line aligned: each stage's counters are written by the lcore that
// runs it, and a stage allocated beside another lcore's must not share a line.
class alignas(RTE_CACHE_LINE_SIZE) Stage {
 public:
  virtual ~Stage() = default;
  // TSC cycles spent in polls that moved packets (the lcore loop measures them).
  Counter busy_tsc;
  virtual const char* kind() const = 0;
  // One pass; returns the packets it moved (0 when idle).
  virtual unsigned poll(uint64_t now_tsc) = 0;
  // True when it holds nothing (for --exit-when-idle).
  virtual bool drained() const = 0;
};

class ReduceStage;
class TxStage;

struct RxCounters {
  Counter packets, bytes, polls_skipped, refused[size_t(wire::Refusal::kCount)], dropped[size_t(sw::Drop::kCount)];
  Counter enqueued, nacks, multi_segment;
  Counter hw_checksums;  // packets whose sums the device verified (RX checksum offload)
};

// RX + parse + admit for one port; enqueues admitted packets on the VOQ ring
// of the shard that owns their (job, op, chunk).
class RxStage final : public Stage {
 public:
  RxStage(uint16_t cfg_port, uint16_t dpdk_port, const sw::Directory& dir, std::vector<rte_ring*> voq, rte_ring* tx,
          rte_mempool* pool);
  const char* kind() const override { return "rx"; }
  unsigned poll(uint64_t now_tsc) override;
  bool drained() const override { return pending_n_ == 0; }
  const RxCounters& counters() const { return c_; }
  uint64_t last_rx_tsc() const { return last_rx_.load(std::memory_order_relaxed); }
  uint16_t port() const { return cfg_port_; }
  // Run to completion: when one lcore runs every stage, admitted packets go
  // straight to their shard's reducer (`shards[s]`, where this port is input
  // `input`), not through a VOQ ring. The reducer's frames then go straight
  // to the ports too (Emitter::send_direct).
  void run_to_completion(std::vector<ReduceStage*> shards, uint32_t input) {
    direct_ = std::move(shards);
    direct_input_ = input;
  }

 private:
  void refuse(rte_mbuf* m, const wire::Parsed* p, sw::Drop why, bool nack);
  bool hand_on();                      // enqueues what is pending; false while a ring is full
  void hand_direct(uint64_t now_tsc);  // run to completion: each shard's run to its reducer
  uint16_t cfg_port_, dpdk_port_;
  const sw::Directory& dir_;
  std::vector<rte_ring*> voq_;  // one per shard
  rte_ring* tx_;                // this port's TX ring (NACKs)
  rte_mempool* pool_;
  rte_mbuf* pending_[kBurst];  // admitted, waiting for ring space
  uint16_t pending_shard_[kBurst];
  uint16_t pending_n_ = 0, pending_at_ = 0;
  RxCounters c_;
  std::atomic<uint64_t> last_rx_{0};
  LinkWatch link_;
  std::vector<ReduceStage*> direct_;  // by shard; empty: staged (VOQ rings)
  uint32_t direct_input_ = 0;
};

// How a fan-out's copies for one port are made (config::Fanout, as the port's device allows).
enum class Copies : uint8_t {
  WHOLE,      // a whole frame each, here (`fanout: copy`)
  CHAINED,    // a header mbuf each, chained to a clone of one payload mbuf (`fanout: chain`)
  AT_EGRESS,  // one whole frame here, copied by the port's TX stage (`fanout: egress`)
};

// Turns what a reducer emits into mbufs and queues them on the TX ring of
// their port. A fan-out's copies share what they can: the header's bytes and
// the checksum of header and body are made once (wire::share). Each copy is
// a whole frame (`fanout: copy`); or, with `fanout: chain` on a port whose
// device sends chained mbufs, a small header mbuf chained to an indirect
// clone of one payload mbuf that holds the body for every copy; or, with
// `fanout: egress`, one whole frame per port that its TX stage copies.
class Emitter final : public sw::Sink {
 public:
  // `copies[port]`: how copies to that port are made (WHOLE past its end).
  Emitter(std::vector<rte_ring*> tx_by_port, rte_mempool* pool, std::vector<Copies> copies)
      : tx_(std::move(tx_by_port)),
        pool_(pool),
        copies_(std::move(copies)),
        pending_(tx_.size()),
        port_seen_(tx_.size()),
        fanout_flag_(fanout_flag()) {
    note_egress();
  }
  void send(sw::Out&& o) override;
  void send_all(const wire::Header& h, const std::shared_ptr<const std::vector<uint8_t>>& body,
                std::span<const sw::Dest> to) override;
  // Queues an mbuf unchanged for `port` (forward-only mode).
  void forward(uint16_t port, rte_mbuf* m) { queue(port, m); }
  // Queues what is pending; false while some is still waiting for ring space.
  bool flush();
  // Run to completion: frames for port p go straight to tx[p]'s device, not
  // through its TX ring (null entries keep the ring).
  void send_direct(std::vector<TxStage*> tx) {
    direct_tx_ = std::move(tx);
    note_egress();
  }
  bool drained() const { return pending_n_ == 0; }
  Counter frames, payload_copies, alloc_failures;

 private:
  // One copy: `m` is a fresh mbuf (the caller's) that becomes the frame.
  // False when it could not be made (`m` is freed and the loss counted).
  bool build(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh,
             const std::shared_ptr<const std::vector<uint8_t>>& body, uint16_t ip_id);
  // Whether copies for `port` are made at its TX stage (whole copies through
  // its ring) rather than here (chained copies, or run to completion).
  bool replicated_at_egress(uint16_t port) const {
    return port < copies_.size() && copies_[port] == Copies::AT_EGRESS && tx_[port] &&
           !(port < direct_tx_.size() && direct_tx_[port]);
  }
  // Inline while the port's queue has room; growing it, or a port that does
  // not exist, goes out of line (the fast path then saves no registers).
  void queue(uint16_t port, rte_mbuf* m) {
    if (port < pending_.size() && pending_[port].size() < pending_[port].capacity() && tx_[port]) {
      pending_[port].push_back(m);
      ++pending_n_;
      frames.add();
      return;
    }
    queue_slow(port, m);
  }
  __attribute__((noinline)) void queue_slow(uint16_t port, rte_mbuf* m);
  rte_mbuf* payload_for(const std::shared_ptr<const std::vector<uint8_t>>& body);
  uint32_t sum_for(const std::shared_ptr<const std::vector<uint8_t>>& body);
  std::vector<rte_ring*> tx_;
  rte_mempool* pool_;
  std::vector<Copies> copies_;
  std::shared_ptr<const std::vector<uint8_t>> sum_body_;  // whose one's-complement sum sum_ is
  uint32_t sum_ = 0;
  // Frames waiting for their port's TX ring, by port: each port's run goes
  // on its ring in one operation however the fan-out interleaves ports.
  std::vector<std::vector<rte_mbuf*>> pending_;
  size_t pending_n_ = 0;
  // Held, not just compared by address: a freed body's address may come back for another.
  std::shared_ptr<const std::vector<uint8_t>> last_body_;
  rte_mbuf* last_payload_ = nullptr;
  uint16_t ip_id_ = 0;
  std::vector<TxStage*> direct_tx_;  // by port; empty: TX rings
  std::vector<uint8_t> port_seen_;   // send_all's scratch: ports given a replicated frame, by port
  uint64_t fanout_flag_;
  bool egress_ = false;  // some port's copies are made at its TX stage
  void note_egress() {
    egress_ = false;
    for (uint16_t p = 0; p < tx_.size(); ++p) egress_ |= replicated_at_egress(p);
  }
};

enum class Arbiter : uint8_t { ROUND_ROBIN, RANDOM, REVERSE };

struct ReduceCounters {
  Counter dequeued, bursts, backpressured, ticks;
};

// What a reducer shard does with its packets: reduce them (the switch), or
// one of two baselines for benchmarks, which are not switches:
//   FORWARD  every admitted packet goes back out of its input port unchanged,
//            with no slot and no arithmetic;
//   IDEAL    the same, after the data work that any reducer must do for a
//            contribution and nothing else: its elements added into one
//            accumulator that stays in this lcore's L1, and a result body
//            written from it, over the packet's own elements (the cheapest
//            buffer a result can have); for fp32 both in one pass
//            (add_f32_out), for the narrower formats add_f32 then round_f32.
//            No slot, lookup, header, fan-out or check: a ceiling for any
//            reducer on the same packets, lcores and devices. Float formats;
//            what it sends is well formed but for its UDP checksum.
enum class Baseline : uint8_t { NONE, FORWARD, IDEAL };

// One reducer shard: an arbiter over its VOQ rings (one per input port) and
// the shard's slots.
class ReduceStage final : public Stage {
 public:
  // `in_ports[i]`: the switch port whose packets `inputs[i]` carries.
  ReduceStage(uint32_t shard, const sw::Directory& dir, std::vector<rte_ring*> inputs, std::vector<uint16_t> in_ports,
              std::vector<rte_ring*> tx_by_port, std::vector<Copies> copies, rte_mempool* pool, Arbiter mode,
              uint64_t seed, uint32_t slots, uint64_t tsc_hz, Baseline baseline = Baseline::NONE);
  const char* kind() const override { return "reduce"; }
  unsigned poll(uint64_t now_tsc) override;
  bool drained() const override { return emitter_.drained(); }
  const sw::Reducer& reducer() const { return red_; }
  const ReduceCounters& counters() const { return c_; }
  // A copy of the reducer's statistics (and its jobs'), refreshed by the owning lcore every tick.
  sw::ReducerStats snapshot(std::vector<std::pair<uint32_t, sw::JobStats>>* jobs = nullptr) const;
  const char* mode_name() const;
  uint64_t served(uint32_t input) const { return served_[input].get(); }
  uint32_t inputs() const { return uint32_t(in_.size()); }
  uint32_t shard() const { return shard_; }
  const Emitter& emitter() const { return emitter_; }
  Emitter& emitter() { return emitter_; }
  // Run to completion: a burst from input `input` (its RX stage's port),
  // handed over directly by the RX stage on this lcore. Takes them all.
  void take(uint32_t input, rte_mbuf** burst, unsigned n, uint64_t now_tsc);
  // False while the frames already made wait for TX room: RX then takes no
  // more (the same backpressure a full TX ring gives).
  bool ready() { return emitter_.flush(); }
  // RX runs on this lcore too: the packets' lines are already in its cache,
  // so they are not prefetched.
  void same_lcore_as_rx(bool same) { prefetch_ = !same; }

 private:
  void serve(uint32_t input, rte_mbuf** burst, unsigned n, uint64_t now_ns);
  void prefetch_burst(rte_mbuf** burst, unsigned n) const;
  void prefetch_elements(rte_mbuf* m) const;
  void ideal(rte_mbuf** burst, unsigned n);
  uint32_t shard_;
  std::vector<rte_ring*> in_;
  std::vector<uint16_t> in_port_;
  Emitter emitter_;
  sw::Reducer red_;
  Arbiter mode_;
  Baseline baseline_;
  bool prefetch_ = true;
  std::vector<float> ideal_acc_;  // Baseline::IDEAL's accumulator
  std::mt19937_64 rng_;
  std::vector<uint32_t> order_;
  uint32_t next_ = 0;
  uint64_t tsc_hz_, next_tick_ = 0;
  double ns_per_tsc_;
  ReduceCounters c_;
  std::unique_ptr<Counter[]> served_;  // packets taken from each input ring
  mutable std::atomic<uint32_t> seq_{0};
  sw::ReducerStats snap_;
  std::vector<std::pair<uint32_t, sw::JobStats>> snap_jobs_;
};

struct TxCounters {
  Counter packets, bytes, retries;
  Counter copies, alloc_failures;  // egress replication: copies made, and copies lost for want of a buffer
};

// Drains one port's TX ring into the port.
// Bursts a TX stage may send in one poll when its ring holds them.
inline constexpr unsigned kTxBurstsPerPoll = 4;

class TxStage final : public Stage {
 public:
  // `linearize`: the device cannot send chained mbufs (a fan-out's shared
  // payload is then copied behind each header here, at TX).
  // `replicates`: frames carrying a Replication may come on the ring
  // (`fanout: egress`); `pool`: where their copies come from.
  TxStage(uint16_t cfg_port, uint16_t dpdk_port, rte_ring* ring, bool linearize, bool replicates, rte_mempool* pool);
  ~TxStage() override;
  const char* kind() const override { return "tx"; }
  unsigned poll(uint64_t now_tsc) override;
  // Nothing left to send, or nowhere to send it (the link is down).
  bool drained() const override {
    return (pending_n_ == 0 && in_at_ == in_n_ && !fanout_ && rte_ring_empty(ring_)) || !link_.last();
  }
  const TxCounters& counters() const { return c_; }
  uint16_t port() const { return cfg_port_; }
  // Run to completion: sends frames made on this lcore straight to the
  // device, behind what the ring already gave it. Returns how many it took.
  unsigned send(rte_mbuf** m, unsigned n);

 private:
  // One rte_eth_tx_burst of k <= kBurst frames (linearized first where the
  // device cannot send chains), counted; returns how many the device took.
  uint16_t burst(rte_mbuf** m, uint16_t k);
  // Up to kBurst frames to send into out[]: the ring's, with the copies of
  // each replicated frame behind it. Returns how many.
  uint16_t fill(rte_mbuf** out);
  // Copies of fanout_ for the next destinations on this port, into out[0, room).
  uint16_t copies(rte_mbuf** out, uint16_t room);
  uint16_t cfg_port_, dpdk_port_;
  rte_ring* ring_;
  bool linearize_, replicates_;
  rte_mempool* pool_;
  uint64_t fanout_flag_;
  rte_mbuf* pending_[kBurst];  // frames for the device
  uint16_t pending_n_ = 0, pending_at_ = 0;
  rte_mbuf* in_[kBurst];  // taken from the ring, not yet in pending_
  uint16_t in_n_ = 0, in_at_ = 0;
  rte_mbuf* fanout_ = nullptr;  // the replicated frame being copied (our reference), and its next destination
  uint16_t fanout_next_ = 0;
  TxCounters c_;
  LinkWatch link_;
};

}  // namespace prism::pipe
