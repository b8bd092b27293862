// The file store (as torch's FileStore): one file, on a filesystem every
// rank sees, holding an append-only log of records (uint32 key length, key,
// uint32 value length, value; little-endian). Writers append a whole record
// under flock(LOCK_EX); readers read new records under flock(LOCK_SH), so
// no one sees half a record; a mutex keeps this process's threads apart
// (flock does not). The latest record of a key is its value; add() keeps
// decimal text, as the TCP store does.
//
// get() re-reads the file with a short sleep between tries (1 ms, doubling
// up to 50 ms) until the key appears or the timeout passes.
//
// Trust: whoever can write the file can plant records (another rank's
// address), so it must be this user's alone: a new file is created 0600, and
// a symbolic link at the path, a file another user owns, or one its group or
// everyone may write is refused (StoreError saying so). Keep it in a private
// directory (mode 0700), not in /tmp itself, where anyone may create the path
// first.
//
// Lifetime: each FileStore counts itself in (key "filestore/users") and out;
// the last one out deletes the file, so the next job starts clean. A file
// left by a job that crashed holds its old values: give each job a fresh
// path (or delete it first).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "coll/tcp/fd.hpp"
#include "rendezvous/store.hpp"

namespace prism::rdv {

class FileStore final : public Store {
 public:
  // Opens (creating, mode 0600) `path`. Throws StoreError naming it: it cannot
  // be opened, or it is not this user's alone (see Trust above).
  explicit FileStore(std::string path);
  ~FileStore() override;

  void set(std::string_view key, std::span<const uint8_t> value) override;
  Bytes get(std::string_view key, Millis timeout = kDefaultStoreTimeout) override;
  int64_t add(std::string_view key, int64_t delta) override;
  bool check(std::string_view key) override;
  using Store::set;

  const std::string& path() const { return path_; }

 private:
  class Lock;
  void reopen_if_replaced();
  void read_new();  // under the file's lock: records past offset_ into values_
  void append(std::string_view key, std::span<const uint8_t> value);
  int64_t add_locked(std::string_view key, int64_t delta);
  [[noreturn]] void fail(const std::string& what) const;

  std::string path_;
  std::mutex mu_;
  coll::Fd fd_;
  uint64_t offset_ = 0;  // of the file read into values_
  std::unordered_map<std::string, Bytes> values_;
};

std::shared_ptr<FileStore> make_file_store(const std::string& path);

}  // namespace prism::rdv
