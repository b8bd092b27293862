// The switch's clock: a monotonic counter (the TSC) less the time the switch
// did not run. A polling lcore reads its clock several times a pass, and a
// pass takes microseconds; when two readings lie further apart than `stall`,
// the lcore was not running (SIGSTOP, a VM paused or migrated, a debugger,
// the host's scheduler) and the gap is left out: the clock stands still
// across it. Every deadline the switch keeps (op_timeout_ms, retention, a
// pool's idle reclaim, a leaf's retries) is kept in this time, so an op does
// not expire for time in which the switch could make no progress, and after a
// stall the lcore's next passes read what waited in its queues before any
// deadline can pass (docs/PROTOCOL.md, "Stalls, restarts and stops").
//
// One per lcore, read by that lcore only (the total left out is an atomic so
// that telemetry and other threads may read it).
#pragma once

#include <atomic>
#include <cstdint>

namespace prism {

class StallClock {
 public:
  // `stall`: the longest gap between two readings that still counts, in
  // ticks of the counter.
  explicit StallClock(uint64_t stall) : stall_(stall) {}

  // The clock at counter value `raw` (non-decreasing from call to call).
  uint64_t at(uint64_t raw) {
    if (last_ && raw - last_ > stall_) {
      skipped_.store(skipped_.load(std::memory_order_relaxed) + (raw - last_), std::memory_order_relaxed);
      stalls_.store(stalls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      if (raw - last_ > longest_.load(std::memory_order_relaxed))
        longest_.store(raw - last_, std::memory_order_relaxed);
    }
    last_ = raw;
    return raw - skipped_.load(std::memory_order_relaxed);
  }
  // From any thread: the clock at `raw`, by the stalls seen so far.
  uint64_t view(uint64_t raw) const { return raw - skipped_.load(std::memory_order_relaxed); }
  uint64_t stall_ticks() const { return stall_; }
  uint64_t stalls() const { return stalls_.load(std::memory_order_relaxed); }
  uint64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }  // ticks left out in all
  uint64_t longest() const { return longest_.load(std::memory_order_relaxed); }  // the longest gap left out

 private:
  uint64_t stall_;
  uint64_t last_ = 0;
  std::atomic<uint64_t> skipped_{0}, stalls_{0}, longest_{0};
};

}  // namespace prism
