#include "arith/op.hpp"

#include <bit>

namespace prism {

int ceil_log2(uint32_t r) { return r <= 1 ? 0 : 32 - std::countl_zero(r - 1); }

int required_width(Format dtype, uint32_t group) {
  const FormatInfo& fi = info(dtype);
  if (!fi.is_float) return fi.p + ceil_log2(group);
  return fi.emax - fi.emin + fi.p + ceil_log2(group) + 1;
}

std::optional<int> exact_width_needed(const OpDesc& d) {
  if (!needs_exact_width(d)) return std::nullopt;
  return required_width(d.dtype, d.group);
}

std::optional<std::string> admission_error(const OpDesc& d, int configured_width) {
  if (d.group < 1 || d.group > 65535)
    return "group size " + std::to_string(d.group) + " is out of range: it must be 1..65535";
  if (is_float(d.dtype) && !is_float(d.out))
    return std::string("output format ") + name(d.out) + " cannot hold a sum of " + name(d.dtype) +
           " values: use a float output format (" + choices_if<Format>(is_float) + ")";
  if (!is_float(d.dtype) && d.out == Format::INT8)
    return "integer sums are output as int32 or a float format, not int8";
  if (const auto need = exact_width_needed(d); need && *need > configured_width)
    return std::string("accumulator too narrow: an exact sum of ") + std::to_string(d.group) + " " + name(d.dtype) +
           " values needs " + std::to_string(*need) + " bits but the configured width is " +
           std::to_string(configured_width) + "; raise the width to at least " + std::to_string(*need) +
           " or use fewer ranks";
  return std::nullopt;
}

}  // namespace prism
