// A group's spare accumulators, so that a collective called again with the
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
// give_back() keeps it for the next take() of the same descriptor; at most
// kAccCacheBytes (bytes_per_lane() * lanes) are kept, the least recently
// given back dropped first. One cache per rank's Links (links.hpp: a Group
// owns its links, so its caches): no global or thread-local state, and no
// lock (one thread drives a group). Only best_kernels() accumulators.
//
// Used by every host algorithm: the ring and RHD (p accumulators, or q, per
// round), the binomial tree (one 4096-lane block) and the chain (one
// segment's, up to 65536 lanes and more: made per call, a KULISCH one
// page-faulted in and its bank cleared every call).
#pragma once

#include <cstddef>
#include <list>
#include <memory>
#include <utility>

#include "arith/accumulator.hpp"

namespace prism::coll {

inline constexpr size_t kAccCacheBytes = size_t(64) << 20;

class AccCache {
 public:
  std::unique_ptr<Accumulator> take(const OpDesc& d);
  void give_back(std::unique_ptr<Accumulator> a);
  // The spares: how many, their bytes; clear() frees them.
  size_t count() const { return spares_.size(); }
  size_t bytes() const { return bytes_; }
  void clear() {
    spares_.clear();
    bytes_ = 0;
  }

 private:
  std::list<std::unique_ptr<Accumulator>> spares_;  // most recently given back first
  size_t bytes_ = 0;
};

// One taken accumulator, given back when the lease goes (also when a
// collective throws: take() empties it before anyone sees it again).
class AccLease {
 public:
  AccLease() = default;
  AccLease(AccCache& c, const OpDesc& d) : c_(&c), a_(c.take(d)) {}
  AccLease(AccLease&&) = default;
  AccLease& operator=(AccLease&& o) {
    if (this != &o) {
      release();
      c_ = o.c_;
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
    if (a_) c_->give_back(std::move(a_));
  }
  AccCache* c_ = nullptr;
  std::unique_ptr<Accumulator> a_;
};

}  // namespace prism::coll
