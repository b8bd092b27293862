#include "group/switch_path.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "coll/binomial.hpp"

namespace prism::group {

void SwitchPath::run(const coll::Call& c) {
  OpOptions o;
  o.out = c.op.out;
  o.out_given = true;
  o.policy = c.op.policy;
  o.transport = transport_;
  o.exceptions = c.op.exceptions;
  switch (c.coll) {
    case Collective::ALLREDUCE: last_ = comm_.allreduce(c.in, c.out, c.count, c.op.dtype, o); return;
    case Collective::REDUCE: last_ = comm_.reduce(c.in, c.out, c.count, c.op.dtype, uint16_t(c.root), o); return;
    case Collective::BARRIER: {  // nobody has the sum of one int32 before everybody sent theirs
      const int32_t one = 1;
      int32_t all = 0;
      OpOptions i;
      i.out = Format::INT32;
      i.out_given = true;
      last_ = comm_.allreduce(&one, &all, 1, Format::INT32, i);
      return;
    }
    case Collective::BROADCAST:
    case Collective::REDUCE_SCATTER:
    case Collective::ALLGATHER: break;
  }
  throw std::logic_error("switch: kAlgorithms offers a collective the switch path does not run");
}

void calibrate_switch(Communicator& comm, coll::Links& links, const coll::ReduceOp& op, coll::CostParams& c) {
  // The same sizes on every rank whatever its own input (an allgather's blocks differ, a broadcast's
  // other ranks have none): a 1 MiB vector of small integers in op.dtype (the switch's cost does not
  // follow the values), and one element.
  const size_t ib = info(op.dtype).bytes;
  const size_t big = std::max<size_t>(1, (size_t(1) << 20) / ib);
  std::vector<uint8_t> in(big * ib), out(big * info(op.out).bytes);
  for (size_t i = 0; i < big; ++i) store_bits(op.dtype, in.data() + i * ib, encode_double(op.dtype, double(i % 7) - 3));
  OpOptions o;
  o.out = op.out;
  o.out_given = true;
  o.policy = op.policy;
  o.exceptions = op.exceptions;
  const auto least = [&](size_t n) {
    double best = 1e300;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      comm.allreduce(in.data(), out.data(), n, op.dtype, o);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double small = least(1), large = least(big);
  double v[2] = {small, big > 1 ? std::max(0.0, (large - small) / double((big - 1) * ib)) : 0.0};
  coll::binomial_broadcast(links, v, sizeof v, 0);
  c.have_switch = true;
  c.switch_alpha = v[0];
  c.switch_beta = v[1];
}

}  // namespace prism::group
