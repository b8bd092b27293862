// prism::Group: a group of ranks that runs every collective (allreduce,
// reduce, broadcast, reduce_scatter, allgather, barrier) with any algorithm —
// through the PRISM switch, or among the hosts by the seeds' binomial tree,
// pipelined chain, RHD or the ring — or `auto`, which the cost model chooses
// from the group's calibration. Under KULISCH_FIXED every algorithm gives the
// same bits (the switch's): exact partials travel between hosts losslessly.
// docs/RANK.md is the guide.
//
//   // every rank, torch-style: rank 0 serves the store at MASTER_ADDR:MASTER_PORT
//   prism::Group g = prism::Group::from_store(prism::rdv::store_from_env(rank), rank, size);
//   g.allreduce(grad.data(), grad.data(), grad.size(), prism::Format::FP32);   // auto, exact
//
// A group owns its links to the other ranks, its switch communicator (when it
// has a switch), its calibration and its buffers. One thread drives a group;
// every rank calls the same collectives in the same order with the same
// sizes, formats and options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "prism.hpp"
#include "store.hpp"
#include "types.hpp"

namespace prism {

struct GroupOptions {
  // The algorithm of every collective that does not name one (AUTO: the cost model's choice).
  Algorithm algorithm = Algorithm::AUTO;
  // What AUTO chooses among (empty: every algorithm; the switch only when the group has one).
  std::vector<Algorithm> candidates;
  // A calibration file (Group::calibration_json's, prism-rank --calibrate's) for AUTO's model; without
  // one, AUTO measures the group the first time it needs to (a collective step, a few hundred ms).
  std::string calibration;
  // Join the switch (make the switch communicator): with a config's or an explicit switch, when the
  // switch is the algorithm or one of AUTO's candidates.
  Tuning tuning;                        // the switch communicator's
  uint32_t connect_timeout_ms = 60000;  // the host links' setup gives up after this (naming who is missing)
  uint32_t recv_timeout_ms = 60000;     // a host collective with no progress for this long fails
  std::string host_ip;                  // this rank's address for the host links ("": the config's or found)
  uint16_t tcp_port_offset = 0;         // from_config: a rank's host link listens at its udp_port + this
  std::string name;                     // from_store: groups sharing one store keep their keys apart by name
  // from_store: a switch and the pool to take the group's job from (docs/PROTOCOL.md, "Job pools"):
  // rank 0 asks the pool for a job id and shares it through the store, every rank joins it from its
  // own address (which the switch binds to it) and leaves it when the group is destroyed. Empty
  // switch_address: $PRISM_SWITCH ("ip:port"); pool 0: $PRISM_POOL; neither set: no switch.
  std::string switch_address;
  uint32_t pool = 0;
};

// One call's options.
struct CollOptions {
  OpOptions op;                        // formats, policy, exceptions (reducing collectives)
  std::optional<Algorithm> algorithm;  // the group's default when empty
  uint16_t root = 0;                   // reduce's and broadcast's root
  size_t segments = 0;                 // the chain's m (0: the model's, or its default)
};

struct CollReport {
  Algorithm algorithm = Algorithm::AUTO;              // what ran (AUTO's choice)
  size_t segments = 0;                                // the chain's m, when it ran
  uint64_t overflow = 0, invalid = 0, nan_input = 0;  // elements of this rank's result with each flag
  double seconds = 0;
  double predicted_seconds = -1;  // the model's, when the group is calibrated for this op
};

struct Prediction {
  Algorithm algorithm;
  size_t segments;  // the chain's m
  double seconds;
};

class Group {
 public:
  // (a) From the switch's YAML: the job's member entries give every rank's address (its host link
  // listens at the member's ip and udp_port + tcp_port_offset) and the switch.
  static Group from_config(const std::string& yaml_path, ConfigSelect sel, const GroupOptions& o = {});
  // (b) Explicit: every rank's host-link address "ip:port" in rank order, and this rank's switch
  // endpoints when the group has a switch (no hosts: the switch alone, GroupOptions::algorithm SWITCH).
  static Group from_endpoints(int rank, const std::vector<std::string>& hosts,
                              const std::optional<Endpoints>& switch_endpoints = std::nullopt,
                              const GroupOptions& o = {});
  // (c) A rendezvous store (store.hpp): each rank publishes its host-link address there and reads the
  // others'; with a switch and a pool (GroupOptions), the group takes a job from the pool. Nothing
  // is configured anywhere for the group: no member entries, no restart of the switch.
  static Group from_store(std::shared_ptr<rdv::Store> store, int rank, int size, const GroupOptions& o = {});

  Group(Group&&) noexcept;
  Group& operator=(Group&&) noexcept;
  ~Group();

  int rank() const;
  int size() const;
  bool has_switch() const;

  // Buffers as MPI's: `count` elements of the whole vector (reduce_scatter: rank r gets block r of
  // the sum, the first count % p blocks one element longer; allgather: `in` is this rank's block).
  // `in` == `out` works where the widths agree. Throws Error.
  CollReport allreduce(const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {});
  CollReport reduce(const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {});
  CollReport broadcast(const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {});
  CollReport reduce_scatter(const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {});
  CollReport allgather(const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {});
  CollReport barrier(const CollOptions& o = {});
  // Any of them; `flags` (may be null) gets a status byte per element of this rank's result.
  CollReport run(Collective c, const void* in, void* out, size_t count, Format dtype, const CollOptions& o = {},
                 uint8_t* flags = nullptr);

  // What AUTO runs for this call (measuring the group first when it has no calibration for this op:
  // then every rank must call it), and every candidate's prediction.
  Prediction choose(Collective c, size_t count, Format dtype, const CollOptions& o = {});
  std::vector<Prediction> predictions(Collective c, size_t count, Format dtype, const CollOptions& o = {});

  // Measures the model's parameters for `op` (every rank calls it; `sample`: count elements of
  // `dtype`, rank 0's are used): the links' alpha and beta, the reducers' gamma, and the switch's
  // figures when the group has one and it is a candidate.
  void calibrate(const void* sample, size_t count, Format dtype, const OpOptions& op = {});
  // The calibration for `op` as a file's text (empty when there is none); the same on every rank.
  std::string calibration_json(Format dtype, const OpOptions& op = {}) const;
  // Rank 0's ping-pong of the last calibration: message bytes and the median half round trip (s).
  std::vector<std::pair<size_t, double>> ping_points() const;

  // The switch's communicator (null without a switch): non-blocking ops, statistics.
  Communicator* switch_communicator();

  struct Impl;

 private:
  explicit Group(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Names of the closed sets, for messages and command lines.
const char* algorithm_name(Algorithm a);    // "auto", "switch", "binomial", ...
const char* collective_name(Collective c);  // "allreduce", ...

}  // namespace prism
