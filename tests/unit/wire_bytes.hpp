// A PRISM header without a descriptor (JOIN, JOINED, ALLOC, ALLOCATED, LEAVE,
// LEFT), written byte by byte from docs/PROTOCOL.md's table — not by the
// code under test — for the tests that feed such messages to the switch.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace prism::test {

inline std::vector<uint8_t> session_bytes(uint8_t kind, uint32_t job, uint32_t op, uint32_t chunk, uint16_t sender,
                                          uint16_t group, uint16_t terms, uint8_t status = 0,
                                          const std::vector<uint8_t>& body = {}) {
  std::vector<uint8_t> m(32, 0);
  const auto be = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i) m[at + size_t(i)] = uint8_t(v >> (8 * (n - 1 - i)));
  };
  be(0, 0x5052, 2);  // magic
  m[2] = 1;          // version
  m[3] = kind;
  be(4, job, 4);
  be(8, op, 4);
  be(12, chunk, 4);
  be(16, sender, 2);
  be(18, group, 2);
  be(20, terms, 2);
  m[31] = status;
  m.resize(32 + body.size());
  if (!body.empty()) std::memcpy(m.data() + 32, body.data(), body.size());
  return m;
}

}  // namespace prism::test
