// How a port's packets reach the lcore that owns their shard, in the
// shared-nothing layout (docs/PROTOCOL.md, Steering: a chunk of shard s is
// sent to UDP port udp_port + s). Tried in order on each port with several
// RX queues, the first that the device takes wins:
//   rte_flow     one rule per shard: UDP destination port -> the owner's queue
//   tap_program  net_tap: the tun driver's steering program (tap_steer.hpp)
//   software     the device spreads packets by its own hash (or has one
//                queue): each lcore passes the packets of other lcores'
//                shards to them through their inbox rings, counted
// Whatever the device does, RX checks each packet's shard, so a packet that
// reaches the wrong lcore (a client that ignores the rule) is passed on too.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "util/closed_set.hpp"

namespace prism::pipe {

enum class Steering : uint8_t { NONE, RTE_FLOW, TAP_PROGRAM, SOFTWARE };
inline constexpr size_t kSteeringCount = 4;
inline constexpr Entry<Steering> kSteerings[] = {
    {Steering::NONE, "none", "one queue, polled by the only lcore: nothing to steer"},
    {Steering::RTE_FLOW, "rte_flow", "an rte_flow rule per shard: UDP destination port -> the owning lcore's queue"},
    {Steering::TAP_PROGRAM, "tap_program",
     "the tap interface's steering program (kernel) puts each shard's port on the owning lcore's queue"},
    {Steering::SOFTWARE, "software",
     "the device does not steer: lcores pass other lcores' packets to them through inbox rings (counted)"},
};
static_assert(std::size(kSteerings) == kSteeringCount, "every Steering has a row in kSteerings");
constexpr std::span<const Entry<Steering>> entries(Steering) { return kSteerings; }

// Who owns what: shard s belongs to lcore (s mod lcores); a port has
// `queues` RX queues, lcore w polling queue w when w < queues.
struct SteerPlan {
  uint16_t base;  // the switch's udp_port
  uint32_t shards, lcores;
  uint16_t queues;
  uint32_t owner(uint32_t shard) const { return shard % lcores; }
  // The queue a shard's packets should arrive on: its owner's, or (when the
  // device has fewer queues than lcores) the one the owner's share lands on.
  uint16_t queue_of(uint32_t shard) const { return uint16_t(owner(shard) % queues); }
};

// Installs the best steering the device takes. `ifname`: the port's Linux
// interface (net_tap), or empty. `why` collects what was tried and refused.
Steering steer_port(uint16_t dpdk_port, const std::string& driver, const std::string& ifname, const SteerPlan& plan,
                    std::string* why);
// Removes what steer_port() installed (rte_flow rules; a tap's program goes with its interface).
void unsteer_port(uint16_t dpdk_port, Steering s);

}  // namespace prism::pipe
