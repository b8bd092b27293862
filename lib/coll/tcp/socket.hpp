// Socket helpers of the TCP links: addresses as text and as sockaddr, the
// links' socket (non-blocking, Nagle off, buffers as TcpOptions asks), and
// which local address reaches a given host.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <optional>
#include <string>

#include "coll/tcp.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll {

std::string ipv4_str(uint32_t ip);                             // "10.0.0.1" (ip in host order)
std::optional<uint32_t> parse_ipv4_str(const std::string& s);  // dotted quad only
std::string addr_str(const TcpAddr& a);                        // "10.0.0.1:5000"
std::optional<TcpAddr> parse_addr_str(const std::string& s);   // "10.0.0.1:5000"

sockaddr_in to_sockaddr(const TcpAddr& a);
TcpAddr from_sockaddr(const sockaddr_in& s);

// A non-blocking, close-on-exec TCP socket with Nagle off and o.socket_buffer
// forced (when privileged). Throws LinkError naming `who`.
Fd tcp_socket(const TcpOptions& o, const std::string& who);

// Whether a connected socket's two ends are one address: on loopback a
// connect to a port nobody listens at can meet itself.
bool connected_to_itself(int fd);

// The local IPv4 address the kernel would send from to reach `host` (a name
// or an address): a UDP socket connected there (nothing is sent) and
// getsockname(), as Gloo does. Empty when `host` does not resolve or has no
// route.
std::optional<uint32_t> source_address_to(const std::string& host);

}  // namespace prism::coll
