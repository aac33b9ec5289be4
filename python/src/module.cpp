// conv3djit._ext: the public C++ API (include/conv3djit) for Python. Thin by design: it parses
// arguments into Conv3dDesc (desc.cpp) and EngineOptions, checks arrays (tensors.cpp), binds the
// results (results.cpp) and calls the library; the conveniences (allocating outputs, choosing
// streams), the exception classes and the PyTorch integration are Python (python/conv3djit).
// This file: the error translation, the Engine and the module itself; host.cpp the CPU reference.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include <conv3djit/conv3d.hpp>
#include <conv3djit/engine.hpp>
#include <conv3djit/error.hpp>

#include "bindings.hpp"
#include "tensors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace conv3djit::python {

namespace {

// conv3djit._errors.BY_CATEGORY: the exception class of each category's name. Kept (never released)
// for the life of the interpreter, like the module itself.
PyObject* error_classes = nullptr;

void translate(const std::exception_ptr& error, void*) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    PyObject* cls = PyDict_GetItemString(error_classes, to_string(e.category()));
    PyErr_SetString(cls ? cls : PyExc_RuntimeError, e.what());
  }
}

void check_or_throw(const Conv3dDesc& desc, const CallArrays& arrays, bool out_double = false) {
  const Validation v = check_arrays(desc, arrays, out_double);
  if (!v) throw Error(v.category, v.message);
}

// Engine::run (with weights prepared ahead, or null), or with `reference` run_reference (a float64
// out), on checked arrays.
void on_arrays(Engine& e, bool reference, const Conv3dDesc& desc, const InArray& input, const InArray& weight,
               const std::optional<InArray>& bias, const OutArray& out, const std::optional<InArray>& residual,
               nb::handle stream, const PreparedWeights* prepared) {
  const Stream s = stream_of(stream);
  const CallArrays arrays = arrays_of(input, weight, given(bias), &out, given(residual));
  check_or_throw(desc, arrays, reference);
  // The arrays' own shapes were checked against desc: the allocation check would only repeat
  // that, and PyTorch's allocator reports pieces smaller than a tensor.
  Conv3dTensors t = tensors_of(arrays);
  t.shapes_checked = true;
  t.prepared_weights = prepared;
  nb::gil_scoped_release release;
  if (reference) {
    e.run_reference(desc, t, s);
  } else {
    e.run(desc, t, s);
  }
}

// Engine(max_candidates=, tune_budget_ms=, tune_runs=) as TuneOptions, each checked (a NaN budget is refused).
TuneOptions tune_options_of(int max_candidates, double budget_ms, int runs) {
  if (max_candidates < 1) invalid(fmt::format("max_candidates = {}: expected an int >= 1", max_candidates));
  if (!(budget_ms > 0)) invalid(fmt::format("tune_budget_ms = {}: expected a number > 0", budget_ms));
  if (runs < 1) invalid(fmt::format("tune_runs = {}: expected an int >= 1", runs));
  TuneOptions t;
  t.max_candidates = max_candidates;
  t.budget_ms = budget_ms;
  t.runs = runs;
  return t;
}

void bind_engine(nb::module_& m) {
  using Release = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<PreparedWeights>(m, "PreparedWeights",
                              "Weights rewritten once for one description's kernel on one device (Engine.prepare_weights). "
                              "Pass it to run() with the weight it was made from; prepare again after the weight changes. "
                              "Holds device memory until it is deleted.")
      .def_prop_ro("valid", &PreparedWeights::valid, "Made by prepare_weights.")
      .def_prop_ro("kernel", &PreparedWeights::kernel,
                   "The kernel that rewrote the weights; '' where the description's kernel reads them as they are.")
      .def_prop_ro("bytes", &PreparedWeights::bytes, "Device memory it holds.");
  nb::class_<Engine>(m, "Engine",
                     "The kernel caches and settings behind conv3d(). default_engine() is the process-wide one; a "
                     "separate Engine gives a separate cache folder, limit, compile mode or tuning.")
      .def("__init__",
           [](Engine* self, const std::string& cache_dir, uint64_t cache_limit_bytes, bool disk_cache,
              const std::string& kernel_config, const std::optional<std::string>& compile_mode,
              bool trust_shared_cache, bool check_allocations, const std::optional<std::string>& tune_mode,
              int max_candidates, double tune_budget_ms, int tune_runs) {
             EngineOptions o;
             o.cache_dir = cache_dir;
             o.cache_limit_bytes = cache_limit_bytes;
             o.disk_cache = disk_cache;
             o.kernel_config = kernel_config;
             o.compile_mode = compile_mode_of(compile_mode);
             o.trust_shared_cache = trust_shared_cache;
             o.check_allocations = check_allocations;
             o.tune_mode = tune_mode_of(tune_mode);
             o.tuning = tune_options_of(max_candidates, tune_budget_ms, tune_runs);
             new (self) Engine(o);
           },
           nb::kw_only(), "cache_dir"_a = "", "cache_limit_bytes"_a = EngineOptions{}.cache_limit_bytes,
           "disk_cache"_a = true, "kernel_config"_a = "", "compile_mode"_a.none() = nb::none(),
           "trust_shared_cache"_a = false, "check_allocations"_a = true, "tune_mode"_a.none() = nb::none(),
           "max_candidates"_a = TuneOptions{}.max_candidates, "tune_budget_ms"_a = TuneOptions{}.budget_ms,
           "tune_runs"_a = TuneOptions{}.runs,
           "compile_mode: None ($CONV3DJIT_COMPILE, else 'allow'), 'allow', 'warn' or 'never'. tune_mode: None "
           "($CONV3DJIT_TUNE, else 'off'), 'off' (tuned records are used, nothing is timed) or 'first_use' (a "
           "description's first run without a record tunes it). max_candidates, tune_budget_ms, tune_runs: how "
           "tune() measures: plans timed per description, wall time per description (compiles included), timed "
           "launches per candidate.")
      .def("prepare_weights",
           [](Engine& e, const Conv3dDesc& desc, const InArray& weight, nb::handle stream) {
             const Stream s = stream_of(stream);
             CallArrays arrays;
             arrays.weight = &weight;
             check_or_throw(desc, arrays);
             nb::gil_scoped_release release;
             return e.prepare_weights(desc, weight.data(), s);
           },
           "desc"_a, "weight"_a.noconvert(), nb::kw_only(), "stream"_a.none() = nb::none(),
           "The weight (desc's weight shape, dtype and layout) rewritten once into the layout desc's kernel reads on "
           "`stream`'s device, for run(..., prepared_weights=) calls that then skip that step (explain() lists it as "
           "the 'weights' step). Synchronizes the stream. Raises InvalidArgument while the stream captures a graph.")
      .def("run",
           [](Engine& e, const Conv3dDesc& desc, const InArray& input, const InArray& weight,
              const std::optional<InArray>& bias, const OutArray& out, const std::optional<InArray>& residual,
              nb::handle stream, const PreparedWeights* prepared) {
             on_arrays(e, false, desc, input, weight, bias, out, residual, stream, prepared);
           },
           "desc"_a, "input"_a.noconvert(), "weight"_a.noconvert(), "bias"_a.noconvert().none() = nb::none(),
           nb::kw_only(), "out"_a.noconvert(), "residual"_a.noconvert().none() = nb::none(),
           "stream"_a.none() = nb::none(), "prepared_weights"_a.none() = nb::none(),
           "Runs desc on CUDA arrays, asynchronously on `stream` (None: the legacy default stream). Shapes are "
           "PyTorch's; strides desc.layout's (contiguous, or channels_last_3d for 'ndhwc'); input, weight and bias "
           "of desc.dtype, out and residual of desc.output_dtype. residual: the array of the output's shape that "
           "desc.residual adds (it may be out itself). prepared_weights: prepare_weights(desc, weight)'s result, "
           "read instead of rewriting the weight. Arrays are checked first; a wrong call raises and writes nothing.")
      .def("run_pointers",
           [](Engine& e, const Conv3dDesc& desc, uintptr_t input, uintptr_t weight, uintptr_t bias, uintptr_t out,
              uintptr_t stream, uintptr_t residual, const PreparedWeights* prepared) {
             Conv3dTensors t;
             t.input = reinterpret_cast<const void*>(input);
             t.weight = reinterpret_cast<const void*>(weight);
             t.bias = reinterpret_cast<const void*>(bias);
             t.output = reinterpret_cast<void*>(out);
             t.residual = reinterpret_cast<const void*>(residual);
             t.prepared_weights = prepared;
             e.run(desc, t, reinterpret_cast<Stream>(stream));
           },
           "desc"_a, "input"_a, "weight"_a, "bias"_a, "out"_a, "stream"_a, nb::kw_only(), "residual"_a = 0,
           "prepared_weights"_a.none() = nb::none(), Release(),
           "As run(), on raw device pointers (ints; bias 0 when desc.bias is False, residual 0 when desc.residual "
           "is False) and a CUstream handle, without array checks: the caller guarantees dense tensors in desc.layout of the "
           "description's shapes.")
      .def("run_reference",
           [](Engine& e, const Conv3dDesc& desc, const InArray& input, const InArray& weight,
              const std::optional<InArray>& bias, const OutArray& out, const std::optional<InArray>& residual,
              nb::handle stream) { on_arrays(e, true, desc, input, weight, bias, out, residual, stream, nullptr); },
           "desc"_a, "input"_a.noconvert(), "weight"_a.noconvert(), "bias"_a.noconvert().none() = nb::none(),
           nb::kw_only(), "out"_a.noconvert(), "residual"_a.noconvert().none() = nb::none(),
           "stream"_a.none() = nb::none(),
           "The float64 reference on the GPU: like run(), out is a float64 array in desc.layout's memory order (the "
           "residual of desc.output_dtype).")
      .def("precompile", &Engine::precompile, "desc"_a, "arch"_a = "", Release(),
           "Compiles (or finds in the disk cache) every kernel desc needs on `arch` ('sm_90', ...; empty: the "
           "current device's). Needs no GPU when arch is given.")
      .def("kernel_for", &Engine::kernel_for, "desc"_a, "arch"_a = "", Release())
      .def("explain", &Engine::explain, "desc"_a, "arch"_a = "", "candidates"_a = 0, Release(),
           "Which kernel desc runs on `arch` (empty: the current device's, where a tuned record counts) and why: "
           "its launch, the kernels around it, what decided, why each family before it passed, and up to "
           "`candidates` configurations tune() would time. Compiles nothing; needs no GPU when arch is given.")
      .def("resources",
           [](Engine& e, const Conv3dDesc& desc, nb::handle stream, bool aligned_input) {
             const Stream s = stream_of(stream);
             nb::gil_scoped_release release;
             return e.resources(desc, s, aligned_input);
           },
           "desc"_a, "stream"_a.none() = nb::none(), "aligned_input"_a = true)
      .def("tune",
           [](Engine& e, const Conv3dDesc& desc, nb::handle stream, bool retune) {
             const Stream s = stream_of(stream);
             nb::gil_scoped_release release;
             return e.tune(desc, s, retune);
           },
           "desc"_a, "stream"_a.none() = nb::none(), "retune"_a = false,
           "Times the planner's best few plans for desc on `stream`'s device (None: the legacy default stream), on "
           "scratch tensors and a stream of its own, checks each against float64 on sampled outputs, and keeps "
           "the fastest accurate one as a record in the disk cache, which every later plan of desc on such a "
           "device takes (in any process that shares or imports the cache). With a record already there it "
           "answers from it (from_record) unless `retune`. Returns a TuneResult (winner -1 and nothing stored "
           "when no candidate is accurate). Raises InvalidArgument while the stream captures a CUDA graph or with "
           "a kernel_config.")
      .def("stats", &Engine::stats)
      .def("cache_entries", &Engine::cache_entries, Release())
      .def("cache_info", &Engine::cache_info, Release())
      .def("cache_clear", &Engine::cache_clear, Release(), "Removes every entry; returns how many.")
      .def("cache_export", &Engine::cache_export, "archive_path"_a, Release(),
           "Writes every valid entry into one archive file; returns the entry count.")
      .def("cache_import", &Engine::cache_import, "archive_path"_a, Release(),
           "Verifies every entry of an archive, then adds them; returns the entry count.");

  m.def("default_engine", &Engine::global, nb::rv_policy::reference, "The process-wide Engine conv3d() uses.");
}

}  // namespace
}  // namespace conv3djit::python

NB_MODULE(_ext, m) {
  using namespace conv3djit;
  using namespace conv3djit::python;
  m.doc() = "conv3djit's C++ API; use the conv3djit package, which wraps it.";
  // Descriptions live on in caches that PyTorch (torch.compile, autograd graphs) does not free
  // before the interpreter exits; nanobind would report each as a leak then.
  nb::set_leak_warnings(false);
  error_classes = nb::object(nb::module_::import_("conv3djit._errors").attr("BY_CATEGORY")).release().ptr();
  nb::register_exception_translator(&translate);

  bind_desc(m);
  bind_results(m);
  bind_engine(m);
  bind_host(m);

  m.def("nvrtc_version", &nvrtc_version);
  m.def("supported_archs", &supported_archs, "The archs this NVRTC compiles for: 'sm_75', ..., 'sm_90a', ...");
  m.def("check_arch", &check_arch, "arch"_a,
        "Raises InvalidArgument for a malformed arch name, Unsupported for one this NVRTC cannot compile for.");
  m.def("current_device", &current_device, "The device of the current context (or device 0); None without one.");
  m.def("version", []() { return std::string(conv3djit::version()); });
}
