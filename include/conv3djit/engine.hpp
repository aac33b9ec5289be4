#pragma once
/// Engine: the kernel caches and settings behind conv3d(). Most programs use the process-wide
/// Engine::global(); a separate Engine gives a separate cache folder or limit (tests, tools).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conv3djit/conv3d.hpp"
#include "conv3djit/export.hpp"

namespace conv3djit {

/// What a kernel that is in neither cache may do.
enum class CompileMode {
  Allow,  ///< compile it with NVRTC (the default)
  Warn,   ///< compile it, and log each miss at warning level
  Never,  ///< throw Error(CacheMiss) naming the kernel and the description; compile nothing
};

/// Whether run() times candidate kernels for a description it has no tuned record of. Either way a
/// record already in the disk cache (Engine::tune(), `conv3djit tune`, an imported archive) is used.
enum class TuneMode {
  Off,       ///< the planner's heuristic where there is no record (the default)
  FirstUse,  ///< tune each description on its first call without a record, and store the winner
};

/// How Engine::tune() measures (also on first use).
struct TuneOptions {
  /// Plans timed per description, the heuristic's first; the others are the families' next best.
  int max_candidates = 6;
  /// Wall time per description, compiles included: candidates not timed by then are skipped (the
  /// heuristic's is always timed).
  double budget_ms = 2000;
  /// Timed launches per candidate (after one warm-up launch); the median counts. A candidate
  /// whose run takes more than twice the best median so far stops there.
  int runs = 7;
};

struct EngineOptions {
  /// Disk cache folder; empty means $CONV3DJIT_CACHE_DIR, else $XDG_CACHE_HOME/conv3djit, else
  /// ~/.cache/conv3djit.
  std::string cache_dir;
  /// Disk cache size limit in bytes; least recently used entries are evicted beyond it.
  uint64_t cache_limit_bytes = 2ull << 30;
  /// false: keep compiled kernels in memory only.
  bool disk_cache = true;
  /// Empty: the planner chooses each kernel. For experiments and benchmarks, one family's
  /// configuration, "FAMILY:V1,V2,..." or "FAMILY:name=value,..." (`conv3djit families` lists
  /// the families and their fields).
  std::string kernel_config;
  /// nullopt: $CONV3DJIT_COMPILE (allow, warn or never), else Allow.
  std::optional<CompileMode> compile_mode;
  /// Use a cache folder that other users can write. Its cubins run on the GPU, so by default
  /// such a folder is refused (memory-only, with an error in the log; explicit cache calls throw).
  bool trust_shared_cache = false;
  /// Check before each launch that every tensor lies inside its allocation
  /// (cuMemGetAddressRange), so a description larger than its buffers is an invalid_argument
  /// error instead of an out-of-bounds kernel.
  bool check_allocations = true;
  /// nullopt: $CONV3DJIT_TUNE (off or first_use), else Off.
  std::optional<TuneMode> tune_mode;
  TuneOptions tuning;
};

/// Counters since the Engine was made.
struct EngineStats {
  uint64_t memory_hits = 0;  ///< conv3d calls served by an already loaded kernel
  uint64_t disk_hits = 0;    ///< cubins read from the disk cache instead of compiled
  uint64_t compiles = 0;     ///< NVRTC compiles
  double compile_ms = 0;     ///< wall time spent in NVRTC
  uint64_t module_loads = 0; ///< cuModuleLoadData calls (one per kernel and context)
  uint64_t refused_compiles = 0;  ///< misses refused by CompileMode::Never
  uint64_t tunes = 0;        ///< descriptions tuned (candidates timed) by this Engine
  double tuning_ms = 0;      ///< wall time spent tuning, compiles included
  uint64_t tuned_plans = 0;  ///< plans taken from a tuned record instead of the heuristic
  /// calls that read Conv3dTensors::prepared_weights instead of preparing their weights
  uint64_t prepared_weight_reads = 0;
};

/// One plan Engine::tune() tried.
struct TunedCandidate {
  std::string kernel;   ///< the kernel's key, every field named
  std::string config;   ///< the forced configuration that plans it (EngineOptions::kernel_config form)
  bool heuristic = false;  ///< the planner's own choice
  double median_ms = -1;   ///< per call; negative: not timed (the budget ran out, or it failed)
  double rel_l2 = -1;      ///< against float64 on sampled outputs; negative: not measured
  double ready_ms = -1;    ///< compiling (or reading from the disk cache) and loading its kernels
  bool accurate = false;   ///< within the description's accuracy class
  std::string error;       ///< why it could not be timed; empty when it was
};

/// What Engine::tune() found for one description.
struct TuneResult {
  std::string description;  ///< describe(desc)
  std::string device;       ///< what the record is keyed by besides the description
  std::vector<TunedCandidate> candidates;  ///< the heuristic's first
  /// Index into candidates of the fastest accurate one; -1 when none ran within the accuracy
  /// class (then nothing is stored, and plans keep the heuristic's choice).
  int winner = -1;
  double heuristic_ms = -1; ///< the planner's choice's time, also as a record remembers it
  double tuning_ms = 0;     ///< wall time of this tuning, compiles included (0 for a record)
  int64_t tuned_unix = 0;   ///< when the winner was measured (seconds since the epoch)
  bool from_record = false; ///< a stored record answered; nothing was timed
  bool stored = false;      ///< the winner is in the disk cache now
  std::string store_problem;  ///< why not, where it is not ("this Engine has no disk cache", ...)
  const TunedCandidate& best() const { return candidates.at(static_cast<size_t>(winner)); }
};

/// One kernel precompile() made sure of.
struct PrecompiledKernel {
  std::string key;          ///< canonical cache key text
  std::string kernel;       ///< the kernel's key, every field named ("igemm_sm90 fp32 ncdhw ...")
  bool compiled = false;    ///< false: it was already in the memory or disk cache
  bool on_disk = false;     ///< its cubin is in the disk cache now
  double compile_ms = 0;
  /// What NVRTC said about a successful compile (warnings, ptxas' performance notes such as
  /// serialised wgmmas); empty when it said nothing or the kernel came from a cache.
  std::string compiler_notes;
  /// From the cubin, compiled or cached (no GPU needed): registers a thread, and bytes of stack
  /// frame, i.e. local memory for values ptxas could not keep in registers (spills) or a called
  /// routine's saved registers. -1 where the cubin does not record them.
  int registers = -1;
  int stack_bytes = -1;
  /// Bytes of the kernel's machine code in the cubin (16 an instruction); -1 where not found.
  long long code_bytes = -1;
};

/// What precompile() did for one description: every kernel its plan launches, the main kernel
/// first, then helpers (weight preparation, the twin for misaligned inputs, input copies).
struct PrecompileResult {
  std::vector<PrecompiledKernel> kernels;
  const PrecompiledKernel& main() const { return kernels.front(); }
};

/// One disk cache entry, for listings.
struct CacheEntry {
  std::string key;
  std::string kernel;  ///< readable kernel and shape: "igemm_sm90 fp32 cg=3 k=3x5x7 s=1x1x1 d=1x1x1 sm_90"
  std::string path;
  uint64_t bytes = 0;
  int64_t last_use_unix = 0;  ///< seconds since the epoch of the last read or write
};

struct CacheInfo {
  std::string dir;
  bool exists = false;
  bool writable = false;  ///< a probe file could be created in it (or in the parent it would be made in)
  std::string problem;    ///< why the folder cannot be used for storing; empty when it can
  uint64_t bytes = 0;
  uint64_t entries = 0;
  uint64_t limit_bytes = 0;
};

/// A kernel a plan launches around its convolution.
struct PlanStep {
  /// "weights" (prepared before the convolution reads them), "input copy" (made on every call),
  /// "input copy where needed" (for rows that are no 16-byte multiples or an unaligned input), or
  /// "unaligned input" (the plan's twin, launched instead for an input off a 16-byte boundary).
  std::string role;
  std::string kernel;  ///< its key, every field named
  unsigned grid = 0, block = 0, shared_bytes = 0;
  uint64_t scratch_bytes = 0;  ///< stream-ordered scratch memory it writes
};

/// Which kernel a description runs on and why (Engine::explain): nothing is compiled.
struct PlanExplanation {
  std::string kernel;  ///< its key, every field named
  unsigned grid = 0, block = 0, shared_bytes = 0;  ///< launch: blocks, threads a block, dynamic shared memory
  std::vector<PlanStep> steps;
  /// What decided: "planner", "forced configuration" (EngineOptions::kernel_config) or "tuned
  /// record" (Engine::tune; only on the current device).
  std::string source;
  /// With the planner: each family before the chosen one in its order, and why it passed the
  /// description on (the types it serves, a rule it needs, its heuristic's rule, or no
  /// configuration of it fitting).
  std::vector<std::pair<std::string, std::string>> passed;
  /// The configurations Engine::tune would time (the planner's first), each an
  /// EngineOptions::kernel_config; as many as asked for, at most.
  std::vector<std::string> candidates;
};

/// What the kernel a description runs on costs the device, from cuFuncGetAttribute.
struct KernelResources {
  std::string kernel;          ///< the kernel's key, every field named
  int registers = 0;           ///< per thread
  int local_bytes = 0;         ///< local memory per thread (spills, stack); 0 for every kernel the planner picks
  int static_shared_bytes = 0;
  unsigned dynamic_shared_bytes = 0;
  unsigned grid = 0, block = 0;
};

/// The GPU a context runs on.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string arch;        ///< "sm_90"
  int sm_count = 0;
  int driver_version = 0;  ///< e.g. 13000
};

class CONV3DJIT_API Engine {
 public:
  explicit Engine(EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// The process-wide Engine that conv3d() uses.
  static Engine& global();

  /// As conv3d(), on this Engine's caches.
  void run(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream = nullptr);

  /// The float64 reference on the GPU (one thread per output, double accumulation): like run(),
  /// but tensors.output points to N x K x OD x OH x OW doubles. The oracle for large problems.
  void run_reference(const Conv3dDesc& desc, const Conv3dTensors& tensors, Stream stream = nullptr);

  /// Compiles (or finds in the disk cache) the kernel desc needs on `arch` ("sm_90", "sm_90a");
  /// an empty arch means the current device's. Needs no GPU when arch is given. Thread-safe.
  PrecompileResult precompile(const Conv3dDesc& desc, const std::string& arch = "");

  /// The key of the kernel the planner picks for desc on `arch` (empty: current device), every field named.
  std::string kernel_for(const Conv3dDesc& desc, const std::string& arch = "");

  /// The plan of kernel_for() in full: the kernel's launch, the kernels around it, what decided,
  /// why each family before the chosen one passed, and up to `candidates` configurations that
  /// tune() would time. Needs no GPU when arch is given; compiles nothing.
  PlanExplanation explain(const Conv3dDesc& desc, const std::string& arch = "", int candidates = 0);

  /// The kernel run() launches for desc on `stream`'s device (loaded, compiled if needed) and its
  /// registers, local memory, shared memory and launch shape; with aligned_input = false, the one
  /// it launches for an input that is not 16-byte aligned. Needs a GPU.
  KernelResources resources(const Conv3dDesc& desc, Stream stream = nullptr, bool aligned_input = true);

  /// The weights at `weight` (desc's shape, type and layout) rewritten once into the layout the
  /// kernel of desc reads on `stream`'s device, for calls that pass them as
  /// Conv3dTensors::prepared_weights instead of rewriting them on every call (the plan's
  /// "weights" step, explain()). Plans the description as run() does (tuning it with
  /// TuneMode::FirstUse), compiling what it needs; returns once the weights are written (it
  /// synchronizes `stream`). Where the kernel reads the weights as they are, nothing is copied
  /// and calls behave as without it. Throws Error(InvalidArgument) for a null weight or while the
  /// stream is capturing a CUDA graph (the preparation must run, not be recorded).
  PreparedWeights prepare_weights(const Conv3dDesc& desc, const void* weight, Stream stream = nullptr);

  /// Times the planner's best few candidates for desc on `stream`'s device (TuneOptions; out of
  /// range values are Error(InvalidArgument) when the Engine is made), on
  /// scratch tensors of its own and a stream of its own, and stores the fastest accurate one as a
  /// record in the disk cache (keyed by the description, the device's name, SM count and clock,
  /// the driver and library versions), which every later plan of desc on such a device takes,
  /// in this process and in any that shares or imports the cache. With a record already there
  /// it answers from the record unless `retune`. Throws Error(InvalidArgument) while the stream
  /// is capturing a CUDA graph, and for a forced configuration (EngineOptions::kernel_config).
  TuneResult tune(const Conv3dDesc& desc, Stream stream = nullptr, bool retune = false);

  EngineStats stats() const;

  std::vector<CacheEntry> cache_entries() const;
  CacheInfo cache_info() const;
  /// Removes every entry; returns how many were removed.
  uint64_t cache_clear();
  /// Writes every valid entry into one archive file; returns the entry count. Throws CacheIO.
  uint64_t cache_export(const std::string& archive_path) const;
  /// Verifies and adds every entry of an archive; returns the entry count. Throws CacheIO.
  uint64_t cache_import(const std::string& archive_path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Weights rewritten for one description's kernel on one device (Engine::prepare_weights): a
/// copy in device memory of its own, freed with this object, in the layout the kernel reads
/// (channels-last, TF32-rounded, split for 3xTF32: the family's). Pass it with the tensor it was
/// made from, in calls of any description of those weights (another batch size or input extent
/// reads it where its kernel prepares the weights the same way, and prepares them itself where
/// not); after that tensor changes, prepare it again (calls read the copy, not the tensor). A call
/// that passes it with another weight tensor, weight shape, type or layout, or on another device
/// is an Error(InvalidArgument). It must outlive the calls that read it (synchronize before
/// destroying it, as with any tensor a call reads). Movable, not copyable.
class CONV3DJIT_API PreparedWeights {
 public:
  PreparedWeights() noexcept;
  ~PreparedWeights();
  PreparedWeights(PreparedWeights&& other) noexcept;
  PreparedWeights& operator=(PreparedWeights&& other) noexcept;
  PreparedWeights(const PreparedWeights&) = delete;
  PreparedWeights& operator=(const PreparedWeights&) = delete;

  /// Made by prepare_weights (a default-constructed one is not, and no call takes it).
  bool valid() const noexcept { return state_ != nullptr; }
  /// The kernel that rewrote the weights, every field named; empty where desc's kernel reads the
  /// weights as they are.
  std::string kernel() const;
  /// Device memory it holds.
  uint64_t bytes() const noexcept;

  struct State;
  const State* state() const noexcept { return state_.get(); }

 private:
  friend class Engine;
  explicit PreparedWeights(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
};

/// Engine::global().prepare_weights(desc, weight, stream).
CONV3DJIT_API PreparedWeights prepare_weights(const Conv3dDesc& desc, const void* weight, Stream stream = nullptr);

/// NVRTC's version as "13.0".
CONV3DJIT_API std::string nvrtc_version();

/// The archs this NVRTC compiles for, "sm_75" ... ("sm_XYa" variants exist from sm_90, "sm_XYf"
/// from sm_100).
CONV3DJIT_API std::vector<std::string> supported_archs();

/// Throws Error(InvalidArgument) for a malformed arch name and Error(Unsupported) for one this
/// NVRTC cannot compile for, listing the supported ones; precompile(desc, arch) checks the same.
CONV3DJIT_API void check_arch(const std::string& arch);

/// The device of the current context (or device 0); nullopt without a driver or device.
CONV3DJIT_API std::optional<DeviceInfo> current_device() noexcept;

/// Library version "MAJOR.MINOR.PATCH".
CONV3DJIT_API const char* version() noexcept;

}  // namespace conv3djit
