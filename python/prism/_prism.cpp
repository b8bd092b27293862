// prism._prism: libprism's Group for Python (pybind11). A group is made from a
// rendezvous store (a URL, or any Python object with set/get/add/check: the
// torch backend passes torch's own store) and runs every collective on
// buffers given by address and element count, with the GIL released, so a
// framework's tensors are reduced in place without a copy. The Python
// packages `prism` and `prism_torch` (docs/TORCH.md) are built on it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "arith/op.hpp"
#include "coll/algorithms.hpp"
#include "coll/calibrate.hpp"
#include "coll/call.hpp"
#include "coll/cost_model.hpp"
#include "format/format.hpp"
#include "group/same_type_sum.hpp"
#include "prism/group.hpp"
#include "rendezvous/callback_store.hpp"
#include "util/closed_set.hpp"

namespace py = pybind11;

namespace prism::python {
namespace {

template <class E>
E named(const char* what, const std::string& v) {
  if (const auto e = from_name<E>(v)) return *e;
  throw std::invalid_argument(std::string(what) + " '" + v + "': not one of " + choices<E>(", "));
}

Algorithm algorithm_named(const std::string& v) {
  return v == "auto" ? Algorithm::AUTO : named<Algorithm>("algorithm", v);
}

// A Python object's set/get/add/check as a store. Its methods run with the GIL taken (the group calls
// them from whichever thread it runs on); a Python exception becomes the StoreError that names the key.
std::shared_ptr<rdv::Store> python_store(py::object o) {
  std::shared_ptr<py::object> obj(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
  const auto call = [obj](const char* method, auto&&... args) {
    py::gil_scoped_acquire gil;
    try {
      return obj->attr(method)(args...);
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
  };
  rdv::StoreCallbacks cb;
  cb.set = [call](std::string_view key, std::span<const uint8_t> value) {
    call("set", std::string(key), py::bytes(reinterpret_cast<const char*>(value.data()), value.size()));
  };
  cb.get = [call](std::string_view key, rdv::Millis timeout) -> std::optional<rdv::Bytes> {
    py::gil_scoped_acquire gil;
    const py::object r = call("get", std::string(key), int64_t(timeout.count()));
    if (r.is_none()) return std::nullopt;
    const std::string s = r.cast<std::string>();
    return rdv::Bytes(s.begin(), s.end());
  };
  cb.add = [call](std::string_view key, int64_t delta) {
    py::gil_scoped_acquire gil;
    return call("add", std::string(key), delta).template cast<int64_t>();
  };
  cb.check = [call](std::string_view key) {
    py::gil_scoped_acquire gil;
    return call("check", std::string(key)).template cast<bool>();
  };
  return std::make_shared<rdv::CallbackStore>(std::move(cb));
}

// A group and the lock that keeps it to one thread at a time.
class PyGroup {
 public:
  PyGroup(py::object store, int rank, int size, const std::string& algorithm,
          const std::vector<std::string>& candidates, const std::string& name, const std::string& switch_address,
          uint32_t pool, const std::string& host_ip, const std::string& calibration, uint32_t connect_timeout_ms,
          uint32_t recv_timeout_ms) {
    GroupOptions o;
    o.algorithm = algorithm_named(algorithm);
    for (const std::string& c : candidates) o.candidates.push_back(algorithm_named(c));
    o.name = name;
    o.switch_address = switch_address;
    o.pool = pool;
    o.host_ip = host_ip;
    o.calibration = calibration;
    o.connect_timeout_ms = connect_timeout_ms;
    o.recv_timeout_ms = recv_timeout_ms;
    std::shared_ptr<rdv::Store> s = py::isinstance<py::str>(store)
                                        ? rdv::store_from_url(store.cast<std::string>(), rank)
                                        : python_store(std::move(store));
    py::gil_scoped_release nogil;
    group_ = std::make_unique<Group>(Group::from_store(std::move(s), rank, size, o));
  }

  Group& group() {
    if (!group_) throw std::runtime_error("this PRISM group is closed");
    return *group_;
  }

  // Leaves the switch's pooled job and closes the links now (the destructor does it too).
  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    group_.reset();
  }

  py::dict run(const std::string& collective, uintptr_t in, uintptr_t out, size_t count, const std::string& dtype,
               const std::string& policy, const std::optional<std::string>& out_format,
               const std::optional<std::string>& algorithm, int root, bool same_type) {
    const Collective c = named<Collective>("collective", collective);
    const Format f = named<Format>("dtype", dtype);
    CollOptions o;
    o.op.policy = named<Policy>("policy", policy);
    if (out_format) {
      o.op.out = named<Format>("out", *out_format);
      o.op.out_given = true;
    }
    if (algorithm) o.algorithm = algorithm_named(*algorithm);
    if (root < 0 || root > 0xffff) throw std::invalid_argument("root " + std::to_string(root) + ": not a rank");
    o.root = uint16_t(root);
    const auto* ip = reinterpret_cast<const void*>(in);
    auto* op = reinterpret_cast<void*>(out);
    CollReport r;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      Group& g = group();
      if (same_type && (c == Collective::ALLREDUCE || c == Collective::REDUCE || c == Collective::REDUCE_SCATTER)) {
        const size_t p = size_t(g.size()), me = size_t(g.rank());
        const size_t mine = c == Collective::ALLREDUCE ? count
                            : c == Collective::REDUCE  ? (g.rank() == root ? count : 0)
                                                       : count / p + (me < count % p);
        r = same_type_sum(g, c, ip, mine ? op : nullptr, count, mine, f, o);
      } else {
        r = g.run(c, ip, op, count, f, o);
      }
    }
    py::dict d;
    d["algorithm"] = algorithm_name(r.algorithm);
    d["segments"] = r.segments;
    d["overflow"] = r.overflow;
    d["invalid"] = r.invalid;
    d["nan_input"] = r.nan_input;
    d["seconds"] = r.seconds;
    d["predicted_seconds"] = r.predicted_seconds;
    return d;
  }

  // What AUTO would run (measuring the group first when it has no calibration: every rank calls it).
  py::tuple choose(const std::string& collective, size_t count, const std::string& dtype, const std::string& policy) {
    CollOptions o;
    o.op.policy = named<Policy>("policy", policy);
    const Collective c = named<Collective>("collective", collective);
    const Format f = named<Format>("dtype", dtype);
    Prediction p;
    {
      py::gil_scoped_release nogil;
      std::lock_guard lock(mu_);
      p = group().choose(c, count, f, o);
    }
    return py::make_tuple(algorithm_name(p.algorithm), p.seconds);
  }

 private:
  std::mutex mu_;
  std::unique_ptr<Group> group_;
};

}  // namespace
}  // namespace prism::python

PYBIND11_MODULE(_prism, m) {
  using namespace prism;
  using prism::python::PyGroup;
  m.doc() = "libprism's Group: every collective, exact, through the PRISM switch or among the hosts";
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<rdv::StoreError> store_error(m, "StoreError", PyExc_RuntimeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      error(e.what());
    } catch (const rdv::StoreError& e) {
      store_error(e.what());
    } catch (const std::overflow_error& e) {
      PyErr_SetString(PyExc_OverflowError, e.what());
    }
  });
  py::class_<PyGroup>(m, "Group")
      .def(py::init<py::object, int, int, const std::string&, const std::vector<std::string>&, const std::string&,
                    const std::string&, uint32_t, const std::string&, const std::string&, uint32_t, uint32_t>(),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::kw_only(), py::arg("algorithm") = "auto",
           py::arg("candidates") = std::vector<std::string>{}, py::arg("name") = "", py::arg("switch") = "",
           py::arg("pool") = 0, py::arg("host_ip") = "", py::arg("calibration") = "",
           py::arg("connect_timeout_ms") = 60000, py::arg("recv_timeout_ms") = 60000)
      .def_property_readonly("rank", [](PyGroup& g) { return g.group().rank(); })
      .def_property_readonly("size", [](PyGroup& g) { return g.group().size(); })
      .def_property_readonly("has_switch", [](PyGroup& g) { return g.group().has_switch(); })
      .def("run", &PyGroup::run, py::arg("collective"), py::arg("in_addr"), py::arg("out_addr"), py::arg("count"),
           py::arg("dtype"), py::kw_only(), py::arg("policy") = "kulisch", py::arg("out") = py::none(),
           py::arg("algorithm") = py::none(), py::arg("root") = 0, py::arg("same_type") = false)
      .def("choose", &PyGroup::choose, py::arg("collective"), py::arg("count"), py::arg("dtype"),
           py::arg("policy") = "kulisch")
      .def("close", &PyGroup::close);
  m.def(
      "digest",
      [](uintptr_t addr, size_t nbytes) {
        XXH64_hash_t h;
        {
          py::gil_scoped_release nogil;
          h = XXH3_64bits(reinterpret_cast<const void*>(addr), nbytes);
        }
        char s[17];
        std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
        return std::string(s);
      },
      py::arg("addr"), py::arg("nbytes"), "XXH3-64 of nbytes at addr, as 16 hex digits");
  m.def(
      "runs",
      [](const std::string& a, const std::string& c, int root) {
        return coll::runs(prism::python::algorithm_named(a), prism::python::named<Collective>("collective", c), root);
      },
      py::arg("algorithm"), py::arg("collective"), py::arg("root") = 0,
      "whether `algorithm` runs `collective` at `root` (the switch's reduce: any root; the chain: rank 0's)");
  m.def(
      "predict",
      [](const std::string& calibration, const std::string& collective, int p, size_t count, size_t elem_bytes,
         const std::vector<std::string>& algorithms) {
        coll::Problem pr;
        pr.coll = prism::python::named<Collective>("collective", collective);
        pr.p = p;
        pr.count = count;
        pr.elem_bytes = elem_bytes;
        std::vector<Algorithm> allowed;
        for (const std::string& a : algorithms) allowed.push_back(prism::python::algorithm_named(a));
        const coll::CostParams c = coll::calibration_from_json(calibration).params;
        py::dict out;
        for (const coll::Choice& ch : coll::candidates(pr, c, allowed)) out[algorithm_name(ch.algo)] = ch.seconds;
        const coll::Choice best = coll::choose(pr, c, allowed);
        out["auto"] = algorithm_name(best.algo);
        return out;
      },
      py::arg("calibration"), py::arg("collective"), py::arg("p"), py::arg("count"), py::arg("elem_bytes") = 4,
      py::arg("algorithms") = std::vector<std::string>{"binomial", "chain", "rhd", "ring"},
      "the cost model's predicted seconds per algorithm from a calibration file's text, and auto's choice "
      "('auto'): tools/auto_replay.py replays auto on recorded measurements");
  m.def(
      "format_bytes", [](const std::string& f) { return format_bytes(prism::python::named<Format>("format", f)); },
      py::arg("format"));
}
