// What a port on a Linux interface (net_af_packet) needs that DPDK 22.11's
// driver does not do by itself:
// - frames as large as the interface's MTU: the driver's ring frames are
//   2048 bytes unless its devargs say otherwise, and a larger frame is lost
//   in the kernel without a trace. af_packet_devargs() adds framesz and
//   blocksz sized from the interface's MTU when the config leaves them out;
// - the frames the kernel dropped because the ring was full (an unpaced
//   sender): the driver does not read PACKET_STATISTICS, so imissed stays 0.
//   RingDrops reads them from the driver's own packet sockets.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prism::pipe {

// `device` with framesz= and blocksz= added for its iface's MTU when it is a
// net_af_packet vdev that sets neither and the MTU needs more than the
// driver's default 2048-byte frames; `why` says what was added. Else `device`.
std::string af_packet_devargs(const std::string& device, std::string* why);

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
