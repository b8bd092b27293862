#include "coll/buffer_cache.hpp"

namespace prism::coll {
namespace {

template <class T>
size_t size_of(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

}  // namespace

// A collective's Reused<T> go in and out in reverse order, so each one gets the same spare every call.
template <class T>
std::vector<T> BufferCache::take() {
  Spares<T>& s = spares<T>();
  if (s.v.empty()) return {};
  std::vector<T> v = std::move(s.v.back());
  s.v.pop_back();
  s.bytes -= size_of(v);
  return v;
}

template <class T>
void BufferCache::give_back(std::vector<T> v) {
  const size_t b = size_of(v);
  if (b == 0 || b > kBufferCacheBytes) return;
  Spares<T>& s = spares<T>();
  s.v.push_back(std::move(v));
  s.bytes += b;
  while (s.bytes > kBufferCacheBytes) {
    s.bytes -= size_of(s.v.front());
    s.v.pop_front();
  }
}

template std::vector<uint8_t> BufferCache::take<uint8_t>();
template std::vector<LaneExact> BufferCache::take<LaneExact>();
template void BufferCache::give_back<uint8_t>(std::vector<uint8_t>);
template void BufferCache::give_back<LaneExact>(std::vector<LaneExact>);
template std::vector<double> BufferCache::take<double>();
template void BufferCache::give_back<double>(std::vector<double>);

}  // namespace prism::coll
