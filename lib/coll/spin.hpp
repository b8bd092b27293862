// How long a rank waiting for a peer polls (between sched_yield()s) before it
// sleeps: both kinds of links (shm/links.cpp on their rings, tcp/links.cpp on
// their sockets) wait this way. Yielding, not pausing: the peer it waits for
// (or another program) gets the CPU.
//
// Measured on 2 busy vCPUs. Shared memory, 4 KiB ping-pong one way:
// pause-spinning 20-30 us (200 us when the spin outlasted the peer's time
// slice), sleeping at once 9-31 us, yielding 2-3 us. With more ranks than
// CPUs a long spin costs the ranks that compute (4 ranks' 16 MiB RHD
// allreduce: 50 us slower than none in 4 runs of 4), a short one does not
// (5 us against none: 4 ranks' RHD 1.00-1.06x, 8 ranks' RHD and ring
// 1.06-2.1x). TCP on loopback, the allreduce (FP32_ARRIVAL and KULISCH_FIXED,
// RHD and ring, 1 and 16 MiB, p = 2, 4, 8, 3 rounds in alternating order):
// with this spin 1.10x faster in the median, 59 wins of 72 pairs (p = 4,
// 16 MiB: 1.22x); 50 us at p = 4 and 8 was mixed against 5 us.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>

namespace prism::coll {

inline constexpr auto kSpin = std::chrono::microseconds(50);
inline constexpr auto kSpinOversubscribed = std::chrono::microseconds(5);

// kSpin when `ranks` (the group: an upper bound on its ranks on this host)
// are no more than the CPUs this process may use, else kSpinOversubscribed.
inline std::chrono::microseconds spin_for(int ranks) {
  cpu_set_t set;
  const int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? std::max(1, CPU_COUNT(&set)) : 1;
  return ranks <= cpus ? kSpin : kSpinOversubscribed;
}

}  // namespace prism::coll
