// What a reducer shard remembers of op chunks that no longer hold a slot:
// the results it completed, kept for retransmissions ("retain the result,
// not the slot"), and tombstones of the chunks it let go (a result expired,
// a chunk abandoned), so a late packet for one is told and never reopens
// it. A slot holds an accumulator (kilobytes for a Kulisch chunk); a
// retained result is only the bytes that were sent, so a shard's slot table
// bounds the ops in flight, not the ops completed in the last retention_ms.
//
// Representation: one preallocated ring of 64-byte lines, records in
// completion order (a FIFO), each a one-line Record (the key, the RESULT's
// header as sent, its completion time) followed by the body's lines. A
// record never wraps: when it does not fit before the ring's end, the rest
// of the ring becomes a padding record and it starts at line 0. The
// tombstones are a FIFO of keys, the oldest forgotten first. One KeyTable
// maps every key the log knows to what it knows (a record's line, or a
// tombstone's kind), so a packet that finds no slot costs one probe. Nothing
// allocates after construction; the ring's pages are touched as it fills.
//
// The log never decides to let a result go: the reducer pops the oldest
// when it needs room (has_room() false) or when it is older than
// retention_ms, and counts why; popping tombstones its key (EXPIRED).
//
// Tenancy. Every record and tombstone carries the generation of the job it
// belongs to (a pooled job's, switch/pool.hpp; 0 for a declared job), and
// recall() returns it: a pooled id released and taken again keeps the same
// keys, and the reducer treats what another generation left as unknown, so
// the next tenant never reads the previous one's results (SECURITY-REVIEW
// F2). The key table holds one entry per key, the newest: a record or
// tombstone of an older generation that is later popped or forgotten leaves
// a newer entry for its key alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

#include "proto/wire.hpp"
#include "switch/key_table.hpp"

namespace prism::sw {

class ResultLog {
 public:
  static constexpr size_t kLine = 64;
  // One line: everything a retransmission needs besides the body.
  struct Record {
    uint32_t len;        // body bytes, in the lines that follow
    uint32_t gen;        // its job's generation (pooled; 0 for a declared job)
    uint64_t t_done;     // completion time (ns)
    uint32_t lines;      // lines the record takes, itself included
    uint32_t job_index;  // Job::index of its job; kPad for padding
    uint64_t spare = 0;
    wire::Header h;  // the RESULT's header as it was sent: its job, op and chunk are the key
    SlotKey key() const { return {h.job, h.op, h.chunk}; }
    const uint8_t* body() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  };
  static_assert(sizeof(Record) == kLine, "a record's header is one line");

  // What the log knows of a key.
  enum class Known : uint32_t {
    NOTHING = 0,
    EXPIRED = 1,    // completed; its result let go
    ABANDONED = 2,  // given up after op_timeout_ms
    RETAINED = 3,   // completed; its result is `record`
  };
  struct Memory {
    Known known;
    const Record* record;  // RETAINED only
    uint32_t gen;          // the generation it was remembered under (NOTHING: 0)
  };

  // `bytes` of ring (rounded down to whole lines; 0 retains nothing) and
  // room for the last `tombstones` keys let go. The table holds one record
  // per 512 bytes of ring: a log of smaller results is bounded by that count
  // instead (has_room() says so too).
  ResultLog(size_t bytes, size_t tombstones);

  Memory recall(const SlotKey& k) const {
    const uint32_t v = table_.get(k);
    if (v == 0) return {Known::NOTHING, nullptr, 0};
    if (v < line_base_) return {tomb_[v - 1].why, nullptr, tomb_[v - 1].gen};
    const Record& r = at(v - line_base_);
    return {Known::RETAINED, &r, r.gen};
  }
  // Starts fetching the line recall(k) reads first.
  void prefetch(const SlotKey& k) const { table_.prefetch(k); }

  // A body of `len` bytes fits an empty log (false: it is never retained).
  bool fits(size_t len) const { return lines_for(len) <= cap_ && max_records_ > 0; }
  // A body of `len` bytes fits now, without letting anything go.
  bool has_room(size_t len) const;
  // Appends a record for `k` (unknown to the log, or known from another
  // generation) of generation `gen` with the `len` bytes at `body` (`h`'s
  // job, op and chunk become `k`'s); has_room(len) must hold. Cost: the record's lines written once,
  // with streaming stores where the CPU has them: the ring is far larger
  // than the caches and read back only for a retransmission, so its lines
  // are neither fetched first nor left to crowd the cache.
  void push(const SlotKey& k, uint32_t job_index, const wire::Header& h, const uint8_t* body, size_t len,
            uint64_t now_ns, uint32_t gen = 0);
  // The oldest record, or null when none is retained.
  const Record* oldest() const { return records_ ? &at(head_) : nullptr; }
  // Lets the oldest record go (there must be one): its key becomes EXPIRED
  // (unless the key has a newer entry, of another generation).
  void pop_oldest();
  // Remembers `k` (unknown to the log, known from another generation, or
  // the record just popped) as EXPIRED or ABANDONED under generation `gen`,
  // forgetting the oldest tombstone when there are `tombstones` already.
  void tombstone(const SlotKey& k, Known why, uint32_t gen = 0);

  size_t size() const { return records_; }
  size_t tombstones() const { return tomb_count_; }
  size_t lines_used() const { return used_; }
  size_t capacity_lines() const { return cap_; }

 private:
  static constexpr uint32_t kPad = ~uint32_t(0);
  // A tombstone: the key it names, why, and the generation.
  struct Tomb {
    SlotKey key;
    Known why;
    uint32_t gen;
  };
  struct alignas(kLine) Line {
    unsigned char b[kLine];
  };
  static size_t lines_for(size_t len) { return 1 + (len + kLine - 1) / kLine; }
  Record& at(size_t line) const { return *std::launder(reinterpret_cast<Record*>(&ring_[line])); }
  void skip_padding();
  void put_record(size_t line, const Record& r);
  size_t tomb_at(size_t i) const { return i < tomb_.size() ? i : i - tomb_.size(); }  // i < 2 * capacity
  size_t cap_, max_records_;
  std::unique_ptr<Line[]> ring_;  // default-initialised: pages are touched as the log fills
  std::vector<Tomb> tomb_;        // the tombstones' FIFO ring
  uint32_t line_base_;            // tomb_.size() + 1
  // key -> its tombstone's place in tomb_ + 1 (below line_base_), or its record's line + line_base_
  KeyTable table_;
  size_t head_ = 0, tail_ = 0;  // oldest record's line; where the next one goes (< cap_)
  size_t used_ = 0;             // lines from head_ to tail_, padding included
  size_t records_ = 0;
  size_t tomb_head_ = 0, tomb_count_ = 0;
};

}  // namespace prism::sw
