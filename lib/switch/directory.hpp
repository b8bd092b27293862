// Who may talk to this switch: the jobs, their members and children, looked
// up by id and by source address. Built once from the configuration; read-only
// afterwards, so every lcore may share it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"

namespace prism::sw {

// Why a packet is dropped. Every drop has one reason and one counter.
enum class Drop : uint8_t {
  MALFORMED = 0,   // parse refused it (the parser's own reason is counted too)
  NOT_FOR_US,      // not IPv4/UDP to our port: ignored, not an error
  UNKNOWN_SOURCE,  // valid PRISM packet from an address no job registers
  UNKNOWN_JOB,
  NOT_A_MEMBER,         // the sender id is not a member/child of the job
  SPOOFED,              // the sender id belongs to another address
  WRONG_KIND,           // e.g. a RESULT from a rank, a PARTIAL at a switch without that child
  NOT_ALLOWED,          // format or policy not allowed for the job
  DESCRIPTOR_MISMATCH,  // disagrees with the slot's descriptor
  TOO_NARROW,           // Kulisch width exceeds the configured one
  NO_FREE_SLOT,         // slot table or the job's quota full
  DUPLICATE,            // a contributor already counted (or a repeated fragment)
  RESULT_EXPIRED,       // retransmit for a result no longer retained
  LATE,                 // contribution for a completed op (not a retransmit)
  BAD_PARTIAL,          // a partial that cannot be merged exactly
  STALE_RESULT,         // a parent RESULT for no waiting slot
  kCount
};
const char* name(Drop d);

struct Member {
  uint32_t job;
  uint16_t id;    // rank (members) or child id (children)
  uint16_t port;  // switch port it is reached through
  wire::Endpoint addr;
  uint16_t terms;  // contributions its packets fold: 1 for a rank, `ranks` for a child
  bool child;
};

// Where one copy of a fan-out goes: a switch port, the switch's endpoint on
// it and the receiver's.
struct Dest {
  uint16_t port;
  wire::Endpoint src, dst;
  wire::HeaderTemplate hdr;  // wire::header_template(src, dst)
};

struct Job {
  const JobConfig* cfg;
  std::vector<int32_t> member_of_rank;  // rank -> index into members, -1 if not attached here
  std::vector<int32_t> child_of_id;     // child id -> index into children, -1
  std::vector<Member> members, children;
  std::vector<Dest> result_dests;  // every member, then every child: where a RESULT goes
  uint32_t format_mask = 0, policy_mask = 0;
  uint32_t index = 0;  // dense, 0 .. jobs - 1: per-job state elsewhere is an array by it
  bool allows(Format f) const { return format_mask & (1u << uint8_t(f)); }
  bool allows(Policy p) const { return policy_mask & (1u << uint8_t(p)); }
};

class Directory {
 public:
  explicit Directory(const SwitchConfig& cfg);
  const SwitchConfig& config() const { return cfg_; }
  // Every packet looks its job up: an open-addressed table of (id, job),
  // probed from a multiplicative hash, with no division (std::unordered_map
  // divides by a prime bucket count on every find).
  const Job* job(uint32_t id) const {
    for (uint32_t i = (id * 0x9E3779B1u) >> lookup_shift_;; i = (i + 1) & lookup_mask_) {
      const JobRef& r = lookup_[i];
      if (r.job == nullptr || r.id == id) return r.job;
    }
  }
  size_t jobs() const { return jobs_.size(); }
  // True when any job registers this (ip, udp port): such a sender may get NACKs.
  bool registered(const wire::Endpoint& e) const { return addrs_.count(key(e)) != 0; }
  bool is_parent(const wire::Endpoint& e) const {
    return cfg_.parent && cfg_.parent->addr.ip == e.ip && cfg_.parent->addr.port == e.port;
  }
  // The switch's own endpoint on a port (source of what it sends there).
  wire::Endpoint self(uint16_t port) const {
    if (port < self_.size()) return self_[port];
    wire::Endpoint e;
    e.port = cfg_.udp_port;
    return e;
  }

 private:
  static uint64_t key(const wire::Endpoint& e) { return uint64_t(e.ip) << 16 | e.port; }
  const SwitchConfig& cfg_;
  std::unordered_map<uint32_t, Job> jobs_;  // owns them (nodes do not move)
  struct JobRef {
    uint32_t id;
    const Job* job;  // null: an empty entry, where a probe ends
  };
  std::vector<JobRef> lookup_;  // at most half full
  uint32_t lookup_mask_ = 0, lookup_shift_ = 32;
  std::unordered_map<uint64_t, int> addrs_;
  std::vector<wire::Endpoint> self_;  // by port id
};

struct Verdict {
  bool ok = false;
  const Job* job = nullptr;
  const Member* member = nullptr;  // the rank or child that sent it (null for the parent's RESULT)
  bool from_parent = false;
  Drop why = Drop::MALFORMED;
  bool nack = false;  // the source is registered: it may be told why (NACK)
};

// Checks a parsed packet's claim against the directory: the job exists, the
// sender is who it says it is (same MAC, IP and UDP port as registered, on
// the port it is attached to), and the kind is one this switch takes from it:
// CONTRIB from a member rank, PARTIAL from a child, RESULT from the parent.
Verdict admit(const Directory& dir, const wire::Parsed& p, uint16_t in_port);

}  // namespace prism::sw
