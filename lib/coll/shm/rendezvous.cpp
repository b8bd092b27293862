// connect_shm through a rendezvous store: rank 0 names the group, every rank
// creates its segment and publishes its pid, maps everyone else's, checks
// whether it can read each peer's memory (single copy), says so, and unlinks
// the names once every rank has mapped every segment.
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <sstream>

#include "coll/shm.hpp"
#include "coll/shm/channel.hpp"
#include "coll/shm/links.hpp"
#include "coll/shm/segment.hpp"
#include "rendezvous/store.hpp"

namespace prism::coll {
namespace {

using Clock = std::chrono::steady_clock;
using std::to_string;

const std::string kGroupKey = "shm/group";
std::string pid_key(int rank) { return "shm/" + to_string(rank); }
std::string mapped_key(int rank) { return "shm/" + to_string(rank) + "/mapped"; }
std::string segment_name(uint64_t id, int rank) {
  char b[64];
  std::snprintf(b, sizeof b, "/prism-%016llx-%d", static_cast<unsigned long long>(id), rank);
  return b;
}

// What a peer reads to show it can read this process's memory.
const uint64_t kProbe = 0x5052534d'50524f42ull;

}  // namespace

namespace {
uint64_t dev_shm_free() {
  struct statvfs st {};
  return statvfs("/dev/shm", &st) == 0 ? uint64_t(st.f_bavail) * st.f_frsize : 0;
}
constexpr size_t kMinRing = 64 << 10, kMaxRing = 1 << 20;
}  // namespace

size_t shm_ring_bytes(int size) {
  const uint64_t budget = std::min<uint64_t>(64u << 20, dev_shm_free() / 2);
  size_t ring = kMaxRing;
  while (ring > kMinRing && uint64_t(size) * uint64_t(size) * ring > budget) ring /= 2;
  return ring;
}

bool shm_has_room(int size) { return dev_shm_free() >= uint64_t(size) * shm::Segment::bytes_for(size, kMinRing); }

std::unique_ptr<Links> connect_shm(rdv::Store& store, int rank, int size, const ShmOptions& o) {
  if (size < 1 || rank < 0 || rank >= size)
    throw LinkError("connect_shm: rank " + to_string(rank) + " is not in a group of " + to_string(size));
  const size_t ring = o.ring_bytes ? o.ring_bytes : shm_ring_bytes(size);
  if (ring < 4096 || (ring & (ring - 1)) || ring > (size_t(1) << 30))
    throw LinkError("connect_shm: ShmOptions::ring_bytes " + to_string(ring) +
                    " is not a power of two between 4 KiB and 1 GiB");
  const std::string me = "rank " + to_string(rank) + " of a shared-memory group of " + to_string(size);
  const Clock::time_point deadline = Clock::now() + o.connect_timeout;
  auto left = [&] { return std::max(std::chrono::ceil<rdv::Millis>(deadline - Clock::now()), rdv::Millis(0)); };
  std::vector<shm::Segment> segs(static_cast<size_t>(size));
  uint64_t id = 0;
  int waiting_for = -1;  // the rank whose key a failing get waited for
  // Every name of the group is removed when this returns, set up or failed: after the barrier
  // every rank has mapped every segment; after a failure the group is over. Each rank removing
  // all of them (not just its own) leaves nothing behind when one dies in between.
  struct UnlinkAll {
    const uint64_t& id;
    int size;
    ~UnlinkAll() {
      if (id)
        for (int j = 0; j < size; ++j) shm_unlink(segment_name(id, j).c_str());
    }
  } unlink_all{id, size};
  try {
    if (rank == 0) {
      std::random_device rd;
      while (id == 0) id = uint64_t(rd()) << 32 | rd();
      store.set(kGroupKey, to_string(id) + " " + to_string(size));
    } else {
      waiting_for = 0;
      std::istringstream group(store.get_string(kGroupKey, left()));
      int their_size = 0;
      if (!(group >> id >> their_size))
        throw LinkError(me + ": the store's '" + kGroupKey +
                        "' is not '<id> <size>': is another program using these keys?");
      if (their_size != size)
        throw LinkError(me + ": rank 0 started a group of " + to_string(their_size) + ", this rank was told " +
                        to_string(size) + ": give every rank the same group size");
    }
    segs[size_t(rank)] = shm::Segment::create(segment_name(id, rank), size, rank, ring, me);
    shm::Header* mine = segs[size_t(rank)].header();
    mine->probe_addr = uint64_t(reinterpret_cast<uintptr_t>(&kProbe)), mine->probe_value = kProbe;
    store.set(pid_key(rank), to_string(getpid()));
    for (int j = 0; j < size; ++j) {
      if (j == rank) continue;
      waiting_for = j;
      store.get_string(pid_key(j), left());
      segs[size_t(j)] = shm::Segment::open(segment_name(id, j), me);
      const shm::Header* h = segs[size_t(j)].header();
      uint64_t seen = 0;
      const bool readable = h->pid == mine->pid
                                ? true
                                : shm::read_remote(h->pid, h->probe_addr, &seen, sizeof seen) && seen == h->probe_value;
      // Rank j reads this after the barrier below, before its first message.
      segs[size_t(rank)].ring_header(j)->single_copy.store(o.single_copy && readable ? 1 : 0,
                                                           std::memory_order_release);
    }
    store.set(mapped_key(rank), "1");
    for (int j = 0; j < size; ++j)
      if (j != rank) waiting_for = j, store.get_string(mapped_key(j), left());
  } catch (const rdv::StoreError& e) {
    if (waiting_for < 0) throw LinkError(me + ": rendezvous through the store failed: " + e.what());
    throw LinkError(me + ": rank " + to_string(waiting_for) + " never came to the shared-memory rendezvous within " +
                    to_string(o.connect_timeout.count()) +
                    " ms (ShmOptions::connect_timeout): is it started, with the same store (and prefix) and group "
                    "size? (" +
                    e.what() + ")");
  }
  segs[size_t(rank)].unlink();  // and forgets the name: the links' Segment has nothing to unlink later
  return shm::make_shm_links(rank, id, std::move(segs), o.recv_timeout);
}

}  // namespace prism::coll
