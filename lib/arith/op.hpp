// What an operation asks of the arithmetic: its descriptor, the result flags,
// the exact per-lane state that partials carry, and admission.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "arith/exact.hpp"
#include "format/format.hpp"

namespace prism {

enum class Policy : uint8_t { FP32_ARRIVAL = 1, KULISCH_FIXED = 2, FP32_BINOMIAL = 3 };
enum class Transport : uint8_t { ROUNDED = 1, KULISCH = 2, AUTO = 3 };

std::optional<Policy> policy_from_name(std::string_view);   // fp32_arrival kulisch fp32_binomial
inline std::optional<Policy> policy_from_code(uint8_t c) {  // inline: parse() runs it per packet
  if (c >= 1 && c <= 3) return Policy(c);
  return std::nullopt;
}
const char* name(Policy);
std::optional<Exceptions> exceptions_from_name(std::string_view);  // ieee saturate
inline std::optional<Exceptions> exceptions_from_code(uint8_t c) {
  if (c == 1 || c == 2) return Exceptions(c);
  return std::nullopt;
}
const char* name(Exceptions);
inline std::optional<Transport> transport_from_code(uint8_t c) {
  if (c >= 1 && c <= 3) return Transport(c);
  return std::nullopt;
}
const char* name(Transport);

// Result status bits (RESULT packets' status byte, and per element from finalize()).
namespace flag {
inline constexpr uint8_t OVERFLOW = 1;
inline constexpr uint8_t INVALID = 2;
inline constexpr uint8_t NAN_INPUT = 4;
}  // namespace flag

struct OpDesc {
  Format dtype = Format::FP32;
  Format out = Format::FP32;
  Policy policy = Policy::KULISCH_FIXED;
  Exceptions exceptions = Exceptions::IEEE;
  uint32_t group = 1;  // R: contributions the op combines, 1..65535
  uint32_t lanes = 0;  // elements this accumulator holds (one chunk)
};

// Sideband of a lane's exact state. Specials never enter the fixed-point value.
namespace side {
inline constexpr uint8_t NAN_INPUT = 1;
inline constexpr uint8_t POS_INF = 2;
inline constexpr uint8_t NEG_INF = 4;
inline constexpr uint8_t NEG_ZERO_ONLY = 8;  // every term so far was -0 (value is 0)
inline constexpr uint8_t INVALID = 16;       // FP32 policies: Inf - Inf happened
inline constexpr uint8_t OVERFLOW = 32;      // FP32 policies: a finite sum overflowed
inline constexpr uint8_t ALL = 63;
}  // namespace side

// The exact state of one lane: value * 2^unit_exp(dtype) plus sideband. An
// empty lane is {NEG_ZERO_ONLY, 0}. When a special bit is set the value is 0:
// the result is decided by the sideband alone.
struct LaneExact {
  uint8_t side = side::NEG_ZERO_ONLY;
  Wide value;
};

// Exponent of the unit in which a format's lanes count: the smallest subnormal
// for floats, 1 for integers.
inline int unit_exp(Format f) { return info(f).unit_exp; }

// W_signed = Emax - Emin + p + ceil(log2 R) + 1 for floats (seed 002), and
// bits + ceil(log2 R) for integers.
int required_width(Format dtype, uint32_t group);
int ceil_log2(uint32_t r);

// The widest accumulator this implementation holds, and the default configured width.
inline constexpr int kMaxWidth = 294;

// Checks an op against the arithmetic's rules and the configured Kulisch
// width. Returns an error message saying what is wrong and what would be
// valid, or nothing when the op is admitted.
std::optional<std::string> admission_error(const OpDesc& d, int configured_width);

}  // namespace prism
