// The TCP store's wire format (tcp_store.hpp states it): the greeting, the
// commands and statuses, and little-endian encoding, shared by the client
// and the server.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace prism::rdv::wire {

inline constexpr uint8_t kGreeting[8] = {'P', 'R', 'S', 'T', 1, 0, 0, 0};  // "PRST", version 1

enum class Cmd : uint8_t { SET = 1, GET = 2, ADD = 3, CHECK = 4 };
enum class Status : uint8_t { OK = 0, TIMEOUT = 1, ERROR = 2 };

inline void put(std::vector<uint8_t>& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
inline void put(std::vector<uint8_t>& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }
inline uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

// A request's start: command and key.
inline std::vector<uint8_t> request(Cmd c, std::string_view key) {
  std::vector<uint8_t> b;
  b.push_back(uint8_t(c));
  put(b, key.size(), 4);
  put(b, key);
  return b;
}

}  // namespace prism::rdv::wire
