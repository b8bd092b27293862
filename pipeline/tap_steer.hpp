// Steering on a Linux tap interface (net_tap), where this kernel gives no
// rte_flow (DPDK's tap flows need the multiq qdisc and the flower classifier):
// the tun driver's own steering program (TUNSETSTEERINGEBPF), run by the
// kernel for every frame it hands the tap, picks the queue from the UDP
// destination port by the protocol's rule, so each shard's packets reach the
// lcore that owns it before any lcore touches them. Linux only; no DPDK.
#pragma once

#include <cstdint>
#include <string>

namespace prism::pipe {

// What the program computes: for a frame to UDP port `base` + s, s < shards,
// queue (s mod lcores) mod queues (the lcore that owns shard s, or the queue
// that lcore's packets share when the device has fewer queues than lcores);
// queue 0 for anything else (ARP, ICMP, other ports, IPv4 fragments, VLAN tags).
struct TapSteering {
  uint16_t base;
  uint32_t shards, lcores, queues;
};

// Installs the program on the multi-queue tap interface `ifname`. Returns ""
// or why it could not (the caller falls back to dispatching in software).
std::string install_tap_steering(const std::string& ifname, const TapSteering& s);

}  // namespace prism::pipe
