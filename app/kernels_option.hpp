// --kernels auto|portable|avx2, as prism-reduce and prism-bench read it.
#pragma once

#include <string>

#include "arith/kernels.hpp"
#include "cli.hpp"

namespace prism::app {

inline constexpr const char* kKernelChoices = "auto|portable|avx2";

// The kernels `name` asks for: auto (the best the CPU has, unless
// PRISM_KERNELS=portable), portable, or avx2 (refused on a CPU without it).
inline const Kernels& kernels_named(const std::string& name) {
  if (name == "auto") return best_kernels();
  if (name == "portable") return portable_kernels();
  if (name == "avx2") {
    if (const Kernels* k = avx2_kernels()) return *k;
    cli::fail("--kernels avx2: this CPU lacks AVX2/FMA/F16C; use portable or auto");
  }
  cli::fail("unknown --kernels '" + name + "': use auto, portable or avx2");
}

}  // namespace prism::app
