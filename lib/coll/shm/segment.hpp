// One rank's shared-memory segment (shm.hpp): a header, then one ring per
// peer for the messages that peer sends this rank. Rank r creates
// "/prism-<group id>-<r>" (shm_open), every other rank maps it, and r
// unlinks the name once all have, so a crash afterwards leaves nothing in
// /dev/shm. The layout is the same in every process: fixed-width fields,
// lock-free atomics (address-free, so they work across processes), each
// side's counters on a cache line of their own.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace prism::coll::shm {

inline constexpr uint64_t kSegmentMagic = 0x50524953'4D53484Dull;  // "PRISMSHM"
inline constexpr uint32_t kSegmentVersion = 1;

// The segment owner's: who it is, and its doorbell (doorbell.hpp), rung by
// any peer that wrote to one of its rings or freed space in a ring it writes.
struct Header {
  uint64_t magic;
  uint32_t version, group_size, rank, ring_bytes;
  int32_t pid;  // the owner's process, watched by peers waiting on it
  uint32_t pad0;
  uint64_t probe_addr;  // where in the owner's memory probe_value lies (the setup's check of single copy)
  uint64_t probe_value;
  alignas(64) std::atomic<uint32_t> bell;    // a futex word: incremented at every ring
  std::atomic<uint32_t> sleepers;            // how many of the owner's threads sleep on it
  alignas(64) std::atomic<uint32_t> closed;  // set when the owner destroys its links
};

// The ring from one peer (the producer) to the segment's owner (the
// consumer): a byte stream of messages, head and tail counting bytes ever
// written and consumed (never wrapped; the position is the count modulo
// ring_bytes, a power of two).
struct RingHeader {
  alignas(64) std::atomic<uint64_t> head;  // producer
  std::atomic<uint64_t> abandoned;         // producer: the last single-copy send it gave up on
  alignas(64) std::atomic<uint64_t> tail;  // consumer
  std::atomic<uint64_t> copied;            // consumer: single-copy messages read so far
  std::atomic<uint32_t> single_copy;       // consumer, at setup: it can read the producer's memory
};

inline constexpr size_t kHeaderBytes = 4096;
inline constexpr size_t kRingHeaderBytes = 256;
static_assert(sizeof(Header) <= kHeaderBytes && sizeof(RingHeader) <= kRingHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free);

// A mapping of one rank's segment: created (and initialised) by its owner,
// opened by the others. Unmapped when destroyed; the owner's also unlinked
// if it was not yet.
class Segment {
 public:
  static size_t bytes_for(int group_size, size_t ring_bytes) {
    return kHeaderBytes + size_t(group_size) * (kRingHeaderBytes + ring_bytes);
  }
  // Throws LinkError naming `who` and the name.
  static Segment create(const std::string& name, int group_size, int rank, size_t ring_bytes, const std::string& who);
  static Segment open(const std::string& name, const std::string& who);
  Segment() = default;
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  Header* header() const { return static_cast<Header*>(base_); }
  RingHeader* ring_header(int from) const {
    return reinterpret_cast<RingHeader*>(static_cast<uint8_t*>(base_) + kHeaderBytes +
                                         size_t(from) * (kRingHeaderBytes + header()->ring_bytes));
  }
  uint8_t* ring(int from) const { return reinterpret_cast<uint8_t*>(ring_header(from)) + kRingHeaderBytes; }
  // Removes the name (every rank has mapped it): the memory lives on while mapped.
  void unlink();

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;  // while linked and ours to unlink
};

}  // namespace prism::coll::shm
