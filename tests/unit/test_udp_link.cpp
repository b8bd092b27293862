// rank::UdpLink's batching against plain kernel sockets on loopback: what a
// run of UDP GSO messages puts on the wire must be, datagram for datagram,
// what one sendmmsg of plain datagrams would (same bytes, same order, same
// destination port), whatever the sizes and ports; and what the kernel
// coalesced for a UDP_GRO socket must come back cut into the datagrams a
// plain sender sent. The other side of each test is an ordinary socket.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <vector>

#include "rank/udp_link.hpp"

using prism::rank::UdpLink;

namespace {

// A plain UDP socket bound to 127.0.0.1 on an ephemeral port.
struct Plain {
  int fd = -1;
  uint16_t port = 0;
  Plain() {
    fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    int big = 16 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  }
  ~Plain() { close(fd); }
  // The next datagram (empty after 1 s of nothing) and the port it came from.
  std::vector<uint8_t> next(uint16_t* from = nullptr) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 1000) != 1) return {};
    std::vector<uint8_t> b(65536);
    sockaddr_in src{};
    socklen_t len = sizeof src;
    const ssize_t n = recvfrom(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&src), &len);
    b.resize(n > 0 ? size_t(n) : 0);
    if (from) *from = ntohs(src.sin_port);
    return b;
  }
};

struct Message {
  std::vector<uint8_t> head, body;
  uint16_t port;
};

// Messages as a rank sends them: runs of one size to one port, a shorter last
// one now and then, ports changing, header-only datagrams among them.
std::vector<Message> messages(size_t n, uint16_t port_a, uint16_t port_b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Message> out;
  size_t body = 1408;
  uint16_t port = port_a;
  for (size_t i = 0; i < n; ++i) {
    if (rng() % 16 == 0) port = port == port_a ? port_b : port_a;
    if (rng() % 32 == 0) body = 100 + rng() % 1300;
    Message m;
    m.head.resize(32);
    m.body.resize(rng() % 40 == 0 ? 0 : (rng() % 24 == 0 ? body / 2 : body));
    for (auto& b : m.head) b = uint8_t(rng());
    for (auto& b : m.body) b = uint8_t(rng());
    std::memcpy(m.head.data(), &i, sizeof(uint32_t));  // its number, to find it again
    m.port = port;
    out.push_back(std::move(m));
  }
  return out;
}

void send_all(UdpLink& link, const std::vector<Message>& ms) {
  std::vector<UdpLink::Datagram> d;
  for (const auto& m : ms) d.push_back({m.head.data(), m.head.size(), m.body.data(), m.body.size(), m.port});
  size_t sent = 0;
  for (int tries = 0; sent < d.size() && tries < 1000; ++tries) {
    sent += link.send(d.data() + sent, d.size() - sent);
    if (sent < d.size()) usleep(1000);
  }
  ASSERT_EQ(sent, d.size());
}

// Every message arrives once, whole, at its port; per port in the order sent.
void expect_received(Plain& a, Plain& b, const std::vector<Message>& ms) {
  std::vector<size_t> want_a, want_b;
  for (size_t i = 0; i < ms.size(); ++i) (ms[i].port == a.port ? want_a : want_b).push_back(i);
  for (auto [sock, want] : {std::pair{&a, &want_a}, std::pair{&b, &want_b}})
    for (size_t i : *want) {
      const std::vector<uint8_t> got = sock->next();
      std::vector<uint8_t> expect = ms[i].head;
      expect.insert(expect.end(), ms[i].body.begin(), ms[i].body.end());
      ASSERT_EQ(got, expect) << "message " << i << " to port " << ms[i].port;
    }
  EXPECT_TRUE(a.next().empty() && b.next().empty()) << "more datagrams than were sent";
}

}  // namespace

TEST(UdpLink, GsoRunsPutTheSameDatagramsOnTheWireAsPlainSends) {
  for (bool gso : {true, false}) {
    Plain a, b;
    UdpLink link("127.0.0.1", 0, "127.0.0.1", a.port, gso);
    const std::vector<Message> ms = messages(700, a.port, b.port, 7);
    send_all(link, ms);
    expect_received(a, b, ms);
    const UdpLink::Counters& c = link.counters();
    if (gso && !link.gso_refused()) {
      EXPECT_GT(c.gso_sends, 0u) << "runs of equal datagrams went as GSO messages";
      EXPECT_LT(c.syscalls_send, ms.size() / 10) << "a batch is a few system calls";
    } else if (!gso) {
      EXPECT_EQ(c.gso_sends, 0u);
    }
  }
}

TEST(UdpLink, RunsStopAtGsosLimits) {
  // 300 datagrams of 1440 bytes to one port: a GSO message holds at most 64
  // of them and 65,499 bytes of payload (45 here), so several messages.
  Plain a, b;
  UdpLink link("127.0.0.1", 0, "127.0.0.1", a.port);
  std::vector<Message> ms(300);
  for (size_t i = 0; i < ms.size(); ++i) {
    ms[i].head.assign(32, uint8_t(i));
    ms[i].body.assign(1408, uint8_t(i * 7));
    ms[i].port = a.port;
  }
  send_all(link, ms);
  expect_received(a, b, ms);
  if (!link.gso_refused()) {
    EXPECT_EQ(link.counters().gso_datagrams, 300u);
    EXPECT_GE(link.counters().gso_sends, (300u + 44) / 45);
  }
}

TEST(UdpLink, CoalescedReceivesAreCutIntoTheDatagramsSent) {
  // A plain sender's GSO message to a UdpLink on loopback arrives as one
  // coalesced buffer where the kernel has UDP_GRO: the link must hand back
  // the datagrams, each whole, in order.
  Plain sender;
  UdpLink link("127.0.0.1", 0, "127.0.0.1", sender.port);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  // The link's own address: the sender's first datagram from it tells.
  const std::vector<uint8_t> hello(8, 1);
  const UdpLink::Datagram d{hello.data(), hello.size(), nullptr, 0, 0};
  ASSERT_EQ(link.send(&d, 1), 1u);
  std::vector<uint8_t> b(100);
  ASSERT_EQ(recvfrom(sender.fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&me), &len), 8);
  ASSERT_EQ(connect(sender.fd, reinterpret_cast<sockaddr*>(&me), sizeof me), 0);
  std::vector<uint8_t> payload(20 * 1000 + 300);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = uint8_t(i * 31 + i / 1000);
  const int seg = 1000;
  const bool gso = setsockopt(sender.fd, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0;
  ASSERT_EQ(send(sender.fd, payload.data(), payload.size(), 0), ssize_t(payload.size()));
  std::vector<std::vector<uint8_t>> got;
  for (int tries = 0; got.size() < 21 && tries < 100; ++tries) {
    const size_t n = link.receive(100);
    for (size_t i = 0; i < n; ++i) got.emplace_back(link.data(i), link.data(i) + link.length(i));
  }
  ASSERT_EQ(got.size(), 21u);
  for (size_t i = 0; i < 21; ++i) {
    const size_t at = i * 1000, n = std::min<size_t>(1000, payload.size() - at);
    EXPECT_EQ(got[i], std::vector<uint8_t>(payload.begin() + long(at), payload.begin() + long(at + n))) << i;
  }
  if (gso && link.gro()) {
    EXPECT_EQ(link.counters().gro_datagrams, 21u) << "loopback keeps a GSO message whole";
  }
}

// F5: the rank's socket does not set SO_REUSEADDR, so another local program
// (any user: Linux checks no uid for SO_REUSEADDR on UDP) that sets it cannot
// bind the rank's registered ip:port and take its RESULTs or send as it.
TEST(UdpLink, NoOtherSocketCanBindTheRanksAddress) {
  Plain sw;
  UdpLink link("127.0.0.1", 0, "127.0.0.1", sw.port);
  // The link's own address: the first datagram from it tells.
  const std::vector<uint8_t> hello(8, 1);
  const UdpLink::Datagram d{hello.data(), hello.size(), nullptr, 0, 0};
  ASSERT_EQ(link.send(&d, 1), 1u);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  std::vector<uint8_t> b(100);
  ASSERT_EQ(recvfrom(sw.fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&me), &len), 8);
  ASSERT_NE(me.sin_port, 0);

  const int thief = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(thief, 0);
  const int one = 1;
  ASSERT_EQ(setsockopt(thief, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one), 0);
  const int rc = bind(thief, reinterpret_cast<sockaddr*>(&me), sizeof me);
  const int e = errno;
  close(thief);
  EXPECT_EQ(rc, -1) << "a second socket bound the rank's 127.0.0.1:" << ntohs(me.sin_port);
  EXPECT_EQ(e, EADDRINUSE);
}
