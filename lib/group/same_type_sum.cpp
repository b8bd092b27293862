#include "group/same_type_sum.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace prism {

CollReport same_type_sum(Group& g, Collective c, const void* in, void* out, size_t count, size_t out_elems, Format f,
                         CollOptions o) {
  const auto refuse = [&](uint64_t over) {
    throw std::overflow_error("the sum of these " + std::string(f == Format::INT8 ? "8-bit" : "32-bit") +
                              " integers overflows in " + std::to_string(over) + " of " + std::to_string(out_elems) +
                              " elements (PRISM does not wrap it around, as Open MPI's or Gloo's sum would)");
  };
  o.op.out_given = true;
  if (f != Format::INT8) {
    o.op.out = f;
    const CollReport r = g.run(c, in, out, count, f, o);
    if (f == Format::INT32 && r.overflow) refuse(r.overflow);
    return r;
  }
  o.op.out = Format::INT32;
  std::vector<int32_t> wide(out ? out_elems : 0);
  const CollReport r = g.run(c, in, out ? wide.data() : nullptr, count, f, o);
  size_t beyond = 0;
  for (int32_t v : wide) beyond += v < -128 || v > 127;
  if (beyond) refuse(beyond);
  auto* narrow = static_cast<int8_t*>(out);
  for (size_t i = 0; i < wide.size(); ++i) narrow[i] = int8_t(wide[i]);
  return r;
}

}  // namespace prism
