// conv3djit._ext: the public C++ API (include/conv3djit) for Python. Thin by design: it parses
// arguments into Conv3dDesc and EngineOptions, checks arrays (tensors.cpp) and calls the library;
// the conveniences (allocating outputs, choosing streams), the exception classes and the PyTorch
// integration are Python (python/conv3djit).
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <conv3djit/conv3d.hpp>
#include <conv3djit/engine.hpp>
#include <conv3djit/error.hpp>
#include <conv3djit/reference.hpp>

#include "tensors.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace conv3djit::python {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCategory::InvalidArgument, message); }

// One axis value from an int-like object (int, numpy integer, ...), or nullopt.
std::optional<int64_t> index_of(nb::handle value) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) return std::nullopt;
  nb::object number = nb::steal(PyNumber_Index(value.ptr()));
  if (!number.is_valid()) throw nb::python_error();
  return nb::cast<int64_t>(number);
}

// `count` ints from a sequence (not a string), or nullopt.
std::optional<std::vector<int64_t>> ints_of(nb::handle value, size_t count) {
  if (PyUnicode_Check(value.ptr()) || !PySequence_Check(value.ptr())) return std::nullopt;
  nb::sequence items = nb::borrow<nb::sequence>(value);
  if (nb::len(items) != count) return std::nullopt;
  std::vector<int64_t> out;
  for (nb::handle item : items) {
    std::optional<int64_t> v = index_of(item);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::string repr_text(nb::handle value) { return nb::repr(value).c_str(); }

// nn.Conv3d's convention: one int for all three axes, or three ints (D, H, W).
Dims3 dims3_of(nb::handle value, const char* field) {
  if (std::optional<int64_t> all = index_of(value)) return Dims3(*all);
  if (auto three = ints_of(value, 3)) return Dims3((*three)[0], (*three)[1], (*three)[2]);
  invalid(fmt::format("{} = {}: expected an int or a sequence of 3 ints", field, repr_text(value)));
}

Padding padding_of(nb::handle value) {
  if (PyUnicode_Check(value.ptr())) {
    const std::string word = nb::cast<std::string>(value);
    if (word == "same") return Padding::same();
    if (word == "valid") return Padding::valid();
    invalid(fmt::format("padding = '{}': expected an int, 3 ints, 'same' or 'valid'", word));
  }
  return Padding(dims3_of(value, "padding"));
}

Precision precision_of(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "tf32") return Precision::Tf32;
  invalid(fmt::format("precision = '{}': expected 'fp32' or 'tf32'", name));
}

const char* precision_name(Precision p) { return p == Precision::Tf32 ? "tf32" : "fp32"; }

// Element types and layouts by name: a new one is a line in each pair of functions.
DataType dtype_of(const std::string& name) {
  if (name == "float32") return DataType::Float32;
  throw Error(ErrorCategory::Unsupported, fmt::format("dtype = '{}': conv3djit serves 'float32'", name));
}
const char* dtype_name(DataType) { return "float32"; }
Layout layout_of(const std::string& name) {
  if (name == "ncdhw") return Layout::NCDHW;
  throw Error(ErrorCategory::Unsupported, fmt::format("layout = '{}': conv3djit serves 'ncdhw'", name));
}
const char* layout_name(Layout) { return "ncdhw"; }

std::optional<CompileMode> compile_mode_of(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  if (*name == "allow") return CompileMode::Allow;
  if (*name == "warn") return CompileMode::Warn;
  if (*name == "never") return CompileMode::Never;
  invalid(fmt::format("compile_mode = '{}': expected None, 'allow', 'warn' or 'never'", *name));
}

nb::tuple tuple_of(Dims3 d) { return nb::make_tuple(d.d, d.h, d.w); }

nb::object padding_value(const Padding& p) {
  switch (p.mode) {
    case Padding::Mode::Same: return nb::str("same");
    case Padding::Mode::Valid: return nb::str("valid");
    case Padding::Mode::Explicit: break;
  }
  return tuple_of(p.amount);
}

Conv3dDesc make_desc(nb::handle input, nb::handle out_channels, nb::handle kernel_size, nb::handle stride,
                     nb::handle padding, nb::handle dilation, nb::handle groups, bool bias,
                     const std::string& precision, const std::string& dtype, const std::string& layout) {
  Conv3dDesc d;
  auto shape = ints_of(input, 5);
  if (!shape) invalid(fmt::format("input_shape = {}: expected 5 ints (N, C, D, H, W)", repr_text(input)));
  d.n = (*shape)[0], d.c = (*shape)[1], d.d = (*shape)[2], d.h = (*shape)[3], d.w = (*shape)[4];
  auto k = index_of(out_channels);
  if (!k) invalid(fmt::format("out_channels = {}: expected an int", repr_text(out_channels)));
  d.k = *k;
  d.kernel = dims3_of(kernel_size, "kernel_size");
  d.stride = dims3_of(stride, "stride");
  d.padding = padding_of(padding);
  d.dilation = dims3_of(dilation, "dilation");
  auto g = index_of(groups);
  if (!g) invalid(fmt::format("groups = {}: expected an int", repr_text(groups)));
  d.groups = *g;
  d.bias = bias;
  d.precision = precision_of(precision);
  d.dtype = dtype_of(dtype);
  d.layout = layout_of(layout);
  return d;
}

// Every field, for equality and hashing (descriptions key caches in Python).
nb::tuple fields_of(const Conv3dDesc& d) {
  return nb::make_tuple(d.n, d.c, d.d, d.h, d.w, d.k, tuple_of(d.kernel), tuple_of(d.stride), padding_value(d.padding),
                        tuple_of(d.dilation), d.groups, d.bias, precision_name(d.precision),
                        static_cast<int>(d.dtype), static_cast<int>(d.layout));
}

std::string desc_repr(const Conv3dDesc& d) {
  const std::string pad = nb::repr(padding_value(d.padding)).c_str();
  return fmt::format(
      "Conv3dDesc(input_shape=({}, {}, {}, {}, {}), out_channels={}, kernel_size=({}, {}, {}), stride=({}, {}, {}), "
      "padding={}, dilation=({}, {}, {}), groups={}, bias={}, precision='{}')",
      d.n, d.c, d.d, d.h, d.w, d.k, d.kernel.d, d.kernel.h, d.kernel.w, d.stride.d, d.stride.h, d.stride.w, pad,
      d.dilation.d, d.dilation.h, d.dilation.w, d.groups, d.bias ? "True" : "False", precision_name(d.precision));
}

nb::tuple output_shape(const Conv3dDesc& d) {
  const OutputExtents o = output_extents(d);
  return nb::make_tuple(o.n, o.k, o.d, o.h, o.w);
}

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

CallArrays arrays_of(const InArray& input, const InArray& weight, const std::optional<InArray>& bias,
                     const std::optional<OutArray>& out) {
  return {&input, &weight, bias ? &*bias : nullptr, out ? &*out : nullptr};
}

void check_or_throw(const Conv3dDesc& desc, const CallArrays& arrays, bool out_double = false) {
  const Validation v = check_arrays(desc, arrays, out_double);
  if (!v) throw Error(v.category, v.message);
}

// Host arrays for the CPU reference: float32, C order (nanobind converts numpy arrays that are not).
using HostIn = nb::ndarray<const float, nb::device::cpu, nb::c_contig>;

void check_host(const char* name, const HostIn& a, std::initializer_list<int64_t> expected) {
  std::vector<int64_t> want(expected), got(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) got[i] = static_cast<int64_t>(a.shape(i));
  if (got != want) invalid(fmt::format("{}: shape ({}) does not match the description, which needs ({})", name,
                                       fmt::join(got, ", "), fmt::join(want, ", ")));
}

nb::ndarray<nb::numpy, double> reference(const Conv3dDesc& d, const HostIn& input, const HostIn& weight,
                                         const std::optional<HostIn>& bias) {
  if (d.bias != bias.has_value()) invalid(d.bias ? "bias: the description has bias = True, but no bias array was given"
                                                 : "bias: an array was given, but the description has bias = False");
  const OutputExtents o = output_extents(d);
  check_host("input", input, {d.n, d.c, d.d, d.h, d.w});
  check_host("weight", weight, {d.k, d.c / d.groups, d.kernel.d, d.kernel.h, d.kernel.w});
  if (bias) check_host("bias", *bias, {d.k});
  auto* result = new double[static_cast<size_t>(o.elements())];
  nb::capsule owner(result, [](void* p) noexcept { delete[] static_cast<double*>(p); });
  {
    nb::gil_scoped_release release;
    reference_conv3d(d, input.data(), weight.data(), bias ? bias->data() : nullptr, result);
  }
  const size_t shape[5] = {size_t(o.n), size_t(o.k), size_t(o.d), size_t(o.h), size_t(o.w)};
  return nb::ndarray<nb::numpy, double>(result, 5, shape, owner);
}

Comparison compare_arrays(const nb::ndarray<const float, nb::device::cpu, nb::c_contig>& got,
                          const nb::ndarray<const double, nb::device::cpu, nb::c_contig>& ref, const Tolerance& tol) {
  if (got.size() != ref.size()) invalid(fmt::format("got: {} elements, reference: {}", got.size(), ref.size()));
  nb::gil_scoped_release release;
  return compare(got.data(), ref.data(), static_cast<int64_t>(got.size()), tol);
}

void bind_desc(nb::module_& m) {
  nb::class_<Validation>(m, "Validation", "The outcome of validate(): ok, or the error conv3d() would raise.")
      .def_ro("ok", &Validation::ok)
      .def_prop_ro("category", [](const Validation& v) -> nb::object {
        return v.ok ? nb::object(nb::none()) : nb::object(nb::str(to_string(v.category)));
      }, "The error category's name ('invalid_argument', ...), None when ok.")
      .def_ro("message", &Validation::message)
      .def("__bool__", [](const Validation& v) { return v.ok; })
      .def("__repr__", [](const Validation& v) {
        return v.ok ? std::string("Validation(ok=True)")
                    : fmt::format("Validation(ok=False, category='{}', message={})", to_string(v.category),
                                  repr_text(nb::str(v.message.c_str())));
      });

  nb::class_<Conv3dDesc>(m, "Conv3dDesc",
                         "One convolution with nn.Conv3d's semantics: what nn.Conv3d(C, out_channels, kernel_size, "
                         "stride, padding, dilation, groups, bias) applied to an N x C x D x H x W input means. "
                         "Immutable and hashable.")
      .def("__init__",
           [](Conv3dDesc* self, nb::handle input, nb::handle out_channels, nb::handle kernel_size, nb::handle stride,
              nb::handle padding, nb::handle dilation, nb::handle groups, bool bias, const std::string& precision,
              const std::string& dtype, const std::string& layout) {
             new (self) Conv3dDesc(make_desc(input, out_channels, kernel_size, stride, padding, dilation, groups,
                                             bias, precision, dtype, layout));
           },
           "input_shape"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
           "groups"_a = 1, "bias"_a = false, "precision"_a = "fp32", "dtype"_a = "float32", "layout"_a = "ncdhw")
      .def_prop_ro("input_shape", [](const Conv3dDesc& d) { return nb::make_tuple(d.n, d.c, d.d, d.h, d.w); })
      .def_prop_ro("in_channels", [](const Conv3dDesc& d) { return d.c; })
      .def_prop_ro("out_channels", [](const Conv3dDesc& d) { return d.k; })
      .def_prop_ro("kernel_size", [](const Conv3dDesc& d) { return tuple_of(d.kernel); })
      .def_prop_ro("stride", [](const Conv3dDesc& d) { return tuple_of(d.stride); })
      .def_prop_ro("padding", [](const Conv3dDesc& d) { return padding_value(d.padding); },
                   "(D, H, W) amounts, or 'same' / 'valid'.")
      .def_prop_ro("dilation", [](const Conv3dDesc& d) { return tuple_of(d.dilation); })
      .def_ro("groups", &Conv3dDesc::groups)
      .def_ro("bias", &Conv3dDesc::bias)
      .def_prop_ro("precision", [](const Conv3dDesc& d) { return precision_name(d.precision); })
      .def_prop_ro("dtype", [](const Conv3dDesc& d) { return dtype_name(d.dtype); })
      .def_prop_ro("layout", [](const Conv3dDesc& d) { return layout_name(d.layout); })
      .def_prop_ro("weight_shape", [](const Conv3dDesc& d) {
        return nb::make_tuple(d.k, d.groups > 0 ? d.c / d.groups : 0, d.kernel.d, d.kernel.h, d.kernel.w);
      }, "(K, C / groups, KD, KH, KW).")
      .def_prop_ro("output_shape", &output_shape, "(N, K, OD, OH, OW); raises InvalidArgument if invalid.")
      .def("__repr__", &desc_repr)
      .def("__str__", [](const Conv3dDesc& d) { return describe(d); })
      .def("__eq__", [](const Conv3dDesc& a, nb::handle b) {
        return nb::isinstance<Conv3dDesc>(b) && fields_of(a).equal(fields_of(nb::cast<const Conv3dDesc&>(b)));
      })
      .def("__hash__", [](const Conv3dDesc& d) { return nb::hash(fields_of(d)); });

  m.def("validate",
        [](const Conv3dDesc& desc, std::optional<InArray> input, std::optional<InArray> weight,
           std::optional<InArray> bias, std::optional<OutArray> out) {
          if (!input && !weight && !bias && !out) return validate(desc);
          if (!input || !weight) invalid("validate: input and weight are needed to check arrays");
          return check_arrays(desc, arrays_of(*input, *weight, bias, out));
        },
        "desc"_a, "input"_a.none() = nb::none(), "weight"_a.none() = nb::none(), "bias"_a.none() = nb::none(),
        "out"_a.none() = nb::none(),
        "Checks a description (and, if given, its arrays) without raising.");
  m.def("output_shape", &output_shape, "desc"_a, "(N, K, OD, OH, OW) of a valid description.");
  m.def("resolved_padding", [](const Conv3dDesc& d) {
    const ResolvedPadding p = resolved_padding(d);
    return nb::make_tuple(tuple_of(p.before), tuple_of(p.after));
  }, "desc"_a, "((D, H, W) before, (D, H, W) after): 'same' puts an odd total's extra element at the end.");
  m.def("describe", [](const Conv3dDesc& d) { return describe(d); }, "desc"_a);
}

std::string fields_repr(const char* name, std::initializer_list<std::pair<const char*, std::string>> fields) {
  std::string text = std::string(name) + "(";
  bool first = true;
  for (const auto& [key, value] : fields) {
    text += fmt::format("{}{}={}", first ? "" : ", ", key, value);
    first = false;
  }
  return text + ")";
}

std::string quoted(const std::string& s) { return repr_text(nb::str(s.c_str())); }

void bind_results(nb::module_& m) {
  nb::class_<PrecompiledKernel>(m, "PrecompiledKernel", "One kernel precompile() made sure of.")
      .def_ro("key", &PrecompiledKernel::key)
      .def_ro("kernel", &PrecompiledKernel::kernel)
      .def_ro("compiled", &PrecompiledKernel::compiled)
      .def_ro("on_disk", &PrecompiledKernel::on_disk)
      .def_ro("compile_ms", &PrecompiledKernel::compile_ms)
      .def_ro("compiler_notes", &PrecompiledKernel::compiler_notes)
      .def("__repr__", [](const PrecompiledKernel& k) {
        return fields_repr("PrecompiledKernel",
                                              {{"kernel", quoted(k.kernel)}, {"compiled", k.compiled ? "True" : "False"},
                                               {"on_disk", k.on_disk ? "True" : "False"},
                                               {"compile_ms", fmt::format("{:.1f}", k.compile_ms)}});
      });
  nb::class_<PrecompileResult>(m, "PrecompileResult",
                               "Every kernel a description's plan launches: the main kernel first, then helpers.")
      .def_ro("kernels", &PrecompileResult::kernels)
      .def_prop_ro("main", [](const PrecompileResult& r) { return r.main(); })
      .def("__repr__", [](const PrecompileResult& r) { return fmt::format("PrecompileResult({} kernels)", r.kernels.size()); });
  nb::class_<EngineStats>(m, "EngineStats", "Counters since the Engine was made.")
      .def_ro("memory_hits", &EngineStats::memory_hits)
      .def_ro("disk_hits", &EngineStats::disk_hits)
      .def_ro("compiles", &EngineStats::compiles)
      .def_ro("compile_ms", &EngineStats::compile_ms)
      .def_ro("module_loads", &EngineStats::module_loads)
      .def_ro("refused_compiles", &EngineStats::refused_compiles)
      .def("__repr__", [](const EngineStats& s) {
        return fmt::format("EngineStats(memory_hits={}, disk_hits={}, compiles={}, compile_ms={:.1f}, module_loads={}, "
                           "refused_compiles={})",
                           s.memory_hits, s.disk_hits, s.compiles, s.compile_ms, s.module_loads, s.refused_compiles);
      });
  nb::class_<CacheEntry>(m, "CacheEntry", "One disk cache entry.")
      .def_ro("key", &CacheEntry::key)
      .def_ro("kernel", &CacheEntry::kernel)
      .def_ro("path", &CacheEntry::path)
      .def_ro("bytes", &CacheEntry::bytes)
      .def_ro("last_use_unix", &CacheEntry::last_use_unix)
      .def("__repr__", [](const CacheEntry& e) {
        return fmt::format("CacheEntry(kernel={}, bytes={})", quoted(e.kernel), e.bytes);
      });
  nb::class_<CacheInfo>(m, "CacheInfo", "The disk cache folder and its use.")
      .def_ro("dir", &CacheInfo::dir)
      .def_ro("exists", &CacheInfo::exists)
      .def_ro("writable", &CacheInfo::writable)
      .def_ro("problem", &CacheInfo::problem)
      .def_ro("bytes", &CacheInfo::bytes)
      .def_ro("entries", &CacheInfo::entries)
      .def_ro("limit_bytes", &CacheInfo::limit_bytes)
      .def("__repr__", [](const CacheInfo& c) {
        return fmt::format("CacheInfo(dir={}, exists={}, writable={}, entries={}, bytes={}, limit_bytes={}{})",
                           quoted(c.dir), c.exists ? "True" : "False", c.writable ? "True" : "False", c.entries,
                           c.bytes, c.limit_bytes, c.problem.empty() ? "" : ", problem=" + quoted(c.problem));
      });
  nb::class_<KernelResources>(m, "KernelResources", "What the kernel of a description costs the device.")
      .def_ro("kernel", &KernelResources::kernel)
      .def_ro("registers", &KernelResources::registers)
      .def_ro("local_bytes", &KernelResources::local_bytes)
      .def_ro("static_shared_bytes", &KernelResources::static_shared_bytes)
      .def_ro("dynamic_shared_bytes", &KernelResources::dynamic_shared_bytes)
      .def_ro("grid", &KernelResources::grid)
      .def_ro("block", &KernelResources::block)
      .def("__repr__", [](const KernelResources& r) {
        return fmt::format("KernelResources(kernel={}, registers={}, local_bytes={}, grid={}, block={})",
                           quoted(r.kernel), r.registers, r.local_bytes, r.grid, r.block);
      });
  nb::class_<DeviceInfo>(m, "DeviceInfo", "The GPU a context runs on.")
      .def_ro("ordinal", &DeviceInfo::ordinal)
      .def_ro("name", &DeviceInfo::name)
      .def_ro("arch", &DeviceInfo::arch)
      .def_ro("sm_count", &DeviceInfo::sm_count)
      .def_ro("driver_version", &DeviceInfo::driver_version)
      .def("__repr__", [](const DeviceInfo& d) {
        return fmt::format("DeviceInfo(ordinal={}, name={}, arch='{}', sm_count={}, driver_version={})", d.ordinal,
                           quoted(d.name), d.arch, d.sm_count, d.driver_version);
      });
  nb::class_<Tolerance>(m, "Tolerance", "Thresholds of an accuracy class; negative atol/rtol = not checked.")
      .def_ro("rel_l2", &Tolerance::rel_l2)
      .def_ro("atol", &Tolerance::atol)
      .def_ro("rtol", &Tolerance::rtol)
      .def("__repr__", [](const Tolerance& t) {
        return fmt::format("Tolerance(rel_l2={}, atol={}, rtol={})", t.rel_l2, t.atol, t.rtol);
      });
  nb::class_<Comparison>(m, "Comparison", "How far a result is from the float64 reference.")
      .def_ro("rel_l2", &Comparison::rel_l2)
      .def_ro("max_abs_error", &Comparison::max_abs_error)
      .def_ro("outside_tolerance", &Comparison::outside_tolerance)
      .def_ro("non_finite", &Comparison::non_finite)
      .def_ro("passed", &Comparison::passed)
      .def("__bool__", [](const Comparison& c) { return c.passed; })
      .def("__repr__", [](const Comparison& c) {
        return fmt::format("Comparison(passed={}, rel_l2={:.3g}, max_abs_error={:.3g}, outside_tolerance={}, "
                           "non_finite={})",
                           c.passed ? "True" : "False", c.rel_l2, c.max_abs_error, c.outside_tolerance, c.non_finite);
      });
}

void bind_engine(nb::module_& m) {
  using Release = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<Engine>(m, "Engine",
                     "The kernel caches and settings behind conv3d(). default_engine() is the process-wide one; a "
                     "separate Engine gives a separate cache folder, limit or compile mode.")
      .def("__init__",
           [](Engine* self, const std::string& cache_dir, uint64_t cache_limit_bytes, bool disk_cache,
              const std::string& kernel_config, const std::optional<std::string>& compile_mode,
              bool trust_shared_cache, bool check_allocations) {
             EngineOptions o;
             o.cache_dir = cache_dir;
             o.cache_limit_bytes = cache_limit_bytes;
             o.disk_cache = disk_cache;
             o.kernel_config = kernel_config;
             o.compile_mode = compile_mode_of(compile_mode);
             o.trust_shared_cache = trust_shared_cache;
             o.check_allocations = check_allocations;
             new (self) Engine(o);
           },
           nb::kw_only(), "cache_dir"_a = "", "cache_limit_bytes"_a = EngineOptions{}.cache_limit_bytes,
           "disk_cache"_a = true, "kernel_config"_a = "", "compile_mode"_a.none() = nb::none(),
           "trust_shared_cache"_a = false, "check_allocations"_a = true)
      .def("run",
           [](Engine& e, const Conv3dDesc& desc, const InArray& input, const InArray& weight,
              const std::optional<InArray>& bias, const OutArray& out, nb::handle stream) {
             const Stream s = stream_of(stream);
             const CallArrays arrays = arrays_of(input, weight, bias, out);
             check_or_throw(desc, arrays);
             nb::gil_scoped_release release;
             e.run(desc, tensors_of(arrays), s);
           },
           "desc"_a, "input"_a.noconvert(), "weight"_a.noconvert(), "bias"_a.noconvert().none() = nb::none(),
           nb::kw_only(), "out"_a.noconvert(), "stream"_a.none() = nb::none(),
           "Runs desc on CUDA arrays, asynchronously on `stream` (None: the legacy default stream). Arrays are "
           "checked first; a wrong call raises and writes nothing.")
      .def("run_pointers",
           [](Engine& e, const Conv3dDesc& desc, uintptr_t input, uintptr_t weight, uintptr_t bias, uintptr_t out,
              uintptr_t stream) {
             Conv3dTensors t;
             t.input = reinterpret_cast<const void*>(input);
             t.weight = reinterpret_cast<const void*>(weight);
             t.bias = reinterpret_cast<const void*>(bias);
             t.output = reinterpret_cast<void*>(out);
             e.run(desc, t, reinterpret_cast<Stream>(stream));
           },
           "desc"_a, "input"_a, "weight"_a, "bias"_a, "out"_a, "stream"_a, Release(),
           "As run(), on raw device pointers (ints; bias 0 when desc.bias is False) and a CUstream handle, "
           "without array checks: the caller guarantees contiguous tensors of the description's shapes.")
      .def("run_reference",
           [](Engine& e, const Conv3dDesc& desc, const InArray& input, const InArray& weight,
              const std::optional<InArray>& bias, const OutArray& out, nb::handle stream) {
             const Stream s = stream_of(stream);
             const CallArrays arrays = arrays_of(input, weight, bias, out);
             check_or_throw(desc, arrays, /*out_double=*/true);
             nb::gil_scoped_release release;
             e.run_reference(desc, tensors_of(arrays), s);
           },
           "desc"_a, "input"_a.noconvert(), "weight"_a.noconvert(), "bias"_a.noconvert().none() = nb::none(),
           nb::kw_only(), "out"_a.noconvert(), "stream"_a.none() = nb::none(),
           "The float64 reference on the GPU: like run(), out is a float64 array.")
      .def("precompile", &Engine::precompile, "desc"_a, "arch"_a = "", Release(),
           "Compiles (or finds in the disk cache) every kernel desc needs on `arch` ('sm_90', ...; empty: the "
           "current device's). Needs no GPU when arch is given.")
      .def("kernel_for", &Engine::kernel_for, "desc"_a, "arch"_a = "", Release())
      .def("resources",
           [](Engine& e, const Conv3dDesc& desc, nb::handle stream, bool aligned_input) {
             const Stream s = stream_of(stream);
             nb::gil_scoped_release release;
             return e.resources(desc, s, aligned_input);
           },
           "desc"_a, "stream"_a.none() = nb::none(), "aligned_input"_a = true)
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

  m.def("reference_conv3d", &reference, "desc"_a, "input"_a, "weight"_a, "bias"_a.none() = nb::none(),
        "The float64 CPU reference (float64 accumulation, all cores) of host float32 arrays; returns a numpy "
        "float64 array N x K x OD x OH x OW.");
  m.def("tolerance", [](const std::string& precision) { return tolerance(precision_of(precision)); }, "precision"_a);
  m.def("compare", &compare_arrays, "got"_a, "reference"_a, "tolerance"_a);
  m.def("nvrtc_version", &nvrtc_version);
  m.def("supported_archs", &supported_archs, "The archs this NVRTC compiles for: 'sm_75', ..., 'sm_90a', ...");
  m.def("check_arch", &check_arch, "arch"_a,
        "Raises InvalidArgument for a malformed arch name, Unsupported for one this NVRTC cannot compile for.");
  m.def("current_device", &current_device, "The device of the current context (or device 0); None without one.");
  m.def("version", []() { return std::string(conv3djit::version()); });
}
