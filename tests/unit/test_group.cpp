// prism::Group (prism/group.hpp), the library object, over real TCP links on
// loopback (ranks as threads), found through a rendezvous store (a file
// store): for p = 1..9, every (algorithm, collective) pair kAlgorithms
// offers among the hosts, and auto, against independent references —
// KULISCH_FIXED bit for bit with one accumulator fed every rank's input (the
// switch's result), FP32_BINOMIAL through the binomial tree bit for bit with
// the accumulator's binomial order, broadcast and allgather the inputs'
// bytes; then the table's own completeness (every row predicts what it
// offers) and the refusals a user meets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "coll/algorithms.hpp"
#include "coll/blocks.hpp"
#include "coll_util.hpp"
#include "prism/group.hpp"
#include "rendezvous/file_store.hpp"

namespace prism {
namespace {

using Bytes = std::vector<uint8_t>;
using coll::test::make_input;

// A fresh file store path per group.
std::string store_path() {
  static int n = 0;
  return (std::filesystem::temp_directory_path() /
          ("prism_test_group_" + std::to_string(getpid()) + "_" + std::to_string(n++)))
      .string();
}

// Runs body(group) on p threads, each a rank of one group made from one file store.
template <class Fn>
std::vector<std::string> run_ranks(int p, Fn body, GroupOptions o = {}) {
  const std::string path = store_path();
  std::vector<std::string> errors(static_cast<size_t>(p));
  std::vector<std::thread> th;
  o.host_ip = "127.0.0.1";
  o.connect_timeout_ms = 20000;
  o.recv_timeout_ms = 30000;
  for (int r = 0; r < p; ++r)
    th.emplace_back([&, r] {
      try {
        Group g = Group::from_store(std::make_shared<rdv::FileStore>(path), r, p, o);
        body(g);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : th) t.join();
  std::filesystem::remove(path);
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors, const std::string& what) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << what << ": rank " << r;
}

// One accumulator of `policy` fed every rank's input, rank r as contribution (r - root) mod p.
Bytes reference(const coll::ReduceOp& op, Policy policy, const std::vector<Bytes>& in, size_t count, int root = 0) {
  const int p = int(in.size());
  auto acc = make_accumulator(OpDesc{op.dtype, op.out, policy, op.exceptions, uint32_t(p), uint32_t(count)});
  for (int r = 0; r < p; ++r) acc->add(in[size_t(r)].data(), uint32_t((r - root + p) % p));
  Bytes out(count * info(op.out).bytes), flags(count);
  acc->finalize(out.data(), flags.data());
  return out;
}

// What rank r must hold after collective c (count elements, root), from every rank's input.
Bytes expected(Collective c, const coll::ReduceOp& op, const std::vector<Bytes>& in, size_t count, int root, int r,
               Policy policy) {
  const int p = int(in.size());
  const size_t ib = info(op.dtype).bytes, ob = info(op.out).bytes;
  const size_t lo = coll::coll_block_start(count, p, r), hi = coll::coll_block_start(count, p, r + 1);
  switch (c) {
    case Collective::ALLREDUCE: return reference(op, policy, in, count, 0);
    case Collective::REDUCE: return r == root ? reference(op, policy, in, count, root) : Bytes();
    case Collective::REDUCE_SCATTER: {
      const Bytes all = reference(op, policy, in, count);
      return Bytes(all.begin() + lo * ob, all.begin() + hi * ob);
    }
    case Collective::BROADCAST: return in[size_t(root)];
    case Collective::ALLGATHER: {
      Bytes out(count * ib);
      for (int u = 0; u < p; ++u) {
        const size_t a = coll::coll_block_start(count, p, u), b = coll::coll_block_start(count, p, u + 1);
        std::memcpy(out.data() + a * ib, in[size_t(u)].data() + a * ib, (b - a) * ib);
      }
      return out;
    }
    case Collective::BARRIER: return Bytes();
  }
  return Bytes();
}

// Every host algorithm × every collective it offers (the table's), p = 1..9, KULISCH_FIXED bf16 -> fp32
// with specials, through Group::run: the reference's bits on every rank.
TEST(Group, EveryTablePairGivesTheReferenceBitsForP1To9) {
  const size_t count = 5003;  // no p of 2..9 divides it; two binomial blocks
  const coll::ReduceOp op{Format::BF16, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  size_t pairs = 0;
  for (int p = 1; p <= 9; ++p) {
    std::vector<Bytes> in;
    for (int r = 0; r < p; ++r) in.push_back(make_input(op.dtype, count, uint32_t(100 * p + r)));
    std::vector<std::vector<std::pair<std::string, Bytes>>> got(static_cast<size_t>(p));
    const auto errors = run_ranks(p, [&](Group& g) {
      const int r = g.rank();
      for (const coll::AlgorithmInfo& a : coll::algorithms()) {
        if (!a.hosts) continue;
        for (const Entry<Collective>& c : kCollectives) {
          const int root = a.roots == coll::Roots::ZERO || !coll::rooted(c.value) ? 0 : p - 1;
          if (!coll::runs(a.value, c.value, root)) continue;
          CollOptions o;
          o.op.out = op.out;
          o.op.out_given = true;
          o.algorithm = a.value;
          o.root = uint16_t(root);
          const coll::Call shape{c.value, nullptr, nullptr, nullptr, count, op, root, 0};
          const coll::ResultShape rs = coll::result_shape(shape, r, p);
          Bytes out(rs.elems * rs.esz, 0xEE);
          const uint8_t* x = in[size_t(r)].data();
          if (c.value == Collective::ALLGATHER) x += coll::coll_block_start(count, p, r) * info(op.dtype).bytes;
          if (c.value == Collective::BROADCAST && r != root) x = nullptr;
          const CollReport rep = g.run(c.value, x, out.empty() ? nullptr : out.data(), count, op.dtype, o);
          EXPECT_EQ(rep.algorithm, a.value);
          got[size_t(r)].push_back({std::string(a.name) + " " + c.name + " root " + std::to_string(root), out});
        }
      }
    });
    expect_no_errors(errors, "p = " + std::to_string(p));
    if (!errors[0].empty()) continue;
    // Replay the same walk to know each result's case.
    for (int r = 0; r < p; ++r) {
      size_t k = 0;
      for (const coll::AlgorithmInfo& a : coll::algorithms()) {
        if (!a.hosts) continue;
        for (const Entry<Collective>& c : kCollectives) {
          const int root = a.roots == coll::Roots::ZERO || !coll::rooted(c.value) ? 0 : p - 1;
          if (!coll::runs(a.value, c.value, root)) continue;
          ASSERT_LT(k, got[size_t(r)].size());
          const auto& [what, bytes] = got[size_t(r)][k++];
          EXPECT_TRUE(bytes == expected(c.value, op, in, count, root, r, Policy::KULISCH_FIXED))
              << what << ", p = " << p << ", rank " << r;
          if (r == 0) ++pairs;
        }
      }
    }
  }
  // Every host pair the table offers ran for every p (a row offering a collective its run function does not
  // run throws std::logic_error above).
  size_t offered = 0;
  for (const coll::AlgorithmInfo& a : coll::algorithms())
    for (const Entry<Collective>& c : kCollectives) offered += a.hosts && (a.runs & coll::bit(c.value)) ? 1 : 0;
  EXPECT_EQ(pairs, offered * 9);
}

// FP32_BINOMIAL through the binomial tree: the accumulator's binomial order over ranks relabelled from the root.
TEST(Group, BinomialTreeIsTheAccumulatorsFp32BinomialOrder) {
  const size_t count = 4099;
  const coll::ReduceOp op{Format::FP32, Format::FP32, Policy::FP32_BINOMIAL, Exceptions::IEEE};
  for (int p : {3, 6}) {
    std::vector<Bytes> in;
    for (int r = 0; r < p; ++r) in.push_back(make_input(op.dtype, count, uint32_t(7 * p + r), true));
    std::vector<Bytes> all(static_cast<size_t>(p)), red(static_cast<size_t>(p));
    const auto errors = run_ranks(p, [&](Group& g) {
      CollOptions o;
      o.op.policy = Policy::FP32_BINOMIAL;
      o.algorithm = Algorithm::BINOMIAL;
      Bytes out(count * 4);
      g.allreduce(in[size_t(g.rank())].data(), out.data(), count, Format::FP32, o);
      all[size_t(g.rank())] = out;
      o.root = uint16_t(p - 1);
      g.reduce(in[size_t(g.rank())].data(), out.data(), count, Format::FP32, o);
      red[size_t(g.rank())] = out;
    });
    expect_no_errors(errors, "p = " + std::to_string(p));
    for (int r = 0; r < p; ++r)
      EXPECT_TRUE(all[size_t(r)] == reference(op, Policy::FP32_BINOMIAL, in, count, 0)) << "p " << p << " rank " << r;
    EXPECT_TRUE(red[size_t(p - 1)] == reference(op, Policy::FP32_BINOMIAL, in, count, p - 1)) << "p " << p;
  }
}

// auto: the group measures itself once per op, every rank chooses the same algorithm, and the
// result is the exact reference whichever it chose; each collective gets a candidate that runs it.
TEST(Group, AutoChoosesTheSameOnEveryRankAndStaysExact) {
  const size_t count = 20000;
  const coll::ReduceOp op{Format::FP32, Format::FP32, Policy::KULISCH_FIXED, Exceptions::IEEE};
  const int p = 4;
  std::vector<Bytes> in;
  for (int r = 0; r < p; ++r) in.push_back(make_input(op.dtype, count, uint32_t(900 + r)));
  std::vector<std::vector<Algorithm>> chose(static_cast<size_t>(p));
  std::vector<Bytes> out(static_cast<size_t>(p), Bytes(count * 4));
  std::vector<std::string> cal(static_cast<size_t>(p));
  const auto errors = run_ranks(p, [&](Group& g) {
    const CollReport rep = g.allreduce(in[size_t(g.rank())].data(), out[size_t(g.rank())].data(), count, Format::FP32);
    chose[size_t(g.rank())].push_back(rep.algorithm);
    EXPECT_GT(rep.predicted_seconds, 0);
    cal[size_t(g.rank())] = g.calibration_json(Format::FP32);
    for (Collective c :
         {Collective::REDUCE_SCATTER, Collective::ALLGATHER, Collective::BROADCAST, Collective::BARRIER}) {
      const Prediction pr = g.choose(c, count, Format::FP32);
      EXPECT_TRUE(coll::runs(pr.algorithm, c, 0)) << name(c) << " " << name(pr.algorithm);
      chose[size_t(g.rank())].push_back(pr.algorithm);
    }
    EXPECT_TRUE(g.predictions(Collective::ALLREDUCE, count, Format::FP32).size() == 4);  // no switch: 4 hosts
  });
  expect_no_errors(errors, "auto");
  const Bytes want = reference(op, Policy::KULISCH_FIXED, in, count);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(out[size_t(r)] == want) << "rank " << r << " ran " << name(chose[size_t(r)][0]);
    EXPECT_EQ(chose[size_t(r)], chose[0]) << "rank " << r;
    EXPECT_EQ(cal[size_t(r)], cal[0]) << "every rank holds rank 0's calibration";
  }
  EXPECT_NE(cal[0].find("\"op\":\"fp32->fp32 kulisch ieee\""), std::string::npos) << cal[0];
}

// What a user gets wrong, refused with a message that says what to do; the group stays usable.
TEST(Group, RefusalsSayWhatIsWrong) {
  const auto errors = run_ranks(2, [&](Group& g) {
    const auto msg = [&](auto f) {
      try {
        f();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), Errc::INVALID_ARGUMENT) << e.what();
        return std::string(e.what());
      }
      return std::string("no error");
    };
    float x[8] = {}, y[8] = {};
    CollOptions o;
    o.algorithm = Algorithm::SWITCH;
    EXPECT_NE(msg([&] { g.allreduce(x, y, 8, Format::FP32, o); }).find("no switch"), std::string::npos);
    o.algorithm = Algorithm::RING;
    EXPECT_NE(msg([&] { g.reduce(x, y, 8, Format::FP32, o); }).find("reduce runs by"), std::string::npos);
    o.algorithm = Algorithm::RHD;
    o.root = 5;
    EXPECT_NE(msg([&] { g.reduce(x, y, 8, Format::FP32, o); }).find("not a rank"), std::string::npos);
    o.root = 0;
    o.op.out = Format::INT32;
    o.op.out_given = true;
    EXPECT_NE(msg([&] { g.allreduce(x, y, 8, Format::FP32, o); }).find("refused"), std::string::npos);
    o.op = {};
    EXPECT_NE(msg([&] { g.allreduce(x, nullptr, 8, Format::FP32, o); }).find("output buffer"), std::string::npos);
    // ...and the group still works.
    float one[2] = {1, 2}, sum[2] = {};
    g.allreduce(one, sum, 2, Format::FP32, o);
    EXPECT_EQ(sum[0], 2);
    EXPECT_EQ(sum[1], 4);
  });
  expect_no_errors(errors, "refusals");
}

// The table is whole: every row predicts each collective it offers (its cost model), and names itself.
TEST(Group, EveryAlgorithmRowHasAModelForWhatItOffers) {
  coll::CostParams c;
  c.alpha = 1e-5, c.beta = 1e-9, c.gamma = 1e-9, c.have_switch = true, c.switch_alpha = 1e-5, c.switch_beta = 1e-10;
  for (const coll::AlgorithmInfo& a : coll::algorithms()) {
    EXPECT_EQ(from_name<Algorithm>(a.name), a.value);
    EXPECT_TRUE(a.run != nullptr && a.predict != nullptr) << a.name << ": a row needs its run and predict functions";
    for (const Entry<Collective>& col : kCollectives) {
      if (!(a.runs & coll::bit(col.value))) continue;
      const auto t = coll::predict(a.value, coll::Problem{col.value, 4, 1000, 4, 0}, c);
      EXPECT_TRUE(t && *t >= 0) << a.name << " " << col.name;
    }
  }
}

}  // namespace
}  // namespace prism
