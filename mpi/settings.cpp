#include "mpi/settings.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

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
  if (const char* v = env("PRISM_SWITCH")) s.switch_address = v;
  if (const char* v = env("PRISM_POOL")) s.pool = v;
  return s;
}

namespace {

// The settings every rank must share, by variable: its value's name, "" where unset. They decide
// which calls PRISM takes (PRISM_MPI, PRISM_MPI_16BIT) and how (the rest): ranks that differ would
// wait in different collectives.
struct Shared {
  const char* var;
  std::string (*value)(const Settings&);
};
const Shared kShared[] = {
    {"PRISM_MPI", [](const Settings& s) -> std::string { return s.enabled ? "on" : "off"; }},
    {"PRISM_MPI_16BIT", [](const Settings& s) -> std::string { return s.half ? name(*s.half) : ""; }},
    {"PRISM_ALGO", [](const Settings& s) -> std::string { return algorithm_name(s.algorithm); }},
    {"PRISM_POLICY", [](const Settings& s) -> std::string { return name(s.policy); }},
    {"PRISM_SWITCH", [](const Settings& s) { return s.switch_address; }},
    {"PRISM_POOL", [](const Settings& s) { return s.pool; }},
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

std::string shared_settings(const Settings& s) {
  std::string out;
  for (const Shared& x : kShared) out += std::string(x.var) + "=" + x.value(s) + "\n";
  return out;
}

std::string settings_difference(int a, const std::string& sa, int b, const std::string& sb) {
  const std::vector<std::string> la = lines(sa), lb = lines(sb);
  for (size_t i = 0; i < std::max(la.size(), lb.size()); ++i) {
    const std::string x = i < la.size() ? la[i] : "", y = i < lb.size() ? lb[i] : "";
    if (x == y) continue;
    const bool x_set = x.find('=') + 1 < x.size(), y_set = y.find('=') + 1 < y.size();
    const std::string var = (x.empty() ? y : x).substr(0, (x.empty() ? y : x).find('='));
    return "rank " + std::to_string(a) + " has " + (x_set ? x : "no " + var) + ", rank " + std::to_string(b) + " has " +
           (y_set ? y : "none");
  }
  return {};
}

}  // namespace prism::mpi
