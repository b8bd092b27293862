// The Emitter turns what a reducer (or RX, for NACKs) emits into mbufs and
// hands them to an Egress: a port's TX ring, or its TX stage on this lcore.
//
// A RESULT is made once: result_buffer() gives the reducer the payload area
// of the frame it will be sent in, the reducer finalizes into it, and
// send_result() sums that body once and makes each destination's copy from
// it. What every copy shares (the PRISM header's bytes and the checksum of
// header and body) is made once (wire::share); each destination costs its
// Ethernet, IPv4 and UDP headers (a per-destination template) and, for a
// whole copy, one memcpy of the body. With `fanout: chain` on a port whose
// device sends chained mbufs, a copy is instead a small header mbuf chained
// to an indirect clone of one payload mbuf.
#pragma once

#include <rte_mempool.h>
#include <rte_ring.h>

#include <memory>
#include <vector>

#include "stage.hpp"
#include "tx.hpp"

namespace prism::pipe {

// Where an Emitter's frames go for each switch port.
class Egress {
 public:
  virtual ~Egress() = default;
  virtual bool has(uint16_t port) const = 0;
  // Takes up to n frames for `port`, in order; returns how many it took.
  virtual unsigned put(uint16_t port, rte_mbuf** m, unsigned n) = 0;
};

// Staged: each port's TX ring (multi-producer: RX and every shard feed it).
class RingEgress final : public Egress {
 public:
  explicit RingEgress(std::vector<rte_ring*> by_port) : ring_(std::move(by_port)) {}
  bool has(uint16_t port) const override { return port < ring_.size() && ring_[port]; }
  unsigned put(uint16_t port, rte_mbuf** m, unsigned n) override {
    return rte_ring_enqueue_burst(ring_[port], reinterpret_cast<void**>(m), n, nullptr);
  }

 private:
  std::vector<rte_ring*> ring_;
};

// Run to completion: the port's TX stage, on this lcore, sends them now.
class DirectEgress final : public Egress {
 public:
  explicit DirectEgress(std::vector<TxStage*> by_port) : tx_(std::move(by_port)) {}
  bool has(uint16_t port) const override { return port < tx_.size() && tx_[port]; }
  unsigned put(uint16_t port, rte_mbuf** m, unsigned n) override { return tx_[port]->send(m, n); }

 private:
  std::vector<TxStage*> tx_;
};

// How a fan-out's copies for one port are made (config's fanout, as the port's device allows).
enum class Copies : uint8_t {
  WHOLE,    // a whole frame each
  CHAINED,  // a header mbuf each, chained to a clone of one payload mbuf
};

struct EmitCounters {
  Counter frames, payload_copies, alloc_failures;
};
inline constexpr CounterField<EmitCounters> kEmitCounters[] = {
    {"frames", "frames made and queued for a port", &EmitCounters::frames},
    {"payload_copies", "shared payload mbufs made for chained copies", &EmitCounters::payload_copies},
    {"alloc_failures", "frames lost for want of a buffer (or to a port with no device)", &EmitCounters::alloc_failures},
};

// Cache-line aligned: its counters are written per frame by its lcore, and
// the emitter allocated next to it may be another lcore's.
class alignas(RTE_CACHE_LINE_SIZE) Emitter final : public sw::Sink {
 public:
  // `copies[port]`: how copies to that port are made (WHOLE past its end).
  Emitter(std::unique_ptr<Egress> egress, rte_mempool* pool, std::vector<Copies> copies, size_t ports);
  ~Emitter() override;
  void send(sw::Out&& o) override;
  uint8_t* result_buffer(size_t bytes) override;
  void send_result(const wire::Header& h, size_t len, std::span<const sw::Dest> to) override;
  // Queues an mbuf unchanged for `port` (the bench's baselines).
  void forward(uint16_t port, rte_mbuf* m) { queue(port, m); }
  // Hands on what is pending; false while some still waits for room.
  bool flush();
  bool drained() const { return pending_n_ == 0; }
  const EmitCounters& counters() const { return c_; }
  // NACKs sent out of `port` by this emitter.
  uint64_t nacks(uint16_t port) const { return port < ports_ ? nacks_[port].get() : 0; }

 private:
  // Inline while the port's queue has room; growing it, or a port that does
  // not exist, goes out of line (the fast path then saves no registers).
  void queue(uint16_t port, rte_mbuf* m) {
    if (port < pending_.size() && pending_[port].size() < pending_[port].capacity()) {
      pending_[port].push_back(m);
      ++pending_n_;
      c_.frames.add();
      return;
    }
    queue_slow(port, m);
  }
  __attribute__((noinline)) void queue_slow(uint16_t port, rte_mbuf* m);
  bool chained(uint16_t port) const { return port < copies_.size() && copies_[port] == Copies::CHAINED; }
  // Fresh mbufs for up to kBurst copies, in one allocation where the pool can.
  void alloc(rte_mbuf** m, unsigned n);
  // One whole copy of the result's body for `d`, into fresh mbuf `m`.
  void whole_copy(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh, const uint8_t* body, uint16_t ip_id);
  // One chained copy: a header in `m`, chained to a clone of res_.
  void chained_copy(rte_mbuf* m, const sw::Dest& d, const wire::SharedPart& sh, uint16_t ip_id);
  void lost(rte_mbuf* m) {
    if (m) rte_pktmbuf_free(m);
    c_.alloc_failures.add();
  }

  std::unique_ptr<Egress> egress_;
  rte_mempool* pool_;
  std::vector<Copies> copies_;
  bool any_chained_ = false;
  size_t ports_;
  // Frames waiting for their port's egress, by port: each port's run goes
  // on in one operation however the fan-out interleaves ports.
  std::vector<std::vector<rte_mbuf*>> pending_;
  size_t pending_n_ = 0;
  // The result being made: its mbuf (the first whole copy's frame, or the
  // payload that chained copies clone) or, when no mbuf could hold it, spill_.
  rte_mbuf* res_ = nullptr;
  std::vector<uint8_t> spill_;
  bool spilled_ = false;  // the result being made is in spill_
  uint16_t ip_id_ = 0;
  EmitCounters c_;
  std::unique_ptr<Counter[]> nacks_;  // by port
};

}  // namespace prism::pipe
