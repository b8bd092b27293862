// JSON output for PRISM's tools: string quoting and a one-object builder, so
// that manifests (prism-gen) and measurement lines (prism-bench) are written
// one way.
//
//   JsonObject o;
//   o.str("policy", "kulisch").num("ranks", 8).num("gbps", 41.25, "%.4g").null("target");
//   o.text()  ->  {"policy":"kulisch","ranks":8,"gbps":41.25,"target":null}
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace prism::app {

// `s` as a JSON string literal: quotes, backslashes and control characters escaped.
inline std::string json_str(std::string_view s) {
  std::string o = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (c == '\n') {
      o += "\\n";
    } else if (c == '\t') {
      o += "\\t";
    } else if (u < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", u);
      o += b;
    } else {
      o += c;
    }
  }
  return o + "\"";
}

// A JSON number: printf's `fmt` ("%.6g"), null when not finite.
inline std::string json_num(double v, const char* fmt = "%.6g") {
  if (!std::isfinite(v)) return "null";
  char b[40];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

// An object, field by field, in the order given.
class JsonObject {
 public:
  JsonObject& raw(std::string_view key, std::string_view json) {
    s_ += s_.size() > 1 ? "," : "";
    s_ += json_str(key);
    s_ += ':';
    s_ += json;
    return *this;
  }
  JsonObject& str(std::string_view key, std::string_view v) { return raw(key, json_str(v)); }
  template <std::integral T>
  JsonObject& num(std::string_view key, T v) {
    if constexpr (std::is_same_v<T, bool>) return raw(key, v ? "true" : "false");
    return raw(key, std::to_string(v));
  }
  JsonObject& num(std::string_view key, double v, const char* fmt = "%.6g") { return raw(key, json_num(v, fmt)); }
  JsonObject& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonObject& null(std::string_view key) { return raw(key, "null"); }
  std::string text() const { return s_ + "}"; }

 private:
  std::string s_ = "{";
};

// A JSON array of fn(x) for each x of `xs` (fn returns JSON text).
template <class Range, class Fn>
std::string json_array(const Range& xs, Fn fn) {
  std::string s = "[";
  for (const auto& x : xs) {
    if (s.size() > 1) s += ',';
    s += fn(x);
  }
  return s + "]";
}

}  // namespace prism::app
