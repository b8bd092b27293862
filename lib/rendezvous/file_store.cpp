#include "rendezvous/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "rendezvous/wait.hpp"

namespace prism::rdv {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kUsers = "filestore/users";  // how many FileStores have the file open
constexpr Millis kFirstSleep{1}, kLongestSleep{50};

void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
}
uint32_t get32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

std::string quoted(std::string_view key) {
  std::string q(1, '\'');
  q.append(key).push_back('\'');
  return q;
}

// What to do about a store file someone else could have written.
constexpr const char* kPrivate =
    ": a store file must be this user's alone (anyone who can write it can plant records, e.g. another "
    "address for a rank's links). Put it in a private directory (mkdir -m 0700; not /tmp itself), or "
    "delete what is there if it is yours";

// The file opened at `path` is one only this user can have written.
void check_ours(const std::string& path, const struct stat& st) {
  const std::string where = "file store " + path + ": ";
  if (!S_ISREG(st.st_mode)) throw StoreError(where + "not a regular file" + kPrivate);
  if (st.st_uid != geteuid())
    throw StoreError(where + "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                     std::to_string(geteuid()) + ")" + kPrivate);
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw StoreError(where + "writable by " + (st.st_mode & S_IWOTH ? "every user" : "its group") + " (mode " + mode +
                     ")" + kPrivate);
  }
}

}  // namespace

// flock() held while it lives: shared for reading, exclusive for writing.
class FileStore::Lock {
 public:
  Lock(const FileStore& s, bool exclusive) : fd_(s.fd_.get()) {
    while (flock(fd_, exclusive ? LOCK_EX : LOCK_SH) != 0)
      if (errno != EINTR) s.fail("flock()");
  }
  ~Lock() { flock(fd_, LOCK_UN); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  int fd_;
};

FileStore::FileStore(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw StoreError("file store: an empty path: give a file every rank can reach");
  std::lock_guard<std::mutex> guard(mu_);
  for (;;) {
    // A link at the path is refused, not followed (it could lead to any file
    // of this user's); a new file is this user's alone.
    fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd_ && errno == ELOOP) throw StoreError("file store " + path_ + ": it is a symbolic link" + kPrivate);
    if (!fd_) fail("cannot open it (is its directory there, writable, and on a filesystem every rank sees?)");
    struct stat mine {
    }, there{};
    if (fstat(fd_.get(), &mine) != 0) fail("fstat()");
    check_ours(path_, mine);
    Lock lock(*this, true);
    // The last user of an earlier job may have deleted the file between our
    // open and our lock: count in only where the path still leads.
    if (lstat(path_.c_str(), &there) != 0 || mine.st_ino != there.st_ino || mine.st_dev != there.st_dev) continue;
    read_new();
    add_locked(kUsers, 1);
    return;
  }
}

FileStore::~FileStore() {
  try {
    std::lock_guard<std::mutex> guard(mu_);
    Lock lock(*this, true);
    read_new();
    if (add_locked(kUsers, -1) <= 0) ::unlink(path_.c_str());
  } catch (const StoreError&) {
    // A file we cannot write at the end: it stays, the next job must use another path.
  }
}

void FileStore::fail(const std::string& what) const {
  throw StoreError("file store " + path_ + ": " + what + ": " + std::strerror(errno));
}

void FileStore::read_new() {
  struct stat st {};
  if (fstat(fd_.get(), &st) != 0) fail("fstat()");
  const uint64_t end = uint64_t(st.st_size);
  if (end <= offset_) return;
  std::vector<uint8_t> buf(size_t(end - offset_));
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t r = pread(fd_.get(), buf.data() + got, buf.size() - got, off_t(offset_ + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("reading");
    if (r == 0) break;
    got += size_t(r);
  }
  size_t at = 0;
  for (;;) {  // whole records only (a writer killed mid-record leaves a torn tail: it is never read)
    if (got - at < 4) break;
    const uint32_t klen = get32(&buf[at]);
    if (got - at - 4 < uint64_t(klen) + 4) break;
    const uint32_t vlen = get32(&buf[at + 4 + klen]);
    if (got - at - 8 - klen < vlen) break;
    const uint8_t* k = &buf[at + 4];
    const uint8_t* v = k + klen + 4;
    values_[std::string(reinterpret_cast<const char*>(k), klen)].assign(v, v + vlen);
    at += 8 + size_t(klen) + vlen;
  }
  offset_ += at;
}

void FileStore::append(std::string_view key, std::span<const uint8_t> value) {
  if (key.size() > UINT32_MAX || value.size() > UINT32_MAX)
    throw StoreError("file store " + path_ + ": a key or value over 4 GiB: the store is for small values");
  std::vector<uint8_t> rec;
  rec.reserve(8 + key.size() + value.size());
  put32(rec, uint32_t(key.size()));
  rec.insert(rec.end(), key.begin(), key.end());
  put32(rec, uint32_t(value.size()));
  rec.insert(rec.end(), value.begin(), value.end());
  size_t done = 0;
  while (done < rec.size()) {
    const ssize_t r = ::write(fd_.get(), rec.data() + done, rec.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail("writing key " + quoted(key));
    done += size_t(r);
  }
}

int64_t FileStore::add_locked(std::string_view key, int64_t delta) {
  int64_t v = 0;
  if (const auto it = values_.find(std::string(key)); it != values_.end()) {
    const char* b = reinterpret_cast<const char*>(it->second.data());
    const auto r = std::from_chars(b, b + it->second.size(), v);
    if (r.ec != std::errc() || r.ptr != b + it->second.size())
      throw StoreError("file store " + path_ + ": key " + quoted(key) +
                       " holds a value that is not a decimal integer: add() only works on keys that only add() sets");
  }
  if (__builtin_add_overflow(v, delta, &v))
    throw StoreError("file store " + path_ + ": adding " + std::to_string(delta) + " to key " + quoted(key) +
                     " overflows 64 bits");
  const std::string s = std::to_string(v);
  append(key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  return v;
}

void FileStore::set(std::string_view key, std::span<const uint8_t> value) {
  std::lock_guard<std::mutex> guard(mu_);
  Lock lock(*this, true);
  append(key, value);
}

Bytes FileStore::get(std::string_view key, Millis timeout) {
  const Clock::time_point deadline = Clock::now() + bounded_wait(timeout);
  const std::string k(key);
  Millis sleep = kFirstSleep;
  for (;;) {
    {
      std::lock_guard<std::mutex> guard(mu_);
      Lock lock(*this, false);
      read_new();
      if (const auto it = values_.find(k); it != values_.end()) return it->second;
    }
    const Clock::time_point now = Clock::now();
    if (now >= deadline)
      throw StoreError("file store " + path_ + ": key " + quoted(key) + " not set after " +
                       std::to_string(timeout.count()) +
                       " ms: is the rank that sets it running, with the same file (and prefix)?");
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, kLongestSleep);
  }
}

int64_t FileStore::add(std::string_view key, int64_t delta) {
  std::lock_guard<std::mutex> guard(mu_);
  Lock lock(*this, true);
  read_new();
  return add_locked(key, delta);
}

bool FileStore::check(std::string_view key) {
  std::lock_guard<std::mutex> guard(mu_);
  Lock lock(*this, false);
  read_new();
  return values_.count(std::string(key)) != 0;
}

std::shared_ptr<FileStore> make_file_store(const std::string& path) { return std::make_shared<FileStore>(path); }

}  // namespace prism::rdv
