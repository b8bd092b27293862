// How long a cache line takes between two CPUs, and what one rdtsc costs:
// the two facts of a VM that shape prism-bench pipeline's two-lcore figures
// (docs/PERFORMANCE.md, "Machine").
//
//   g++ -O2 -pthread tools/core_latency.cpp -o /tmp/core_latency && /tmp/core_latency [CPU_A CPU_B]
//
// Two threads pinned to CPU_A and CPU_B (default 0 and 1) bounce one atomic
// flag: each round trip moves its line there and back.
#include <pthread.h>
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace {

alignas(64) std::atomic<int> flag{0};

bool pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int a = argc > 2 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  if (a == b) {
    std::fprintf(stderr, "usage: core_latency [CPU_A CPU_B] with two different CPUs (default 0 1)\n");
    return 2;
  }
  constexpr int kTrips = 2000000;
  bool pinned_b = true;
  std::thread t([&] {
    pinned_b = pin(b);
    for (int i = 0; i < kTrips; ++i) {
      while (flag.load(std::memory_order_acquire) != 1) {
      }
      flag.store(0, std::memory_order_release);
    }
  });
  if (!pin(a)) std::fprintf(stderr, "cannot pin to CPU %d: the figure is not between two CPUs\n", a);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kTrips; ++i) {
    flag.store(1, std::memory_order_release);
    while (flag.load(std::memory_order_acquire) != 0) {
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  t.join();
  if (!pinned_b) std::fprintf(stderr, "cannot pin to CPU %d: the figure is not between two CPUs\n", b);
  std::printf("CPU %d <-> CPU %d: %.1f ns per round trip of one cache line\n", a, b,
              std::chrono::duration<double, std::nano>(t1 - t0).count() / kTrips);
  volatile unsigned long long sink = 0;
  constexpr int kReads = 10000000;
  const auto r0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReads; ++i) sink = sink + __rdtsc();
  const auto r1 = std::chrono::steady_clock::now();
  std::printf("rdtsc: %.1f ns per read\n", std::chrono::duration<double, std::nano>(r1 - r0).count() / kReads);
  return 0;
}
