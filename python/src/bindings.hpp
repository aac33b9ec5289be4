#pragma once
// What the binding sources share: argument parsing that several bindings use, and each file's
// bind function (desc.cpp, results.cpp, host.cpp; module.cpp binds the Engine and defines the module).
#include <nanobind/nanobind.h>

#include <optional>
#include <string>

#include <conv3djit/conv3d.hpp>
#include <conv3djit/engine.hpp>

namespace conv3djit::python {

namespace nb = nanobind;

/// Throws Error(InvalidArgument, message): the extension's errors reach Python as conv3djit.InvalidArgument.
[[noreturn]] void invalid(const std::string& message);

/// repr() of a Python object.
std::string repr_text(nb::handle value);

/// 'fp32' / 'tf32'; anything else is InvalidArgument.
Precision precision_of(const std::string& name);

/// None / 'allow' / 'warn' / 'never'; anything else is InvalidArgument.
std::optional<CompileMode> compile_mode_of(const std::optional<std::string>& name);

/// None / 'off' / 'first_use'; anything else is InvalidArgument.
std::optional<TuneMode> tune_mode_of(const std::optional<std::string>& name);

/// Conv3dDesc, Validation and the shape functions.
void bind_desc(nb::module_& m);

/// The result structs: PrecompileResult, EngineStats, TuneResult, CacheInfo, ...
void bind_results(nb::module_& m);

/// The CPU reference, tolerance() and compare().
void bind_host(nb::module_& m);

}  // namespace conv3djit::python
