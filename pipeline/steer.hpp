// How a port's packets reach the lcore that owns their shard, in the
// shared-nothing layout (docs/PROTOCOL.md, Steering: a chunk of shard s is
// sent to UDP port udp_port + s). Tried in order on each port with several
// RX queues, the first that the device takes wins:
//   rte_flow     one rule per shard: UDP destination port -> the owner's queue
//   tap_program  net_tap: the tun driver's steering program (tap_steer.hpp)
//   rss          RSS on the UDP destination port alone (RTE_ETH_RSS_L4_DST_ONLY),
//                its indirection table set so that each shard's port lands on
//                its owner's queue (a port whose entry another shard's port
//                already took goes by software)
//   software     the device spreads packets by its own hash (or has one
//                queue): each lcore passes the packets of other lcores'
//                shards to them through their inbox rings, counted
// Whatever the device does, RX checks each packet's shard, so a packet that
// reaches the wrong lcore (a client that ignores the rule) is passed on too.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/closed_set.hpp"

namespace prism::pipe {

enum class Steering : uint8_t { NONE, RTE_FLOW, TAP_PROGRAM, RSS, SOFTWARE };
inline constexpr size_t kSteeringCount = 5;
inline constexpr Entry<Steering> kSteerings[] = {
    {Steering::NONE, "none", "one queue, polled by the only lcore: nothing to steer"},
    {Steering::RTE_FLOW, "rte_flow", "an rte_flow rule per shard: UDP destination port -> the owning lcore's queue"},
    {Steering::TAP_PROGRAM, "tap_program",
     "the tap interface's steering program (kernel) puts each shard's port on the owning lcore's queue"},
    {Steering::RSS, "rss",
     "RSS on the UDP destination port alone, its indirection table pointing each shard's port at the owning lcore's "
     "queue"},
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

// RSS restricted to the UDP destination port: the key the port is
// configured with (Microsoft's verification key, 40 bytes), the Toeplitz
// hash of a destination port under it (the 16-bit port is the whole input),
// and the indirection table that puts each shard's port on its queue, with
// the shards whose entry an earlier shard already took with another queue.
inline constexpr uint8_t kRssKey[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67,
                                        0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb,
                                        0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30,
                                        0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
uint32_t rss_hash_dst_port(const uint8_t* key, uint16_t port);
struct RssTable {
  std::vector<uint16_t> reta;       // entry -> queue
  std::vector<uint32_t> unsteered;  // shards left to software dispatch
};
RssTable rss_table(const uint8_t* key, uint16_t reta_size, const SteerPlan& plan);

// Installs the best steering the device takes. `ifname`: the port's Linux
// interface (net_tap), or empty. `rss`: the port was configured with RSS on
// the UDP destination port alone (kRssKey), `reta_size` entries. `why`
// collects what was tried and refused.
Steering steer_port(uint16_t dpdk_port, const std::string& driver, const std::string& ifname, const SteerPlan& plan,
                    bool rss, uint16_t reta_size, std::string* why);
// Removes what steer_port() installed (rte_flow rules; a tap's program goes with its interface).
void unsteer_port(uint16_t dpdk_port, Steering s);

}  // namespace prism::pipe
