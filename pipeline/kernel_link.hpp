// What a port on a Linux interface (net_af_packet, net_af_xdp) needs that
// DPDK 22.11's drivers do not do by themselves:
// - frames as large as the interface's MTU: the driver's ring frames are
//   2048 bytes unless its devargs say otherwise, and a larger frame is lost
//   in the kernel without a trace. af_packet_devargs() adds framesz and
//   blocksz sized from the interface's MTU when the config leaves them out;
// - a ring as deep as the other port kinds' 1024 descriptors: the driver's
//   holds 512 frames, which the windows of 8 ranks fill; af_packet_devargs()
//   adds framecnt=1024 when the config leaves it out;
// - the frames the kernel dropped because the ring was full (an unpaced
//   sender): the driver does not read PACKET_STATISTICS, so imissed stays 0.
//   RingDrops reads them from the driver's own packet sockets;
// - net_af_xdp binds one queue of its interface unless queue_count= says
//   more: af_xdp_devargs() asks for as many as the switch has lcores, where
//   the interface has that many combined channels (a NIC's; a veth reports
//   none, so the driver takes one queue there);
// - the interface's MTU, which the switch's frames and its OVERSIZE drop go by.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prism::pipe {

// `device` with framesz= and blocksz= added for its iface's MTU when it is a
// net_af_packet vdev that sets neither and the MTU needs more than the
// driver's default 2048-byte frames; `why` says what was added. Else `device`.
std::string af_packet_devargs(const std::string& device, std::string* why);

// `device` with queue_count= added when it is a net_af_xdp vdev that sets
// none, `lcores` > 1 and its iface has more than one combined channel (as the
// driver counts them: ETHTOOL_GCHANNELS): min(lcores, channels from
// start_queue on). `why` says what was added.
std::string af_xdp_devargs(const std::string& device, unsigned lcores, std::string* why);

// The IP MTU of the interface with this index, or 0 when unknown.
unsigned iface_mtu(unsigned ifindex);

// The kernel's ring drops on the packet sockets bound to one interface
// (every queue's socket): sampled now and then, summed (the kernel resets
// its counter on each read).
class RingDrops {
 public:
  explicit RingDrops(unsigned ifindex);
  uint64_t sample();  // drops since the last sample

 private:
  std::vector<int> fds_;
};

}  // namespace prism::pipe
