// Output files for PRISM's tools: a result appears whole or not at all, and
// whatever a path names stays what it is.
//
// - A regular file (or a path that does not exist yet) is written to a temp
//   beside it and renamed over it when complete: a reader never sees half a
//   file, and an error leaves the old file (or none) behind. The new file keeps
//   the old one's permission bits (a new one gets 0666 less the umask).
// - A symbolic link is followed to its target (for a chain of links, the last
//   one's): the target gets the data, the link stays a link, and the temp goes
//   beside the target, not the link.
// - Anything else that exists (a device such as /dev/null, a FIFO, a socket) is
//   written through: it stays what it is and gets the bytes as they come.
// - A directory, or a path whose directory does not exist, is refused with one
//   line that says so; nothing is created on the way.
//
//   check_writable(path, what)  before a long run: fails now, not after it
//   OutputFile                   one output: write, then commit() (or destroy to discard)
//   OutputSet                    several outputs that appear together: commit() renames
//                                each only when every one was written
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"

namespace prism::app {

namespace output_detail {

inline std::string label(const std::string& path, const std::string& what) {
  return what.empty() ? path : what + " " + path;
}
[[noreturn]] inline void fail_errno(const std::string& path, const std::string& what, int err) {
  cli::fail("cannot write " + label(path, what) + ": " + std::strerror(err));
}
inline std::string dir_of(const std::string& path) {
  const std::string d = std::filesystem::path(path).parent_path().string();
  return d.empty() ? "." : d;
}
inline mode_t new_file_mode() {
  const mode_t u = ::umask(022);
  ::umask(u);
  return 0666 & ~u;
}

}  // namespace output_detail

// The path a write to `path` really goes to: symbolic links followed to the
// last one's target, which need not exist yet.
inline std::string resolve_links(const std::string& path, const std::string& what = "") {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p.string();
    std::error_code ec;
    const fs::path t = fs::read_symlink(p, ec);
    if (ec) output_detail::fail_errno(path, what, ec.value());
    p = t.is_absolute() ? t : p.parent_path() / t;
  }
  output_detail::fail_errno(path, what, ELOOP);
}

// Fails now, with one line ("cannot write --json out/x.json: directory out does
// not exist"), if an OutputFile could not be made at `path` later; creates
// nothing. `what` names the option in the message (may be empty). For a long
// run whose output is written at its end (prism-bench's --json), call this
// before the run.
inline void check_writable(const std::string& path, const std::string& what = "") {
  using namespace output_detail;
  if (path.empty()) cli::fail("cannot write " + label(path, what) + ": the path is empty");
  const std::string target = resolve_links(path, what);
  struct stat st;
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) cli::fail("cannot write " + label(path, what) + ": it is a directory");
    if (::access(target.c_str(), W_OK) != 0) fail_errno(path, what, errno);
    if (!S_ISREG(st.st_mode)) return;  // written through
  } else if (errno != ENOENT) {
    fail_errno(path, what, errno);
  }
  const std::string dir = dir_of(target);
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) cli::fail("cannot write " + label(path, what) + ": directory " + dir + " does not exist");
    fail_errno(path, what, errno);
  }
  if (!S_ISDIR(st.st_mode)) cli::fail("cannot write " + label(path, what) + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fail_errno(path, what, errno);
}

class OutputFile {
 public:
  // Opens the output (the temp, or the file written through); fails with one
  // line naming the path and the reason.
  explicit OutputFile(std::string path, std::string what = "") : path_(std::move(path)), what_(std::move(what)) {
    check_writable(path_, what_);
    target_ = resolve_links(path_, what_);
    struct stat st;
    const bool exists = ::stat(target_.c_str(), &st) == 0;
    if (exists && !S_ISREG(st.st_mode)) {
      through_ = true;
      f_ = std::fopen(target_.c_str(), "wb");
      if (!f_) output_detail::fail_errno(path_, what_, errno);
      return;
    }
    std::string tmp = target_ + ".tmp.XXXXXX";
    const int fd = ::mkstemp(tmp.data());
    if (fd < 0) output_detail::fail_errno(path_, what_, errno);
    tmp_ = tmp;
    if (::fchmod(fd, exists ? (st.st_mode & 07777) : output_detail::new_file_mode()) != 0 ||
        !(f_ = ::fdopen(fd, "wb"))) {
      const int e = errno;
      ::close(fd);
      discard();
      output_detail::fail_errno(path_, what_, e);
    }
  }
  ~OutputFile() { discard(); }
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Buffered; an error is kept and reported by close() or commit().
  void write(const void* p, size_t n) {
    if (!n || err_ || !f_) return;
    if (std::fwrite(p, 1, n, f_) != n) err_ = errno ? errno : EIO;
  }
  void write(std::string_view s) { write(s.data(), s.size()); }

  // Flushes and closes; on any error removes the temp and fails with one line.
  void close() {
    if (!f_) return;
    int e = err_;
    if (!e && std::fflush(f_) != 0) e = errno;
    if (std::fclose(f_) != 0 && !e) e = errno;
    f_ = nullptr;
    if (e) {
      discard();
      output_detail::fail_errno(path_, what_, e);
    }
  }
  // Closes, then puts the data in place (the temp renamed over the target).
  void commit() {
    close();
    if (tmp_.empty()) return;
    if (std::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const int e = errno;
      discard();
      output_detail::fail_errno(path_, what_, e);
    }
    tmp_.clear();
  }
  // Drops what was written (the temp removed; a file written through keeps it).
  void discard() {
    if (f_) std::fclose(f_);
    f_ = nullptr;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
    tmp_.clear();
  }

  const std::string& path() const { return path_; }
  bool written_through() const { return through_; }

 private:
  std::string path_, what_, target_, tmp_;
  std::FILE* f_ = nullptr;
  bool through_ = false;
  int err_ = 0;
};

// Writes `data` to `path` as one OutputFile.
inline void write_file(const std::string& path, const void* data, size_t n, const std::string& what = "") {
  OutputFile f(path, what);
  f.write(data, n);
  f.commit();
}

// Outputs that appear together or not at all: each is written to its temp;
// commit() closes every one and, only when all were written, renames them into
// place. Destroyed uncommitted (an error on the way), it removes the temps and
// the directories make_dir() created.
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet() {
    if (committed_) return;
    files_.clear();
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) ::rmdir(it->c_str());
  }

  // A directory the outputs go in: made if missing. Its parent must exist,
  // unless `parents` (then missing parents are made too, as mkdir -p).
  void make_dir(const std::string& dir, const std::string& what, bool parents) {
    namespace fs = std::filesystem;
    std::vector<fs::path> missing;
    for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
      struct stat st;
      if (::stat(p.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode))
          cli::fail("cannot write " + what + " " + dir + ": " + p.string() + " is not a directory");
        break;
      }
      if (errno != ENOENT) output_detail::fail_errno(dir, what, errno);
      missing.push_back(p);
      if (p == p.parent_path()) break;
    }
    if (missing.size() > 1 && !parents)
      cli::fail("cannot write " + what + " " + dir + ": directory " + missing.back().string() + " does not exist");
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0777) != 0 && errno != EEXIST) output_detail::fail_errno(dir, what, errno);
      made_.push_back(it->string());
    }
  }

  OutputFile& open(const std::string& path, const std::string& what = "") {
    files_.push_back(std::make_unique<OutputFile>(path, what));
    return *files_.back();
  }

  void commit() {
    for (auto& f : files_) f->close();
    for (auto& f : files_) f->commit();
    committed_ = true;
  }

 private:
  std::vector<std::unique_ptr<OutputFile>> files_;
  std::vector<std::string> made_;
  bool committed_ = false;
};

}  // namespace prism::app
