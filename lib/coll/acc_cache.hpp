// A thread's spare accumulators, so that a collective called again with the
// same shapes (a training loop's allreduce, every step) reuses the last
// call's instead of making them again.
//
// Why: an accumulator is big (KULISCH over fp32: 55-59 bytes per lane, a
// 65536-lane block ~3.6 MB), so glibc serves it by mmap; made and freed per
// call, every call page-faults it in (zeroed by the kernel) and unmaps it
// again. Two ranks on loopback, a 256 KiB ring allreduce: ~35% of a rank's
// time was in the page-fault path and make_kulisch.
//
// take(d) gives an accumulator of exactly descriptor d, empty (reset(), or
// made fresh by make_accumulator()): its results are a fresh one's bits.
// give_back() keeps it for this thread's next take() of the same
// descriptor; at most kAccCacheBytes (bytes_per_lane() * lanes) are kept,
// the least recently given back dropped first. Per thread (thread_local),
// so ranks run as threads never share one, and it needs no lock; a thread's
// spares are freed when it exits. Only best_kernels() accumulators.
//
// Used by the ring and RHD (p accumulators, or q, per round). The binomial
// tree (one 4096-lane block) and the chain (one segment's) measured no gain
// from it on loopback, so they still make theirs per call.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

#include "arith/accumulator.hpp"

namespace prism::coll {

inline constexpr size_t kAccCacheBytes = size_t(64) << 20;

namespace acc_cache {

std::unique_ptr<Accumulator> take(const OpDesc& d);
void give_back(std::unique_ptr<Accumulator> a);

// This thread's spares: how many, their bytes; clear() frees them.
size_t count();
size_t bytes();
void clear();

}  // namespace acc_cache

// One taken accumulator, given back when the lease goes (also when a
// collective throws: take() empties it before anyone sees it again).
class AccLease {
 public:
  AccLease() = default;
  explicit AccLease(const OpDesc& d) : a_(acc_cache::take(d)) {}
  AccLease(AccLease&&) = default;
  AccLease& operator=(AccLease&& o) {
    if (this != &o) {
      release();
      a_ = std::move(o.a_);
    }
    return *this;
  }
  ~AccLease() { release(); }

  explicit operator bool() const { return bool(a_); }
  Accumulator* operator->() const { return a_.get(); }
  Accumulator& operator*() const { return *a_; }

 private:
  void release() {
    if (a_) acc_cache::give_back(std::move(a_));
  }
  std::unique_ptr<Accumulator> a_;
};

}  // namespace prism::coll
