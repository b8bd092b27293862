// What every DPDK stage of the switch shares: the burst size, counters one
// lcore writes and another reads, the base class an lcore polls, a port's
// link watch, and what RX leaves in an mbuf for the stages after it.
//
// The graph (wired once, in runtime.cpp):
//
//   port --RX--> ingress --Handoff--> reducer shard --Emitter--> Egress --> TX --> port
//
// A Handoff is VOQ rings [port][shard] drained by each shard's arbiter
// (staged: reducers on their own lcores, or an arbiter that varies the
// order) or a direct call into the shard (one lcore runs everything, each
// packet to completion). An Egress is a TX ring per port or the port's TX
// stage itself. Stages do not know which: it is decided when they are
// connected.
#pragma once

#include <rte_config.h>
#include <rte_mbuf.h>

#include <atomic>
#include <cstdint>

#include "switch/ingress.hpp"

namespace prism::pipe {

inline constexpr uint16_t kBurst = 32;

// A counter one lcore writes and the telemetry thread reads.
struct Counter {
  std::atomic<uint64_t> v{0};
  void add(uint64_t n = 1) { v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }
  uint64_t get() const { return v.load(std::memory_order_relaxed); }
};

// One named counter of a stage's counter block S: the table that lists a
// block's counters is the only place they are named (telemetry, the summary
// and the bench iterate it), as DPDK's ethdev xstats tables do.
template <class S>
struct CounterField {
  const char* name;
  const char* doc;
  Counter S::*field;
};

// What RX learned about a packet, carried in the mbuf's private area so the
// reducer does not parse it again. The Parsed pointers point into the mbuf.
struct Meta {
  wire::Parsed p;
  sw::Verdict v;
  uint16_t in_port;  // the switch port it came in on
  uint16_t shard;    // the shard that owns it (proto/steer.hpp)
};
inline Meta* meta(rte_mbuf* m) { return static_cast<Meta*>(rte_mbuf_to_priv(m)); }
inline constexpr uint16_t kPrivSize = uint16_t((sizeof(Meta) + RTE_MBUF_PRIV_ALIGN - 1) & ~(RTE_MBUF_PRIV_ALIGN - 1));

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

}  // namespace prism::pipe
