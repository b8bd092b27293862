// What the host collectives' unit tests share: a group of ranks as threads
// on the in-process transport, and the inputs they reduce.
#pragma once

#include <cstdint>
#include <exception>
#include <random>
#include <thread>
#include <vector>

#include "arith/accumulator.hpp"
#include "coll/inproc.hpp"
#include "coll/partial_message.hpp"
#include "format/format.hpp"

namespace prism::coll::test {

// Runs fn(rank, transport) on p threads; rethrows the first exception.
template <class Fn>
void run_group(int p, Fn fn, Observer obs = nullptr) {
  auto ts = make_inproc_group(p, std::move(obs));
  std::vector<std::exception_ptr> err(static_cast<size_t>(p));
  std::vector<std::thread> th;
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] {
      try {
        fn(r, *ts[size_t(r)]);
      } catch (...) {
        err[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : th) t.join();
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

// Mostly finite values over a spread of exponents, about one element in 300
// any bit pattern (NaN, Inf) unless `finite` (then bf16 too keeps fp32's
// exponent window, so fp32 sums neither overflow nor flush).
inline std::vector<uint8_t> make_input(Format f, size_t count, uint32_t seed, bool finite = false) {
  std::mt19937 rng(seed);
  const size_t sz = info(f).bytes;
  std::vector<uint8_t> b(count * sz);
  for (size_t i = 0; i < count; ++i) {
    uint32_t bits;
    const bool wild = !finite && rng() % 300 == 0;
    if (f == Format::INT32) {
      bits = wild ? uint32_t(rng()) : uint32_t(int32_t(rng() % 2000001) - 1000000);
    } else if (f == Format::FP32) {
      bits = wild ? uint32_t(rng()) : (rng() & 0x807FFFFFu) | uint32_t(103 + rng() % 49) << 23;
    } else if (f == Format::BF16 && finite) {
      bits = (rng() & 0x807Fu) | uint32_t(103 + rng() % 49) << 7;
    } else {
      do {
        bits = uint32_t(rng()) & ((1u << (8 * sz)) - 1);
      } while (!wild && is_special(f, bits));
    }
    store_bits(f, b.data() + i * sz, bits);
  }
  return b;
}

// The exact reference: one KULISCH_FIXED accumulator fed every rank's input
// (in[r] for rank r, `count` elements), rounded once: the switch's result.
struct Reduced {
  std::vector<uint8_t> out, flags;
};
inline Reduced one_accumulator(const ReduceOp& op, const std::vector<std::vector<uint8_t>>& in, size_t count) {
  const uint32_t p = uint32_t(in.size());
  auto acc = make_accumulator(OpDesc{op.dtype, op.out, Policy::KULISCH_FIXED, op.exceptions, p, uint32_t(count)});
  Reduced res{std::vector<uint8_t>(count * info(op.out).bytes), std::vector<uint8_t>(count)};
  for (uint32_t r = 0; r < p; ++r) acc->add(in[r].data(), r);
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

// The inputs with every sign bit cleared (for the sum of |x| in the fp32
// policies' error bound).
inline std::vector<std::vector<uint8_t>> magnitudes(Format f, std::vector<std::vector<uint8_t>> in, size_t count) {
  const size_t sz = info(f).bytes;
  const uint32_t sign = 1u << (8 * sz - 1);
  for (auto& b : in)
    for (size_t i = 0; i < count; ++i) store_bits(f, b.data() + i * sz, load_bits(f, b.data() + i * sz) & ~sign);
  return in;
}

}  // namespace prism::coll::test
