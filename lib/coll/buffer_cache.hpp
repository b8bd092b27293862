// A thread's spare vectors (message buffers, lane scratch), so that a
// collective called again reuses the last call's memory, as acc_cache.hpp
// does for accumulators.
//
// Why: the ring's and RHD's message buffers and their LaneExact scratch (56
// bytes a lane: ~1.8 MB for a 32768-lane segment) are big enough for glibc
// to map and unmap afresh; made per call, every call page-faults them in.
// After the accumulators, that was most of the kernel time left in a 256 KiB
// ring allreduce on loopback (encode_partial's scratch, the buffers' resize).
//
// Reused<T> is a std::vector<T> that starts as this thread's most recently
// given-back spare (size, capacity and contents as last left: a user resizes
// and writes before it reads, as it would within one call) and is given back
// when it goes. At most kBufferCacheBytes of capacity are kept per element
// type and thread, the least recently given back dropped first.
//
// Used by the ring, RHD, the binomial tree and the chain for their partials'
// message buffers and scratch; their block-sized flag vectors (64 KiB at
// most) stay per call.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "arith/op.hpp"

namespace prism::coll {

inline constexpr size_t kBufferCacheBytes = size_t(64) << 20;

namespace buffer_cache {

// This thread's spare of T (empty when none); giving one back keeps it.
template <class T>
std::vector<T> take();
template <class T>
void give_back(std::vector<T> v);
// This thread's spares of T: how many, their capacity in bytes; clear() frees them.
template <class T>
size_t count();
template <class T>
size_t bytes();
template <class T>
void clear();

}  // namespace buffer_cache

// A vector by inheritance so that code written for std::vector<T> (members
// passed as std::vector<T>&) takes it unchanged; never deleted through a
// std::vector<T>*.
template <class T>
class Reused : public std::vector<T> {
 public:
  Reused() : std::vector<T>(buffer_cache::take<T>()) {}
  ~Reused() { buffer_cache::give_back<T>(std::move(static_cast<std::vector<T>&>(*this))); }
  Reused(const Reused&) = delete;
  Reused& operator=(const Reused&) = delete;
};

}  // namespace prism::coll
