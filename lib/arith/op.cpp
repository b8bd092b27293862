#include "arith/op.hpp"

#include <bit>

namespace prism {

std::optional<Policy> policy_from_name(std::string_view n) {
  if (n == "fp32_arrival") return Policy::FP32_ARRIVAL;
  if (n == "kulisch" || n == "kulisch_fixed") return Policy::KULISCH_FIXED;
  if (n == "fp32_binomial") return Policy::FP32_BINOMIAL;
  return std::nullopt;
}
const char* name(Policy p) {
  switch (p) {
    case Policy::FP32_ARRIVAL: return "fp32_arrival";
    case Policy::KULISCH_FIXED: return "kulisch";
    case Policy::FP32_BINOMIAL: return "fp32_binomial";
  }
  return "?";
}
std::optional<Exceptions> exceptions_from_name(std::string_view n) {
  if (n == "ieee") return Exceptions::IEEE;
  if (n == "saturate") return Exceptions::SATURATE;
  return std::nullopt;
}
const char* name(Exceptions e) { return e == Exceptions::IEEE ? "ieee" : "saturate"; }
const char* name(Transport t) {
  switch (t) {
    case Transport::ROUNDED: return "rounded";
    case Transport::KULISCH: return "kulisch";
    case Transport::AUTO: return "auto";
  }
  return "?";
}

int ceil_log2(uint32_t r) { return r <= 1 ? 0 : 32 - std::countl_zero(r - 1); }

int required_width(Format dtype, uint32_t group) {
  const FormatInfo& fi = info(dtype);
  if (!fi.is_float) return fi.p + ceil_log2(group);
  return fi.emax - fi.emin + fi.p + ceil_log2(group) + 1;
}

std::optional<std::string> admission_error(const OpDesc& d, int configured_width) {
  if (d.group < 1 || d.group > 65535)
    return "group size " + std::to_string(d.group) + " is out of range: it must be 1..65535";
  if (is_float(d.dtype) && !is_float(d.out))
    return std::string("output format ") + name(d.out) + " cannot hold a sum of " + name(d.dtype) +
           " values: use a float output format (fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz)";
  if (!is_float(d.dtype) && d.out == Format::INT8)
    return "integer sums are output as int32 or a float format, not int8";
  if (d.policy == Policy::KULISCH_FIXED || !is_float(d.dtype)) {
    const int need = required_width(d.dtype, d.group);
    if (need > configured_width)
      return std::string("accumulator too narrow: an exact sum of ") + std::to_string(d.group) + " " + name(d.dtype) +
             " values needs " + std::to_string(need) + " bits but the configured width is " +
             std::to_string(configured_width) + "; raise the width to at least " + std::to_string(need) +
             " or use fewer ranks";
  }
  return std::nullopt;
}

}  // namespace prism
