#include "coll/shm/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "coll/links.hpp"
#include "coll/tcp/fd.hpp"

namespace prism::coll::shm {

namespace {
// MAP_POPULATE: the rings' pages are faulted in now, not one by one as the first messages go
// around (measured: a 4 KiB ping-pong's first lap of a fresh 1 MiB ring took 6 us a message, later
// laps 1.7 us).
void* map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}
}  // namespace

Segment Segment::create(const std::string& name, int group_size, int rank, size_t ring_bytes, const std::string& who) {
  Segment s;
  Fd fd(shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!fd) throw LinkError(who + ": shm_open(" + name + ") to create it: " + std::strerror(errno));
  s.name_ = name;  // ours to unlink from here on, whatever fails next
  s.bytes_ = bytes_for(group_size, ring_bytes);
  // fallocate, not ftruncate: the memory is taken now, so a full /dev/shm is this error and not a
  // SIGBUS at some later message.
  if (const int e = posix_fallocate(fd.get(), 0, off_t(s.bytes_)); e != 0)
    throw LinkError(who + ": reserving " + std::to_string(s.bytes_) + " bytes of shared memory for " + name + ": " +
                    std::strerror(e) + " (is /dev/shm full? PRISM_LINKS=tcp avoids it)");
  s.base_ = map(fd.get(), s.bytes_);
  if (!s.base_) throw LinkError(who + ": mmap of " + name + ": " + std::strerror(errno));
  // A new file reads as zeros: every counter starts at 0. The header's atomics are constructed in place.
  Header* h = new (s.base_) Header{};
  h->magic = kSegmentMagic, h->version = kSegmentVersion;
  h->group_size = uint32_t(group_size), h->rank = uint32_t(rank), h->ring_bytes = uint32_t(ring_bytes);
  h->pid = int32_t(getpid());
  for (int j = 0; j < group_size; ++j) new (s.ring_header(j)) RingHeader{};
  return s;
}

Segment Segment::open(const std::string& name, const std::string& who) {
  Segment s;
  Fd fd(shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0));
  if (!fd)
    throw LinkError(who + ": shm_open(" + name + "): " + std::strerror(errno) +
                    ": do all ranks share /dev/shm (one host, one IPC namespace)? PRISM_LINKS=tcp avoids it");
  struct stat st {};
  if (fstat(fd.get(), &st) != 0 || size_t(st.st_size) < kHeaderBytes)
    throw LinkError(who + ": the shared memory " + name + " is too small to be a PRISM segment");
  s.bytes_ = size_t(st.st_size);
  s.base_ = map(fd.get(), s.bytes_);
  if (!s.base_) throw LinkError(who + ": mmap of " + name + ": " + std::strerror(errno));
  const Header* h = s.header();
  if (h->magic != kSegmentMagic || h->version != kSegmentVersion ||
      s.bytes_ != bytes_for(int(h->group_size), h->ring_bytes))
    throw LinkError(who + ": " + name + " is not a PRISM segment of this version");
  return s;
}

Segment::Segment(Segment&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), name_(std::move(o.name_)) {
  o.name_.clear();
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    this->~Segment();
    new (this) Segment(std::move(o));
  }
  return *this;
}

Segment::~Segment() {
  unlink();
  if (base_) munmap(base_, bytes_);
}

void Segment::unlink() {
  if (!name_.empty()) shm_unlink(name_.c_str());
  name_.clear();
}

}  // namespace prism::coll::shm
