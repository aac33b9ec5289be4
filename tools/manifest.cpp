// The precompile manifest: JSON lines, one convolution per line, with the same keys and accepted
// values as the shape flags. Strict (unknown keys are errors) so that a typo cannot silently warm
// the wrong kernel.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace conv3djit::cli {
namespace {

using nlohmann::json;

// Thrown for one bad key, then given the file:line by the caller.
struct KeyError {
  std::string key;
  std::string message;
};

// An integer, or a list of integers, as the shared checks take it.
std::vector<int64_t> ints(const json& value, const std::string& key, bool list_allowed) {
  if (value.is_number_integer()) return {value.get<int64_t>()};
  if (list_allowed && value.is_array()) {
    std::vector<int64_t> out;
    for (const json& item : value) {
      if (!item.is_number_integer()) break;
      out.push_back(item.get<int64_t>());
    }
    if (out.size() == value.size()) return out;
  }
  throw KeyError{key, fmt::format("expected {}, got {}",
                                  list_allowed ? "an integer or a list of integers" : "an integer",
                                  value.dump())};
}

std::string text(const json& value, const std::string& key) {
  if (!value.is_string()) throw KeyError{key, fmt::format("expected a string, got {}", value.dump())};
  return value.get<std::string>();
}

void check(const std::string& key, const std::string& error) {
  if (!error.empty()) throw KeyError{key, error};
}

NamedDesc parse_line(const json& line) {
  if (!line.is_object()) throw KeyError{"", "expected a JSON object"};
  for (const char* key : {"input", "out_channels", "kernel"}) {
    if (!line.contains(key)) throw KeyError{key, "missing"};
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
    } else if (key == "dilation") {
      check(key, read_dims3(ints(value, key, true), 1, d.dilation));
    } else if (key == "groups") {
      check(key, read_count(ints(value, key, false)[0], d.groups));
    } else if (key == "bias") {
      if (!value.is_boolean()) throw KeyError{key, fmt::format("expected true or false, got {}", value.dump())};
      d.bias = value.get<bool>();
    } else if (key == "precision") {
      check(key, read_precision(text(value, key), d.precision));
    } else if (key == "name") {
      out.name = text(value, key);
    } else {
      throw KeyError{key, "unknown key"};
    }
  }
  return out;
}

}  // namespace

std::vector<NamedDesc> read_manifest(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw Error(ErrorCategory::InvalidArgument, fmt::format("cannot open manifest {}", path));
  std::vector<NamedDesc> descs;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = fmt::format("{}:{}", path, number);
    try {
      NamedDesc named = parse_line(json::parse(line));
      // Invalid combinations (groups not dividing C, an empty output) are reported here, with
      // the line, rather than later as a failed compile.
      const Validation valid = validate(named.desc);
      if (!valid) throw KeyError{"", valid.message};
      if (named.name.empty()) named.name = describe(named.desc);
      descs.push_back(std::move(named));
    } catch (const json::parse_error& e) {
      throw Error(ErrorCategory::InvalidArgument, fmt::format("{}: invalid JSON: {}", where, e.what()));
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
