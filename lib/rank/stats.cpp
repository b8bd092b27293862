// prism::Stats' field table (prism.hpp's stat_fields()).
#include <iterator>

#include "prism/prism.hpp"

namespace prism {
namespace {

constexpr StatField count(const char* name, const char* doc, uint64_t Stats::*m) { return {name, doc, m, nullptr}; }
constexpr StatField value(const char* name, const char* doc, double Stats::*m) { return {name, doc, nullptr, m}; }

constexpr StatField kStatFields[] = {
    count("ops", "ops started", &Stats::ops),
    count("ops_failed", "ops that ended in an error", &Stats::ops_failed),
    count("chunks", "chunk contributions sent (first sends)", &Stats::chunks),
    count("retransmits", "chunks sent again (RETRANSMIT)", &Stats::retransmits),
    count("results", "RESULTs taken", &Stats::results),
    count("duplicate_results", "RESULTs for chunks already complete (ignored)", &Stats::duplicate_results),
    count("stray", "datagrams for no outstanding op, or malformed (ignored)", &Stats::stray),
    count("nacks", "NACKs received (all reasons; by reason: nack_by_reason)", &Stats::nacks),
    count("no_slot_retries", "chunks sent again after NO_FREE_SLOT", &Stats::no_slot_retries),
    count("packets_sent", "datagrams sent", &Stats::packets_sent),
    count("packets_received", "datagrams received", &Stats::packets_received),
    count("bytes_sent", "UDP payload bytes sent", &Stats::bytes_sent),
    count("bytes_received", "UDP payload bytes received", &Stats::bytes_received),
    count("joins_sent", "JOINs sent before the session was complete", &Stats::joins_sent),
    value("join_seconds", "how long joining took (waiting for the other ranks)", &Stats::join_seconds),
    value("rtt_min_us", "the least round trip of a chunk sent once", &Stats::rtt_min_us),
    value("rtt_srtt_us", "the smoothed round trip of chunks sent once", &Stats::rtt_srtt_us),
    value("rtt_max_us", "the largest round trip of a chunk sent once", &Stats::rtt_max_us),
    value("rto_us", "the retransmission timeout now", &Stats::rto_us),
    count("gso_sends", "UDP GSO messages sent (each a run of 2 or more chunks to one switch port)", &Stats::gso_sends),
    count("gso_datagrams", "datagrams sent inside UDP GSO messages", &Stats::gso_datagrams),
    count("gso_refused",
          "1 when UDP GSO was given up and sends fell back to plain sendmmsg: the kernel refused it "
          "(EINVAL/EIO: no checksum offload), or the switch NACKed one cut short as MALFORMED (a path that "
          "passed it unsegmented to a port that truncates it)",
          &Stats::gso_refused),
    count("gro_buffers", "received buffers the kernel had coalesced (UDP_GRO)", &Stats::gro_buffers),
    count("gro_datagrams", "datagrams inside coalesced buffers", &Stats::gro_datagrams),
    count("queries", "QUERYs sent: a chunk late with no sign of loss, asked about instead of re-sent", &Stats::queries),
    count("status_held", "STATUS HELD received: the switch had this rank's contribution and waited for others",
          &Stats::status_held),
    count("status_missing", "STATUS MISSING received: the switch lacked it (lost): re-sent", &Stats::status_missing),
    count("send_calls", "system calls that sent (sendmmsg)", &Stats::send_calls),
    count("receive_calls", "system calls that received (recvmmsg)", &Stats::receive_calls),
};
// Every field but the array: a field added to Stats without a row changes its size.
static_assert(sizeof(Stats) == std::size(kStatFields) * 8 + sizeof(Stats::nack_by_reason),
              "every field of Stats has a row in kStatFields");

}  // namespace

const StatField* stat_fields(size_t* n) {
  if (n) *n = std::size(kStatFields);
  return kStatFields;
}

}  // namespace prism
