// The library's result structs (precompile results, statistics, tuning results, cache listings,
// device and kernel facts, accuracy checks) as read-only Python classes with readable reprs.
#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

#include <conv3djit/engine.hpp>
#include <conv3djit/reference.hpp>

#include "bindings.hpp"

namespace conv3djit::python {
namespace {

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

// The library's "negative: not measured" as None.
std::optional<double> measured(double value) { return value < 0 ? std::nullopt : std::optional<double>(value); }

// A measured value to `digits` significant digits, or None.
std::string measured_text(double value, int digits) {
  return value < 0 ? "None" : fmt::format("{:.{}g}", value, digits);
}

std::string candidate_repr(const TunedCandidate& c) {
  std::string text = fields_repr("TunedCandidate", {{"config", quoted(c.config)},
                                                    {"heuristic", c.heuristic ? "True" : "False"},
                                                    {"median_ms", measured_text(c.median_ms, 4)},
                                                    {"rel_l2", measured_text(c.rel_l2, 3)},
                                                    {"accurate", c.accurate ? "True" : "False"}});
  if (!c.error.empty()) text.insert(text.size() - 1, ", error=" + quoted(c.error));
  return text;
}

std::string result_repr(const TuneResult& r) {
  const bool won = r.winner >= 0 && static_cast<size_t>(r.winner) < r.candidates.size();
  std::string text = fmt::format("TuneResult(description={}, candidates={}, winner={}", quoted(r.description),
                                 r.candidates.size(), r.winner);
  if (won) text += fmt::format(", best={}, median_ms={}", quoted(r.best().config), measured_text(r.best().median_ms, 4));
  text += fmt::format(", heuristic_ms={}, tuning_ms={:.1f}, from_record={}, stored={}", measured_text(r.heuristic_ms, 4),
                      r.tuning_ms, r.from_record ? "True" : "False", r.stored ? "True" : "False");
  if (!r.store_problem.empty()) text += ", store_problem=" + quoted(r.store_problem);
  return text + ")";
}

}  // namespace

void bind_results(nb::module_& m) {
  nb::class_<PrecompiledKernel>(m, "PrecompiledKernel", "One kernel precompile() made sure of.")
      .def_ro("key", &PrecompiledKernel::key)
      .def_ro("kernel", &PrecompiledKernel::kernel)
      .def_ro("compiled", &PrecompiledKernel::compiled)
      .def_ro("on_disk", &PrecompiledKernel::on_disk)
      .def_ro("compile_ms", &PrecompiledKernel::compile_ms)
      .def_ro("compiler_notes", &PrecompiledKernel::compiler_notes)
      .def_ro("registers", &PrecompiledKernel::registers, "registers a thread, from the cubin (-1: not recorded)")
      .def_ro("stack_bytes", &PrecompiledKernel::stack_bytes,
              "bytes of stack frame a thread (local memory: spills), from the cubin (-1: not recorded)")
      .def_ro("code_bytes", &PrecompiledKernel::code_bytes,
              "bytes of the kernel's machine code, from the cubin (16 an instruction; -1: not found)")
      .def("__repr__", [](const PrecompiledKernel& k) {
        return fields_repr("PrecompiledKernel",
                                              {{"kernel", quoted(k.kernel)}, {"compiled", k.compiled ? "True" : "False"},
                                               {"on_disk", k.on_disk ? "True" : "False"},
                                               {"compile_ms", fmt::format("{:.1f}", k.compile_ms)},
                                               {"registers", std::to_string(k.registers)},
                                               {"stack_bytes", std::to_string(k.stack_bytes)},
                                               {"code_bytes", std::to_string(k.code_bytes)}});
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
      .def_ro("tunes", &EngineStats::tunes, "Descriptions tuned (candidates timed) by this Engine.")
      .def_ro("tuning_ms", &EngineStats::tuning_ms, "Wall time spent tuning, compiles included.")
      .def_ro("tuned_plans", &EngineStats::tuned_plans, "Plans taken from a tuned record instead of the heuristic.")
      .def_ro("prepared_weight_reads", &EngineStats::prepared_weight_reads,
              "Calls that read prepared weights instead of preparing their weights.")
      .def("__repr__", [](const EngineStats& s) {
        return fmt::format("EngineStats(memory_hits={}, disk_hits={}, compiles={}, compile_ms={:.1f}, module_loads={}, "
                           "refused_compiles={}, tunes={}, tuning_ms={:.1f}, tuned_plans={}, prepared_weight_reads={})",
                           s.memory_hits, s.disk_hits, s.compiles, s.compile_ms, s.module_loads, s.refused_compiles,
                           s.tunes, s.tuning_ms, s.tuned_plans, s.prepared_weight_reads);
      });
  nb::class_<TunedCandidate>(m, "TunedCandidate", "One plan Engine.tune() tried.")
      .def_ro("kernel", &TunedCandidate::kernel, "The kernel's key, every field named.")
      .def_ro("config", &TunedCandidate::config,
              "The configuration that plans it, in Engine(kernel_config=...)'s form ('igemm_sm80:bm=64,bn=64').")
      .def_ro("heuristic", &TunedCandidate::heuristic, "Whether it is the planner's own choice.")
      .def_prop_ro("median_ms", [](const TunedCandidate& c) { return measured(c.median_ms); },
                   "Per call, the median of the timed launches; None: not timed (the budget ran out, or it failed).")
      .def_prop_ro("rel_l2", [](const TunedCandidate& c) { return measured(c.rel_l2); },
                   "Relative L2 error against float64 on sampled outputs; None: not measured.")
      .def_prop_ro("ready_ms", [](const TunedCandidate& c) { return measured(c.ready_ms); },
                   "Compiling (or reading from the disk cache) and loading its kernels; None when not done.")
      .def_ro("accurate", &TunedCandidate::accurate, "Within the description's accuracy class.")
      .def_ro("error", &TunedCandidate::error, "Why it could not be timed; empty when it was.")
      .def("__repr__", &candidate_repr);
  nb::class_<TuneResult>(m, "TuneResult", "What Engine.tune() found for one description.")
      .def_ro("description", &TuneResult::description, "describe(desc).")
      .def_ro("device", &TuneResult::device, "What the record is keyed by besides the description.")
      .def_ro("candidates", &TuneResult::candidates, "The TunedCandidates, the heuristic's first.")
      .def_ro("winner", &TuneResult::winner,
              "Index into candidates of the fastest accurate one; -1 when none ran within the accuracy class "
              "(then nothing is stored, and plans keep the heuristic's choice).")
      .def_prop_ro("heuristic_ms", [](const TuneResult& r) { return measured(r.heuristic_ms); },
                   "The planner's own choice's time (as the record remembers it, for one); None: not timed.")
      .def_ro("tuning_ms", &TuneResult::tuning_ms, "Wall time of this tuning, compiles included (0 for a record).")
      .def_ro("tuned_unix", &TuneResult::tuned_unix, "When the winner was measured (seconds since the epoch).")
      .def_ro("from_record", &TuneResult::from_record, "A stored record answered; nothing was timed.")
      .def_ro("stored", &TuneResult::stored, "The winner is in the disk cache now.")
      .def_ro("store_problem", &TuneResult::store_problem,
              "Why it is not, where it is not ('this Engine has no disk cache', ...); empty when stored.")
      .def_prop_ro("best",
                   [](const TuneResult& r) -> std::optional<TunedCandidate> {
                     if (r.winner < 0 || static_cast<size_t>(r.winner) >= r.candidates.size()) return std::nullopt;
                     return r.best();
                   },
                   "candidates[winner] (None without a winner).")
      .def("__repr__", &result_repr);
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
  nb::class_<PlanStep>(m, "PlanStep", "A kernel a plan launches around its convolution.")
      .def_ro("role", &PlanStep::role,
              "'weights', 'input copy', 'input copy where needed' or 'unaligned input' (the twin launched instead)")
      .def_ro("kernel", &PlanStep::kernel)
      .def_ro("grid", &PlanStep::grid)
      .def_ro("block", &PlanStep::block)
      .def_ro("shared_bytes", &PlanStep::shared_bytes)
      .def_ro("scratch_bytes", &PlanStep::scratch_bytes)
      .def("__repr__", [](const PlanStep& s) {
        return fmt::format("PlanStep(role={}, kernel={})", quoted(s.role), quoted(s.kernel));
      });
  nb::class_<PlanExplanation>(m, "PlanExplanation", "Which kernel a description runs on and why (Engine.explain).")
      .def_ro("kernel", &PlanExplanation::kernel)
      .def_ro("grid", &PlanExplanation::grid)
      .def_ro("block", &PlanExplanation::block)
      .def_ro("shared_bytes", &PlanExplanation::shared_bytes)
      .def_ro("steps", &PlanExplanation::steps)
      .def_ro("source", &PlanExplanation::source, "'planner', 'forced configuration' or 'tuned record'")
      .def_ro("passed", &PlanExplanation::passed,
              "(family, why) for each family before the chosen one in the planner's order")
      .def_ro("candidates", &PlanExplanation::candidates, "configurations tune() would time, each a kernel_config")
      .def("__repr__", [](const PlanExplanation& e) {
        return fmt::format("PlanExplanation(kernel={}, source={}, {} steps, {} families passed)", quoted(e.kernel),
                           quoted(e.source), e.steps.size(), e.passed.size());
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

}  // namespace conv3djit::python
