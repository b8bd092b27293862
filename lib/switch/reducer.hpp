// One reducer shard's logic: the slots of the ops hashed to it, keyed by
// (job, op, chunk), each with its descriptor, contributor bitmap and
// accumulator; completion into RESULTs (root) or PARTIALs (leaf); retained
// results for retransmissions; NACKs to registered senders; STATUSes that
// answer a member's QUERY (never opening or changing a slot). No DPDK: the
// pipeline's reducer stage hands it parsed packets and sends what it emits.
//
// A slot lives while its op chunk is open (and, at a leaf, until the
// parent's RESULT comes): on completion its RESULT's bytes go to the result
// log (result_log.hpp) and the slot is free at once. A chunk open longer
// than op_timeout_ms is abandoned: its contributors are told (NACK
// OP_ABANDONED) and its key is tombstoned, as a completed chunk's is when
// its retained result is let go.
//
// Single-threaded by design: one shard = one lcore owns its slots, so nothing
// here locks. Slots and accumulators are recycled, so a steady stream of ops
// with the same descriptor allocates nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <unordered_map>
#include <vector>

#include "arith/accumulator.hpp"
#include "proto/fragment.hpp"
#include "proto/steer.hpp"
#include "switch/directory.hpp"
#include "switch/ingress.hpp"
#include "switch/key_table.hpp"
#include "switch/pool_shard.hpp"
#include "switch/result_log.hpp"
#include "switch/session.hpp"
#include "switch/sink.hpp"

namespace prism::sw {

// Which shard owns a key, and which takes a packet: the protocol's steering
// rule (proto/steer.hpp), which RX, the reducer and every client share.
inline uint32_t shard_of(const SlotKey& k, uint32_t shards) { return wire::shard_of(k.job, k.op, k.chunk, shards); }
inline uint32_t shard_of(const wire::Header& h, uint32_t shards) { return wire::shard_of(h, shards); }

// Per job, counted in op chunks (a slot holds one chunk of one op).
struct JobStats {
  uint64_t opened = 0, completed = 0, expired = 0, timed_out = 0, quota_refused = 0;
  uint64_t in_flight = 0;
};

struct ReducerStats {
  // Every packet the shard takes is either accepted (counted into a slot, staged, answered or acted
  // on) or dropped for one reason: packets = accepted + dropped, and dropped is the sum of
  // drops[] but for the NO_MEMORY of a tick or of an accepted packet's completion (no packet's drop).
  uint64_t packets = 0, accepted = 0, dropped = 0;
  uint64_t contribs = 0, partials = 0, parent_results = 0, session_packets = 0;
  uint64_t results_sent = 0, partials_sent = 0, nacks_sent = 0, resent = 0;
  uint64_t elements = 0;  // element-contributions reduced
  uint64_t drops[size_t(Drop::kCount)] = {};
  uint64_t slots_in_use = 0, slots_high = 0;
  uint64_t results_retained = 0, evicted_for_room = 0;
  uint64_t pool_packets = 0, pool_replies = 0;
  uint64_t queries = 0, statuses_sent = 0;

  void count(Drop d) {
    ++drops[size_t(d)];
    ++dropped;
  }
};

// One named statistic of a block S: these tables are the only place the
// statistics are named (telemetry, the summary and the bench iterate them).
template <class S>
struct StatField {
  const char* name;
  const char* doc;
  uint64_t S::*field;
};
inline constexpr StatField<ReducerStats> kReducerStats[] = {
    {"packets", "admitted packets the shard took", &ReducerStats::packets},
    {"accepted", "packets among them counted into a slot, staged, answered or acted on", &ReducerStats::accepted},
    {"dropped", "packets among them dropped, each for one of the reasons listed under the shard",
     &ReducerStats::dropped},
    {"contribs", "CONTRIBs among them", &ReducerStats::contribs},
    {"partials", "PARTIALs among them", &ReducerStats::partials},
    {"parent_results", "RESULTs from the parent among them", &ReducerStats::parent_results},
    {"session_packets", "JOINs and JOINEDs among them (sessions: who joined, the first op number)",
     &ReducerStats::session_packets},
    {"results_sent", "RESULT frames sent (one per destination)", &ReducerStats::results_sent},
    {"partials_sent", "PARTIAL frames sent to the parent", &ReducerStats::partials_sent},
    {"resent", "RESULTs sent again for a retransmission, and PARTIALs retried", &ReducerStats::resent},
    {"nacks_sent", "NACKs the shard sent", &ReducerStats::nacks_sent},
    {"elements", "element-contributions reduced", &ReducerStats::elements},
    {"slots_in_use", "slots holding an op chunk now", &ReducerStats::slots_in_use},
    {"slots_high", "the most slots ever in use at once", &ReducerStats::slots_high},
    {"results_retained", "completed results in the result log now, for retransmissions",
     &ReducerStats::results_retained},
    {"evicted_for_room", "retained results let go before retention_ms because the log (retention_mib) was full",
     &ReducerStats::evicted_for_room},
    {"pool_packets", "ALLOCs and LEAVEs among them (job pools)", &ReducerStats::pool_packets},
    {"pool_replies", "ALLOCATEDs and LEFTs sent (job pools)", &ReducerStats::pool_replies},
    {"queries", "QUERYs among them (a rank asking whether its contribution is held)", &ReducerStats::queries},
    {"statuses_sent", "STATUSes sent in answer (a QUERY for a completed chunk gets its RESULT again instead)",
     &ReducerStats::statuses_sent},
};
inline constexpr StatField<JobStats> kJobStats[] = {
    {"opened", "op chunks that took a slot", &JobStats::opened},
    {"completed", "op chunks whose every contribution arrived", &JobStats::completed},
    {"expired", "completed chunks whose retained result was let go (after retention_ms, or early for room)",
     &JobStats::expired},
    {"timed_out", "chunks abandoned after op_timeout_ms (their contributors got NACK op_abandoned)",
     &JobStats::timed_out},
    {"slot_refusals", "chunks refused a slot (slot_quota or a full table)", &JobStats::quota_refused},
    {"in_flight", "chunks open now", &JobStats::in_flight},
};

// Cache-line aligned (its statistics are written per packet; another lcore's
// shard may be its neighbour in memory).
class alignas(64) Reducer {
 public:
  // `slots`: capacity of this shard's slot table. `mtu`: IP MTU for PARTIAL fragments.
  // `shard`: which of the switch's shards this is (the op numbers it opens are noted under it).
  // `result_mtu`: the IP MTU of the ports RESULTs leave through (the smallest): a chunk whose
  // RESULT would not fit it is refused when it opens (NACK CHUNK_TOO_LARGE), never built and lost.
  // `log`: the result log's size; by default the config's retention_mib and kTombstones let-go
  // chunk keys remembered (the fuzzer passes a small log, which is cheap to set up per input and
  // makes it reach the forgetting).
  struct LogSize {
    size_t bytes, tombstones;
  };
  static constexpr size_t kTombstones = size_t(1) << 16;
  Reducer(const Directory& dir, uint32_t slots, size_t mtu = 1500, uint32_t shard = 0, size_t result_mtu = 9000,
          std::optional<LogSize> log = std::nullopt);
  // What one slot's accumulator may take, at most (FP32_BINOMIAL keeps 4 bytes per rank and lane):
  // a chunk needing more is refused when it opens (NACK CHUNK_TOO_LARGE).
  static constexpr size_t kMaxSlotBytes = size_t(4) << 20;
  ~Reducer();

  // One admitted packet (ingress() admitted it); `now_ns` is the lcore's clock.
  // An allocation that fails refuses the packet (Drop::NO_MEMORY), nothing
  // half done: the shard runs on (SECURITY-REVIEW F12).
  void on_packet(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  // Lets go of results older than retention_ms, re-sends late PARTIALs and
  // abandons timed-out chunks; call every few ms. Costs the work it finds
  // (plus one look at the oldest result and the oldest open chunk).
  void tick(uint64_t now_ns, Sink& out);
  // A graceful stop (docs/PROTOCOL.md, "The switch stops"): from now on the
  // shard opens no chunk of an op newer than every op the job had opened (at
  // any shard) when drain() was called, and takes no JOIN or ALLOC, each
  // refused with NACK SWITCH_STOPPING (`stopping`); chunks of the ops in
  // flight still open and complete. abandon_all() then gives up every chunk
  // still open, as op_timeout_ms would.
  void drain();
  void abandon_all(Sink& out);
  bool draining() const { return draining_; }

  const ReducerStats& stats() const { return stats_; }
  const std::unordered_map<uint32_t, JobStats>& job_stats() const { return jobs_; }
  // Slots holding ops that are not complete (for --exit-when-idle's report).
  struct Open {
    SlotKey key;
    uint32_t terms, group;
  };
  std::vector<Open> open_slots() const;
  size_t bytes_per_slot_estimate() const;

 private:
  struct Slot;
  enum class State : uint8_t { FREE, OPEN, WAIT_PARENT };

  Slot* find(const SlotKey& k);
  Slot* find(const SlotKey& k, uint32_t gen);
  ResultLog::Memory recall(const SlotKey& k, uint32_t gen) const;
  static uint32_t generation(const Job& j) { return j.pooled ? j.pooled->generation() : 0; }
  Slot* open(const wire::Parsed& p, const Verdict& v, ResultLog::Known known, uint64_t now_ns, Sink& out);
  void on_session(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  void take(const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  void expire(uint64_t now_ns, Sink& out);
  void abandon_released();
  void contribute(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  void merge_partial(Slot& s, const wire::Parsed& p, const Verdict& v, uint64_t now_ns, Sink& out);
  void repeat(const ResultLog::Record& r, const wire::Parsed& p, const Verdict& v, Sink& out);
  void resend(const ResultLog::Record& r, const Verdict& v, Sink& out);
  void on_query(const wire::Parsed& p, const Verdict& v, Sink& out);
  // The bitmap of the job's members at this switch that have not contributed
  // to `s` (PROTOCOL.md: OP_ABANDONED's and STATUS's body); null when it
  // would not fit one frame.
  std::shared_ptr<std::vector<uint8_t>> missing_bitmap(const Slot& s) const;
  void complete(Slot& s, uint64_t now_ns, Sink& out);
  void retry_completion(Slot& s, uint64_t now_ns, Sink& out);
  void finish(Slot& s, const wire::Header& h, const uint8_t* body, size_t len, uint64_t now_ns, Sink& out);
  void retain(const Slot& s, const wire::Header& h, const uint8_t* body, size_t len, uint64_t now_ns);
  void let_go_oldest(bool for_room);
  void send_partial(Slot& s, bool retransmit, Sink& out);
  void forward_parent_result(Slot& s, const wire::Parsed& p, uint64_t now_ns, Sink& out);
  // Another switch that gave the chunk up first: the parent, or a child; and its bitmap of missing ranks.
  struct Told {
    bool by_parent = false;
    const Member* by_child = nullptr;
    std::span<const uint8_t> missing;
  };
  void abandon(Slot& s, Sink& out, const Told& told);
  void abandon(Slot& s, Sink& out);  // this switch's own decision
  void on_peer_abandoned(const wire::Parsed& p, const Verdict& v, Sink& out);
  void give_up(Slot& s);  // abandoned with nobody to tell
  void release(Slot& s);
  void link_newest(Slot& s);
  void unlink(Slot& s);
  bool waits_only_on_peers(const Slot& s) const;
  // Counts the drop and, when the reason has one and `from` a reply token, NACKs the admitted sender.
  void refuse(Drop d, const wire::Parsed& p, const Verdict& v, const Member& from, Sink& out);
  // The resend budget (SECURITY-REVIEW F8): every packet a member sends this
  // shard earns its bytes (up to kMaxCredit); what the shard sends it again
  // (a retained RESULT for a QUERY or RETRANSMIT, a STATUS's bitmap) spends
  // them. The first RESULT of an op, a NACK and a bare STATUS cost nothing:
  // each answers one packet of the member's with no more bytes than it had.
  // So no member, nor whoever spoofs one, gets more bytes back than it sent,
  // and a rank that lost RESULTs has the bytes of its own CONTRIBs to get
  // them again with. Kept per member entry and pooled generation.
  void earn(const Verdict& v, const wire::Parsed& p);
  bool spend(const Verdict& v, size_t bytes);
  // The reply budget, in frames: every frame a member's packet draws beyond the one RESULT of each
  // op takes a token, from one of two buckets: answers (a RESULT sent again, a STATUS) and NACKs.
  // Each bucket holds kReplyBurst and refills at one a millisecond; each contribution the shard
  // counts adds one answer (up to kMaxReplies). A rank that lost RESULTs asks for them with the
  // tokens of its own CONTRIBs, while a flood of requests costs the shard at most a thousand
  // frames a second per member and bucket, and a flood of refused packets does not take the
  // answers a real loss needs. Without a token a request is dropped (OVER_BUDGET), a refusal
  // counted unanswered.
  bool reply_token(const Verdict& v, const Member& m, bool nack = false);
  // One answer token more for the contribution just counted: its sender's credit, which earn()
  // found for this packet (a contribution is always earned first).
  void earn_reply();
  void drop(Drop d) { stats_.count(d); }
  void accept() { ++stats_.accepted; }

  // Whether an op of `job` opened before drain() (its chunks may still open).
  bool before_drain(const Job& job, uint32_t op) const;

  const Directory& dir_;
  bool draining_ = false;
  std::vector<std::optional<uint32_t>> drain_limit_;  // by Job::index: one past its highest op at drain()
  // Key -> slot + 1 for every live slot: a flat table (key_table.hpp), so
  // an op's first packet and its release cost one probe each, not a hash
  // library's buckets and signatures.
  KeyTable index_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<int32_t> free_;
  // Open slots in the order they opened (a doubly linked list through the
  // slots): the oldest is the first to time out, so a tick looks at one.
  int32_t oldest_open_ = -1, newest_open_ = -1;
  // Open slots that wait only for another switch, past their op_timeout_ms: also in opening order.
  int32_t oldest_peer_ = -1, newest_peer_ = -1;
  std::vector<std::pair<int32_t, uint32_t>> waiting_;  // (slot, its generation): leaves waiting for the parent
  ResultLog log_;                                      // completed results, and tombstones of the chunks let go
  Sessions sessions_;
  std::unordered_map<uint32_t, JobStats> jobs_;
  std::vector<JobStats*> stats_of_;  // by Job::index, into jobs_
  ReducerStats stats_;
  struct Credit {
    uint32_t bytes = 0, gen = 0;  // gen: the pooled generation it was earned under
    struct Bucket {
      uint32_t tokens = kReplyBurst;
      uint64_t refilled_ns = 0;  // the trickle's clock
    } replies, nacks;
  };
  Credit& credit(const Verdict& v, const Member& m);
  static constexpr uint32_t kMaxCredit = 1u << 20;
  static constexpr uint32_t kReplyBurst = 256, kMaxReplies = 4096;
  static constexpr uint64_t kReplyRefillNs = 1000000;  // one token a millisecond, up to kReplyBurst
  uint64_t now_ns_ = 0;                                // the packet's (or tick's) time
  Credit* earned_ = nullptr;                           // the credit earn() last found (credit_ never grows)
  std::vector<Credit> credit_;                         // by Job::entry_of()
  PoolShard pool_;  // ALLOC, binding JOINs, LEAVE and reclaim for the pools' jobs this shard owns
  uint64_t next_sweep_ns_ = 0;
  size_t mtu_;
  uint32_t shard_;
  size_t result_mtu_;
  // A direct-mapped cache in front of the index (an exact-match flow cache,
  // as in Open vSwitch; 1 KiB, where the index spreads its keys over 16
  // bytes per slot): an op's R packets arrive close together, so most
  // find the slot here without hashing into the index. An entry is only a
  // hint: it counts when its slot is live and holds that very key, so a
  // released or reused slot needs no invalidation.
  static constexpr uint32_t kCacheBits = 8;
  // Keyed with a random word per shard (as KeyTable is, SECURITY-REVIEW F20):
  // keys chosen to share an entry only evict each other's hints, and cannot
  // be chosen offline.
  uint32_t cache_at(const SlotKey& k) const {
    return (((k.op ^ cache_key_) * 0x9E3779B1u) ^ (k.chunk * 0x85EBCA77u) ^
            ((k.job ^ cache_key_ >> 7) * 0xC2B2AE3Du)) >>
           (32 - kCacheBits);
  }
  uint32_t cache_key_ = uint32_t(fresh_seed());
  std::vector<int32_t> cache_ = std::vector<int32_t>(size_t(1) << kCacheBits, -1);
};

}  // namespace prism::sw
