// The Communicator's state (private to libprism): its ops, the window of
// chunks in flight, the socket and the round-trip estimator.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "prism/prism.hpp"
#include "proto/packet.hpp"
#include "proto/steer.hpp"
#include "rank/rtt.hpp"
#include "rank/udp_link.hpp"

namespace prism::rank {

struct Chunk {
  static constexpr uint32_t kNotInFlight = UINT32_MAX;
  uint64_t sent_ns = 0;        // the last send
  uint32_t tries = 0;          // sends so far
  uint32_t at = kNotInFlight;  // its place in the window (Impl::inflight)
  bool done = false;           // its RESULT is in
};

struct Op {
  uint32_t op = 0;
  bool reduce = false;
  const uint8_t* in = nullptr;
  uint8_t* out = nullptr;  // null: the result is not kept (a reduce's non-root)
  size_t count = 0, in_bytes = 0, out_bytes = 0;
  uint32_t C = 0, nchunks = 0, next_new = 0, completed = 0;
  wire::Header desc;  // every CONTRIB's header but chunk, count and flags
  std::vector<Chunk> chunks;
  uint64_t t_start = 0, t_progress = 0;   // when it started; its last RESULT
  bool finished = false, queued = false;  // queued: in sendq (chunks never sent yet)
  std::unique_ptr<Error> error;
  OpReport report;
};

}  // namespace prism::rank

namespace prism {

struct Communicator::Impl {
  Impl(const Endpoints& e, const Tuning& t);

  void join();            // join.cpp
  void leave() noexcept;  // join.cpp: a pooled job's LEAVE
  uint32_t start(const void* in, void* out, size_t count, Format dtype, const OpOptions& o, bool reduce, uint16_t root);
  void progress(int max_wait_ms);
  rank::Op& op_of(const Request& r, uint64_t id);
  OpReport take(uint32_t id);
  uint32_t chunk_elems_for(size_t in_bytes, size_t out_bytes) const;

  static constexpr size_t kMaxBatch = 256;
  static constexpr uint8_t kOpAbandoned = 8;  // NACK reason: the switch abandoned the op (docs/PROTOCOL.md)

  struct InFlight {
    rank::Op* op;
    uint32_t chunk;
  };
  struct Pending {
    rank::Op* op;
    uint32_t chunk;
    bool retransmit;
  };

  std::string who(const rank::Op& op) const;
  // The switch's UDP port for a packet of (op, chunk): its shard's (docs/PROTOCOL.md, Steering).
  uint16_t port_of(uint32_t op, uint32_t chunk) const {
    return wire::shard_port(ep.switch_port, wire::shard_of(ep.job, op, chunk, ep.switch_shards));
  }
  std::string switch_where() const;  // "ip:port", or "ip:first-last" with more than one shard
  void queue(rank::Op& op, uint32_t c, bool retransmit);
  void send_due(uint64_t t);
  void receive(int wait_ms, uint64_t t);
  void on_result(rank::Op& op, const wire::Parsed& p, uint64_t t);
  void on_nack(rank::Op& op, const wire::Parsed& p, const uint8_t* body, size_t body_len);
  void check_deadlines(uint64_t t);
  void leave_window(rank::Op& op, uint32_t c);
  void finish(rank::Op& op, uint64_t t);
  void fail(rank::Op& op, Error e);

  Endpoints ep;
  Tuning tune;
  rank::UdpLink link;
  rank::RttEstimator rtt;
  uint32_t next_op;
  uint32_t nonce = 0;  // this communicator's JOIN nonce (0: did not join)
  uint32_t window = 64;
  size_t mtu = 1500;
  std::unordered_map<uint32_t, std::unique_ptr<rank::Op>> ops;  // by op number, until waited for
  std::deque<rank::Op*> sendq;                                  // ops with chunks never sent, in call order
  std::vector<InFlight> inflight;                               // the window: chunks sent and not complete
  std::vector<std::array<uint8_t, wire::kHeaderSize>> heads;    // headers of the batch being sent
  std::array<rank::UdpLink::Datagram, kMaxBatch> dgrams{};
  std::vector<Pending> batch;
  Stats stats;
};

}  // namespace prism
