// Closed sets described once: a table of {value, name, doc, alias} rows next
// to each enum, found by argument-dependent lookup through an `entries(E)`
// hook, names, parses, documents and lists the set. Every help text, error
// message and telemetry name derives from the table, so adding an enumerator
// means adding one row (each table static_asserts its size against the enum).
//
//   enum class Colour : uint8_t { RED = 1, GREEN = 2 };
//   inline constexpr size_t kColourCount = 2;
//   inline constexpr Entry<Colour> kColours[] = {
//       {Colour::RED, "red", "the first"}, {Colour::GREEN, "green", "the second", "verde"}};
//   static_assert(std::size(kColours) == kColourCount);
//   constexpr std::span<const Entry<Colour>> entries(Colour) { return kColours; }
//
//   name(Colour::RED) == "red"; from_name<Colour>("verde") == Colour::GREEN;
//   choices<Colour>() == "red green"; from_code<Colour>(2) == Colour::GREEN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace prism {

template <class E>
struct Entry {
  E value;
  const char* name;             // the spelling in configs, command lines, telemetry and logs
  const char* doc;              // one sentence: what it is (and, where it is a refusal, what to do)
  const char* alias = nullptr;  // a second spelling from_name() accepts (never printed)
};

template <class E>
concept ClosedSet = requires {
  entries(E{});
};

// The row of `v`, or null when the table has none (a value off the wire).
template <ClosedSet E>
constexpr const Entry<E>* entry(E v) {
  for (const Entry<E>& e : entries(E{}))
    if (e.value == v) return &e;
  return nullptr;
}

template <ClosedSet E>
constexpr const char* name(E v) {
  const Entry<E>* e = entry(v);
  return e ? e->name : "?";
}

template <ClosedSet E>
constexpr const char* doc(E v) {
  const Entry<E>* e = entry(v);
  return e ? e->doc : "?";
}

// The value whose name (or alias) is `s`.
template <ClosedSet E>
constexpr std::optional<E> from_name(std::string_view s) {
  for (const Entry<E>& e : entries(E{}))
    if (s == e.name || (e.alias && s == e.alias)) return e.value;
  return std::nullopt;
}

// The names of the values `keep(value)` accepts, in table order: "fp32 fp16 ..." of the float formats.
template <ClosedSet E, class Keep>
std::string choices_if(Keep keep, const char* sep = " ") {
  std::string out;
  for (const Entry<E>& e : entries(E{})) {
    if (!keep(e.value)) continue;
    if (!out.empty()) out += sep;
    out += e.name;
  }
  return out;
}

// Every name in table order, joined by `sep`: "fp32 fp16 bf16 ...".
template <ClosedSet E>
std::string choices(const char* sep = " ") {
  return choices_if<E>([](E) { return true; }, sep);
}

// The value whose numeric code is `c` (wire enums), or nothing.
template <ClosedSet E>
constexpr std::optional<E> from_code(uint8_t c) {
  for (const Entry<E>& e : entries(E{}))
    if (uint8_t(e.value) == c) return e.value;
  return std::nullopt;
}

// How many rows the table has.
template <ClosedSet E>
constexpr size_t count() {
  return entries(E{}).size();
}

// True when the table lists the codes first, first + 1, ... in order: what
// lets a hot path's range check (first <= c < first + count) stand for a
// table lookup. Tables of wire enums static_assert it.
template <ClosedSet E>
constexpr bool codes_in_order(unsigned first) {
  unsigned want = first;
  for (const Entry<E>& e : entries(E{}))
    if (unsigned(std::underlying_type_t<E>(e.value)) != want++) return false;
  return true;
}

}  // namespace prism
