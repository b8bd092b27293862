// Joining the job's session (docs/PROTOCOL.md, "Sessions"): the rank sends
// JOIN with a nonce of its own until the switch answers JOINED COMPLETE,
// which it does once every rank of the job has joined; the answer carries
// the session's first op number, above every op number the switch (and
// the switches below it) remember, so a restarted job never reuses one.
#include <array>
#include <chrono>
#include <random>
#include <thread>

#include "rank/comm_impl.hpp"

namespace prism {
namespace {

uint64_t now_ms() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

uint32_t fresh_nonce() {
  std::random_device rd;
  uint32_t n = 0;
  while (n == 0) n = rd();
  return n;
}

std::string ranks_in(const std::vector<uint8_t>& bitmap, uint16_t group, bool set) {
  std::string s;
  size_t n = 0;
  for (uint32_t r = 0; r < group; ++r) {
    const bool in = r / 8 < bitmap.size() && (bitmap[r / 8] >> (r % 8) & 1);
    if (in != set) continue;
    if (n++ < 16) s.append(n > 1 ? ", " : "").append(std::to_string(r));
  }
  if (n > 16) s += ", … (" + std::to_string(n) + " in all)";
  return s;
}

}  // namespace

void Communicator::Impl::join() {
  nonce = fresh_nonce();
  wire::Header h = wire::session_header(wire::Kind::JOIN, ep.job, ep.group);
  h.op = nonce;
  h.chunk = 0;
  h.sender = ep.rank;
  std::array<uint8_t, wire::kHeaderSize> msg;
  wire::put_header(h, msg.data());
  const uint64_t t0 = now_ms(), deadline = t0 + tune.join_timeout_ms;
  uint64_t interval = 20, next_send = t0;
  bool answered = false;
  uint16_t joined = 0;
  std::vector<uint8_t> bitmap;
  for (;;) {
    const uint64_t t = now_ms();
    if (t >= deadline) break;
    if (t >= next_send) {
      const rank::UdpLink::Datagram d{msg.data(), msg.size(), nullptr, 0, port_of(0, 0)};  // the session's shard
      if (link.send(&d, 1) == 1) ++stats.joins_sent;
      next_send = t + interval;
      interval = std::min<uint64_t>(interval * 2, 500);  // the others may take a while to start
    }
    const uint64_t until = std::min(next_send, deadline);
    const size_t n = link.receive(until > t ? int(until - t) + 1 : 1);
    for (size_t i = 0; i < n; ++i) {
      wire::Parsed p;
      const size_t len = link.length(i);
      if (len == 0 || wire::parse_message({link.data(i), len}, &p, false) != wire::Refusal::OK || p.h.job != ep.job) {
        ++stats.stray;
        continue;
      }
      if (p.h.kind == wire::Kind::NACK && p.h.op == nonce && uint8_t(p.h.dtype) == 0) {
        const auto r = wire::NackReason(p.h.status);
        throw Error(Errc::REFUSED,
                    "joining job " + std::to_string(ep.job) + " as rank " + std::to_string(ep.rank) +
                        ": the switch refused it: " + wire::name(r) + " (" + std::to_string(p.h.status) +
                        "): " + prism::doc(r),
                    0, p.h.status);
      }
      if (p.h.kind != wire::Kind::JOINED || p.h.op != nonce || p.h.sender != ep.rank) {
        ++stats.stray;
        continue;
      }
      answered = true;
      joined = p.h.terms;
      bitmap.assign(p.payload, p.payload + p.payload_len);
      if (p.h.status & wire::jstatus::COMPLETE) {
        next_op = p.h.chunk;
        stats.join_seconds = double(now_ms() - t0) / 1e3;
        return;
      }
    }
  }
  const std::string who = "job " + std::to_string(ep.job) + ", rank " + std::to_string(ep.rank);
  if (!answered)
    throw Error(Errc::TIMEOUT, who + ": the switch at " + switch_where() + " never answered JOIN in " +
                                   std::to_string(tune.join_timeout_ms) +
                                   " ms: is it running, does its config register this rank at " +
                                   (ep.local_ip.empty() ? std::string("this host") : ep.local_ip) + ":" +
                                   std::to_string(ep.local_port) +
                                   " with this host's MAC, and is the rank on the switch port's network?");
  throw Error(Errc::TIMEOUT, who + ": waited " + std::to_string(tune.join_timeout_ms) + " ms for every rank to join: " +
                                 std::to_string(joined) + " of " + std::to_string(ep.group) + " joined; missing rank" +
                                 (ep.group - joined > 1 ? "s " : " ") +
                                 (bitmap.empty() ? std::string("unknown (a group this large gets no bitmap of them)")
                                                 : ranks_in(bitmap, ep.group, false)) +
                                 ". Start every rank of the job (within join_timeout_ms of each other)");
}

void Communicator::Impl::leave() noexcept {
  // A pooled job's rank leaves it (docs/PROTOCOL.md, "Job pools"): LEAVE with the session's nonce until
  // LEFT answers, a few times; a LEAVE lost every time only leaves the job to the switch's idle timeout.
  if (!ep.pooled || nonce == 0) return;
  try {
    std::array<uint8_t, wire::kHeaderSize> msg;
    wire::put_header(wire::leave_header(ep.job, nonce, ep.rank), msg.data());
    for (int attempt = 0; attempt < 5; ++attempt) {
      const rank::UdpLink::Datagram d{msg.data(), msg.size(), nullptr, 0, port_of(0, 0)};
      link.send(&d, 1);
      const uint64_t until = now_ms() + (20u << attempt);
      for (uint64_t t = now_ms(); t < until; t = now_ms()) {
        const size_t n = link.receive(int(until - t) + 1);
        for (size_t i = 0; i < n; ++i) {
          wire::Parsed p;
          const size_t len = link.length(i);
          if (len && wire::parse_message({link.data(i), len}, &p, false) == wire::Refusal::OK &&
              p.h.kind == wire::Kind::LEFT && p.h.job == ep.job && p.h.op == nonce && p.h.sender == ep.rank)
            return;
        }
      }
    }
  } catch (...) {  // a destructor's best effort
  }
}

}  // namespace prism
