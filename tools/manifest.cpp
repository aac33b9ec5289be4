// The precompile manifest: JSON lines, one convolution per line, with the same keys and accepted
// values as the shape flags. Strict (unknown or repeated keys are errors) so that a typo cannot
// silently warm the wrong kernel. Every refusal reads "FILE:LINE: key 'K': what was expected, got
// what".
#include <fmt/format.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli.hpp"

namespace conv3djit::cli {
namespace {

using nlohmann::json;

// A line is an object of scalars and flat lists (two levels). Anything nested past this is
// refused while parsing, so that no value built from a line is deep enough for a recursive walk
// (dump() for a message, a copy, a destructor) to exhaust the stack.
constexpr int kMaxDepth = 8;
// Longer lines are refused rather than read whole (a manifest of /dev/zero must not eat memory).
constexpr size_t kMaxLineBytes = size_t{1} << 20;
// A bad value is quoted in its message up to this many bytes.
constexpr size_t kShownBytes = 48;

// Thrown for one bad key, then given the file:line by the caller.
struct KeyError {
  std::string key;
  std::string message;
};

// A bad value as its message quotes it: its JSON text, cut short on a character boundary.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() <= kShownBytes) return text;
  size_t cut = kShownBytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

// nlohmann's exception text without its "[json.exception.NAME.ID] " prefix.
std::string json_text(const json::exception& e) {
  const std::string what = e.what();
  const size_t end = what.find("] ");
  return end == std::string::npos ? what : what.substr(end + 2);
}

// The value as int64, if it is an integer that fits: nlohmann stores integers past INT64_MAX as
// unsigned, which get<int64_t>() would wrap to a negative number.
std::optional<int64_t> as_int64(const json& value) {
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  return std::nullopt;
}

// An integer, or a list of integers, as the shared checks take it.
std::vector<int64_t> ints(const json& value, const std::string& key, bool list_allowed) {
  std::vector<int64_t> out;
  if (const std::optional<int64_t> one = as_int64(value)) {
    out.push_back(*one);
    return out;
  }
  if (list_allowed && value.is_array()) {
    for (const json& item : value) {
      const std::optional<int64_t> v = as_int64(item);
      if (!v) break;
      out.push_back(*v);
    }
    if (out.size() == value.size()) return out;
  }
  throw KeyError{key, fmt::format("expected {} within int64, got {}",
                                  list_allowed ? "an integer or a list of integers" : "an integer",
                                  shown(value))};
}

std::string text(const json& value, const std::string& key) {
  if (!value.is_string()) throw KeyError{key, fmt::format("expected a string, got {}", shown(value))};
  return value.get<std::string>();
}

void check(const std::string& key, const std::string& error) {
  if (!error.empty()) throw KeyError{key, error};
}

// Parses one line. nlohmann's parser calls back on every key and before every object or array
// it enters, so depth and repeated keys are refused before anything deeper is built. A parse
// error names the top-level key whose value was being read, if any.
json parse_json(const std::string& line) {
  std::string key;       // the top-level key whose value is being read; empty between values
  std::vector<std::set<std::string>> seen;  // the keys of each open object
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    using Event = json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= kMaxDepth) {
          throw KeyError{key, fmt::format("expected at most {} nested lists or objects, got more", kMaxDepth)};
        }
        if (event == Event::object_start) seen.emplace_back();
        break;
      case Event::key: {
        const std::string& name = parsed.get_ref<const std::string&>();
        if (depth == 1) key = name;
        if (!seen.back().insert(name).second) {
          throw KeyError{key, depth == 1 ? std::string("given twice in one line; expected each key once")
                                         : fmt::format("key '{}' given twice in one object; expected each key once", name)};
        }
        break;
      }
      case Event::object_end:
        seen.pop_back();
        if (depth == 1) key.clear();
        break;
      case Event::array_end:
      case Event::value:
        if (depth == 1) key.clear();
        break;
    }
    return true;
  };
  try {
    return json::parse(line, on_event);
  } catch (const json::out_of_range& e) {
    // A number past double's range ("1e309"): nlohmann names the literal between quotes.
    const std::string what = e.what();
    const size_t open = what.find('\''), close = what.rfind('\'');
    const std::string literal = open < close ? what.substr(open + 1, close - open - 1) : json_text(e);
    throw KeyError{key, fmt::format("expected a number within double's range, got {}", literal)};
  } catch (const json::parse_error& e) {
    throw KeyError{key, fmt::format("invalid JSON: {}", json_text(e))};
  }
}

// The epilogue's number field named `key`, or null.
float* epilogue_scalar(Epilogue& e, const std::string& key) {
  const std::pair<const char*, float*> fields[] = {{"alpha", &e.alpha},         {"slope", &e.slope},
                                                   {"clamp_min", &e.clamp_min}, {"clamp_max", &e.clamp_max},
                                                   {"gamma", &e.gamma},         {"beta", &e.beta}};
  for (const auto& [name, field] : fields) {
    if (key == name) return field;
  }
  return nullptr;
}

NamedDesc parse_line(const json& line) {
  if (!line.is_object()) throw KeyError{"", fmt::format("expected a JSON object, got {}", shown(line))};
  for (const char* key : {"input", "out_channels", "kernel"}) {
    if (!line.contains(key)) throw KeyError{key, "missing (input, out_channels and kernel are required)"};
  }
  NamedDesc out;
  Conv3dDesc& d = out.desc;
  for (const auto& [key, value] : line.items()) {
    if (key == "input") {
      check(key, read_input(ints(value, key, true), d));
    } else if (key == "out_channels") {
      check(key, read_count(ints(value, key, false)[0], d.k));
    } else if (key == "kernel") {
      check(key, read_dims3(ints(value, key, true), 1, d.kernel));
    } else if (key == "stride") {
      check(key, read_dims3(ints(value, key, true), 1, d.stride));
    } else if (key == "padding") {
      check(key, value.is_string() ? read_padding_word(value.get<std::string>(), d.padding)
                                   : read_padding(ints(value, key, true), d.padding));
    } else if (key == "padding_before" || key == "padding_after") {
      if (line.contains("padding")) throw KeyError{key, "expected either padding or padding_before / padding_after, got both"};
      check(key, read_padding_side(ints(value, key, true), key == "padding_after", d.padding));
    } else if (key == "padding_mode") {
      check(key, read_padding_mode(text(value, key), d.padding_mode));
    } else if (key == "dilation") {
      check(key, read_dims3(ints(value, key, true), 1, d.dilation));
    } else if (key == "groups") {
      check(key, read_count(ints(value, key, false)[0], d.groups));
    } else if (key == "bias") {
      if (!value.is_boolean()) throw KeyError{key, fmt::format("expected true or false, got {}", shown(value))};
      d.bias = value.get<bool>();
    } else if (key == "precision") {
      check(key, read_precision(text(value, key), d.precision));
    } else if (key == "dtype") {
      check(key, read_dtype(text(value, key), d.dtype));
    } else if (key == "layout") {
      check(key, read_layout(text(value, key), d.layout));
    } else if (key == "fp32_output") {
      if (!value.is_boolean()) throw KeyError{key, fmt::format("expected true or false, got {}", shown(value))};
      d.fp32_output = value.get<bool>();
    } else if (key == "activation") {
      check(key, read_activation(text(value, key), d.epilogue.activation));
    } else if (key == "residual") {
      if (!value.is_boolean()) throw KeyError{key, fmt::format("expected true or false, got {}", shown(value))};
      d.epilogue.residual = value.get<bool>();
    } else if (float* scalar = epilogue_scalar(d.epilogue, key)) {
      if (!value.is_number()) throw KeyError{key, fmt::format("expected a number, got {}", shown(value))};
      check(key, read_scalar(value.get<double>(), *scalar));
    } else if (key == "name") {
      out.name = text(value, key);
    } else {
      throw KeyError{key, "unknown key; expected input, out_channels, kernel, stride, padding, padding_before, "
                          "padding_after, padding_mode, dilation, groups, bias, precision, dtype, layout, fp32_output, "
                          "activation, slope, clamp_min, clamp_max, alpha, gamma, residual, beta or name"};
    }
  }
  return out;
}

// The next line of `file` (without its '\n') into `line`; false at the end. Throws KeyError for a
// line longer than kMaxLineBytes, having read no more than that.
bool read_line(std::istream& file, std::string& line) {
  line.clear();
  std::streambuf& in = *file.rdbuf();
  for (int ch = in.sbumpc(); ch != std::char_traits<char>::eof(); ch = in.sbumpc()) {
    if (ch == '\n') return true;
    if (line.size() == kMaxLineBytes) {
      throw KeyError{"", fmt::format("expected a line of at most {} bytes, got a longer one", kMaxLineBytes)};
    }
    line.push_back(static_cast<char>(ch));
  }
  return !line.empty();
}

}  // namespace

std::vector<NamedDesc> read_manifest(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(ErrorCategory::InvalidArgument, fmt::format("cannot open manifest {}", path));
  std::vector<NamedDesc> descs;
  std::string line;
  for (int number = 1;; ++number) {
    const std::string where = fmt::format("{}:{}", path, number);
    try {
      if (!read_line(file, line)) break;
      const size_t first = line.find_first_not_of(" \t\r");
      if (first == std::string::npos || line[first] == '#') continue;
      NamedDesc named = parse_line(parse_json(line));
      // Invalid combinations (groups not dividing C, an empty output) are reported here, with
      // the line, rather than later as a failed compile.
      const Validation valid = validate(named.desc);
      if (!valid) throw KeyError{"", valid.message};
      if (named.name.empty()) named.name = describe(named.desc);
      descs.push_back(std::move(named));
    } catch (const KeyError& e) {
      throw Error(ErrorCategory::InvalidArgument,
                  e.key.empty() ? fmt::format("{}: {}", where, e.message)
                                : fmt::format("{}: key '{}': {}", where, e.key, e.message));
    }
  }
  if (descs.empty()) throw Error(ErrorCategory::InvalidArgument, fmt::format("{}: no shapes", path));
  return descs;
}

}  // namespace conv3djit::cli
