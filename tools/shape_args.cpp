// The shape flags shared by precompile, verify and run, and the value checks the manifest reuses,
// so that a flag and a manifest key accept exactly the same values.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>

#include "cli.hpp"
#include "device.hpp"

namespace conv3djit::cli {
namespace {

// "1,2,3" -> {1,2,3}. Strict: every field an integer, nothing else, no empty field.
bool split_ints(const std::string& text, std::vector<int64_t>& out) {
  out.clear();
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    while (first < last && *first == ' ') ++first;
    while (last > first && last[-1] == ' ') --last;
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(first, last, value);
    if (first == last || ec != std::errc() || ptr != last) return false;
    out.push_back(value);
    if (end == text.size()) return true;
    begin = end + 1;
  }
}

std::string check_min(const std::vector<int64_t>& values, int64_t min) {
  for (int64_t v : values) {
    if (v < min) return fmt::format("every value must be >= {}, got {}", min, v);
  }
  return {};
}

// Registers a comma-list flag whose checked value is stored by `read` while CLI11 parses; a
// rejected value becomes a usage error that names the flag.
CLI::Option* add_list_flag(CLI::App& cmd, const std::string& name, const std::string& form,
                           const std::string& help, std::function<std::string(const std::string&)> read) {
  return cmd
      .add_option_function<std::string>(
          name,
          [name, read](const std::string& text) {
            const std::string error = read(text);
            if (!error.empty()) throw CLI::ValidationError(name, error);
          },
          help)
      ->type_name(form);
}

// "a,b" -> two finite floats, nothing else.
bool split_two_floats(const std::string& text, float& a, float& b) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos) return false;
  auto read = [](const std::string& field, float& out) {
    char* end = nullptr;
    out = std::strtof(field.c_str(), &end);
    return !field.empty() && end == field.c_str() + field.size() && std::isfinite(out);
  };
  return read(text.substr(0, comma), a) && read(text.substr(comma + 1), b);
}

}  // namespace

CLI::Option* add_input_range_flag(CLI::App& cmd, ValueRange& range) {
  return add_list_flag(cmd, "--input-range", "LO,HI",
                       "input values drawn from [LO, HI) (default -1,1; e.g. 0,1 for image-like data)",
                       [&range](const std::string& text) -> std::string {
                         float lo = 0, hi = 0;
                         if (!split_two_floats(text, lo, hi)) return fmt::format("expected LO,HI, got '{}'", text);
                         if (!(lo < hi)) return fmt::format("LO must be below HI, got {},{}", lo, hi);
                         range = ValueRange{lo, hi};
                         return {};
                       });
}

std::string read_input(const std::vector<int64_t>& values, Conv3dDesc& desc) {
  if (values.size() != 5) {
    return fmt::format("expected 5 values N,C,D,H,W, got {}", values.size());
  }
  if (auto error = check_min(values, 1); !error.empty()) return error;
  desc.n = values[0];
  desc.c = values[1];
  desc.d = values[2];
  desc.h = values[3];
  desc.w = values[4];
  return {};
}

std::string read_dims3(const std::vector<int64_t>& values, int64_t min, Dims3& out) {
  if (values.size() != 1 && values.size() != 3) {
    return fmt::format("expected 1 or 3 values, got {}", values.size());
  }
  if (auto error = check_min(values, min); !error.empty()) return error;
  out = values.size() == 1 ? Dims3(values[0]) : Dims3(values[0], values[1], values[2]);
  return {};
}

std::string read_padding(const std::vector<int64_t>& values, Padding& out) {
  Dims3 amount;
  if (auto error = read_dims3(values, 0, amount); !error.empty()) return error;
  out = Padding(amount);
  return {};
}

std::string read_padding_side(const std::vector<int64_t>& values, bool after, Padding& out) {
  Dims3 amount;
  if (auto error = read_dims3(values, 0, amount); !error.empty()) return error;
  // The side not given stays 0: --padding-before 2,0,0 alone pads 2 frames before and none after.
  if (out.mode != Padding::Mode::PerSide) out = Padding::per_side(Dims3(0), Dims3(0));
  (after ? out.after : out.amount) = amount;
  return {};
}

std::string read_padding_word(const std::string& word, Padding& out) {
  if (word == "same") {
    out = Padding::same();
  } else if (word == "valid") {
    out = Padding::valid();
  } else {
    return fmt::format("expected P, PD,PH,PW, same or valid, got '{}'", word);
  }
  return {};
}

std::string read_count(int64_t value, int64_t& out) {
  if (value < 1) return fmt::format("must be >= 1, got {}", value);
  out = value;
  return {};
}

std::string read_precision(const std::string& word, Precision& out) {
  if (word == "fp32") {
    out = Precision::Fp32;
  } else if (word == "tf32") {
    out = Precision::Tf32;
  } else {
    // bf16 and fp16 name element types, whose class is theirs: a likely mix-up, said so.
    const std::optional<DataType> type = parse_dtype(word);
    if (type && *type != DataType::Float32) {
      return fmt::format("expected fp32 or tf32, got '{}' (an element type: give it as dtype)", word);
    }
    return fmt::format("expected fp32 or tf32, got '{}'", word);
  }
  return {};
}

std::string read_dtype(const std::string& word, DataType& out) {
  if (const std::optional<DataType> t = parse_dtype(word)) {
    out = *t;
    return {};
  }
  return fmt::format("expected fp32, bf16 or fp16 (or float32, bfloat16, float16), got '{}'", word);
}

std::string read_layout(const std::string& word, Layout& out) {
  if (const std::optional<Layout> l = parse_layout(word)) {
    out = *l;
    return {};
  }
  return fmt::format("expected ncdhw or ndhwc, got '{}'", word);
}

std::string read_activation(const std::string& word, Activation& out) {
  if (const std::optional<Activation> a = parse_activation(word)) {
    out = *a;
    return {};
  }
  return fmt::format("expected identity, relu, leaky_relu, gelu, gelu_tanh, silu, sigmoid, tanh, hardswish or "
                     "clamp, got '{}'", word);
}

std::string read_padding_mode(const std::string& word, PaddingMode& out) {
  if (const std::optional<PaddingMode> m = parse_padding_mode(word)) {
    out = *m;
    return {};
  }
  return fmt::format("expected zeros, reflect, replicate or circular, got '{}'", word);
}

std::string read_scalar(double value, float& out) {
  if (!std::isfinite(value) || std::abs(value) > std::numeric_limits<float>::max()) {
    return fmt::format("expected a finite number within float's range, got {}", value);
  }
  out = static_cast<float>(value);
  return {};
}

void add_shape_flags(CLI::App& cmd, ShapeFlags& flags, bool required) {
  Conv3dDesc& desc = flags.desc;
  // Reads a comma list, then hands it to one of the shared checks.
  auto ints = [](auto check) {
    return [check](const std::string& text) -> std::string {
      std::vector<int64_t> values;
      if (!split_ints(text, values)) return fmt::format("expected integers like 1,2,3, got '{}'", text);
      return check(values);
    };
  };
  auto count = [](int64_t& out) {
    return [&out](const std::string& text) -> std::string {
      std::vector<int64_t> values;
      if (!split_ints(text, values) || values.size() != 1) {
        return fmt::format("expected one integer, got '{}'", text);
      }
      return read_count(values[0], out);
    };
  };

  flags.input = add_list_flag(cmd, "--input", "N,C,D,H,W", "input extents",
                              ints([&desc](const auto& v) { return read_input(v, desc); }));
  flags.out_channels = add_list_flag(cmd, "--out-channels", "K", "output channels", count(desc.k));
  flags.kernel = add_list_flag(cmd, "--kernel", "KD,KH,KW", "kernel extents (or one for all axes)",
                               ints([&desc](const auto& v) { return read_dims3(v, 1, desc.kernel); }));
  flags.options = {flags.input, flags.out_channels, flags.kernel};
  flags.options.push_back(add_list_flag(
      cmd, "--stride", "S|SD,SH,SW", "stride (default 1)",
      ints([&desc](const auto& v) { return read_dims3(v, 1, desc.stride); })));
  flags.options.push_back(add_list_flag(
      cmd, "--padding", "P|PD,PH,PW|same|valid", "padding (default 0)",
      [&desc](const std::string& text) {
        // Not a list: it must be one of the words, whose error lists every accepted form.
        std::vector<int64_t> values;
        if (!split_ints(text, values)) return read_padding_word(text, desc.padding);
        return read_padding(values, desc.padding);
      }));
  CLI::Option* padding = flags.options.back();
  for (const bool after : {false, true}) {
    flags.options.push_back(
        add_list_flag(cmd, after ? "--padding-after" : "--padding-before", "P|PD,PH,PW",
                      after ? "padding after each axis (default 0)"
                            : "padding before each axis (default 0), e.g. 2,1,1 with --padding-after 0,1,1: causal in D",
                      ints([&desc, after](const auto& v) { return read_padding_side(v, after, desc.padding); }))
            ->excludes(padding));
  }
  flags.options.push_back(add_list_flag(
      cmd, "--padding-mode", "zeros|reflect|replicate|circular", "what the padding reads (default zeros)",
      [&desc](const std::string& text) { return read_padding_mode(text, desc.padding_mode); }));
  flags.options.push_back(add_list_flag(
      cmd, "--dilation", "S|SD,SH,SW", "dilation (default 1)",
      ints([&desc](const auto& v) { return read_dims3(v, 1, desc.dilation); })));
  flags.options.push_back(add_list_flag(cmd, "--groups", "G", "groups (default 1)", count(desc.groups)));
  flags.options.push_back(cmd.add_flag("--bias", desc.bias, "add a bias per output channel"));
  flags.options.push_back(add_list_flag(
      cmd, "--precision", "fp32|tf32", "accuracy class of fp32 inputs (default fp32; bf16 and fp16 have their type's)",
      [&desc](const std::string& text) { return read_precision(text, desc.precision); }));
  flags.options.push_back(add_list_flag(
      cmd, "--dtype", "fp32|bf16|fp16",
      "element type of the input, weight and bias, and of the output unless --fp32-output (default fp32)",
      [&desc](const std::string& text) { return read_dtype(text, desc.dtype); }));
  flags.options.push_back(add_list_flag(
      cmd, "--layout", "ncdhw|ndhwc",
      "memory order of every tensor (default ncdhw; ndhwc: channels innermost, as PyTorch's channels_last_3d)",
      [&desc](const std::string& text) { return read_layout(text, desc.layout); }));
  flags.options.push_back(
      cmd.add_flag("--fp32-output", desc.fp32_output, "bf16 / fp16 inputs: a float32 output (and residual)"));
  // The epilogue: out = act(alpha * conv + bias) * gamma + beta * residual, in the kernel's store.
  Epilogue& e = desc.epilogue;
  auto scalar = [](float& out) {
    return [&out](const std::string& text) -> std::string {
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size()) return fmt::format("expected a number, got '{}'", text);
      return read_scalar(v, out);
    };
  };
  flags.options.push_back(add_list_flag(
      cmd, "--activation", "NAME",
      "epilogue activation: identity (default), relu, leaky_relu, gelu, gelu_tanh, silu, sigmoid, tanh, hardswish, clamp",
      [&e](const std::string& text) { return read_activation(text, e.activation); }));
  flags.options.push_back(add_list_flag(cmd, "--slope", "X", "leaky_relu's slope below zero (default 0.01)", scalar(e.slope)));
  flags.options.push_back(add_list_flag(cmd, "--clamp", "MIN,MAX", "clamp's bounds (default 0,6)",
                                        [&e](const std::string& text) -> std::string {
                                          if (!split_two_floats(text, e.clamp_min, e.clamp_max)) {
                                            return fmt::format("expected MIN,MAX, got '{}'", text);
                                          }
                                          return {};
                                        }));
  flags.options.push_back(add_list_flag(cmd, "--alpha", "X", "scale of the convolution before the bias (default 1)", scalar(e.alpha)));
  flags.options.push_back(add_list_flag(cmd, "--gamma", "X", "scale after the activation (default 1)", scalar(e.gamma)));
  flags.options.push_back(cmd.add_flag("--residual", e.residual, "add beta * a residual tensor of the output's shape"));
  flags.options.push_back(add_list_flag(cmd, "--beta", "X", "scale of the residual (default 1)", scalar(e.beta)));
  for (CLI::Option* option : flags.options) option->group("Shape");
  if (required) {
    for (CLI::Option* option : {flags.input, flags.out_channels, flags.kernel}) option->required();
  }
}

void require_shape(const ShapeFlags& flags) {
  for (const CLI::Option* option : {flags.input, flags.out_channels, flags.kernel}) {
    if (option->count() == 0) throw CLI::RequiredError(option->get_name());
  }
}

void add_shape_or_manifest_flags(CLI::App& cmd, ShapeFlags& flags, std::string& manifest) {
  add_shape_flags(cmd, flags, false);
  CLI::Option* option = cmd.add_option("--manifest", manifest, "JSON-lines file, one shape per line (instead of flags)")
                            ->check(CLI::ExistingFile);
  // Shape flags are optional only because --manifest can replace them. The exclusion is checked
  // here rather than with CLI11's excludes(), which would print "Excludes: --manifest" under
  // every shape flag's help.
  cmd.callback([&flags, option] {
    if (option->count() == 0) return require_shape(flags);
    for (const CLI::Option* shape_flag : flags.options) {
      if (shape_flag->count() > 0) throw CLI::ExcludesError(option->get_name(), shape_flag->get_name());
    }
  });
}

std::vector<NamedDesc> read_shapes(const ShapeFlags& flags, const std::string& manifest) {
  if (!manifest.empty()) return read_manifest(manifest);
  require_valid(flags.desc);
  return {{describe(flags.desc), flags.desc}};
}

void require_valid(const Conv3dDesc& desc) {
  const Validation valid = validate(desc);
  if (!valid) throw Error(valid.category, valid.message);
}

double macs(const Conv3dDesc& desc) {
  const OutputExtents out = output_extents(desc);
  return static_cast<double>(out.elements()) * static_cast<double>(desc.c / desc.groups) *
         static_cast<double>(desc.kernel.d * desc.kernel.h * desc.kernel.w);
}

}  // namespace conv3djit::cli
