#include "rank/pool.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <random>

#include "prism/prism.hpp"
#include "proto/packet.hpp"
#include "rank/udp_link.hpp"

namespace prism::rank {
namespace {

uint64_t now_ms() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace

PooledJob alloc_pooled_job(const std::string& local_ip, const std::string& switch_ip, uint16_t switch_port,
                           uint32_t pool, uint16_t group, uint32_t timeout_ms) {
  UdpLink link(local_ip, 0, switch_ip, switch_port);
  std::random_device rd;
  uint32_t nonce = 0;
  while (nonce == 0) nonce = rd();
  // Padded to the ALLOCATED's size: a pool answers nobody with more bytes than it was sent.
  std::array<uint8_t, wire::kHeaderSize + wire::kAllocatedBody> msg{};
  wire::put_header(wire::alloc_header(pool, nonce, 0, group), msg.data());
  const uint64_t t0 = now_ms(), deadline = t0 + timeout_ms;
  uint64_t interval = 20, next_send = t0;
  const std::string what = "asking pool " + std::to_string(pool) + " at " + switch_ip + ":" +
                           std::to_string(switch_port) + " for a job of " + std::to_string(group) + " ranks";
  for (uint64_t t = t0; t < deadline; t = now_ms()) {
    if (t >= next_send) {
      const UdpLink::Datagram d{msg.data(), msg.size(), nullptr, 0, 0};
      link.send(&d, 1);
      next_send = t + interval;
      interval = std::min<uint64_t>(interval * 2, 500);
    }
    const uint64_t until = std::min(next_send, deadline);
    const size_t n = link.receive(until > t ? int(until - t) + 1 : 1);
    for (size_t i = 0; i < n; ++i) {
      wire::Parsed p;
      const size_t len = link.length(i);
      if (len == 0 || wire::parse_message({link.data(i), len}, &p, false) != wire::Refusal::OK || p.h.op != nonce)
        continue;
      if (p.h.kind == wire::Kind::NACK && uint8_t(p.h.dtype) == 0) {
        const auto r = wire::NackReason(p.h.status);
        throw Error(
            Errc::REFUSED,
            what + ": the switch refused it: " + wire::name(r) + " (" + std::to_string(p.h.status) +
                "): " + prism::doc(r) +
                (r == wire::NackReason::UNKNOWN_JOB ? " (no pool starts at job " + std::to_string(pool) + ")" : ""),
            0, p.h.status);
      }
      const auto body = wire::allocated_body(p);
      if (p.h.kind != wire::Kind::ALLOCATED || !body || p.h.group != group) continue;
      return {p.h.job, uint16_t(std::max<uint16_t>(1, p.h.terms)), body->slot_quota, body->idle_timeout_ms};
    }
  }
  throw Error(Errc::TIMEOUT, what + ": no answer in " + std::to_string(timeout_ms) +
                                 " ms: is the switch running there, does its config declare that pool, and is this "
                                 "host on one of the pool's switch ports?");
}

}  // namespace prism::rank
