#pragma once
// Family: one kind of convolution kernel, as the planner sees it. A family owns its kernel
// template (KernelDef: source, field table), its configuration struct, which problems it can
// serve, its choice of configuration and the plan that launches it. The planner (planner.cpp)
// walks the registry (registry.cpp) and takes the first family that offers a plan; a forced
// configuration (`--config`) goes to the family it names through the same planning path.
#include <array>
#include <cuda.h>

#include <optional>
#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace conv3djit::detail {

/// A forced configuration parsed against a family's field table: one value or nothing per field.
struct ForcedConfig {
  const Family* family = nullptr;
  std::string text;                         // as given, for messages
  std::vector<std::optional<int>> values;   // by field of family->kernel().fields
  /// The value of field `name`, if forced.
  std::optional<int> get(const char* name) const;
};

/// Why a family cannot serve a problem, or nothing when it can.
using Refusal = std::optional<std::string>;

class Family {
 public:
  virtual ~Family() = default;
  /// The kernel template and its configuration fields.
  virtual const KernelDef& kernel() const = 0;
  /// Other names `--config` accepts for the family.
  virtual std::vector<std::string> aliases() const { return {}; }
  /// The arch the family needs, for help text ("sm_90 exactly", "sm_80 or newer", "any").
  virtual const char* arch() const { return "any"; }
  /// Whether the family's kernel is built for prob's element types and layout; the planner asks
  /// before can_implement() and choose(). Most families are float32 NCDHW kernels.
  virtual Refusal serves_types(const Problem& prob) const;
  /// Whether the family can serve prob on such a device at all (some configuration of it), its
  /// types aside.
  virtual Refusal can_implement(const Problem& prob, const DeviceLimits& limits) const = 0;
  /// The family's best plan for prob by its heuristic, or nothing where the planner should look
  /// further down the registry (it cannot serve prob, or another family is measured faster).
  virtual std::optional<Plan> choose(const Problem& prob, const DeviceLimits& limits) const = 0;
  /// The rule of its heuristic by which choose() leaves a problem it could serve to a family
  /// further down the registry (explain_plan names it); nothing where choose() searched and no
  /// configuration fit. The default: no such rule.
  virtual Refusal declines(const Problem& prob, const DeviceLimits& limits) const;
  /// Plans worth timing against the planner's choice (Engine::tune): the family's best few
  /// configurations for prob, best first, at most `count`, also those its heuristic leaves to a
  /// family further down the registry. Each must be the plan its configuration text forces
  /// (tune/candidates.cpp replays them and drops any that is not). The default: its choice.
  virtual std::vector<Plan> candidates(const Problem& prob, const DeviceLimits& limits, int count) const;
  /// The plan of a forced configuration; fields it leaves out take the family's defaults. Throws
  /// Error(InvalidArgument) naming the rule the configuration breaks.
  virtual Plan force(const Problem& prob, const DeviceLimits& limits, const ForcedConfig& config) const = 0;
  /// The tensor maps the kernel takes after its five arguments (up to three), where it takes them,
  /// from the tensors it reads (after any preparation step) and writes; the kernels that take
  /// fewer ignore the rest.
  virtual void tensor_maps(const Plan&, const void* /*input*/, const void* /*weight*/, void* /*output*/,
                           CUtensorMap* /*first*/, CUtensorMap* /*second*/, CUtensorMap* /*third*/) const {}
};

/// The serves_types() of the families built for bf16 / fp16 NCDHW tensors only.
Refusal serves_half_ncdhw(const Problem& prob);
/// serves_types for families of the tensor cores' 16-bit and tf32 products: bf16 / fp16, and
/// float32 in the tf32 class.
Refusal serves_half_or_tf32(const Problem& prob);

/// The families, in the planner's order.
const std::vector<const Family*>& registry();

/// A configuration struct's fields by name, in key order: the one table from which the key's
/// slots, the traits, `--config` parsing and its help text all come. C holds ints only.
template <class C, size_t N>
struct ConfigTable {
  struct Field {
    FieldInfo info;
    int C::*member;
  };
  std::array<Field, N> fields;

  std::vector<FieldInfo> infos() const {
    std::vector<FieldInfo> out;
    for (const Field& f : fields) out.push_back(f.info);
    return out;
  }
  void store(const C& c, int32_t* slots) const {
    for (size_t i = 0; i < N; ++i) slots[i] = c.*(fields[i].member);
  }
  C load(const int32_t* slots) const {
    C c{};
    for (size_t i = 0; i < N; ++i) c.*(fields[i].member) = slots[i];
    return c;
  }
  /// `base` with the forced fields of `config` set (the others as in base).
  C apply(C base, const ForcedConfig& config) const {
    for (size_t i = 0; i < N; ++i) {
      if (config.values[i]) base.*(fields[i].member) = *config.values[i];
    }
    return base;
  }
};

/// The first `count` of plans with distinct keys, in their order (a family's candidates).
std::vector<Plan> distinct_plans(std::vector<Plan> plans, int count);

/// Whether blocks of `bn` output channels are worth timing for k of them: the narrowest width
/// always, a wider one only where half of it would not cover k (else it adds only padding).
inline bool useful_width(long long k, int bn, int narrowest) { return bn == narrowest || bn < 2 * k; }

/// The key's shape fields for prob and kernel def (those the kernel does not use stay zero).
SpecKey shape_key(const Problem& prob, const KernelDef& def);

/// What every family's plan starts with: the launch arguments, the key with the configuration
/// (stored by table), the block and its dynamic shared memory. The caller sizes the grid.
template <class C, size_t N>
Plan new_plan(const Problem& prob, const Family& family, const ConfigTable<C, N>& table, const C& config,
              int block, int shared_bytes = 0);

ConvParams make_params(const Problem& prob);

/// A grid-stride launch of `threads` threads in blocks of `block`, capped at `per_sm` blocks per SM.
unsigned stride_grid(long long threads, unsigned block, const DeviceLimits& limits, int per_sm);

inline long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

/// `blocks` as a launch's grid; Error(Unsupported) naming the family past the driver's 2^31 - 1.
unsigned checked_grid(long long blocks, const Family& family);

/// Shared memory the driver reserves per block.
inline constexpr int kSharedPerBlockReserved = 1024;

/// Blocks a wave of the planners' cost models: the H100's and H200's SM count, fixed so that keys
/// never depend on the device.
inline constexpr long long kWaveBlocks = 132;

template <class C, size_t N>
Plan new_plan(const Problem& prob, const Family& family, const ConfigTable<C, N>& table, const C& config,
              int block, int shared_bytes) {
  Plan plan;
  plan.params = make_params(prob);
  plan.key = shape_key(prob, family.kernel());
  plan.family = &family;
  table.store(config, plan.key.config);
  plan.block = static_cast<unsigned>(block);
  plan.shared_bytes = static_cast<unsigned>(shared_bytes);
  return plan;
}

}  // namespace conv3djit::detail
