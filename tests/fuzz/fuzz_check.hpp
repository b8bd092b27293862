// Shared helpers of the libFuzzer targets: a CHECK that names the broken
// property before it traps (so the crash report says what failed), and a sink
// that makes the compiler keep reads of every payload byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s at %s:%d\n", #cond, __FILE__, __LINE__); \
      __builtin_trap();                                                                    \
    }                                                                                      \
  } while (0)

namespace fuzz {

// Reads every byte of [p, p + n): ASan reports any byte that is not the input's.
inline void touch(const uint8_t* p, size_t n) {
  uint8_t x = 0;
  for (size_t i = 0; i < n; ++i) x = uint8_t(x ^ p[i]);
  static volatile uint8_t sink;
  sink = x;
}

}  // namespace fuzz
