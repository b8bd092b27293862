#include "coll/shm/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace prism::coll::shm {

namespace {
// Shared futexes (not FUTEX_PRIVATE_FLAG): the word is in memory other processes map.
long futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}
}  // namespace

void ring(Header* h) {
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleepers.load(std::memory_order_seq_cst) != 0) futex(&h->bell, FUTEX_WAKE, INT_MAX, nullptr);
}

void sleep_on(Header* h, uint32_t seen, std::chrono::nanoseconds timeout) {
  const long long ns = timeout.count() > 0 ? timeout.count() : 0;
  const timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
  h->sleepers.fetch_add(1, std::memory_order_seq_cst);
  futex(&h->bell, FUTEX_WAIT, seen, &ts);
  h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace prism::coll::shm
