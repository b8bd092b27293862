// A small command-line reader shared by PRISM's tools: --key VALUE,
// --key=VALUE, boolean --flags, positionals, and one-line errors that say
// what is wrong and what to do. A value from a closed set (a format, a
// policy, ...) is read with one_of() / list_of(), whose errors list the set's
// table (util/closed_set.hpp), never a typed-out copy of it.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "util/closed_set.hpp"

namespace prism::cli {

struct Error {
  std::string msg;
};
[[noreturn]] inline void fail(const std::string& msg) { throw Error{msg}; }

// A tool's main(): returns fn()'s status; an error (cli::fail or any other
// exception) prints one line, "tool: what is wrong", and returns 2.
template <class Fn>
int run_tool(const char* tool, Fn fn) {
  try {
    return fn();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.msg.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
  }
  return 2;
}

class Args {
 public:
  // `valued`: options that take a value; `flags`: options that do not.
  // A valued option given twice keeps every value (see all()).
  Args(int argc, char** argv, int first, const std::set<std::string>& valued, const std::set<std::string>& flags) {
    bool ended = false;
    for (int i = first; i < argc; ++i) {
      const std::string s = argv[i];
      if (ended || s.size() < 2 || s[0] != '-') {
        positional.push_back(s);
        continue;
      }
      if (s == "--") {
        ended = true;
        continue;
      }
      std::string key = s, val;
      bool has_val = false;
      if (auto eq = s.find('='); s.rfind("--", 0) == 0 && eq != std::string::npos) {
        key = s.substr(0, eq);
        val = s.substr(eq + 1);
        has_val = true;
      }
      if (flags.count(key)) {
        if (has_val) fail("option " + key + " takes no value");
        flags_.insert(key);
        continue;
      }
      if (!valued.count(key)) fail("unknown option " + s + " (see --help)");
      if (!has_val) {
        if (i + 1 >= argc) fail("option " + key + " needs a value (see --help)");
        val = argv[++i];
      }
      values_[key].push_back(val);
    }
  }

  bool has(const std::string& k) const { return flags_.count(k) || values_.count(k); }
  std::string str(const std::string& k, const std::string& def = "") const {
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second.back();
  }
  std::vector<std::string> all(const std::string& k) const {
    auto it = values_.find(k);
    return it == values_.end() ? std::vector<std::string>{} : it->second;
  }
  uint64_t num(const std::string& k, uint64_t lo, uint64_t hi, uint64_t def) const {
    if (!values_.count(k)) return def;
    const std::string v = str(k);
    char* end = nullptr;
    errno = 0;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 0);
    if (v.empty() || *end || errno || v[0] == '-' || x < lo || x > hi)
      fail("bad " + k + " '" + v + "': give a whole number in " + std::to_string(lo) + ".." + std::to_string(hi));
    return x;
  }
  double real(const std::string& k, double lo, double hi, double def) const {
    if (!values_.count(k)) return def;
    const std::string v = str(k);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi))
      fail("bad " + k + " '" + v + "': give a number in [" + shortest(lo) + ", " + shortest(hi) + "]");
    return x;
  }

  std::vector<std::string> positional;

 private:
  static std::string shortest(double x) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", x);
    return b;
  }
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> flags_;
};

// "a,b,c" -> {"a", "b", "c"} (an empty item stays: "a,,b" has three).
inline std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t comma = v.find(',', start);
    out.push_back(v.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// The value of option `key` in closed set E: `def` when the option is not
// given (no default: "missing --dtype (fp32 fp16 ...)"), and for a value not
// in the set "unknown --policy 'x' (fp32_arrival kulisch fp32_binomial)".
template <ClosedSet E>
E one_of(const Args& a, const std::string& key, std::optional<E> def = std::nullopt) {
  if (!a.has(key)) {
    if (def) return *def;
    fail("missing " + key + " (" + choices<E>() + ")");
  }
  const std::string v = a.str(key);
  if (auto e = from_name<E>(v)) return *e;
  fail("unknown " + key + " '" + v + "' (" + choices<E>() + ")");
}

// A comma-separated list of E's names, or "all" (then: every value, in table
// order). Each value once, in the order given. `what` names an item in the
// error: "unknown policy 'x': use fp32_arrival kulisch fp32_binomial or all".
template <ClosedSet E>
std::vector<E> list_of(const std::string& what, const std::string& list) {
  std::vector<E> out;
  for (const auto& item : split_list(list)) {
    if (item == "all") {
      out.clear();
      for (const auto& e : entries(E{})) out.push_back(e.value);
      return out;
    }
    const auto e = from_name<E>(item);
    if (!e) fail("unknown " + what + " '" + item + "': use " + choices<E>() + " or all");
    if (std::find(out.begin(), out.end(), *e) == out.end()) out.push_back(*e);
  }
  return out;
}

}  // namespace prism::cli
