#include "plan/forced_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "conv3djit/error.hpp"

namespace conv3djit::detail {
namespace {

const Family* find_family(const std::string& name) {
  for (const Family* f : registry()) {
    if (name == f->kernel().name) return f;
    for (const std::string& alias : f->aliases()) {
      if (name == alias) return f;
    }
  }
  return nullptr;
}

std::string forms_of(const Family& f) {
  std::string text = f.kernel().name;
  bool first = true;
  int open = 0;
  for (const FieldInfo& field : f.kernel().fields) {
    if (field.role == FieldRole::Derived) continue;
    const bool optional = field.role == FieldRole::Optional;
    if (optional) {
      text += first ? "[:" : "[,";
      ++open;
    } else {
      text += first ? ":" : ",";
    }
    text += field.name;
    first = false;
  }
  return text + std::string(static_cast<size_t>(open), ']');
}

[[noreturn]] void malformed(const std::string& text, const std::string& why) {
  throw Error(ErrorCategory::InvalidArgument,
              fmt::format("config = '{}': {}; expected one of {}", text, why, config_forms()));
}

int parse_int(const std::string& text, const std::string& value, const char* field) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1 << 20) {
    malformed(text, fmt::format("{} = '{}' is not a non-negative integer", field, value));
  }
  return static_cast<int>(v);
}

}  // namespace

std::optional<int> ForcedConfig::get(const char* name) const {
  const auto& fields = family->kernel().fields;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (std::strcmp(fields[i].name, name) == 0) return values[i];
  }
  return std::nullopt;
}

std::string config_forms() {
  std::string text;
  for (const Family* f : registry()) text += (text.empty() ? "" : " | ") + forms_of(*f);
  return text;
}

// The element types and layouts a family serves, as its serves_types() answers for each (float32
// named "tf32" where only that class is served).
std::string served_types(const Family& f) {
  std::vector<std::string> served;
  for (DataType t : {DataType::Float32, DataType::BFloat16, DataType::Float16}) {
    for (bool wide : {false, true}) {
      if (wide && t == DataType::Float32) continue;
      for (Layout l : {Layout::NCDHW, Layout::NDHWC}) {
        Conv3dDesc d;
        d.dtype = t;
        d.fp32_output = wide;
        d.layout = l;
        const bool serves = !f.serves_types(make_problem(d));
        d.precision = Precision::Tf32;
        if (serves || (t == DataType::Float32 && !f.serves_types(make_problem(d)))) {
          served.push_back(fmt::format("{}{} {}", serves ? dtype_name(t) : "tf32", wide ? "->fp32" : "", layout_name(l)));
        }
      }
    }
  }
  return served.empty() ? "none" : fmt::format("{}", fmt::join(served, ", "));
}

std::string config_help() {
  std::string text;
  size_t width = 0;  // the longest field name: the help texts start in one column
  for (const Family* f : registry()) {
    for (const FieldInfo& field : f->kernel().fields) width = std::max(width, std::strlen(field.name));
  }
  for (const Family* f : registry()) {
    const KernelDef& def = f->kernel();
    std::string aliases;
    for (const std::string& a : f->aliases()) aliases += (aliases.empty() ? " (also " : ", ") + a;
    text += fmt::format("{}{}: kernels/{}, {}\n  types: {}\n  --config {}\n", def.name,
                        aliases.empty() ? "" : aliases + ")", def.source, f->arch(), served_types(*f), forms_of(*f));
    for (const FieldInfo& field : def.fields) {
      const char* role = field.role == FieldRole::Chosen ? "" : field.role == FieldRole::Optional ? " (optional)" : " (derived)";
      text += fmt::format("    {:<{}} {}{}\n", field.name, width, field.help, role);
    }
  }
  return text;
}

ForcedConfig parse_config(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  ForcedConfig c;
  c.text = text;
  c.family = find_family(name);
  if (c.family == nullptr) malformed(text, fmt::format("no kernel family '{}'", name));
  const std::vector<FieldInfo>& fields = c.family->kernel().fields;
  c.values.assign(fields.size(), std::nullopt);
  if (colon == std::string::npos) return c;
  std::vector<std::string> items;
  for (size_t pos = colon + 1;;) {
    const size_t comma = text.find(',', pos);
    items.push_back(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  size_t next = 0;  // positional values fill the chosen fields in table order
  for (const std::string& item : items) {
    const size_t eq = item.find('=');
    size_t index = fields.size();
    std::string value = item;
    if (eq != std::string::npos) {
      const std::string field = item.substr(0, eq);
      for (size_t i = 0; i < fields.size(); ++i) {
        if (field == fields[i].name) index = i;
      }
      if (index == fields.size() || fields[index].role == FieldRole::Derived) {
        malformed(text, fmt::format("{} has no field '{}' to set", c.family->kernel().name, field));
      }
      value = item.substr(eq + 1);
    } else {
      while (next < fields.size() && fields[next].role == FieldRole::Derived) ++next;
      if (next == fields.size()) malformed(text, fmt::format("too many values for {}", c.family->kernel().name));
      index = next++;
    }
    if (c.values[index]) malformed(text, fmt::format("{} given twice", fields[index].name));
    c.values[index] = parse_int(text, value, fields[index].name);
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (fields[i].role == FieldRole::Chosen && !c.values[i]) {
      malformed(text, fmt::format("{} needs {}", c.family->kernel().name, fields[i].name));
    }
  }
  return c;
}

void refuse_config(const ForcedConfig& config, const std::string& rules) {
  throw Error(ErrorCategory::InvalidArgument,
              fmt::format("config = '{}': {} needs {}", config.text, config.family->kernel().name, rules));
}

}  // namespace conv3djit::detail
