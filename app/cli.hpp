// A small command-line reader shared by PRISM's tools: --key VALUE,
// --key=VALUE, boolean --flags, positionals, and one-line errors that say
// what is wrong and what to do.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace prism::cli {

struct Error {
  std::string msg;
};
[[noreturn]] inline void fail(const std::string& msg) { throw Error{msg}; }

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
      fail("bad " + k + " '" + v + "': give a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return x;
  }

  std::vector<std::string> positional;

 private:
  std::map<std::string, std::vector<std::string>> values_;
  std::set<std::string> flags_;
};

}  // namespace prism::cli
