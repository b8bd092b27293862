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
#include "output_file.hpp"

using namespace prism;

namespace {

constexpr int kUsageError = 2;
using cli::fail;

const char* kUsage =
    "usage: prism-reduce --dtype D --policy P [--out-dtype O] [--exceptions ieee|saturate]\n"
    "                    [--width BITS] [--kernels auto|portable|avx2] -o OUT IN...\n"
    "  D, O: fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32 (O: fp32, or int32 for integer D)\n"
    "  P: fp32_arrival kulisch fp32_binomial\n"
    "  Each IN is a raw little-endian array of D; @LIST reads IN names from LIST, one per line.\n";

const char* kFormatNames = "fp32 fp16 bf16 e4m3fn e4m3fnuz e5m2 e5m2fnuz int8 int32";

struct Args {
  std::string dtype, policy, out_dtype, exceptions = "ieee", width, kernels = "auto", out;
  std::vector<std::string> ins;
};

Args parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
  const cli::Args c(argc, argv, 1,
                    {"--dtype", "--policy", "--out-dtype", "--exceptions", "--width", "--kernels", "-o", "--output"},
                    {});
  Args a;
  a.dtype = c.str("--dtype");
  a.policy = c.str("--policy");
  a.out_dtype = c.str("--out-dtype");
  a.exceptions = c.str("--exceptions", "ieee");
  a.width = c.str("--width");
  a.kernels = c.str("--kernels", "auto");
  a.out = c.str("-o", c.str("--output"));
  for (const auto& s : c.positional) {
    if (s[0] != '@') {
      a.ins.push_back(s);
      continue;
    }
    std::ifstream list(s.substr(1));
    if (!list) fail("cannot read the input list " + s.substr(1) + ": " + std::strerror(errno));
    for (std::string line; std::getline(list, line);)
      if (!line.empty()) a.ins.push_back(line);
  }
  return a;
}

Format parse_format(const std::string& what, const std::string& v) {
  if (auto f = format_from_name(v)) return *f;
  fail("unknown " + what + " '" + v + "': use one of " + kFormatNames);
}

int run(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (a.dtype.empty()) fail("missing --dtype: give the input format (" + std::string(kFormatNames) + ")");
  if (a.policy.empty()) fail("missing --policy: use fp32_arrival, kulisch or fp32_binomial");
  if (a.out.empty()) fail("missing -o OUT: name the file to write the result to");
  OpDesc d;
  d.dtype = parse_format("dtype", a.dtype);
  const auto pol = policy_from_name(a.policy);
  if (!pol) fail("unknown policy '" + a.policy + "': use fp32_arrival, kulisch or fp32_binomial");
  d.policy = *pol;
  d.out =
      a.out_dtype.empty() ? (is_float(d.dtype) ? Format::FP32 : Format::INT32) : parse_format("out dtype", a.out_dtype);
  const auto ex = exceptions_from_name(a.exceptions);
  if (!ex) fail("unknown exceptions policy '" + a.exceptions + "': use ieee or saturate");
  d.exceptions = *ex;
  int width = kMaxWidth;
  if (!a.width.empty()) {
    char* end = nullptr;
    const long w = std::strtol(a.width.c_str(), &end, 10);
    if (!end || *end || w < 1 || w > 4096) fail("bad --width '" + a.width + "': give a number of bits, 1..4096");
    width = int(w);
  }
  const Kernels* k = &best_kernels();
  if (a.kernels == "portable")
    k = &portable_kernels();
  else if (a.kernels == "avx2") {
    k = avx2_kernels();
    if (!k) fail("--kernels avx2: this CPU lacks AVX2/FMA/F16C; use portable or auto");
  } else if (a.kernels != "auto")
    fail("unknown --kernels '" + a.kernels + "': use auto, portable or avx2");

  if (a.ins.empty()) fail("no input files: give at least one IN array");
  if (a.ins.size() > 65535) fail("too many inputs (" + std::to_string(a.ins.size()) + "): at most 65535");
  d.group = uint32_t(a.ins.size());

  // Check every input before writing anything.
  const uint32_t esz = info(d.dtype).bytes;
  off_t len = -1;
  std::string first;
  for (const auto& in : a.ins) {
    struct stat st;
    if (stat(in.c_str(), &st) != 0) fail("cannot read input " + in + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("input " + in + " is not a regular file");
    if (st.st_size % esz)
      fail("input " + in + " has " + std::to_string(st.st_size) + " bytes, not a whole number of " + a.dtype +
           " elements (" + std::to_string(esz) + " bytes each)");
    if (len >= 0 && st.st_size != len)
      fail("inputs differ in length: " + first + " has " + std::to_string(len) + " bytes, " + in + " has " +
           std::to_string(st.st_size));
    if (len < 0) {
      len = st.st_size;
      first = in;
    }
  }
  d.lanes = uint32_t(len / esz);
  if (auto err = admission_error(d, width)) fail(*err);
  app::check_writable(a.out);  // before the work, not after it

  auto acc = make_accumulator(d, *k);
  std::vector<uint8_t> buf(static_cast<size_t>(len));
  for (size_t r = 0; r < a.ins.size(); ++r) {
    std::FILE* f = std::fopen(a.ins[r].c_str(), "rb");
    if (!f) fail("cannot read input " + a.ins[r] + ": " + std::strerror(errno));
    const size_t got = buf.empty() ? 0 : std::fread(buf.data(), 1, buf.size(), f);
    std::fclose(f);
    if (got != buf.size()) fail("short read on input " + a.ins[r] + ": did it change while being read?");
    acc->add(buf.data(), uint32_t(r));
  }
  std::vector<uint8_t> out(size_t(d.lanes) * info(d.out).bytes), flags(d.lanes);
  acc->finalize(out.data(), flags.data());

  app::write_file(a.out, out.data(), out.size());
  size_t n_ovf = 0, n_inv = 0, n_nan = 0;
  for (uint8_t fl : flags) {
    n_ovf += (fl & flag::OVERFLOW) != 0;
    n_inv += (fl & flag::INVALID) != 0;
    n_nan += (fl & flag::NAN_INPUT) != 0;
  }
  std::fprintf(stderr, "flags: overflow=%zu invalid=%zu nan_input=%zu\n", n_ovf, n_inv, n_nan);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const cli::Error& e) {
    std::fprintf(stderr, "prism-reduce: %s\n", e.msg.c_str());
    return kUsageError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prism-reduce: %s\n", e.what());
    return kUsageError;
  }
}
