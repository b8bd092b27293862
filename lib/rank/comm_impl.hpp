// The Communicator's state (private to libprism): its ops, the window of
// chunks in flight, the socket and the round-trip estimator.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <optional>
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
  uint64_t seq = 0;            // the last send's place in this rank's order of sends (Impl::send_seq)
  uint32_t tries = 0;          // sends so far
  uint32_t at = kNotInFlight;  // its place in the window (Impl::inflight)
  uint64_t query_ns = 0;       // the last QUERY about it (0: none since its last send)
  uint64_t wait_ns = 0;        // its timer counts from here when later than its send (a HELD about an older chunk)
  uint32_t unanswered = 0;     // QUERYs about it with no STATUS since
  bool done = false;           // its RESULT is in
  bool resend = false;         // lost for sure (a STATUS said MISSING): the next round re-sends it
  bool waited = false;         // a QUERY or a HELD touched it: its round trip measures a wait, not the path
};

// Loss detection per switch shard (one UDP port, one FIFO at the switch: its
// chunks complete in the order the ranks sent them, which is the same on
// every rank). A rank asks before it re-sends, so that it re-sends only what
// the switch lacks (a chunk late because another rank lost its copy, or
// started late, is not re-sent by every rank):
// - RACK (RFC 8985): a chunk still open when a chunk sent after it (in
//   this rank's order of sends) was answered, and its round trip (and a reordering allowance) has passed, is
//   suspect: a QUERY asks about it.
// - A timer with no such evidence (nothing answered: every rank's chunks may
//   wait for a late rank): a QUERY asks about the shard's oldest chunk due.
// The switch's STATUS says HELD (it has this rank's contribution and waits
// for the ranks it names: the timers of the chunks sent with it or after it
// restart, and the shard's timeout doubles while it waits), MISSING (re-send it, and what went with it), or
// the RESULT comes again (it was lost). Two QUERYs about a chunk unanswered
// (loss, or a switch without queries) re-send it.
struct ShardTimer {
  uint64_t rack_seq = 0;  // the latest send (Chunk::seq) of a chunk answered on this shard
  uint64_t rack_rtt = 0;  // that chunk's round trip
  uint32_t level = 0;     // doublings of the timeout while the switch says HELD (0 again at a RESULT)
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
  static constexpr uint32_t kAutoWindowMax = 512, kAutoWindowStart = 64, kMinWindow = 64, kMinCap = 16,
                            kPortBudget = 512;
  static constexpr uint32_t kQueryTries = 2;
  // Doublings of a shard's timeout while the switch says HELD: a late rank
  // costs a QUERY every 8 RTOs at most, and a loss behind it waits no longer.
  static constexpr uint32_t kMaxLevel = 3;    // QUERYs unanswered in a row before a timer re-sends instead
  static constexpr uint8_t kOpAbandoned = 8;  // NACK reason: the switch abandoned the op (docs/PROTOCOL.md)

  struct InFlight {
    rank::Op* op;
    uint32_t chunk;
  };
  enum class Send : uint8_t { NEW, RETRANSMIT, QUERY };
  struct Pending {
    rank::Op* op;
    uint32_t chunk;
    Send what;
  };

  std::string who(const rank::Op& op) const;
  // The switch's UDP port for a packet of (op, chunk): its shard's (docs/PROTOCOL.md, Steering).
  uint16_t port_of(uint32_t op, uint32_t chunk) const {
    return wire::shard_port(ep.switch_port, wire::shard_of(ep.job, op, chunk, ep.switch_shards));
  }
  std::string switch_where() const;  // "ip:port", or "ip:first-last" with more than one shard
  rank::ShardTimer& timer_of(uint32_t op, uint32_t chunk) {
    return timers[wire::shard_of(ep.job, op, chunk, ep.switch_shards)];
  }
  // How long a QUERY's answer may take before it counts as lost: the path's
  // own RTO (from chunks that waited for no rank), without the floor that
  // a data retransmission needs, at least 1 ms; the RTO before any sample.
  uint64_t query_timeout() const {
    if (!rtt.samples()) return rtt.rto();
    return std::max<uint64_t>(rtt.rto_unclamped(), 1000000);
  }
  void queue(rank::Op& op, uint32_t c, Send what);
  struct Timers {
    uint64_t asked_until = 0;          // a QUERY's answer is awaited until then
    uint64_t late_at = 0;              // its timeout runs out (ask the shard about its oldest)
    uint64_t suspect_at = UINT64_MAX;  // RACK: a chunk sent after it was answered (ask about it)
  };
  Timers timers_of(const rank::Chunk& ch, const rank::ShardTimer& st) const;
  void due_chunks(uint64_t t);
  void on_status(rank::Op& op, const wire::Parsed& p, uint64_t t);
  void wait_from(const rank::Op& op, uint32_t c, uint64_t t);
  void send_due(uint64_t t);
  void receive(int wait_ms, uint64_t t);
  void on_result(rank::Op& op, const wire::Parsed& p, uint64_t t);
  void on_nack(rank::Op& op, const wire::Parsed& p, const uint8_t* body, size_t body_len);
  void check_deadlines(uint64_t t);
  void leave_window(rank::Op& op, uint32_t c);
  void finish(rank::Op& op, uint64_t t);
  void window_grow();
  void window_cut(uint64_t t);
  void fail(rank::Op& op, Error e);

  Endpoints ep;
  Tuning tune;
  rank::UdpLink link;
  rank::RttEstimator rtt;
  uint32_t next_op;
  uint64_t send_seq = 0;         // sends of chunks so far (Chunk::seq)
  uint64_t gso_given_up_at = 0;  // send_seq when a MALFORMED NACK turned GSO off
  uint32_t nonce = 0;            // this communicator's JOIN nonce (0: did not join)
  uint32_t window = 64;          // chunks in flight now (adaptive unless Tuning::window fixes it)
  uint32_t window_cap = 64;      // Tuning::window, or kAutoWindowMax; within the job's slot quota
  uint32_t clean_results = 0;    // RESULTs since the window last changed
  uint64_t last_cut = 0;         // when a loss last halved it
  bool slow_start = true;        // no loss yet: it doubles
  size_t mtu = 1500;
  std::unordered_map<uint32_t, std::unique_ptr<rank::Op>> ops;  // by op number, until waited for
  std::deque<rank::Op*> sendq;                                  // ops with chunks never sent, in call order
  std::vector<InFlight> inflight;                               // the window: chunks sent and not complete
  std::vector<rank::ShardTimer> timers;                         // by switch shard
  std::vector<InFlight> oldest_due;                             // by switch shard: the chunk a QUERY asks about
  std::string waiting_for;  // the last HELD's news: which ranks the switch still lacks (for a timeout's message)
  std::vector<std::array<uint8_t, wire::kHeaderSize>> heads;  // headers of the batch being sent
  std::array<rank::UdpLink::Datagram, kMaxBatch> dgrams{};
  std::vector<Pending> batch;
  // The switch's id, the sender of its RESULTs, NACKs and STATUS
  // (docs/PROTOCOL.md). Endpoints do not carry it: the first RESULT taken
  // (its job, op, chunk and descriptor those of a chunk this rank sent)
  // names it, and from then on an answer from the switch's address under
  // another sender is not the switch's (stray): a blind forger must guess it too.
  std::optional<uint16_t> switch_id;
  Stats stats;
};

}  // namespace prism
