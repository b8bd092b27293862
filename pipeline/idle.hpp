// How an lcore gives its CPU back while it has nothing to do (the config's
// `polling:`). Busy: it polls without pause. Adaptive: once a pass over its
// stages moves nothing (every RX queue, inbox, VOQ and TX ring of the lcore
// empty), it sleeps after each further empty pass for an eighth of the time
// it has been idle so far, and never longer than polling_sleep_max_us; the
// first pass that moves a packet makes it busy again. So the first packet
// after a silence of T waits at most T/8 (and at most the bound) longer than
// under busy polling: a short gap in a run of traffic costs little (a
// quarter measured 5-10% slower allreduces here, an eighth level with busy),
// and a switch idle for long sleeps at the bound. Anchors: OVS-DPDK's pmd-sleep-max
// (a PMD thread's sleep grows while its queues stay empty, bounded by the
// setting, and resets on traffic), DPDK's examples/l3fwd-power (empty polls
// counted, then sleeps that grow), VPP's adaptive mode (polling under load,
// waiting when idle).
//
// What it costs: an idle lcore wakes about 1e6 / max_us times a second for a
// pass over empty queues (each wake measured at ~20-25 us of CPU on a 2-vCPU
// KVM guest: the system calls, the timer, the pass; so 1000 us for under 5%
// of a CPU there); timers in the stages (retention,
// op_timeout, pool reclaim) run on every pass, so they fire at most max_us
// late.
#pragma once

#include <cstdint>

#include "config/config.hpp"
#include "stage.hpp"

namespace prism::pipe {

// The policy alone (no clock of its own, no sleep): what to sleep after each pass.
class IdleBackoff {
 public:
  static constexpr uint32_t kShare = 8;  // sleep an eighth of the idle time so far
  IdleBackoff(Polling mode, uint32_t max_us) : adaptive_(mode == Polling::ADAPTIVE), max_us_(max_us ? max_us : 1) {}
  // After a pass that moved `moved` packets, at `now_us` (any monotonic
  // microsecond clock): microseconds to sleep now (0: poll again at once).
  uint32_t after_pass(unsigned moved, uint64_t now_us) {
    if (!adaptive_ || moved) {
      idle_ = false;
      return 0;
    }
    if (!idle_) {
      idle_ = true;
      since_us_ = now_us;
      return 0;
    }
    const uint64_t share = (now_us - since_us_) / kShare;
    return share < max_us_ ? uint32_t(share) : max_us_;
  }

 private:
  bool adaptive_;
  uint32_t max_us_;
  bool idle_ = false;
  uint64_t since_us_ = 0;  // when the current idle period began
};

struct IdleCounters {
  Counter sleeps, slept_us;
};
inline constexpr CounterField<IdleCounters> kIdleCounters[] = {
    {"sleeps", "times the lcore slept with every queue empty (polling: adaptive)", &IdleCounters::sleeps},
    {"slept_us", "microseconds it slept in all (measured, timer slack included)", &IdleCounters::slept_us},
};

// One lcore's: the policy, the sleep, its counters.
class IdleWait {
 public:
  IdleWait(Polling mode, uint32_t max_us);
  // Call on the lcore's own thread before its loop: a sleep of a few
  // microseconds needs a small timer slack (Linux's default is 50 us).
  void start() const;
  void after_pass(unsigned moved) {
    if (const uint32_t us = policy_.after_pass(moved, moved ? 0 : now_us())) sleep(us);
  }
  const IdleCounters& counters() const { return c_; }
  bool adaptive() const { return mode_ == Polling::ADAPTIVE; }

 private:
  void sleep(uint32_t us);
  uint64_t now_us() const;
  Polling mode_;
  IdleBackoff policy_;
  IdleCounters c_;
  double us_per_tsc_;
};

}  // namespace prism::pipe
