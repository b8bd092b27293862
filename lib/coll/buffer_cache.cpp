#include "coll/buffer_cache.hpp"

#include <cstdint>
#include <deque>

namespace prism::coll::buffer_cache {
namespace {

// Most recently given back at the back. A collective's Reused<T> go in and
// out in reverse order, so each one gets the same spare every call.
template <class T>
struct Spares {
  std::deque<std::vector<T>> v;
  size_t bytes = 0;
};

template <class T>
Spares<T>& mine() {
  thread_local Spares<T> s;
  return s;
}

template <class T>
size_t size_of(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}

}  // namespace

template <class T>
std::vector<T> take() {
  Spares<T>& s = mine<T>();
  if (s.v.empty()) return {};
  std::vector<T> v = std::move(s.v.back());
  s.v.pop_back();
  s.bytes -= size_of(v);
  return v;
}

template <class T>
void give_back(std::vector<T> v) {
  const size_t b = size_of(v);
  if (b == 0 || b > kBufferCacheBytes) return;
  Spares<T>& s = mine<T>();
  s.v.push_back(std::move(v));
  s.bytes += b;
  while (s.bytes > kBufferCacheBytes) {
    s.bytes -= size_of(s.v.front());
    s.v.pop_front();
  }
}

template <class T>
size_t count() {
  return mine<T>().v.size();
}
template <class T>
size_t bytes() {
  return mine<T>().bytes;
}
template <class T>
void clear() {
  mine<T>().v.clear();
  mine<T>().bytes = 0;
}

#define PRISM_BUFFER_CACHE(T)                 \
  template std::vector<T> take<T>();          \
  template void give_back<T>(std::vector<T>); \
  template size_t count<T>();                 \
  template size_t bytes<T>();                 \
  template void clear<T>();
PRISM_BUFFER_CACHE(uint8_t)
PRISM_BUFFER_CACHE(LaneExact)
#undef PRISM_BUFFER_CACHE

}  // namespace prism::coll::buffer_cache
