// What an operation asks of the arithmetic: its descriptor, the result flags,
// the exact per-lane state that partials carry, and admission.
#pragma once

#include <cstdint>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "arith/exact.hpp"
#include "format/format.hpp"

namespace prism {

// How an op sums (Policy: prism/types.hpp; docs/ARITHMETIC.md).
inline constexpr size_t kPolicyCount = 3;
inline constexpr Entry<Policy> kPolicies[] = {
    {Policy::FP32_ARRIVAL, "fp32_arrival", "fp32 additions in arrival order (what a host ring does; not reproducible)"},
    {Policy::KULISCH_FIXED, "kulisch", "the exact sum, rounded once: the same bits whatever the order",
     "kulisch_fixed"},
    {Policy::FP32_BINOMIAL, "fp32_binomial", "fp32 additions in a fixed binomial tree over the ranks (reproducible)"},
};
static_assert(std::size(kPolicies) == kPolicyCount, "every Policy has a row in kPolicies");
constexpr std::span<const Entry<Policy>> entries(Policy) { return kPolicies; }
static_assert(codes_in_order<Policy>(1), "policy_from_code() range-checks the codes");

// How a leaf sends its partial up the tree (PartialTransport: prism/types.hpp).
inline constexpr size_t kPartialTransportCount = 3;
inline constexpr Entry<PartialTransport> kPartialTransports[] = {
    {PartialTransport::ROUNDED, "rounded", "partials rounded to the output format (lossy, smallest)"},
    {PartialTransport::KULISCH, "kulisch", "partials as exact lane records (lossless)"},
    {PartialTransport::AUTO, "auto", "rounded where that is exact, lane records otherwise (lossless)"},
};
static_assert(std::size(kPartialTransports) == kPartialTransportCount,
              "every PartialTransport has a row in kPartialTransports");
constexpr std::span<const Entry<PartialTransport>> entries(PartialTransport) { return kPartialTransports; }
static_assert(codes_in_order<PartialTransport>(1), "transport_from_code() range-checks the codes");

inline std::optional<Policy> policy_from_name(std::string_view s) { return from_name<Policy>(s); }
inline std::optional<Policy> policy_from_code(uint8_t c) {  // inline: parse() runs it per packet
  if (c >= 1 && c <= kPolicyCount) return Policy(c);
  return std::nullopt;
}
inline const char* name(Policy p) { return prism::name<Policy>(p); }
inline std::optional<PartialTransport> transport_from_code(uint8_t c) {
  if (c >= 1 && c <= kPartialTransportCount) return PartialTransport(c);
  return std::nullopt;
}
inline const char* name(PartialTransport t) { return prism::name<PartialTransport>(t); }

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

// Whether an op's sum is held exactly in a Kulisch accumulator whose width
// the configuration bounds (kulisch_width): KULISCH_FIXED over a float
// format, and every policy over an integer format (integer sums are always
// exact). The FP32 policies over float formats need no width. The one place
// this is decided: admission, the reducer and the config reader ask it.
constexpr bool needs_exact_width(Format dtype, Policy policy) {
  return policy == Policy::KULISCH_FIXED || !info(dtype).is_float;
}
constexpr bool needs_exact_width(const OpDesc& d) { return needs_exact_width(d.dtype, d.policy); }
// The width the op's exact sum needs (required_width()), or nothing when it needs none.
std::optional<int> exact_width_needed(const OpDesc& d);

// Checks an op against the arithmetic's rules and the configured Kulisch
// width. Returns an error message saying what is wrong and what would be
// valid, or nothing when the op is admitted.
std::optional<std::string> admission_error(const OpDesc& d, int configured_width);

}  // namespace prism
