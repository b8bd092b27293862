// The Links between processes of one host, over shared memory, as Open
// MPI's vader/sm: chosen instead of TCP when every rank of a group shares a
// host (lib/group/links_choice.hpp; PRISM_LINKS=tcp|shm|auto).
//
// The code, by role (lib/coll/shm/): segment (each rank's shared memory: a
// header and, per peer, the ring that peer writes to it), doorbell (the
// futex a rank sleeps on), channel (one direction of a pair: the framing,
// the ring, single copy), links.cpp (the Links over channels: the wait
// loop), rendezvous.cpp (the setup through a store).
//
// Messages: each ordered pair (j -> r) has a single-producer single-consumer
// byte ring in r's segment; a message is a 64-bit little-endian length and
// its bytes, streamed through the ring as room allows. A message of 64 KiB
// or more goes in one copy instead: the receiver reads it straight from the
// sender's memory (process_vm_readv, "CMA", where the kernel lets it: same
// user, no Yama ptrace restriction — checked at setup, pair by pair; else
// the ring), and the sender's send() returns once it has.
//
// Progress: as the TCP links, every wait moves every ring along: what each
// peer writes is read into per-peer queues, so no pattern of sends
// deadlocks (sendrecv with large messages both ways included), and recv(peer)
// takes that peer's next message whatever arrived from others.
//
// Waiting: poll the rings between sched_yield()s for 50 us where the group
// has no more ranks than the process may use CPUs (5 us where ranks
// outnumber them: a longer spin takes the CPU from ranks that compute), then
// sleep on the rank's own futex, which every peer rings when it writes to
// this rank or frees room in a ring this rank writes. A
// peer that destroys its links sets a flag (what it sent before still
// arrives); one that dies is seen by its process (a pidfd) within 100 ms of
// a wait that needs it. Either is a LinkError naming the peer, as is no
// progress for ShmOptions::recv_timeout.
//
// Segments: rank r creates "/prism-<group id>-<r>" (shm_open); every rank
// unlinks every name of the group once all have mapped all, before the
// first message, and when the setup fails: a rank that crashes later (or
// during the setup, but for a name created after the others gave up)
// leaves nothing in /dev/shm.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "coll/links.hpp"

namespace prism::rdv {
class Store;  // rendezvous/store.hpp
}

namespace prism::coll {

struct ShmOptions {
  std::chrono::milliseconds connect_timeout{60000};  // the rendezvous gives up after this, naming who never came
  std::chrono::milliseconds recv_timeout{60000};     // a recv (or send) with no progress for this long throws
  // Each ordered pair's ring: a power of two of at least 4 KiB; 0: shm_ring_bytes(size).
  size_t ring_bytes = 0;
  bool single_copy = true;  // false: never read the sender's memory (the ring for every size)
};

// The ring each ordered pair of a group of `size` gets by default: 1 MiB,
// halved (down to 64 KiB) until the group's p * p rings fit in 64 MiB and in
// half of what /dev/shm has free (a container's is often 64 MiB). Each
// rank's segment says its own, so ranks that see different room still
// agree. Messages of 64 KiB or more go by single copy: the ring mostly
// carries smaller ones.
size_t shm_ring_bytes(int size);
// Whether /dev/shm has room now for every segment of a group of `size` with
// 64 KiB rings (the setup reserves them with fallocate: a full /dev/shm is
// an error then, never a SIGBUS later). links_choice.cpp's auto takes TCP
// without it.
bool shm_has_room(int size);

// Rank `rank` of a group of `size`, through a rendezvous store (keys
// "shm/group" = "<id> <size>" from rank 0, "shm/<rank>" = "<pid>",
// "shm/<rank>/mapped"): every rank must be on this host, sharing its
// /dev/shm. Throws LinkError (a bad rank or size, a segment it cannot make
// or map, a rank that never came within o.connect_timeout, naming it).
std::unique_ptr<Links> connect_shm(rdv::Store& store, int rank, int size, const ShmOptions& o = {});

}  // namespace prism::coll
