#include "tap_steer.hpp"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace prism::pipe {
namespace {

// eBPF instructions (the kernel's include/linux/filter.h macros, which are not uapi).
bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}
bpf_insn mov_reg(uint8_t dst, uint8_t src) { return insn(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0); }
bpf_insn mov_imm(uint8_t dst, int32_t imm) { return insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm); }
bpf_insn alu_imm(uint8_t op, uint8_t dst, int32_t imm) { return insn(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm); }
// R0 = the frame's big-endian field at `off` (LD_ABS) or at src + `off` (LD_IND), in host order;
// a read past the frame ends the program with 0.
bpf_insn ld_abs(uint8_t size, int32_t off) { return insn(BPF_LD | size | BPF_ABS, 0, 0, 0, off); }
bpf_insn ld_ind(uint8_t size, uint8_t src, int32_t off) { return insn(BPF_LD | size | BPF_IND, 0, src, 0, off); }
bpf_insn jmp_imm(uint8_t op, uint8_t dst, int32_t imm, int16_t off) {
  return insn(BPF_JMP | op | BPF_K, dst, 0, off, imm);
}
bpf_insn exit_insn() { return insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }

std::vector<bpf_insn> program(const TapSteering& s) {
  std::vector<bpf_insn> p;
  // Jumps to the final "return 0" are patched once its index is known.
  std::vector<size_t> to_zero;
  auto jump_to_zero = [&](uint8_t op, int32_t imm) {
    to_zero.push_back(p.size());
    p.push_back(jmp_imm(op, 0, imm, 0));
  };
  p.push_back(mov_reg(6, 1));      // LD_ABS and LD_IND read the frame through R6
  p.push_back(ld_abs(BPF_H, 12));  // EtherType
  jump_to_zero(BPF_JNE, 0x0800);
  p.push_back(ld_abs(BPF_B, 23));  // IPv4 protocol
  jump_to_zero(BPF_JNE, 17);
  p.push_back(ld_abs(BPF_H, 20));  // flags and fragment offset: only first fragments carry the UDP header
  p.push_back(alu_imm(BPF_AND, 0, 0x1fff));
  jump_to_zero(BPF_JNE, 0);
  p.push_back(ld_abs(BPF_B, 14));  // version and IHL
  p.push_back(alu_imm(BPF_AND, 0, 0x0f));
  p.push_back(alu_imm(BPF_LSH, 0, 2));
  p.push_back(mov_reg(7, 0));
  p.push_back(ld_ind(BPF_H, 7, 14 + 2));  // UDP destination port, behind the IPv4 header
  p.push_back(alu_imm(BPF_SUB, 0, s.base));
  jump_to_zero(BPF_JGE, int32_t(s.shards));  // below base wraps to a huge value: also out
  p.push_back(alu_imm(BPF_MOD, 0, int32_t(s.lcores)));
  if (s.queues != s.lcores) p.push_back(alu_imm(BPF_MOD, 0, int32_t(s.queues)));
  p.push_back(exit_insn());
  const size_t zero = p.size();
  p.push_back(mov_imm(0, 0));
  p.push_back(exit_insn());
  for (size_t at : to_zero) p[at].off = int16_t(zero - at - 1);
  return p;
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

}  // namespace

std::string install_tap_steering(const std::string& ifname, const TapSteering& s) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) return "no interface name";
  if (!s.shards || !s.lcores || !s.queues) return "nothing to steer";
  const std::vector<bpf_insn> prog = program(s);
  static char license[] = "GPL";
  std::vector<char> log(4096);
  bpf_attr a{};
  a.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
  a.insns = reinterpret_cast<uint64_t>(prog.data());
  a.insn_cnt = uint32_t(prog.size());
  a.license = reinterpret_cast<uint64_t>(license);
  a.log_buf = reinterpret_cast<uint64_t>(log.data());
  a.log_size = uint32_t(log.size());
  a.log_level = 1;
  const int prog_fd = int(syscall(SYS_bpf, BPF_PROG_LOAD, &a, sizeof a));
  if (prog_fd < 0) return errno_text("the kernel refused the steering program (bpf)") + " " + log.data();
  // Attach as one more queue of the interface, set the program (it belongs
  // to the interface, not the queue), then detach and close: the program
  // stays while the interface lives.
  std::string why;
  const int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    why = errno_text("cannot open /dev/net/tun");
  } else {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_MULTI_QUEUE;
    int pfd = prog_fd;
    if (ioctl(fd, TUNSETIFF, &ifr) != 0)
      why = errno_text("cannot attach to tap " + ifname + " as a queue (not a multi-queue tap?)");
    else if (ioctl(fd, TUNSETSTEERINGEBPF, &pfd) != 0)
      why = errno_text("cannot set the tap's steering program");
    if (why.empty()) {
      ifreq det{};
      det.ifr_flags = IFF_DETACH_QUEUE;
      ioctl(fd, TUNSETQUEUE, &det);
    }
    close(fd);
  }
  close(prog_fd);
  return why;
}

}  // namespace prism::pipe
