// prism-reduce: the golden reference model. Reduces raw little-endian arrays
// exactly as the switch would and writes the result array.
//
//   prism-reduce --dtype D --policy P [--out-dtype O] [--exceptions ieee|saturate]
//                [--width BITS] [--kernels auto|portable|avx2] -o OUT IN...
//
// The order of the INs is the arrival order (fp32_arrival) and the
// contribution index (fp32_binomial). An IN written @LIST names a file that
// lists further INs, one per line. Errors print one line and exit 2, leaving
// no OUT behind: OUT is written to a temp beside it and renamed over it
// (output_file.hpp; a symlink's target gets the data, a device or FIFO is
// written through). The last line on stderr is
//   flags: overflow=N invalid=N nan_input=N
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "arith/accumulator.hpp"
#include "cli.hpp"
#include "kernels_option.hpp"
#include "output_file.hpp"

using namespace prism;

namespace {

using cli::fail;

std::string usage() {
  return "usage: prism-reduce --dtype D --policy P [--out-dtype O] [--exceptions " + choices<Exceptions>("|") +
         "]\n"
         "                    [--width BITS] [--kernels " +
         std::string(app::kKernelChoices) +
         "] -o OUT IN...\n"
         "  D, O: " +
         choices<Format>() +
         " (O: fp32, or int32 for integer D)\n"
         "  P: " +
         choices<Policy>() +
         "\n"
         "  Each IN is a raw little-endian array of D; @LIST reads IN names from LIST, one per line.\n";
}

struct Request {
  OpDesc desc;
  int width = kMaxWidth;
  const Kernels* kernels = nullptr;
  std::string out;
  std::vector<std::string> ins;
};

// The command line, checked: the op, the width, the kernels, OUT and the INs.
Request parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(usage().c_str(), stdout);
      std::exit(0);
    }
  const cli::Args c(argc, argv, 1,
                    {"--dtype", "--policy", "--out-dtype", "--exceptions", "--width", "--kernels", "-o", "--output"},
                    {});
  Request q;
  OpDesc& d = q.desc;
  d.dtype = cli::one_of<Format>(c, "--dtype");
  d.policy = cli::one_of<Policy>(c, "--policy");
  q.out = c.str("-o", c.str("--output"));
  if (q.out.empty()) fail("missing -o OUT: name the file to write the result to");
  d.out = cli::one_of<Format>(c, "--out-dtype", is_float(d.dtype) ? Format::FP32 : Format::INT32);
  d.exceptions = cli::one_of<Exceptions>(c, "--exceptions", Exceptions::IEEE);
  if (c.has("--width")) {
    const std::string w = c.str("--width");
    char* end = nullptr;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (!end || *end || v < 1 || v > 4096) fail("bad --width '" + w + "': give a number of bits, 1..4096");
    q.width = int(v);
  }
  q.kernels = &app::kernels_named(c.str("--kernels", "auto"));
  for (const auto& s : c.positional) {
    if (s[0] != '@') {
      q.ins.push_back(s);
      continue;
    }
    std::ifstream list(s.substr(1));
    if (!list) fail("cannot read the input list " + s.substr(1) + ": " + std::strerror(errno));
    for (std::string line; std::getline(list, line);)
      if (!line.empty()) q.ins.push_back(line);
  }
  return q;
}

// Checks every input before anything is read or written: regular files of
// whole elements, all the same length. Returns the lanes (elements) per input.
uint32_t check_inputs(const Request& q) {
  if (q.ins.empty()) fail("no input files: give at least one IN array");
  if (q.ins.size() > 65535) fail("too many inputs (" + std::to_string(q.ins.size()) + "): at most 65535");
  const uint32_t esz = info(q.desc.dtype).bytes;
  off_t len = -1;
  std::string first;
  for (const auto& in : q.ins) {
    struct stat st;
    if (stat(in.c_str(), &st) != 0) fail("cannot read input " + in + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("input " + in + " is not a regular file");
    if (st.st_size % esz)
      fail("input " + in + " has " + std::to_string(st.st_size) + " bytes, not a whole number of " +
           name(q.desc.dtype) + " elements (" + std::to_string(esz) + " bytes each)");
    if (len >= 0 && st.st_size != len)
      fail("inputs differ in length: " + first + " has " + std::to_string(len) + " bytes, " + in + " has " +
           std::to_string(st.st_size));
    if (len < 0) {
      len = st.st_size;
      first = in;
    }
  }
  return uint32_t(len / esz);
}

struct Result {
  std::vector<uint8_t> out, flags;
};

// The INs added in their order (the arrival order, the contribution index), finalized.
Result reduce(const Request& q) {
  auto acc = make_accumulator(q.desc, *q.kernels);
  std::vector<uint8_t> buf(size_t(q.desc.lanes) * info(q.desc.dtype).bytes);
  for (size_t r = 0; r < q.ins.size(); ++r) {
    std::FILE* f = std::fopen(q.ins[r].c_str(), "rb");
    if (!f) fail("cannot read input " + q.ins[r] + ": " + std::strerror(errno));
    const size_t got = buf.empty() ? 0 : std::fread(buf.data(), 1, buf.size(), f);
    std::fclose(f);
    if (got != buf.size()) fail("short read on input " + q.ins[r] + ": did it change while being read?");
    acc->add(buf.data(), uint32_t(r));
  }
  Result res{std::vector<uint8_t>(size_t(q.desc.lanes) * info(q.desc.out).bytes), std::vector<uint8_t>(q.desc.lanes)};
  acc->finalize(res.out.data(), res.flags.data());
  return res;
}

void report_flags(const std::vector<uint8_t>& flags) {
  size_t n_ovf = 0, n_inv = 0, n_nan = 0;
  for (uint8_t fl : flags) {
    n_ovf += (fl & flag::OVERFLOW) != 0;
    n_inv += (fl & flag::INVALID) != 0;
    n_nan += (fl & flag::NAN_INPUT) != 0;
  }
  std::fprintf(stderr, "flags: overflow=%zu invalid=%zu nan_input=%zu\n", n_ovf, n_inv, n_nan);
}

int run(int argc, char** argv) {
  Request q = parse(argc, argv);
  q.desc.group = uint32_t(q.ins.size());
  q.desc.lanes = check_inputs(q);
  if (auto err = admission_error(q.desc, q.width)) fail(*err);
  app::check_writable(q.out);  // before the work, not after it
  const Result res = reduce(q);
  app::write_file(q.out, res.out.data(), res.out.size());
  report_flags(res.flags);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return cli::run_tool("prism-reduce", [&] { return run(argc, argv); });
}
