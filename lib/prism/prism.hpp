// libprism: a rank of a PRISM job. A Communicator sends this rank's
// contributions to the PRISM switch in front of it over an ordinary kernel
// UDP socket and collects the switch's RESULTs: allreduce and reduce of a
// buffer in any PRISM format, blocking or not. docs/RANK.md is the guide;
// docs/PROTOCOL.md the wire protocol it speaks.
//
// Self-contained: this header needs nothing but the C++ standard library
// (`pkg-config --cflags --libs prism`). The C API is prism.h.
//
//   auto comm = prism::Communicator::from_config("switch.yaml", {/*job*/ 7, /*rank*/ 3});
//   comm.allreduce(grad.data(), grad.data(), grad.size(), prism::Format::FP32);   // in place
//
// One thread drives a Communicator (as MPI_THREAD_FUNNELED): every call,
// wait() and test() included, makes progress on every outstanding op.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "types.hpp"

namespace prism {

// Format, Policy, PartialTransport and Exceptions (the library's own enums):
// types.hpp.

size_t format_bytes(Format f);      // 0 for a value that is not a Format
const char* format_name(Format f);  // "fp32", ...; "?" for a value that is not a Format

// What went wrong. Every Error's what() names the op, the chunk where it
// matters, the reason, and what to do.
enum class Errc {
  INVALID_ARGUMENT = 1,  // a bad argument or configuration (nothing was sent)
  SYSTEM = 2,            // a socket call failed (errno in the message)
  TIMEOUT = 3,           // no RESULT came back in time for some chunks
  REFUSED = 4,           // the switch NACKed the op (the reason is in the message and nack_reason)
  ABANDONED = 5,         // the switch abandoned the op: a contributor never sent (missing ranks named)
  LINK = 6,              // a link to another rank failed (a peer died, went silent, or called another collective)
};
class Error : public std::runtime_error {
 public:
  Error(Errc code, const std::string& what, uint32_t op = 0, int nack_reason = 0)
      : std::runtime_error(what), code_(code), op_(op), nack_reason_(nack_reason) {}
  Errc code() const { return code_; }
  uint32_t op() const { return op_; }
  int nack_reason() const { return nack_reason_; }  // the NACK's code when code() is REFUSED or ABANDONED

 private:
  Errc code_;
  uint32_t op_;
  int nack_reason_;
};

// Where this rank is and where its switch is. from_config() fills it from
// the switch's YAML; a program may fill it by hand.
struct Endpoints {
  uint32_t job = 0;
  uint16_t rank = 0;
  uint16_t group = 0;            // R: contributions each op combines
  std::string local_ip;          // the rank's registered address ("" or "0.0.0.0": any)
  uint16_t local_port = 20562;   // its registered UDP port (RESULTs come here)
  std::string switch_ip;         // the switch port's address
  uint16_t switch_port = 20562;  // the switch's UDP port (switch.udp_port): its replies come from there
  uint32_t slot_quota = 0;       // the job's slot_quota at the switch (0: none)
  uint32_t switch_shards = 1;    // the switch's reducers.shards, 1..64: chunk c of op o goes to UDP port
                                 // switch_port + (job + o + c) mod switch_shards (docs/PROTOCOL.md, Steering)
  bool pooled = false;           // a job from a switch's pool: the communicator LEAVEs it when destroyed
};

struct Tuning {
  uint32_t window = 0;               // chunks in flight, capped by the job's slot_quota; 0: adaptive, as TCP's
                                     // congestion window (from 64, doubling per window of RESULTs until a loss,
                                     // then a quarter; halved by a loss; at most 512 / R, since the job's ranks
                                     // share the switch port's ring: 256 for 2 ranks, 64 for 8)
  uint32_t chunk_elems = 0;          // elements per packet; 0: the most a packet fits in the path MTU
  uint32_t timeout_ms = 10000;       // an op fails when none of its chunks completed for this long
  uint32_t rto_initial_ms = 20;      // first retransmission timeout, before any round trip is measured
  uint32_t rto_min_ms = 5;           // a floor above the scheduling noise of a busy host
  uint32_t rto_max_ms = 1000;        // backoff doubles the timeout per try up to this
  bool join = true;                  // join the job's session first (a collective step: every rank must): the switch
                                     // gives the first op number, so a restarted job never reuses one it remembers
  uint32_t join_timeout_ms = 60000;  // how long to wait for every rank of the job to join
  uint32_t first_op = 0;             // the first op number when join is false (ops advance by one per collective)
  bool gso = true;                   // send runs of chunks as UDP GSO messages where the kernel takes them
};

struct ConfigSelect {
  uint32_t job = 0;  // 0 with a one-job config: that job
  int rank = -1;     // required
};

struct OpOptions {
  Format out = Format::FP32;  // output format (an integer input defaults to INT32 when out is left FP32 and
                              // out_given is false)
  bool out_given = false;
  Policy policy = Policy::KULISCH_FIXED;
  PartialTransport transport = PartialTransport::KULISCH;
  Exceptions exceptions = Exceptions::IEEE;
};

// What a completed op reports: elements of the result with each flag.
struct OpReport {
  uint32_t op = 0;
  uint64_t overflow = 0, invalid = 0, nan_input = 0;
  uint64_t chunks = 0, retransmits = 0;
  double seconds = 0;
};

struct Stats {
  uint64_t ops = 0, ops_failed = 0;
  uint64_t chunks = 0;
  uint64_t retransmits = 0;
  uint64_t results = 0;
  uint64_t duplicate_results = 0;
  uint64_t stray = 0;
  uint64_t nacks = 0;
  uint64_t nack_by_reason[16] = {};  // by the NACK's reason code (docs/PROTOCOL.md, NACK)
  uint64_t no_slot_retries = 0;
  uint64_t packets_sent = 0, packets_received = 0, bytes_sent = 0, bytes_received = 0;
  uint64_t joins_sent = 0;
  double join_seconds = 0;
  double rtt_min_us = 0, rtt_srtt_us = 0, rtt_max_us = 0;
  double rto_us = 0;
  uint64_t gso_sends = 0, gso_datagrams = 0, gso_refused = 0;
  uint64_t gro_buffers = 0, gro_datagrams = 0;
  uint64_t send_calls = 0, receive_calls = 0;
  uint64_t queries = 0, status_held = 0, status_missing = 0;
};

// Stats' fields as one table (as the switch's counters are): each field's
// name and what it counts. prism-rank's report, the C API's prism_comm_stat()
// and any listing iterate it; nack_by_reason, an array, is apart.
struct StatField {
  const char* name;
  const char* doc;
  uint64_t Stats::*count;  // one of the two is set
  double Stats::*value;
};
const StatField* stat_fields(size_t* n);

class Communicator;

// A non-blocking op's handle. wait() returns its report or throws its Error.
class Request {
 public:
  Request() = default;
  bool valid() const { return comm_ != nullptr; }
  uint32_t op() const { return op_; }

 private:
  friend class Communicator;
  Request(Communicator* c, uint64_t id, uint32_t op) : comm_(c), id_(id), op_(op) {}
  Communicator* comm_ = nullptr;
  uint64_t id_ = 0;
  uint32_t op_ = 0;
};

class Communicator {
 public:
  // From the switch's YAML: the job's member entry for `sel.rank` gives the
  // local address, its switch port's ip the destination. Throws Error.
  static Communicator from_config(const std::string& yaml_path, ConfigSelect sel, Tuning t = {});
  Communicator(const Endpoints& e, Tuning t = {});
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();

  // Every rank of the job calls the same collectives in the same order.
  // `in` holds `count` elements of `dtype`; `out` receives `count` elements
  // of the output format. `in` == `out` (in place) is allowed when the two
  // formats have the same width.
  OpReport allreduce(const void* in, void* out, size_t count, Format dtype, const OpOptions& o = {});
  Request iallreduce(const void* in, void* out, size_t count, Format dtype, const OpOptions& o = {});
  // Only `root` needs an `out` (others may pass null): over a switch every
  // member receives the RESULT, so a reduce costs what an allreduce does.
  OpReport reduce(const void* in, void* out, size_t count, Format dtype, uint16_t root, const OpOptions& o = {});
  Request ireduce(const void* in, void* out, size_t count, Format dtype, uint16_t root, const OpOptions& o = {});

  OpReport wait(Request& r);  // throws the op's Error; the request is spent either way
  bool test(Request& r);      // true when wait() would return at once

  const Stats& stats() const;
  const Endpoints& endpoints() const;
  uint32_t chunk_elems(Format dtype, const OpOptions& o = {}) const;  // elements per packet for an op
  uint32_t next_op() const;
  uint32_t session_nonce() const;  // this communicator's JOIN nonce (0: it did not join)
  uint32_t window() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism
