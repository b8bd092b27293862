// prism-flood: sends the frames of a pcap file out of a Linux interface, over
// and over, as fast as the machine allows or at a set rate; for the hostile
// traffic tests and the reflection figures of docs/SECURITY.md. Each frame
// goes as it is (an AF_PACKET raw socket, batches of sendmmsg), except that
// --rotate-ports gives every IPv4/UDP frame sent a new UDP source port
// (1024..65535 in turn, its checksum updated), as a flooder that rotates
// ports to get past a per-(ip, port) limit does.
//
//   prism-flood --iface eth0 --pcap hostile.pcap [--pps N] [--seconds S | --frames N]
//               [--rotate-ports] [--json]
//
// It prints what it sent: frames, bytes (Ethernet frames without FCS),
// seconds, frames per second and the sends the kernel refused (ENOBUFS: the
// interface's queue was full). Run it in the namespace that owns the interface.
#include <arpa/inet.h>
#include <net/if.h>
#include <netpacket/packet.h>
#include <pcap/pcap.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Args {
  std::string iface, pcap;
  double pps = 0;  // 0: as fast as it goes
  double seconds = 0;
  uint64_t frames = 0;
  bool rotate = false, json = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "prism-flood: %s\nusage: prism-flood --iface IF --pcap FILE [--pps N] [--seconds S | --frames N] "
               "[--rotate-ports] [--json]\n",
               why);
  std::exit(2);
}

double number(const char* flag, const char* v) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v, &end);
  if (errno || end == v || *end || d < 0) usage((std::string(flag) + ": a number >= 0, not '" + v + "'").c_str());
  return d;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((f + " needs a value").c_str());
      return argv[++i];
    };
    if (f == "--iface")
      a.iface = value();
    else if (f == "--pcap")
      a.pcap = value();
    else if (f == "--pps")
      a.pps = number("--pps", value());
    else if (f == "--seconds")
      a.seconds = number("--seconds", value());
    else if (f == "--frames")
      a.frames = uint64_t(number("--frames", value()));
    else if (f == "--rotate-ports")
      a.rotate = true;
    else if (f == "--json")
      a.json = true;
    else
      usage(("unknown flag " + f).c_str());
  }
  if (a.iface.empty() || a.pcap.empty()) usage("--iface and --pcap are required");
  if (a.seconds == 0 && a.frames == 0) usage("give --seconds or --frames");
  return a;
}

std::vector<std::vector<uint8_t>> read_frames(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (!p) usage((path + ": " + err).c_str());
  std::vector<std::vector<uint8_t>> out;
  pcap_pkthdr* h;
  const u_char* d;
  while (pcap_next_ex(p, &h, &d) == 1) out.emplace_back(d, d + h->caplen);
  pcap_close(p);
  if (out.empty()) usage((path + ": no frames in it").c_str());
  return out;
}

// The UDP header of an untagged IPv4/UDP frame, or null.
uint8_t* udp_of(std::vector<uint8_t>& f) {
  if (f.size() < 14 + 20 + 8 || f[12] != 0x08 || f[13] != 0x00 || (f[14] >> 4) != 4 || f[23] != 17) return nullptr;
  const size_t ihl = size_t(f[14] & 15) * 4;
  if (ihl < 20 || f.size() < 14 + ihl + 8) return nullptr;
  return f.data() + 14 + ihl;
}

// RFC 1624: the checksum after one 16-bit word changed from `from` to `to`.
uint16_t adjust(uint16_t sum, uint16_t from, uint16_t to) {
  uint32_t s = uint16_t(~sum) + uint32_t(uint16_t(~from)) + to;
  s = (s & 0xFFFF) + (s >> 16);
  s = (s & 0xFFFF) + (s >> 16);
  const uint16_t r = uint16_t(~s);
  return r == 0 ? 0xFFFF : r;  // 0 means "no checksum" in UDP
}

void set_source_port(uint8_t* udp, uint16_t port) {
  uint16_t old, sum;
  std::memcpy(&old, udp, 2);
  std::memcpy(&sum, udp + 6, 2);
  const uint16_t now = htons(port);
  std::memcpy(udp, &now, 2);
  if (sum != 0) {  // a frame sent without a checksum keeps none
    const uint16_t fixed = htons(adjust(ntohs(sum), ntohs(old), port));
    std::memcpy(udp + 6, &fixed, 2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<std::vector<uint8_t>> frames = read_frames(a.pcap);
  const int fd = socket(AF_PACKET, SOCK_RAW, 0);
  if (fd < 0) {
    std::fprintf(stderr, "prism-flood: a raw socket: %s (needs root or CAP_NET_RAW)\n", std::strerror(errno));
    return 1;
  }
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = int(if_nametoindex(a.iface.c_str()));
  to.sll_halen = 6;
  if (to.sll_ifindex == 0) {
    std::fprintf(stderr, "prism-flood: no interface '%s' here (run it in the interface's namespace)\n",
                 a.iface.c_str());
    return 1;
  }
  constexpr unsigned kBatch = 32;
  std::vector<mmsghdr> msgs(kBatch);
  std::vector<iovec> iov(kBatch);
  std::vector<std::vector<uint8_t>> copies(kBatch);
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(a.seconds));
  uint64_t sent = 0, bytes = 0, refused = 0, next = 0;
  uint32_t port = 1024;
  for (;;) {
    const auto now = clock::now();
    if (a.seconds > 0 && now >= deadline) break;
    if (a.frames && sent >= a.frames) break;
    unsigned n = kBatch;
    if (a.frames) n = unsigned(std::min<uint64_t>(n, a.frames - sent));
    if (a.pps > 0) {  // paced: never ahead of the rate
      const double due = a.pps * std::chrono::duration<double>(now - t0).count() - double(sent);
      if (due < 1) {
        std::this_thread::sleep_for(std::chrono::microseconds(std::max(1, int(1e6 / a.pps))));
        continue;
      }
      n = unsigned(std::min<double>(n, due));
    }
    for (unsigned i = 0; i < n; ++i) {
      std::vector<uint8_t>* f = &frames[(next + i) % frames.size()];
      if (a.rotate) {  // a copy per message: a short file's frame may be in one batch twice
        copies[i].assign(f->begin(), f->end());
        f = &copies[i];
        if (uint8_t* udp = udp_of(*f)) {
          set_source_port(udp, uint16_t(port));
          port = port == 65535 ? 1024 : port + 1;
        }
      }
      iov[i] = {f->data(), f->size()};
      msgs[i] = {};
      msgs[i].msg_hdr.msg_name = &to;
      msgs[i].msg_hdr.msg_namelen = sizeof to;
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
    }
    const int k = sendmmsg(fd, msgs.data(), n, 0);
    if (k < 0) {
      if (errno != ENOBUFS && errno != EAGAIN) {
        std::fprintf(stderr, "prism-flood: sendmmsg: %s\n", std::strerror(errno));
        return 1;
      }
      ++refused;  // the queue is full: the same frames again
      continue;
    }
    for (int i = 0; i < k; ++i) bytes += iov[size_t(i)].iov_len;
    sent += unsigned(k);
    next += unsigned(k);
  }
  const double secs = std::chrono::duration<double>(clock::now() - t0).count();
  close(fd);
  if (a.json)
    std::printf("{\"frames\": %llu, \"bytes\": %llu, \"seconds\": %.3f, \"pps\": %.0f, \"refused\": %llu}\n",
                (unsigned long long)sent, (unsigned long long)bytes, secs, double(sent) / secs,
                (unsigned long long)refused);
  else
    std::printf("sent %llu frames, %llu bytes in %.3f s (%.0f frames/s); %llu sends refused (queue full)\n",
                (unsigned long long)sent, (unsigned long long)bytes, secs, double(sent) / secs,
                (unsigned long long)refused);
  return 0;
}
