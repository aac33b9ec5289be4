// Engine: the pipeline of one conv3d call, validate -> plan -> key -> memory cache -> disk cache
// -> generate -> compile -> load -> launch, and the caches that make every step after the first
// call a lookup.
#include "conv3djit/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cache/disk_cache.hpp"
#include "cache/memory_cache.hpp"
#include "core/log.hpp"
#include "core/problem.hpp"
#include "driver/driver_api.hpp"
#include "driver/module_loader.hpp"
#include "driver/scratch.hpp"
#include "jit/codegen.hpp"
#include "jit/cubin_resources.hpp"
#include "jit/nvrtc_compiler.hpp"
#include "plan/family.hpp"
#include "tune/candidates.hpp"
#include "tune/record.hpp"
#include "tune/tuner.hpp"

namespace conv3djit {

using namespace detail;

namespace {

// A cubin is built once per arch (not per device); a kernel is loaded once per context.
struct BinaryKey {
  SpecKey spec;
  std::string arch;
  bool operator==(const BinaryKey& o) const { return spec == o.spec && arch == o.arch; }
};
struct BinaryKeyHash {
  size_t operator()(const BinaryKey& k) const {
    return SpecKeyHash{}(k.spec) ^ (std::hash<std::string>{}(k.arch) * 31);
  }
};
// Loaded functions and plans are per context: a key and the ID of the context it holds in.
template <class Key, class KeyHash>
struct InContext {
  Key key;
  unsigned long long ctx_id;
  bool operator==(const InContext& o) const { return key == o.key && ctx_id == o.ctx_id; }
  struct Hash {
    size_t operator()(const InContext& k) const {
      return KeyHash{}(k.key) ^ (std::hash<unsigned long long>{}(k.ctx_id) * 31);
    }
  };
};
using FunctionKey = InContext<SpecKey, SpecKeyHash>;

using BinaryPtr = std::shared_ptr<const KernelBinary>;


// Every field of a description, for the plan cache: the planner's tile search then runs once
// per (description, context) instead of on every call.
using DescFields = std::array<int64_t, 37>;
DescFields desc_fields(const Conv3dDesc& d) {
  const Epilogue& e = d.epilogue;
  auto bits = [](float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, sizeof u);
    return static_cast<int64_t>(u);
  };
  return {static_cast<int64_t>(e.activation), e.residual, bits(e.alpha), bits(e.slope), bits(e.clamp_min),
          bits(e.clamp_max), bits(e.gamma), bits(e.beta), d.n, d.c, d.d, d.h, d.w, d.k, d.kernel.d, d.kernel.h, d.kernel.w, d.stride.d, d.stride.h,
          d.stride.w, static_cast<int64_t>(d.padding.mode), d.padding.amount.d, d.padding.amount.h,
          d.padding.amount.w, d.padding.after.d, d.padding.after.h, d.padding.after.w,
          static_cast<int64_t>(d.padding_mode), d.dilation.d, d.dilation.h, d.dilation.w, d.groups, d.bias,
          static_cast<int64_t>(d.dtype), d.fp32_output, static_cast<int64_t>(d.layout),
          static_cast<int64_t>(d.precision)};
}
struct DescFieldsHash {
  size_t operator()(const DescFields& fields) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (int64_t v : fields) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};
using PlanKey = InContext<DescFields, DescFieldsHash>;

// How long a process waits for another one compiling the same kernel before compiling it too.
constexpr std::chrono::seconds kCompileWait{120};

// An environment variable's value in lower case ("" when unset).
std::string env_word(const char* name) {
  const char* value = std::getenv(name);
  std::string v = value != nullptr ? value : "";
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v;
}

// A yes/no environment switch: 1, true, yes, on (any case) mean yes.
bool env_flag(const char* name) {
  const std::string v = env_word(name);
  return v == "1" || v == "true" || v == "yes" || v == "on";
}

// EngineOptions::compile_mode, else $CONV3DJIT_COMPILE. An unknown value is an error rather than a
// default: a mistyped "never" must not quietly let production compile.
CompileMode compile_mode(const EngineOptions& options) {
  if (options.compile_mode) return *options.compile_mode;
  const std::string v = env_word("CONV3DJIT_COMPILE");
  if (v.empty()) return CompileMode::Allow;
  if (v == "allow") return CompileMode::Allow;
  if (v == "warn") return CompileMode::Warn;
  if (v == "never") return CompileMode::Never;
  throw Error(ErrorCategory::InvalidArgument,
              fmt::format("CONV3DJIT_COMPILE = '{}': expected allow, warn or never", std::getenv("CONV3DJIT_COMPILE")));
}

// EngineOptions::tune_mode, else $CONV3DJIT_TUNE; an unknown value is an error, as for the compile mode.
TuneMode tune_mode(const EngineOptions& options) {
  if (options.tune_mode) return *options.tune_mode;
  const std::string v = env_word("CONV3DJIT_TUNE");
  if (v.empty()) return TuneMode::Off;
  if (v == "off") return TuneMode::Off;
  if (v == "first_use" || v == "first-use") return TuneMode::FirstUse;
  throw Error(ErrorCategory::InvalidArgument, fmt::format("CONV3DJIT_TUNE = '{}': expected off or first_use", std::getenv("CONV3DJIT_TUNE")));
}

// TuneOptions out of range are refused when the Engine is made, not at the first tuning.
const TuneOptions& checked(const TuneOptions& t) {
  if (t.max_candidates < 1) {
    throw Error(ErrorCategory::InvalidArgument, fmt::format("tuning.max_candidates = {}: must be >= 1", t.max_candidates));
  }
  if (!(t.budget_ms > 0)) {
    throw Error(ErrorCategory::InvalidArgument, fmt::format("tuning.budget_ms = {}: must be > 0", t.budget_ms));
  }
  if (t.runs < 1) throw Error(ErrorCategory::InvalidArgument, fmt::format("tuning.runs = {}: must be >= 1", t.runs));
  return t;
}

// Every kernel a plan may launch: the convolution's, then its steps and its twin for misaligned
// inputs.
std::vector<std::pair<SpecKey, unsigned>> plan_kernels(const Plan& plan) {
  std::vector<std::pair<SpecKey, unsigned>> keys = {{plan.key, plan.shared_bytes}};
  for (const PrepPlan* step : {plan.prep ? &*plan.prep : nullptr, plan.input_copy ? &*plan.input_copy : nullptr}) {
    if (step != nullptr) keys.emplace_back(step->key, 0);
    if (step != nullptr && step->unaligned) keys.emplace_back(step->unaligned->key, 0);
  }
  if (plan.unaligned) keys.emplace_back(plan.unaligned->key, plan.unaligned->shared_bytes);
  return keys;
}

// Runs f; a cache miss refused by CompileMode::Never is rethrown naming the description too.
template <class F>
auto naming_misses(const Conv3dDesc& desc, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::CacheMiss) throw;
    throw Error(ErrorCategory::CacheMiss, fmt::format("{}, needed by {}", e.message(), describe(desc)));
  }
}

// Whether the `bytes` from ptr lie inside one device allocation. cuMemGetAddressRange gives the
// allocation holding ptr; memory mapped with the virtual memory API (PyTorch's expandable
// segments) reports only the piece holding ptr, so a tensor that runs past its piece is accepted
// when ptr and its last byte are both such mappings.
bool inside_allocation(CUdeviceptr ptr, uint64_t bytes, CUdeviceptr* base, size_t* size) {
  const DriverApi& d = driver();
  if (d.cuMemGetAddressRange(base, size, ptr) != CUDA_SUCCESS) return false;
  if (bytes <= *base + *size - ptr) return true;
  const auto mapped = [&](CUdeviceptr p) {
    CUmemGenericAllocationHandle handle{};
    if (d.cuMemRetainAllocationHandle(&handle, reinterpret_cast<void*>(p)) != CUDA_SUCCESS) return false;
    d.cuMemRelease(handle);
    return true;
  };
  CUdeviceptr last_base = 0;
  size_t last_size = 0;
  return mapped(ptr) && d.cuMemGetAddressRange(&last_base, &last_size, ptr + bytes - 1) == CUDA_SUCCESS &&
         mapped(ptr + bytes - 1);
}

// A description larger than the buffers it is given would make the kernel fault, which poisons
// the whole context: each tensor must lie inside its allocation.
void check_allocations(const Problem& prob, const Conv3dDesc& desc, const Conv3dTensors& t, int output_bytes) {
  const int bytes = element_bytes(desc.dtype);
  struct Tensor {
    const char* name;
    const void* ptr;
    int64_t elements;
    int element_bytes;
  };
  const Tensor tensors[] = {{"input", t.input, prob.input_elements, bytes},
                            {"weight", t.weight, prob.weight_elements, bytes},
                            {"bias", desc.bias ? t.bias : nullptr, desc.k, bytes},
                            {"output", t.output, prob.output_elements, output_bytes},
                            {"residual", desc.epilogue.residual ? t.residual : nullptr, prob.output_elements,
                             element_bytes(prob.out_dtype)}};
  for (const Tensor& x : tensors) {
    if (x.ptr == nullptr) continue;  // validate() has refused a missing tensor already
    const auto ptr = reinterpret_cast<CUdeviceptr>(x.ptr);
    const uint64_t need = static_cast<uint64_t>(x.elements) * static_cast<uint64_t>(x.element_bytes);
    CUdeviceptr base = 0;
    size_t size = 0;
    if (inside_allocation(ptr, need, &base, &size)) continue;
    if (base == 0) {
      throw Error(ErrorCategory::InvalidArgument,
                  fmt::format("{} = {:#x}: not device memory of the stream's context (cuMemGetAddressRange "
                              "knows no allocation there)", x.name, ptr));
    }
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("{} = {:#x} needs {} bytes ({} elements of {} bytes for {}), but its allocation "
                            "({} bytes from {:#x}) ends {} bytes after it. (If the tensor is whole, in memory "
                            "the driver reports in pieces, such as an allocator's pool: set "
                            "Conv3dTensors::shapes_checked or EngineOptions::check_allocations = false.)",
                            x.name, ptr, need, x.elements, x.element_bytes, describe(desc), size, base,
                            base + size - ptr));
  }
}

}  // namespace

// The weight tensor's shape, type and layout in a description, which prepared weights must match.
using WeightFields = std::array<int64_t, 8>;
WeightFields weight_fields(const Conv3dDesc& d) {
  return {d.k, d.c, d.groups, d.kernel.d, d.kernel.h, d.kernel.w, static_cast<int64_t>(d.dtype),
          static_cast<int64_t>(d.layout)};
}
std::string weight_text(const Conv3dDesc& d) {
  return fmt::format("{} x {} x {} x {} x {} {} {}", d.k, d.c / std::max<int64_t>(d.groups, 1), d.kernel.d, d.kernel.h,
                     d.kernel.w, dtype_name(d.dtype), layout_name(d.layout));
}

// What prepare_weights made: the weights it fits (their tensor, shape and context) and, where the
// plan prepares its weights, that step's kernel and the memory it wrote.
struct PreparedWeights::State {
  WeightFields fields{};
  std::string weights;  // weight_text, for errors
  unsigned long long ctx_id = 0;
  CUcontext ctx = nullptr;
  const void* source = nullptr;
  std::optional<SpecKey> prep_key;
  CUdeviceptr ptr = 0;
  uint64_t bytes = 0;

  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  ~State() {
    if (ptr == 0) return;
    try {
      ContextScope scope(ctx);
      driver().cuMemFree(ptr);
    } catch (...) {  // (a destructor: a driver already torn down at exit leaves nothing to free)
    }
  }
};

PreparedWeights::PreparedWeights() noexcept = default;
PreparedWeights::PreparedWeights(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}
PreparedWeights::~PreparedWeights() = default;
PreparedWeights::PreparedWeights(PreparedWeights&&) noexcept = default;
PreparedWeights& PreparedWeights::operator=(PreparedWeights&&) noexcept = default;
std::string PreparedWeights::kernel() const {
  return state_ && state_->prep_key ? canonical_text(*state_->prep_key) : std::string();
}
uint64_t PreparedWeights::bytes() const noexcept { return state_ ? state_->bytes : 0; }

namespace {
// Throws Error(InvalidArgument) where t.prepared_weights are not for this call.
void check_prepared(const Conv3dDesc& desc, const Conv3dTensors& t, const CallContext& ctx) {
  if (t.prepared_weights == nullptr) return;
  const PreparedWeights::State* p = t.prepared_weights->state();
  if (p == nullptr) {
    throw Error(ErrorCategory::InvalidArgument, "tensors.prepared_weights was not made by prepare_weights (it is empty)");
  }
  if (p->fields != weight_fields(desc)) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("tensors.prepared_weights were prepared for weights of {}, but this call's are {} ({})",
                            p->weights, weight_text(desc), describe(desc)));
  }
  if (p->ctx_id != ctx.id) {
    throw Error(ErrorCategory::InvalidArgument,
                "tensors.prepared_weights were prepared in another context (device) than the stream's: prepare "
                "them on each device that runs the layer");
  }
  if (p->source != t.weight) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("tensors.prepared_weights were made from the weights at {}, but tensors.weight = {}: "
                            "pass the tensor they were made from (or prepare this one)",
                            fmt::ptr(p->source), fmt::ptr(t.weight)));
  }
}
}  // namespace

struct Engine::Impl {
  explicit Impl(EngineOptions o)
      : options(std::move(o)),
        mode(compile_mode(options)),
        tuning(tune_mode(options)),
        tune_options(checked(options.tuning)),
        disk(options.disk_cache ? std::make_unique<DiskCache>(options.cache_dir, options.cache_limit_bytes,
                                                              options.trust_shared_cache ||
                                                                  env_flag("CONV3DJIT_TRUST_SHARED_CACHE"))
                                : nullptr) {}

  EngineOptions options;
  CompileMode mode;
  TuneMode tuning;
  TuneOptions tune_options;
  std::unique_ptr<DiskCache> disk;
  MemoryCache<BinaryKey, BinaryPtr, BinaryKeyHash> binaries;
  MemoryCache<FunctionKey, CUfunction, FunctionKey::Hash> functions;
  MemoryCache<PlanKey, Plan, PlanKey::Hash> plans;
  std::mutex contexts_mutex;
  std::unordered_map<unsigned long long, ContextInfo> contexts;  // by context ID
  std::atomic<uint64_t> memory_hits{0}, disk_hits{0}, compiles{0}, module_loads{0}, refused_compiles{0};
  std::atomic<uint64_t> prepared_weight_reads{0};
  std::atomic<uint64_t> compile_us{0};
  std::atomic<uint64_t> tunes{0}, tuning_us{0}, tuned_plans{0};
  // Records of this Engine's tuning, by key text: what an Engine without a disk cache keeps.
  std::mutex records_mutex;
  std::unordered_map<std::string, TunedRecord> records;
  std::unordered_map<unsigned long long, DeviceIdentity> identities;  // by context ID, under contexts_mutex

  const ContextInfo& context_info(const CallContext& ctx) {
    std::lock_guard<std::mutex> lock(contexts_mutex);
    auto it = contexts.find(ctx.id);
    if (it == contexts.end()) it = contexts.emplace(ctx.id, describe_context(ctx.handle)).first;
    return it->second;  // unordered_map never moves its elements
  }

  // The cubin for key on arch: memory, else disk, else NVRTC. *hit: it was already in memory.
  BinaryPtr binary(const SpecKey& key, const std::string& arch, bool* hit = nullptr) {
    return binaries.get_or_create(BinaryKey{key, arch}, [&] {
      const GeneratedKernel gen = generate(key, arch);
      const std::string key_text = cache_key_text(key, arch, gen.options);
      auto result = std::make_shared<KernelBinary>();
      const auto from_disk = [&] {
        if (!disk) return false;
        const std::optional<std::string> payload = disk->load(key_text);
        if (!payload) return false;
        if (!from_payload(*payload, result.get())) {
          log().warn("disk cache entry has no kernel name, rebuilding: {}", key_text);
          disk->remove(key_text);
          return false;
        }
        result->from_disk = true;
        disk_hits.fetch_add(1);
        log().debug("disk cache hit: {}", key_text);
        return true;
      };
      if (from_disk()) return BinaryPtr(result);
      if (mode == CompileMode::Never) {
        refused_compiles.fetch_add(1);
        throw Error(ErrorCategory::CacheMiss,
                    fmt::format("kernel '{}' for {} is not in the cache{} and compiling is off "
                                "(CONV3DJIT_COMPILE=never / CompileMode::Never); precompile it",
                                canonical_text(key), arch, disk ? fmt::format(" '{}'", disk->dir()) : ""));
      }
      // One process compiles, the others sharing the folder wait for it and read its entry.
      DiskCache::KeyLock lock;
      if (disk) lock = disk->lock(key_text, kCompileWait);
      if (lock.waited() && from_disk()) return BinaryPtr(result);
      if (mode == CompileMode::Warn) {
        log().warn("compiling '{}' for {}: not in the cache{}", canonical_text(key), arch,
                   disk ? fmt::format(" '{}'", disk->dir()) : "");
      }
      const auto start = std::chrono::steady_clock::now();
      int attempts = 1;
      CompiledKernel compiled =
          nvrtc_compile_spill_free(gen, key.kernel->blocks_an_sm ? key.kernel->blocks_an_sm(key) : 1, &attempts);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      compiles.fetch_add(1);
      compile_us.fetch_add(static_cast<uint64_t>(ms * 1000));
      log().debug("compiled {} in {:.0f} ms ({} bytes{})", canonical_text(key), ms, compiled.cubin.size(),
                  attempts > 1 ? fmt::format(", {} compiles for a register budget without spills", attempts) : "");
      // ptxas reports slow code it could not avoid here, e.g. serialised wgmmas (C7512).
      if (!compiled.notes.empty()) log().warn("compiler notes for {}:\n{}", canonical_text(key), compiled.notes);
      result->compile_notes = std::move(compiled.notes);
      result->lowered_name = std::move(compiled.lowered_name);
      result->cubin = std::move(compiled.cubin);
      result->compile_ms = ms;
      if (disk) result->disk_problem = disk->store(key_text, to_payload(*result));
      return BinaryPtr(result);
    }, hit);
  }

  // precompile()'s promise: the kernel's cubin is on disk afterwards (when the Engine has a disk
  // cache), or an error says why not.
  PrecompiledKernel precompile(const SpecKey& key, const std::string& arch) {
    bool hit = false;
    BinaryPtr bin = binary(key, arch, &hit);
    PrecompiledKernel r;
    r.key = cache_key_text(key, arch, generate(key, arch).options);
    r.kernel = canonical_text(key);
    r.compiled = !hit && !bin->from_disk;
    r.compile_ms = r.compiled ? bin->compile_ms : 0;
    if (r.compiled) r.compiler_notes = bin->compile_notes;
    const CubinResources resources = cubin_resources(bin->cubin, bin->lowered_name);
    r.registers = resources.registers;
    r.stack_bytes = resources.stack_bytes;
    r.code_bytes = resources.code_bytes;
    if (!disk) return r;
    std::string problem = r.compiled ? bin->disk_problem : "";
    // Kept in memory from before: the entry may have gone from disk since (cleared, evicted).
    if (!r.compiled && !disk->contains(r.key)) problem = disk->store(r.key, to_payload(*bin));
    if (!problem.empty()) {
      throw Error(ErrorCategory::CacheIO, fmt::format("kernel '{}' was not saved in the disk cache '{}': {}",
                                                      r.kernel, disk->dir(), problem));
    }
    r.on_disk = true;
    return r;
  }

  CUfunction function(const SpecKey& key, unsigned shared_bytes, const CallContext& ctx) {
    bool hit = false;
    CUfunction fn = functions.get_or_create(FunctionKey{key, ctx.id}, [&] {
      const ContextInfo& info = context_info(ctx);
      BinaryPtr bin = binary(key, info.arch);
      module_loads.fetch_add(1);
      try {
        return load_kernel(ctx.handle, *bin, shared_bytes);
      } catch (const Error& e) {
        if (!bin->from_disk) throw;
        // A cached cubin the driver refuses is a miss: forget it everywhere and build it afresh.
        log().warn("driver refused a cached kernel, rebuilding: {}", e.what());
        const GeneratedKernel gen = generate(key, info.arch);
        disk->remove(cache_key_text(key, info.arch, gen.options));
        binaries.erase(BinaryKey{key, info.arch});
        bin = binary(key, info.arch);
        module_loads.fetch_add(1);
        return load_kernel(ctx.handle, *bin, shared_bytes);
      }
    }, &hit);
    if (hit) memory_hits.fetch_add(1, std::memory_order_relaxed);
    return fn;
  }

  const DeviceIdentity& identity(const CallContext& ctx) {
    const CUdevice device = context_info(ctx).device;
    std::lock_guard<std::mutex> lock(contexts_mutex);
    auto it = identities.find(ctx.id);
    if (it == identities.end()) it = identities.emplace(ctx.id, identify_device(device)).first;
    return it->second;
  }

  std::optional<TunedRecord> find_record(const std::string& key) {
    {
      std::lock_guard<std::mutex> lock(records_mutex);
      auto it = records.find(key);
      if (it != records.end()) return it->second;
    }
    if (!disk) return std::nullopt;
    const std::optional<std::string> payload = disk->load(key);
    if (!payload) return std::nullopt;
    std::optional<TunedRecord> record = decode_record(*payload);
    if (!record) log().warn("disk cache entry is not a tuned record, ignored: {}", key);
    return record;
  }

  // The plan a record names, if there is one for desc on ctx's device and it still plans the
  // kernel it names.
  std::optional<Plan> recorded_plan(const Problem& prob, const Conv3dDesc& desc, const CallContext& ctx) {
    const std::string key = record_key_text(desc, identity(ctx));
    const std::optional<TunedRecord> record = find_record(key);
    if (!record) return std::nullopt;
    try {
      Plan plan = make_plan(prob, context_info(ctx).limits, record->config);
      if (canonical_text(plan.key) == record->kernel) {
        tuned_plans.fetch_add(1);
        return plan;
      }
      log().warn("tuned record for {} names '{}', but '{}' now plans '{}': using the planner's choice", describe(desc),
                 record->kernel, record->config, canonical_text(plan.key));
    } catch (const Error& e) {
      log().warn("tuned record for {} cannot be planned ({}): using the planner's choice", describe(desc), e.what());
    }
    return std::nullopt;
  }

  // Times the candidates and keeps the winner's record (on disk where there is a disk cache).
  // *winner_plan (if given) becomes the winner's plan.
  TuneResult tune_now(const Problem& prob, const Conv3dDesc& desc, const CallContext& ctx,
                      Plan* winner_plan = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    const DeviceLimits& limits = context_info(ctx).limits;
    const std::vector<Candidate> candidates = tuning_candidates(prob, limits, tune_options.max_candidates);
    TuneHooks hooks;
    hooks.prepare = [&](const Plan& plan) {
      for (const auto& [key, shared] : plan_kernels(plan)) function(key, shared, ctx);
    };
    hooks.launch = [&](const Plan& plan, const Conv3dTensors& t, CUstream stream) { launch(plan, t, stream, ctx); };
    TuneResult result;
    result.description = describe(desc);
    result.device = identity(ctx).text();
    result.candidates = naming_misses(desc, [&] { return time_candidates(prob, candidates, tune_options, ctx.handle, hooks); });
    for (size_t i = 0; i < result.candidates.size(); ++i) {
      const TunedCandidate& c = result.candidates[i];
      if (c.median_ms < 0 || !c.accurate) continue;
      if (result.winner < 0 || c.median_ms < result.candidates[result.winner].median_ms) result.winner = static_cast<int>(i);
    }
    result.tuning_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    tunes.fetch_add(1);
    tuning_us.fetch_add(static_cast<uint64_t>(result.tuning_ms * 1000));
    result.heuristic_ms = result.candidates.front().median_ms;
    result.tuned_unix = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    if (result.winner < 0) {
      const TunedCandidate& h = result.candidates.front();
      result.store_problem = "no candidate ran within the accuracy class";
      log().warn("tuning {}: no candidate ran within its accuracy class (the planner's, {}: {}); nothing stored",
                 result.description, h.kernel,
                 !h.error.empty() ? h.error : fmt::format("rel-L2 {:.3g} on sampled outputs", h.rel_l2));
      return result;
    }
    const TunedCandidate& best = result.best();
    TunedRecord record;
    record.config = best.config;
    record.kernel = best.kernel;
    record.median_ms = best.median_ms;
    record.heuristic_ms = result.heuristic_ms;
    record.candidates = static_cast<int>(std::count_if(result.candidates.begin(), result.candidates.end(),
                                                       [](const TunedCandidate& c) { return c.median_ms >= 0; }));
    record.tuned_unix = result.tuned_unix;
    const std::string key = record_key_text(desc, identity(ctx));
    {
      std::lock_guard<std::mutex> lock(records_mutex);
      records[key] = record;
    }
    result.store_problem = disk ? disk->store(key, encode_record(record)) : "this Engine has no disk cache";
    result.stored = result.store_problem.empty();
    if (!result.stored) log().warn("tuned record for {} kept in memory only: {}", result.description, result.store_problem);
    if (disk) {
      // The winner's kernels go to disk too, so that a process with this cache compiles nothing.
      try {
        for (const auto& [kernel, shared] : plan_kernels(candidates[result.winner].plan)) {
          precompile(kernel, context_info(ctx).arch);
        }
      } catch (const Error& e) {
        log().warn("tuned {}: its kernels are not all in the disk cache: {}", result.description, e.what());
      }
    }
    log().info("tuned {} in {:.0f} ms: {} at {:.4f} ms (the planner's choice {:.4f} ms, {} candidates timed)",
               result.description, result.tuning_ms, best.kernel, best.median_ms, record.heuristic_ms,
               record.candidates);
    if (winner_plan != nullptr) *winner_plan = candidates[result.winner].plan;
    return result;
  }

  // The plan without the plan cache: a forced configuration, else a tuned record, else (tuning on
  // first use, outside graph capture) a tuning's winner, else the planner's choice.
  Plan choose_plan(const Problem& prob, const Conv3dDesc& desc, const CallContext& ctx, bool may_tune) {
    const DeviceLimits& limits = context_info(ctx).limits;
    if (!options.kernel_config.empty()) return make_plan(prob, limits, options.kernel_config);
    if (std::optional<Plan> plan = recorded_plan(prob, desc, ctx)) return std::move(*plan);
    if (may_tune) {
      try {
        Plan winner;
        if (tune_now(prob, desc, ctx, &winner).winner >= 0) return winner;
      } catch (const Error& e) {
        if (e.category() == ErrorCategory::CacheMiss) throw;
        log().warn("tuning {} failed, using the planner's choice: {}", describe(desc), e.what());
      }
    }
    return make_plan(prob, limits, "");
  }

  // The plan for desc on ctx's device, made once per description and context. While `stream`
  // captures a graph nothing is tuned: a plan not made yet is made from a record or the
  // heuristic, and not kept, so that the first call outside the capture tunes.
  Plan plan(const Problem& prob, const Conv3dDesc& desc, const CallContext& ctx, CUstream stream) {
    const PlanKey key{desc_fields(desc), ctx.id};
    const bool may_tune = tuning == TuneMode::FirstUse && options.kernel_config.empty();
    if (may_tune) {
      if (std::optional<Plan> cached = plans.find(key)) return std::move(*cached);  // no driver call per run
      if (stream_capturing(stream)) return choose_plan(prob, desc, ctx, false);
    }
    return plans.get_or_create(key, [&] { return choose_plan(prob, desc, ctx, may_tune); });
  }

  // One step before a convolution (PrepPlan), writing `to`; its arguments are the convolution's.
  void launch_step(const PrepPlan& step, const ConvParams& params, const void* in, const void* wt, const void* bias,
                   void* to, CUstream stream, const CallContext& ctx) {
    CUfunction step_fn = function(step.key, 0, ctx);
    ConvParams p = params;
    // Steps with TMA boxes take their two maps after the five arguments; the others read no further.
    CUtensorMap in_map{}, out_map{};
    if (step.tensor_maps != nullptr) step.tensor_maps(step, params, in, to, &in_map, &out_map);
    void* step_args[] = {&in, &wt, &bias, &to, &p, &in_map, &out_map};
    check_cu(driver().cuLaunchKernel(step_fn, step.grid, 1, 1, step.block, 1, 1, 0, stream, step_args, nullptr),
             "cuLaunchKernel");
  }

  void launch(const Plan& planned, const Conv3dTensors& t, CUstream stream, const CallContext& ctx) {
    // 16-byte copies and loads need a 16-byte aligned input; other inputs take the plan's twin.
    const bool aligned = reinterpret_cast<uintptr_t>(t.input) % 16 == 0;
    const Plan& plan = planned.for_input(aligned);
    // The stream's context, even when the caller's current context is another device's.
    ContextScope scope(ctx.handle);
    CUfunction fn = function(plan.key, plan.shared_bytes, ctx);
    const void* in = t.input;
    const void* wt = t.weight;
    // The kernels read bias only when has_bias; any valid pointer will do otherwise.
    const void* bias = t.bias != nullptr ? t.bias : t.weight;
    ConvParams params = plan.params;
    params.residual = reinterpret_cast<uintptr_t>(t.residual);
    // A step before the convolution writes scratch memory from the call's tensors, which the
    // convolution then reads instead: a copy of the input in rows of 16-byte multiples for TMA
    // boxes, prepared weights.
    auto prepare = [&](const PrepPlan& step, std::optional<Scratch>& scratch) {
      void* to = reinterpret_cast<void*>(scratch.emplace(step.workspace_bytes, stream, context_info(ctx).device).ptr());
      launch_step(step, params, in, wt, bias, to, stream, ctx);
      return to;
    };
    std::optional<Scratch> pitched, prepared;
    // TMA maps need a 16-byte aligned input too: a plan with boxes copies such an input first, as it
    // does one whose rows are not 16-byte multiples (Plan::copies_input).
    if (plan.copies_input(aligned)) in = prepare(plan.input_copy->for_input(aligned), pitched);
    if (plan.prep) {
      // Weights prepared ahead (run() has checked that they are this call's tensor) by this step's
      // kernel; a plan that prepares them another way (another description of the same weights, an
      // unaligned input's twin) does so here.
      const PreparedWeights::State* ready = t.prepared_weights != nullptr ? t.prepared_weights->state() : nullptr;
      if (ready != nullptr && ready->prep_key && *ready->prep_key == plan.prep->key) {
        wt = reinterpret_cast<const void*>(ready->ptr);
        ++prepared_weight_reads;
      } else {
        wt = prepare(*plan.prep, prepared);
      }
    }
    // A weight read through a tensor map must lie on 16 bytes: one that does not is copied.
    std::optional<Scratch> aligned_weight;
    if (plan.weight_map && reinterpret_cast<uintptr_t>(wt) % 16 != 0) {
      const uint64_t bytes = static_cast<uint64_t>(plan.params.k) * plan.params.c_per_group * plan.params.kd *
                             plan.params.kh * plan.params.kw * element_bytes(plan.key.dtype);
      const CUdeviceptr to = aligned_weight.emplace(bytes, stream, context_info(ctx).device).ptr();
      check_cu(driver().cuMemcpyDtoDAsync(to, reinterpret_cast<CUdeviceptr>(wt), bytes, stream), "cuMemcpyDtoDAsync");
      wt = reinterpret_cast<const void*>(to);
    }
    // Kernels with TMA copies take their family's maps (up to three) as their last parameters
    // (zero where unused); the other kernels have five parameters and the driver reads no further.
    CUtensorMap map{}, out_map{}, third_map{};
    if (plan.family != nullptr) plan.family->tensor_maps(plan, in, wt, t.output, &map, &out_map, &third_map);
    void* out = t.output;
    void* args[] = {&in, &wt, &bias, &out, &params, &map, &out_map, &third_map};
    check_cu(driver().cuLaunchKernel(fn, plan.grid, 1, 1, plan.block, 1, 1, plan.shared_bytes, stream, args, nullptr),
             "cuLaunchKernel");
  }
};

Engine::Engine(EngineOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Engine::~Engine() = default;

Engine& Engine::global() {
  // Never destroyed: kernels may still be in flight, and the driver may already be torn down
  // at static destruction time.
  static Engine* engine = new Engine();
  return *engine;
}

void Engine::run(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream) {
  const Problem prob = make_problem(desc, &tensors);
  const auto cu_stream = static_cast<CUstream>(stream);
  const CallContext ctx = call_context(cu_stream);
  if (impl_->options.check_allocations && !tensors.shapes_checked) {
    ContextScope scope(ctx.handle);
    check_allocations(prob, desc, tensors, element_bytes(prob.out_dtype));
  }
  check_prepared(desc, tensors, ctx);
  naming_misses(desc, [&] { impl_->launch(impl_->plan(prob, desc, ctx, cu_stream), tensors, cu_stream, ctx); });
}

PreparedWeights Engine::prepare_weights(const Conv3dDesc& desc, const void* weight, Stream stream) {
  const Problem prob = make_problem(desc);
  if (weight == nullptr) throw Error(ErrorCategory::InvalidArgument, "weight = null: there are no weights to prepare");
  const auto cu_stream = static_cast<CUstream>(stream);
  const CallContext ctx = call_context(cu_stream);
  if (stream_capturing(cu_stream)) {
    throw Error(ErrorCategory::InvalidArgument,
                "the stream is capturing a CUDA graph: prepare the weights before capturing (the preparation must "
                "run, not be recorded)");
  }
  auto state = std::make_unique<PreparedWeights::State>();
  state->fields = weight_fields(desc);
  state->weights = weight_text(desc);
  state->ctx_id = ctx.id;
  state->ctx = ctx.handle;
  state->source = weight;
  naming_misses(desc, [&] {
    ContextScope scope(ctx.handle);
    if (impl_->options.check_allocations) {
      Conv3dTensors t;
      t.weight = weight;
      check_allocations(prob, desc, t, element_bytes(prob.out_dtype));
    }
    // The plan of a 16-byte aligned input; an unaligned input's twin that prepares otherwise
    // prepares on its calls.
    const Plan plan = impl_->plan(prob, desc, ctx, cu_stream);
    if (!plan.prep) return;
    const PrepPlan& step = *plan.prep;
    check_cu(driver().cuMemAlloc(&state->ptr, step.workspace_bytes), "cuMemAlloc");
    state->bytes = step.workspace_bytes;
    state->prep_key = step.key;
    impl_->launch_step(step, plan.params, weight, weight, weight, reinterpret_cast<void*>(state->ptr), cu_stream, ctx);
    check_cu(driver().cuStreamSynchronize(cu_stream), "cuStreamSynchronize");
  });
  return PreparedWeights(std::move(state));
}

PreparedWeights prepare_weights(const Conv3dDesc& desc, const void* weight, Stream stream) {
  return Engine::global().prepare_weights(desc, weight, stream);
}

KernelResources Engine::resources(const Conv3dDesc& desc, Stream stream, bool aligned_input) {
  const Problem prob = make_problem(desc);
  const CallContext ctx = call_context(static_cast<CUstream>(stream));
  const Plan planned = impl_->plan(prob, desc, ctx, static_cast<CUstream>(stream));
  const Plan& plan = planned.for_input(aligned_input);
  ContextScope scope(ctx.handle);
  CUfunction fn = naming_misses(desc, [&] { return impl_->function(plan.key, plan.shared_bytes, ctx); });
  auto attribute = [fn](CUfunction_attribute a) {
    int v = 0;
    check_cu(driver().cuFuncGetAttribute(&v, a, fn), "cuFuncGetAttribute");
    return v;
  };
  KernelResources r;
  r.kernel = canonical_text(plan.key);
  r.registers = attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  r.local_bytes = attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  r.static_shared_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  r.dynamic_shared_bytes = plan.shared_bytes;
  r.grid = plan.grid;
  r.block = plan.block;
  return r;
}

void Engine::run_reference(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream) {
  const Problem prob = make_problem(desc, &tensors);
  const auto cu_stream = static_cast<CUstream>(stream);
  const CallContext ctx = call_context(cu_stream);
  if (impl_->options.check_allocations && !tensors.shapes_checked) {
    ContextScope scope(ctx.handle);
    check_allocations(prob, desc, tensors, sizeof(double));
  }
  const Plan plan = make_reference_plan(prob, impl_->context_info(ctx).limits);
  naming_misses(desc, [&] { impl_->launch(plan, tensors, cu_stream, ctx); });
}

namespace {
// The arch to build for: the caller's, else the current device's (which needs a GPU).
std::string target_arch(Engine::Impl& impl, const std::string& arch, DeviceLimits* limits) {
  if (!arch.empty()) {
    detail::check_arch(arch);
    *limits = limits_for_arch(arch);
    return arch;
  }
  const ContextInfo& info = impl.context_info(call_context(nullptr));
  *limits = info.limits;
  return info.arch;
}
}  // namespace

PrecompileResult Engine::precompile(const Conv3dDesc& desc, const std::string& arch) {
  const Problem prob = make_problem(desc);
  DeviceLimits limits;
  const std::string target = target_arch(*impl_, arch, &limits);
  // For this device, the kernel a tuned record names (precompile never tunes); for an arch, the
  // planner's.
  const Plan plan = arch.empty() ? impl_->choose_plan(prob, desc, call_context(nullptr), false)
                                 : make_plan(prob, limits, impl_->options.kernel_config);
  return naming_misses(desc, [&] {
    PrecompileResult r;
    // Production must not compile the helpers either: weight preparation, the input's copy for
    // TMA boxes, the twin for misaligned inputs.
    for (const auto& [key, shared] : plan_kernels(plan)) r.kernels.push_back(impl_->precompile(key, target));
    return r;
  });
}

std::string Engine::kernel_for(const Conv3dDesc& desc, const std::string& arch) {
  const Problem prob = make_problem(desc);
  DeviceLimits limits;
  target_arch(*impl_, arch, &limits);
  if (arch.empty()) return canonical_text(impl_->choose_plan(prob, desc, call_context(nullptr), false).key);
  return canonical_text(make_plan(prob, limits, impl_->options.kernel_config).key);
}

PlanExplanation Engine::explain(const Conv3dDesc& desc, const std::string& arch, int candidates) {
  const Problem prob = make_problem(desc);
  DeviceLimits limits;
  target_arch(*impl_, arch, &limits);
  PlanExplanation r;
  std::vector<FamilyVerdict> verdicts;
  // choose_plan's order, without tuning.
  std::optional<Plan> plan;
  if (!impl_->options.kernel_config.empty()) {
    plan = make_plan(prob, limits, impl_->options.kernel_config);
    r.source = "forced configuration";
  } else if (arch.empty() && (plan = impl_->recorded_plan(prob, desc, call_context(nullptr)))) {
    r.source = "tuned record";
  } else {
    plan = explain_plan(prob, limits, &verdicts);
    r.source = "planner";
  }
  r.kernel = canonical_text(plan->key);
  r.grid = plan->grid, r.block = plan->block, r.shared_bytes = plan->shared_bytes;
  auto step = [&](const char* role, const PrepPlan& p) {
    r.steps.push_back({role, canonical_text(p.key), p.grid, p.block, 0, p.workspace_bytes});
  };
  if (plan->prep) step("weights", *plan->prep);
  if (plan->input_copy) step(plan->input_copy->every_call ? "input copy" : "input copy where needed", *plan->input_copy);
  if (const Plan* twin = plan->unaligned.get()) {
    r.steps.push_back({"unaligned input", canonical_text(twin->key), twin->grid, twin->block, twin->shared_bytes, 0});
  }
  for (const FamilyVerdict& v : verdicts) {
    if (!v.passed.empty()) r.passed.emplace_back(v.family->kernel().name, v.passed);
  }
  if (candidates > 0) {
    for (const Candidate& c : tuning_candidates(prob, limits, candidates)) r.candidates.push_back(c.config);
  }
  return r;
}

TuneResult Engine::tune(const Conv3dDesc& desc, Stream stream, bool retune) {
  const Problem prob = make_problem(desc);
  const auto cu_stream = static_cast<CUstream>(stream);
  const CallContext ctx = call_context(cu_stream);
  if (!impl_->options.kernel_config.empty()) {
    throw Error(ErrorCategory::InvalidArgument,
                fmt::format("kernel_config = '{}': a forced configuration leaves nothing to tune", impl_->options.kernel_config));
  }
  if (stream_capturing(cu_stream)) {
    throw Error(ErrorCategory::InvalidArgument, "the stream is capturing a CUDA graph: tune before capturing");
  }
  if (!retune) {
    const std::string key = record_key_text(desc, impl_->identity(ctx));
    if (std::optional<TunedRecord> record = impl_->find_record(key)) {
      TuneResult r;
      r.description = describe(desc);
      r.device = impl_->identity(ctx).text();
      TunedCandidate c;
      c.kernel = record->kernel;
      c.config = record->config;
      c.median_ms = record->median_ms;
      c.accurate = true;  // it won an accuracy check when it was tuned
      c.heuristic = c.kernel == canonical_text(make_plan(prob, impl_->context_info(ctx).limits, "").key);
      r.candidates.push_back(c);
      r.winner = 0;
      r.heuristic_ms = record->heuristic_ms;
      r.tuned_unix = record->tuned_unix;
      r.from_record = true;
      r.stored = impl_->disk && impl_->disk->contains(key);
      if (!r.stored) r.store_problem = impl_->disk ? "the record is in this Engine's memory only" : "this Engine has no disk cache";
      return r;
    }
  }
  TuneResult r = impl_->tune_now(prob, desc, ctx);
  impl_->plans.erase(PlanKey{desc_fields(desc), ctx.id});  // the next call plans from the record
  return r;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.memory_hits = impl_->memory_hits.load();
  s.disk_hits = impl_->disk_hits.load();
  s.compiles = impl_->compiles.load();
  s.compile_ms = impl_->compile_us.load() / 1000.0;
  s.module_loads = impl_->module_loads.load();
  s.refused_compiles = impl_->refused_compiles.load();
  s.tunes = impl_->tunes.load();
  s.tuning_ms = impl_->tuning_us.load() / 1000.0;
  s.tuned_plans = impl_->tuned_plans.load();
  s.prepared_weight_reads = impl_->prepared_weight_reads.load();
  return s;
}

namespace {
DiskCache& require_disk(const std::unique_ptr<DiskCache>& disk) {
  if (!disk) throw Error(ErrorCategory::CacheIO, "this Engine has no disk cache (EngineOptions::disk_cache = false)");
  return *disk;
}
}  // namespace

std::vector<CacheEntry> Engine::cache_entries() const {
  std::vector<CacheEntry> entries = require_disk(impl_->disk).entries();
  for (CacheEntry& e : entries) e.kernel = is_record_key(e.key) ? readable_record_key(e.key) : readable_key(e.key);
  return entries;
}
CacheInfo Engine::cache_info() const { return require_disk(impl_->disk).info(); }
uint64_t Engine::cache_clear() { return require_disk(impl_->disk).clear(); }
uint64_t Engine::cache_export(const std::string& path) const { return require_disk(impl_->disk).export_archive(path); }
uint64_t Engine::cache_import(const std::string& path) { return require_disk(impl_->disk).import_archive(path); }

void conv3d(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream) {
  Engine::global().run(desc, tensors, stream);
}

std::optional<DeviceInfo> current_device() noexcept {
  try {
    const DriverApi& d = driver();
    const ContextInfo info = describe_context(context_for_stream(nullptr));
    DeviceInfo dev;
    dev.ordinal = static_cast<int>(info.device);
    char name[256] = {};
    d.cuDeviceGetName(name, sizeof(name), info.device);
    dev.name = name;
    dev.arch = info.arch;
    dev.sm_count = info.limits.sm_count;
    d.cuDriverGetVersion(&dev.driver_version);
    return dev;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

const char* version() noexcept { return CONV3DJIT_VERSION; }

}  // namespace conv3djit
