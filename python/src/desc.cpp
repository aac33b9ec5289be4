// Conv3dDesc for Python: nn.Conv3d's argument conventions (an int or three ints, 'same' / 'valid',
// names for the accuracy class, element type, layout, padding mode and activation) and the epilogue's keyword
// arguments parsed into the C++ description, with errors that name the field and the value.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstdlib>
#include <utility>
#include <vector>

#include <conv3djit/conv3d.hpp>

#include "bindings.hpp"
#include "tensors.hpp"

using namespace nanobind::literals;

namespace conv3djit::python {

void invalid(const std::string& message) { throw Error(ErrorCategory::InvalidArgument, message); }

std::string repr_text(nb::handle value) { return nb::repr(value).c_str(); }

Precision precision_of(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "tf32") return Precision::Tf32;
  invalid(fmt::format("precision = '{}': expected 'fp32' or 'tf32'", name));
}

std::optional<CompileMode> compile_mode_of(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  if (*name == "allow") return CompileMode::Allow;
  if (*name == "warn") return CompileMode::Warn;
  if (*name == "never") return CompileMode::Never;
  invalid(fmt::format("compile_mode = '{}': expected None, 'allow', 'warn' or 'never'", *name));
}

std::optional<TuneMode> tune_mode_of(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  if (*name == "off") return TuneMode::Off;
  if (*name == "first_use") return TuneMode::FirstUse;
  invalid(fmt::format("tune_mode = '{}': expected None, 'off' or 'first_use'", *name));
}

namespace {

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

const char* precision_name(Precision p) { return p == Precision::Tf32 ? "tf32" : "fp32"; }

// Element types by PyTorch's names (the property's) or conv3djit's ("fp32", "bf16", "fp16": the
// manifests'); layouts by conv3djit's.
constexpr std::pair<DataType, const char*> kDtypeNames[] = {
    {DataType::Float32, "float32"}, {DataType::BFloat16, "bfloat16"}, {DataType::Float16, "float16"}};

const char* torch_dtype_name(DataType t) {
  for (const auto& [type, name] : kDtypeNames) {
    if (type == t) return name;
  }
  return "float32";
}

DataType dtype_of(const std::string& name) {
  if (std::optional<DataType> t = parse_dtype(name)) return *t;
  throw Error(ErrorCategory::Unsupported,
              fmt::format("dtype = '{}': conv3djit serves 'float32', 'bfloat16' and 'float16' (or 'fp32', 'bf16', "
                          "'fp16')",
                          name));
}

Layout layout_of(const std::string& name) {
  if (std::optional<Layout> l = parse_layout(name)) return *l;
  invalid(fmt::format("layout = '{}': expected 'ncdhw' or 'ndhwc' (channels_last_3d)", name));
}

nb::tuple tuple_of(Dims3 d) { return nb::make_tuple(d.d, d.h, d.w); }

// The epilogue's scalars, by their keyword names.
constexpr std::pair<const char*, float Epilogue::*> kScalars[] = {
    {"alpha", &Epilogue::alpha}, {"slope", &Epilogue::slope}, {"clamp_min", &Epilogue::clamp_min},
    {"clamp_max", &Epilogue::clamp_max}, {"gamma", &Epilogue::gamma}, {"beta", &Epilogue::beta}};

// The activations' names, for the message that refuses another one.
std::string activation_names() {
  std::string names;
  for (int a = 0; a <= static_cast<int>(Activation::Clamp); ++a) {
    names += fmt::format("{}'{}'", a ? ", " : "", activation_name(static_cast<Activation>(a)));
  }
  return names;
}

Activation activation_of(const std::string& name) {
  if (std::optional<Activation> a = parse_activation(name)) return *a;
  invalid(fmt::format("activation = '{}': expected one of {}", name, activation_names()));
}

PaddingMode padding_mode_of(const std::string& name) {
  if (std::optional<PaddingMode> m = parse_padding_mode(name)) return *m;
  std::string names;
  for (int m = 0; m <= static_cast<int>(PaddingMode::Circular); ++m) {
    names += fmt::format("{}'{}'", m ? ", " : "", padding_mode_name(static_cast<PaddingMode>(m)));
  }
  invalid(fmt::format("padding_mode = '{}': expected one of {}", name, names));
}

// The shortest decimal that reads back as the same float: slope=0.2 reads 0.2, not
// 0.20000000298023224, in properties, repr and manifests.
double scalar_value(float v) { return std::strtod(fmt::format("{}", v).c_str(), nullptr); }

std::string scalar_text(float v) {
  return std::isfinite(v) ? fmt::format("{}", v) : fmt::format("float('{}')", v);
}

nb::object padding_value(const Padding& p) {
  switch (p.mode) {
    case Padding::Mode::Same: return nb::str("same");
    case Padding::Mode::Valid: return nb::str("valid");
    case Padding::Mode::PerSide: return nb::str("per_side");  // the amounts: padding_before / _after
    case Padding::Mode::Explicit: break;
  }
  return tuple_of(p.amount);
}

nb::object side_value(const Padding& p, bool before) {
  if (p.mode != Padding::Mode::PerSide) return nb::none();
  return tuple_of(before ? p.amount : p.after);
}

Conv3dDesc make_desc(nb::handle input, nb::handle out_channels, nb::handle kernel_size, nb::handle stride,
                     nb::handle padding, nb::handle dilation, nb::handle groups, bool bias,
                     const std::string& precision, const std::string& dtype, const std::string& layout,
                     bool fp32_output, nb::handle padding_before, nb::handle padding_after, const std::string& padding_mode,
                     const Epilogue& epilogue) {
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
  if (!padding_before.is_none() || !padding_after.is_none()) {
    // F.pad's convention (a causal time axis: before = 2, after = 0), instead of `padding`.
    const Padding plain = padding_of(padding);
    if (plain.mode != Padding::Mode::Explicit || !(plain.amount == Dims3(0))) {
      invalid(fmt::format("padding = {}: give padding_before / padding_after instead of padding, not both",
                          repr_text(padding)));
    }
    d.padding = Padding::per_side(padding_before.is_none() ? Dims3(0) : dims3_of(padding_before, "padding_before"),
                                  padding_after.is_none() ? Dims3(0) : dims3_of(padding_after, "padding_after"));
  }
  d.padding_mode = padding_mode_of(padding_mode);
  d.dilation = dims3_of(dilation, "dilation");
  auto g = index_of(groups);
  if (!g) invalid(fmt::format("groups = {}: expected an int", repr_text(groups)));
  d.groups = *g;
  d.bias = bias;
  d.precision = precision_of(precision);
  d.dtype = dtype_of(dtype);
  d.layout = layout_of(layout);
  d.fp32_output = fp32_output;
  d.epilogue = epilogue;
  return d;
}

// Every field, for equality and hashing (descriptions key caches in Python).
nb::tuple fields_of(const Conv3dDesc& d) {
  return nb::make_tuple(d.n, d.c, d.d, d.h, d.w, d.k, tuple_of(d.kernel), tuple_of(d.stride), padding_value(d.padding),
                        side_value(d.padding, true), side_value(d.padding, false), padding_mode_name(d.padding_mode),
                        tuple_of(d.dilation), d.groups, d.bias, precision_name(d.precision),
                        static_cast<int>(d.dtype), static_cast<int>(d.layout), d.fp32_output,
                        activation_name(d.epilogue.activation), d.epilogue.alpha, d.epilogue.slope,
                        d.epilogue.clamp_min, d.epilogue.clamp_max, d.epilogue.gamma, d.epilogue.residual,
                        d.epilogue.beta);
}

// The epilogue's fields that differ from the plain convolution's, as keyword arguments: most
// descriptions have none, and their repr stays short.
std::string epilogue_repr(const Epilogue& e) {
  const Epilogue plain;
  std::string text;
  if (e.activation != plain.activation) text += fmt::format(", activation='{}'", activation_name(e.activation));
  if (e.residual) text += ", residual=True";
  for (const auto& [name, field] : kScalars) {
    if (!(e.*field == plain.*field)) text += fmt::format(", {}={}", name, scalar_text(e.*field));  // NaN too
  }
  return text;
}

std::string desc_repr(const Conv3dDesc& d) {
  std::string pad =
      d.padding.mode == Padding::Mode::PerSide
          ? fmt::format("padding_before={}, padding_after={}", repr_text(side_value(d.padding, true)),
                        repr_text(side_value(d.padding, false)))
          : "padding=" + repr_text(padding_value(d.padding));
  // Only where it is not zeros: a zero-padded description's repr stays as it was.
  if (d.padding_mode != PaddingMode::Zeros) {
    pad += fmt::format(", padding_mode='{}'", padding_mode_name(d.padding_mode));
  }
  // The element type and layout only where they are not the defaults, as the padding mode.
  std::string types;
  if (d.dtype != DataType::Float32) types += fmt::format(", dtype='{}'", torch_dtype_name(d.dtype));
  if (d.layout != Layout::NCDHW) types += fmt::format(", layout='{}'", layout_name(d.layout));
  if (d.fp32_output) types += ", fp32_output=True";
  return fmt::format(
      "Conv3dDesc(input_shape=({}, {}, {}, {}, {}), out_channels={}, kernel_size=({}, {}, {}), stride=({}, {}, {}), "
      "{}, dilation=({}, {}, {}), groups={}, bias={}, precision='{}'{}{})",
      d.n, d.c, d.d, d.h, d.w, d.k, d.kernel.d, d.kernel.h, d.kernel.w, d.stride.d, d.stride.h, d.stride.w, pad,
      d.dilation.d, d.dilation.h, d.dilation.w, d.groups, d.bias ? "True" : "False", precision_name(d.precision),
      types, epilogue_repr(d.epilogue));
}

nb::tuple output_shape(const Conv3dDesc& d) {
  const OutputExtents o = output_extents(d);
  return nb::make_tuple(o.n, o.k, o.d, o.h, o.w);
}

}  // namespace

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

  const Epilogue plain;
  nb::class_<Conv3dDesc> cls(m, "Conv3dDesc",
                             "One convolution with nn.Conv3d's semantics: what nn.Conv3d(C, out_channels, "
                             "kernel_size, stride, padding, dilation, groups, bias, padding_mode) applied to an "
                             "N x C x D x H x W input means, and what its store does with each output (the "
                             "epilogue). Immutable and hashable.");
  cls.def("__init__",
          [](Conv3dDesc* self, nb::handle input, nb::handle out_channels, nb::handle kernel_size, nb::handle stride,
             nb::handle padding, nb::handle dilation, nb::handle groups, bool bias, const std::string& precision,
             const std::string& dtype, const std::string& layout, bool fp32_output, nb::handle padding_before,
             nb::handle padding_after, const std::string& padding_mode, const std::string& activation, float alpha,
             float slope, float clamp_min, float clamp_max, float gamma, bool residual, float beta) {
            const Epilogue e{activation_of(activation), alpha, slope, clamp_min, clamp_max, gamma, residual, beta};
            new (self) Conv3dDesc(make_desc(input, out_channels, kernel_size, stride, padding, dilation, groups,
                                            bias, precision, dtype, layout, fp32_output, padding_before,
                                            padding_after,
                                            padding_mode, e));
          },
          "input_shape"_a, "out_channels"_a, "kernel_size"_a, "stride"_a = 1, "padding"_a = 0, "dilation"_a = 1,
          "groups"_a = 1, "bias"_a = false, "precision"_a = "fp32", "dtype"_a = "float32", "layout"_a = "ncdhw",
          nb::kw_only(), "fp32_output"_a = false, "padding_before"_a.none() = nb::none(), "padding_after"_a.none() = nb::none(),
          "padding_mode"_a = "zeros", "activation"_a = "identity", "alpha"_a = scalar_value(plain.alpha),
          "slope"_a = scalar_value(plain.slope), "clamp_min"_a = scalar_value(plain.clamp_min),
          "clamp_max"_a = scalar_value(plain.clamp_max), "gamma"_a = scalar_value(plain.gamma), "residual"_a = false,
          "beta"_a = scalar_value(plain.beta),
          "dtype: the element type of the input, weight and bias (and output, residual): 'float32', 'bfloat16' or "
          "'float16' ('fp32', 'bf16', 'fp16' too); fp32_output (keyword-only): a float32 output and residual of "
          "half inputs. layout: the arrays' memory order, 'ncdhw' (contiguous) or 'ndhwc' (channels_last_3d); "
          "shapes stay PyTorch's (N, C, D, H, W) either way. precision is the class of float32 inputs; half inputs "
          "have their type's (it is then ignored). "
          "padding_mode (keyword-only, any case) is what the padding reads, as nn.Conv3d's: 'zeros', 'reflect', "
          "'replicate' or 'circular'. The epilogue (out = act(alpha * conv + bias) * gamma + beta * residual) is "
          "keyword-only too: activation (any case), the scalars, and residual, whether a residual array of the "
          "output's shape is added.")
      .def_prop_ro("input_shape", [](const Conv3dDesc& d) { return nb::make_tuple(d.n, d.c, d.d, d.h, d.w); })
      .def_prop_ro("in_channels", [](const Conv3dDesc& d) { return d.c; })
      .def_prop_ro("out_channels", [](const Conv3dDesc& d) { return d.k; })
      .def_prop_ro("kernel_size", [](const Conv3dDesc& d) { return tuple_of(d.kernel); })
      .def_prop_ro("stride", [](const Conv3dDesc& d) { return tuple_of(d.stride); })
      .def_prop_ro("padding", [](const Conv3dDesc& d) { return padding_value(d.padding); },
                   "(D, H, W) amounts, 'same' / 'valid', or 'per_side' (see padding_before / padding_after).")
      .def_prop_ro("padding_before", [](const Conv3dDesc& d) { return side_value(d.padding, true); },
                   "Per-side padding before each axis (D, H, W), as F.pad takes it; None otherwise.")
      .def_prop_ro("padding_after", [](const Conv3dDesc& d) { return side_value(d.padding, false); })
      .def_prop_ro("padding_mode", [](const Conv3dDesc& d) { return padding_mode_name(d.padding_mode); },
                   "What the padding reads: 'zeros', 'reflect', 'replicate' or 'circular' (nn.Conv3d's names).")
      .def_prop_ro("dilation", [](const Conv3dDesc& d) { return tuple_of(d.dilation); })
      .def_ro("groups", &Conv3dDesc::groups)
      .def_ro("bias", &Conv3dDesc::bias)
      .def_prop_ro("precision", [](const Conv3dDesc& d) { return precision_name(d.precision); })
      .def_prop_ro("dtype", [](const Conv3dDesc& d) { return torch_dtype_name(d.dtype); },
                   "The input's element type, by PyTorch's name: 'float32', 'bfloat16' or 'float16'.")
      .def_prop_ro("output_dtype", [](const Conv3dDesc& d) { return torch_dtype_name(output_dtype(d)); },
                   "The output's and the residual's element type: the input's, or 'float32' with fp32_output.")
      .def_ro("fp32_output", &Conv3dDesc::fp32_output)
      .def_prop_ro("layout", [](const Conv3dDesc& d) { return layout_name(d.layout); },
                   "'ncdhw' (contiguous arrays) or 'ndhwc' (channels_last_3d strides; the shapes stay (N, C, D, H, W)).")
      .def_prop_ro("activation", [](const Conv3dDesc& d) { return activation_name(d.epilogue.activation); },
                   "The epilogue's activation: 'identity', 'relu', 'leaky_relu', 'gelu', ...")
      .def_prop_ro("residual", [](const Conv3dDesc& d) { return d.epilogue.residual; },
                   "Whether beta * residual (an array of the output's shape) is added.")
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
  for (const auto& [name, field] : kScalars) {
    cls.def_prop_ro(name, [field = field](const Conv3dDesc& d) { return scalar_value(d.epilogue.*field); });
  }

  m.def("validate",
        [](const Conv3dDesc& desc, std::optional<InArray> input, std::optional<InArray> weight,
           std::optional<InArray> bias, std::optional<OutArray> out, std::optional<InArray> residual) {
          if (!input && !weight && !bias && !out && !residual) return validate(desc);
          if (!input || !weight) invalid("validate: input and weight are needed to check arrays");
          return check_arrays(desc, arrays_of(*input, *weight, given(bias), given(out), given(residual)));
        },
        "desc"_a, "input"_a.none() = nb::none(), "weight"_a.none() = nb::none(), "bias"_a.none() = nb::none(),
        "out"_a.none() = nb::none(), nb::kw_only(), "residual"_a.none() = nb::none(),
        "Checks a description (and, if given, its arrays) without raising.");
  m.def("output_shape", &output_shape, "desc"_a, "(N, K, OD, OH, OW) of a valid description.");
  m.def("resolved_padding", [](const Conv3dDesc& d) {
    const ResolvedPadding p = resolved_padding(d);
    return nb::make_tuple(tuple_of(p.before), tuple_of(p.after));
  }, "desc"_a, "((D, H, W) before, (D, H, W) after): 'same' puts an odd total's extra element at the end.");
  m.def("describe", [](const Conv3dDesc& d) { return describe(d); }, "desc"_a);
}

}  // namespace conv3djit::python
