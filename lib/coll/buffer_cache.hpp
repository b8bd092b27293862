// A group's spare vectors (message buffers, lane scratch), so that a
// collective called again reuses the last call's memory, as acc_cache.hpp
// does for accumulators.
//
// Why: the ring's and RHD's message buffers and their LaneExact scratch (56
// bytes a lane: ~1.8 MB for a 32768-lane segment) are big enough for glibc
// to map and unmap afresh; made per call, every call page-faults them in.
// After the accumulators, that was most of the kernel time left in a 256 KiB
// ring allreduce on loopback (encode_partial's scratch, the buffers' resize).
//
// Reused<T> is a std::vector<T> that starts as the cache's most recently
// given-back spare (size, capacity and contents as last left: a user resizes
// and writes before it reads, as it would within one call) and is given back
// when it goes. At most kBufferCacheBytes of capacity are kept per element
// type. One cache per rank's Links (links.hpp), as AccCache.
//
// Used by the ring, RHD, the binomial tree and the chain for their partials'
// message buffers and scratch; their block-sized flag vectors (64 KiB at
// most) stay per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "arith/op.hpp"

namespace prism::coll {

inline constexpr size_t kBufferCacheBytes = size_t(64) << 20;

class BufferCache {
 public:
  // A spare of T (empty when none); giving one back keeps it.
  template <class T>
  std::vector<T> take();
  template <class T>
  void give_back(std::vector<T> v);
  // The spares of T: how many, their capacity in bytes; clear() frees them.
  template <class T>
  size_t count() const {
    return spares<T>().v.size();
  }
  template <class T>
  size_t bytes() const {
    return spares<T>().bytes;
  }
  template <class T>
  void clear() {
    spares<T>().v.clear();
    spares<T>().bytes = 0;
  }

 private:
  template <class T>
  struct Spares {
    std::deque<std::vector<T>> v;  // most recently given back at the back
    size_t bytes = 0;
  };
  template <class T>
  Spares<T>& spares();
  template <class T>
  const Spares<T>& spares() const {
    return const_cast<BufferCache*>(this)->spares<T>();
  }
  Spares<uint8_t> bytes_;
  Spares<LaneExact> lanes_;
  Spares<double> doubles_;
};

template <>
inline BufferCache::Spares<uint8_t>& BufferCache::spares<uint8_t>() {
  return bytes_;
}
template <>
inline BufferCache::Spares<LaneExact>& BufferCache::spares<LaneExact>() {
  return lanes_;
}
template <>
inline BufferCache::Spares<double>& BufferCache::spares<double>() {
  return doubles_;
}

// A vector by inheritance so that code written for std::vector<T> (members
// passed as std::vector<T>&) takes it unchanged; never deleted through a
// std::vector<T>*.
template <class T>
class Reused : public std::vector<T> {
 public:
  explicit Reused(BufferCache& c) : std::vector<T>(c.take<T>()), c_(c) {}
  ~Reused() { c_.give_back<T>(std::move(static_cast<std::vector<T>&>(*this))); }
  Reused(const Reused&) = delete;
  Reused& operator=(const Reused&) = delete;

 private:
  BufferCache& c_;
};

}  // namespace prism::coll
