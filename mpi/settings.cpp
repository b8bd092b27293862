#include "mpi/settings.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include "arith/op.hpp"
#include "coll/algorithms.hpp"
#include "format/format.hpp"
#include "util/closed_set.hpp"

namespace prism::mpi {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

template <class E>
E named(const char* var, const char* v, std::string_view extra = {}) {
  if (const auto e = from_name<E>(v)) return *e;
  throw std::invalid_argument(std::string(var) + "=" + v + ": not one of " +
                              (extra.empty() ? choices<E>(", ") : std::string(extra)));
}

}  // namespace

Settings settings_from_env() {
  Settings s;
  if (const char* v = env("PRISM_MPI")) {
    const std::string_view x(v);
    if (x == "off" || x == "0")
      s.enabled = false;
    else if (x != "on" && x != "1")
      throw std::invalid_argument(std::string("PRISM_MPI=") + v + ": on or off");
  }
  if (const char* v = env("PRISM_ALGO"))
    s.algorithm = std::string_view(v) == "auto"
                      ? Algorithm::AUTO
                      : named<Algorithm>("PRISM_ALGO", v, "auto, switch, binomial, chain, rhd, ring");
  if (const char* v = env("PRISM_POLICY")) s.policy = named<Policy>("PRISM_POLICY", v);
  if (const char* v = env("PRISM_MPI_16BIT")) {
    const Format f = named<Format>("PRISM_MPI_16BIT", v, "bf16, fp16");
    if (f != Format::BF16 && f != Format::FP16)
      throw std::invalid_argument(std::string("PRISM_MPI_16BIT=") + v + ": bf16 or fp16");
    s.half = f;
  }
  if (const char* v = env("PRISM_MPI_HOST")) s.host = v;
  return s;
}

}  // namespace prism::mpi
