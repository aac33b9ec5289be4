#pragma once
// Forced configurations (EngineOptions::kernel_config, `--config`): "FAMILY", "FAMILY:V1,V2,..."
// (the family's chosen fields in table order) or "FAMILY:name=value,..." — parsed, checked and
// explained from each family's field table.
#include <string>

#include "plan/family.hpp"

namespace conv3djit::detail {

/// The family and field values `text` names. Throws Error(InvalidArgument) naming the families
/// and their fields for an unknown family, field or value.
ForcedConfig parse_config(const std::string& text);

/// Every family with its aliases, arch and fields (name, role, meaning): the help text of
/// `--config` and `conv3djit families`.
std::string config_help();

/// The accepted forms, one line ("direct[:tw] | direct_tiled:wk,ws,wr,cc,tw[,v[,p]] | ...").
std::string config_forms();

/// Throws Error(InvalidArgument): "config = '<text>': <family> needs <rules>".
[[noreturn]] void refuse_config(const ForcedConfig& config, const std::string& rules);

}  // namespace conv3djit::detail
