// Ethernet captures: RAII wrappers around libpcap for writing and reading
// them, and the format written into any byte sink (PcapStream).
#pragma once

#include <pcap/pcap.h>

#include <cstdint>
#include <functional>
#include <span>
#include <stdexcept>
#include <string>

namespace prism {

class PcapWriter {
 public:
  explicit PcapWriter(const std::string& path) : path_(path) {
    dead_ = pcap_open_dead(DLT_EN10MB, 65535);
    if (!dead_) throw std::runtime_error("cannot create a pcap handle");
    dump_ = pcap_dump_open(dead_, path.c_str());
    if (!dump_) {
      const std::string err = pcap_geterr(dead_);
      pcap_close(dead_);
      throw std::runtime_error("cannot write " + path + ": " + err);
    }
  }
  ~PcapWriter() {
    if (dump_) pcap_dump_close(dump_);
    if (dead_) pcap_close(dead_);
  }
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  // Writes one frame with a timestamp in microseconds.
  void write(std::span<const uint8_t> frame, uint64_t usec) {
    pcap_pkthdr h{};
    h.ts.tv_sec = time_t(usec / 1000000);
    h.ts.tv_usec = suseconds_t(usec % 1000000);
    h.caplen = h.len = uint32_t(frame.size());
    pcap_dump(reinterpret_cast<u_char*>(dump_), &h, frame.data());
    ++count_;
  }
  uint64_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  pcap_t* dead_ = nullptr;
  pcap_dumper_t* dump_ = nullptr;
  uint64_t count_ = 0;
};

// The classic pcap format, as libpcap's pcap_dump writes it (the writer's byte
// order, microsecond timestamps, Ethernet, snaplen 65535), into any sink with
// write(const void*, size_t): an app::OutputFile, so a capture appears whole.
template <class Sink>
class PcapStream {
 public:
  explicit PcapStream(Sink& out) : out_(out) {
    const uint32_t magic = 0xA1B2C3D4, snaplen = 65535, linktype = DLT_EN10MB, zone = 0, sigfigs = 0;
    const uint16_t major = 2, minor = 4;
    put(magic), put(major), put(minor), put(zone), put(sigfigs), put(snaplen), put(linktype);
  }
  // Writes one frame with a timestamp in microseconds.
  void write(std::span<const uint8_t> frame, uint64_t usec) {
    put(uint32_t(usec / 1000000)), put(uint32_t(usec % 1000000));
    put(uint32_t(frame.size())), put(uint32_t(frame.size()));
    out_.write(frame.data(), frame.size());
  }

 private:
  template <class T>
  void put(T v) {
    out_.write(&v, sizeof v);
  }
  Sink& out_;
};

// Calls fn(frame, usec) for every record; throws on an unreadable file.
inline void read_pcap(const std::string& path, const std::function<void(std::span<const uint8_t>, uint64_t)>& fn) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (!p) throw std::runtime_error("cannot read " + path + ": " + err);
  if (pcap_datalink(p) != DLT_EN10MB) {
    pcap_close(p);
    throw std::runtime_error(path + " is not an Ethernet capture");
  }
  pcap_pkthdr* h;
  const u_char* data;
  int rc;
  while ((rc = pcap_next_ex(p, &h, &data)) == 1)
    fn({data, h->caplen}, uint64_t(h->ts.tv_sec) * 1000000 + uint64_t(h->ts.tv_usec));
  const std::string e = rc == -1 ? pcap_geterr(p) : "";
  pcap_close(p);
  if (rc == -1) throw std::runtime_error("error reading " + path + ": " + e);
}

}  // namespace prism
