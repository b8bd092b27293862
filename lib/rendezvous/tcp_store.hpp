// The TCP store (as torch's TCPStore): one process of the group serves it
// (rank 0: a server thread with one poll() loop over its clients, serving
// until the TcpStore that owns it is destroyed); every rank, the serving one
// too, is a client over TCP.
//
// Wire protocol, version 1. Integers little-endian; every key and value
// carries its length, so nothing is escaped.
//   Greeting, once per connection: the client sends "PRST" and a uint32
//   version (1); the server answers the same 8 bytes, or closes.
//   Request: uint8 command, uint32 key length, the key, then
//     1 SET    uint32 value length, the value
//     2 GET    uint64 timeout in ms (the server parks the request until the
//              key is set, or the timeout passes: never polled)
//     3 ADD    int64 delta (the value is kept as decimal text: "5")
//     4 CHECK  nothing
//   Reply: uint8 status, then
//     0 OK       SET: nothing; GET: uint32 length, the value; ADD: int64 the
//                new value; CHECK: uint8 1 when set, 0 when not
//     1 TIMEOUT  (GET only) nothing
//     2 ERROR    uint32 length, a message (an ADD on a value that is not a
//                decimal integer, an overflow)
//   Keys at most kMaxKey bytes, values kMaxValue: the server closes a
//   connection that breaks the protocol; no client breaks it for the rest.
//   A client refuses a reply longer than kMaxValue (a StoreError) before
//   reading it, and closes a connection after an ERROR.
//   One request at a time per connection (a client with a GET parked opens
//   another connection for its other threads' requests).
//
// Timeouts: a client retries connecting for `connect_timeout` (ranks start
// in any order); a request other than GET waits `connect_timeout` for its
// reply, a GET its own timeout plus that. A server that goes away is a
// StoreError at the next request, or at once for a request waiting.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coll/tcp/fd.hpp"
#include "rendezvous/store.hpp"

namespace prism::rdv {

inline constexpr uint32_t kMaxKey = 64 << 10;
inline constexpr uint32_t kMaxValue = 64 << 20;

// Where a serving TcpStore listens.
enum class Listen : uint8_t {
  EVERY_ADDRESS,  // every local address, as torch's TCPStore and Gloo's: clients may be told a host
                  // name that resolves to another address here than on their hosts
  STORE_HOST,     // the store's host alone, resolved here: an address of this host (127.0.0.1: only
                  // this host's processes reach it)
};

// What one server holds at most. Past a limit a request is answered with an
// ERROR that names it (the client's StoreError); what the store holds stays.
struct TcpStoreLimits {
  size_t keys = size_t(1) << 20;   // distinct keys
  size_t bytes = size_t(1) << 30;  // their keys' and values' bytes together
  size_t connections = 0;          // clients connected at once; 0: half the process's RLIMIT_NOFILE
};

class TcpStoreServer;

class TcpStore final : public Store {
 public:
  // A client of the store served at host:port, and its server when `serve`
  // (listening where `listen` says on `port`; 0: one the kernel picks, see
  // port()). Throws StoreError: a host that does not resolve, an address or
  // port it cannot serve at, no server within connect_timeout.
  TcpStore(const std::string& host, uint16_t port, bool serve, Millis connect_timeout = kDefaultStoreTimeout,
           Listen listen = Listen::EVERY_ADDRESS, const TcpStoreLimits& limits = {});
  ~TcpStore() override;

  void set(std::string_view key, std::span<const uint8_t> value) override;
  Bytes get(std::string_view key, Millis timeout = kDefaultStoreTimeout) override;
  int64_t add(std::string_view key, int64_t delta) override;
  bool check(std::string_view key) override;
  std::string network_host() const override { return host_; }
  using Store::set;

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }  // the port served, when it was 0
  std::string where() const;               // "host:port", for messages

  // Done with the store (libprism-mpi's, once its group is set up: nothing
  // reads it after): closes this client's connections and, where this
  // object serves, the server, whose clients' connections close too. A
  // later request is a StoreError.
  void close();

 private:
  coll::Fd open(bool first);
  // Sends one request on a connection of the pool and reads the reply's
  // status, then the rest through `read(status, recv_exact, recv_length)`
  // (recv_length: a length, refused past kMaxValue).
  template <class Read>
  auto call(const std::vector<uint8_t>& req, std::string_view what, Millis wait, Read read);

  std::string host_;
  uint16_t port_;
  Millis connect_timeout_;
  std::unique_ptr<TcpStoreServer> server_;
  sockaddr_in addr_{};
  std::mutex mu_;
  std::vector<coll::Fd> idle_;  // connections with no request in flight
  bool closed_ = false;
};

std::shared_ptr<TcpStore> make_tcp_store(const std::string& host, uint16_t port, bool serve,
                                         Millis connect_timeout = kDefaultStoreTimeout,
                                         Listen listen = Listen::EVERY_ADDRESS, const TcpStoreLimits& limits = {});

}  // namespace prism::rdv
