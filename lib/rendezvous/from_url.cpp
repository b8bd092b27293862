#include "rendezvous/from_url.hpp"

#include <charconv>
#include <cstdlib>

#include "rendezvous/file_store.hpp"
#include "rendezvous/tcp_store.hpp"

namespace prism::rdv {
namespace {

constexpr const char* kForms = "tcp://host:port (rank 0 serves) or file:///absolute/path";

[[noreturn]] void bad(const std::string& url, const std::string& why) {
  throw StoreError("store URL '" + url + "': " + why + "; expected " + kForms);
}

struct HostPort {
  std::string host;
  uint16_t port;
};

HostPort parse_tcp(const std::string& url) {
  const std::string rest = url.substr(6);  // after tcp://
  if (rest.find('/') != std::string::npos) bad(url, "a path after host:port");
  if (!rest.empty() && rest[0] == '[') bad(url, "an IPv6 address (the store speaks IPv4)");
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) bad(url, "no port");
  const std::string host = rest.substr(0, colon), port_s = rest.substr(colon + 1);
  if (host.empty()) bad(url, "no host");
  unsigned port = 0;
  const auto r = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
  if (port_s.empty() || r.ec != std::errc() || r.ptr != port_s.data() + port_s.size() || port < 1 || port > 65535)
    bad(url, "port '" + port_s + "' is not a number 1..65535");
  return {host, uint16_t(port)};
}

}  // namespace

std::string tcp_url_host(const std::string& url) {
  if (url.rfind("tcp://", 0) != 0) return {};
  try {
    return parse_tcp(url).host;
  } catch (const StoreError&) {
    return {};
  }
}

std::shared_ptr<Store> store_from_url(const std::string& url, int rank, Millis timeout) {
  if (rank < 0) throw StoreError("store URL '" + url + "': rank " + std::to_string(rank) + " is negative");
  if (url.rfind("tcp://", 0) == 0) {
    const HostPort hp = parse_tcp(url);
    return make_tcp_store(hp.host, hp.port, rank == 0, timeout);
  }
  if (url.rfind("file://", 0) == 0) {
    const std::string path = url.substr(7);
    if (path.empty() || path[0] != '/')
      bad(url, "the file's path is not absolute (file:// then the path: three slashes for /tmp/x)");
    if (path.back() == '/') bad(url, "the path names a directory");
    return make_file_store(path);
  }
  const size_t scheme = url.find("://");
  bad(url, scheme == std::string::npos ? "no scheme" : "unknown scheme '" + url.substr(0, scheme) + "'");
}

std::string store_url_from_env() {
  const char* url = std::getenv("PRISM_STORE");
  if (url && *url) return url;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  const bool has_addr = addr && *addr, has_port = port && *port;
  if (has_addr && has_port) return std::string("tcp://") + addr + ":" + port;
  if (has_addr || has_port)
    throw StoreError(std::string("the environment has ") +
                     (has_addr ? "MASTER_ADDR but no MASTER_PORT" : "MASTER_PORT but no MASTER_ADDR") +
                     ": set both (rank 0 serves the TCP store at MASTER_PORT), or PRISM_STORE to a URL: " + kForms);
  throw StoreError(std::string("no rendezvous store in the environment: set PRISM_STORE to ") + kForms +
                   ", or MASTER_ADDR and MASTER_PORT (as torchrun does)");
}

std::shared_ptr<Store> store_from_env(int rank, Millis timeout) {
  return store_from_url(store_url_from_env(), rank, timeout);
}

}  // namespace prism::rdv
