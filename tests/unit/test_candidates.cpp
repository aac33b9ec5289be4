// Tuning candidates, without a GPU: for every kind of layer on sm_90 and sm_80 the planner's choice
// comes first, no two launch alike, every family's candidate is the plan its configuration text
// forces, and where several kernels serve a layer the families offer real alternatives.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "config_cases.hpp"
#include "core/problem.hpp"
#include "plan/family.hpp"
#include "tune/candidates.hpp"

using namespace conv3djit;

namespace {

struct Layer {
  std::string name;
  Conv3dDesc desc;
};

Conv3dDesc tf32(Conv3dDesc d) {
  d.precision = Precision::Tf32;
  return d;
}

Conv3dDesc typed(Conv3dDesc d, DataType type, Layout layout, bool fp32_output = false) {
  d.dtype = type;
  d.layout = layout;
  d.fp32_output = fp32_output;
  return d;
}

const Conv3dDesc kSmallC = test::make(2, 3, {16, 32, 32}, 64, {3, 3, 3}, 1, 1);
const Conv3dDesc kMany256 = test::make(1, 256, {4, 14, 14}, 256, {3, 3, 3}, 1, 1, 1, 1, true);
const Conv3dDesc kMany512 = test::make(1, 512, {3, 8, 8}, 512, {3, 3, 3}, 1, 1);
const Conv3dDesc kPointwise = test::make(2, 128, {4, 14, 14}, 256, {1, 1, 1});
const Conv3dDesc kHalfLayer = test::make(1, 64, {4, 16, 16}, 128, {3, 3, 3}, 1, 1);
const Conv3dDesc kHalfSmallC = test::make(1, 8, {4, 16, 16}, 32, {3, 3, 3}, 1, 1);

// One layer of each kind in both float32 classes (row tiles among their sm_90 choices: C = 256,
// dilated, odd extents), and bf16 / fp16 layers in both layouts.
std::vector<Layer> layers() {
  std::vector<Layer> out = {
      {"small C", kSmallC},
      {"C = 5", test::make(1, 5, {7, 12, 24}, 24, {3, 3, 3}, 1, 1)},
      {"C = 256", kMany256},
      {"C = 512", kMany512},
      {"pointwise", kPointwise},
      {"strided", test::make(1, 16, {8, 32, 32}, 32, {3, 3, 3}, 2, 1)},
      {"dilated", test::make(1, 8, {9, 20, 24}, 24, {3, 3, 3}, 1, 2, 2)},
      {"grouped", test::make(1, 16, {5, 10, 30}, 32, {3, 3, 3}, 1, 1, 1, 4, true)},
      {"depthwise", test::make(2, 16, {5, 19, 70}, 16, {3, 3, 3}, 1, 1, 1, 16, true)},
      {"K < 16", test::make(1, 5, {7, 12, 19}, 9, {2, 3, 3}, 1, Padding::same(), {2, 1, 2})},
      {"odd extents", test::make(1, 7, {5, 13, 17}, 17, {3, 3, 3}, 1, 1)},
  };
  const size_t fp32_layers = out.size();
  for (size_t i = 0; i < fp32_layers; ++i) out.push_back({out[i].name + " tf32", tf32(out[i].desc)});
  for (DataType type : {DataType::BFloat16, DataType::Float16}) {
    const std::string name = type == DataType::BFloat16 ? "bf16" : "fp16";
    for (Layout layout : {Layout::NCDHW, Layout::NDHWC}) {
      const std::string in = layout == Layout::NCDHW ? " NCDHW" : " NDHWC";
      out.push_back({name + in, typed(kHalfLayer, type, layout)});
      out.push_back({name + in + " small C", typed(kHalfSmallC, type, layout)});
      out.push_back({name + in + " C = 3", typed(kSmallC, type, layout)});
      out.push_back({name + in + " C = 512", typed(kMany512, type, layout, true)});
      out.push_back({name + in + " pointwise", typed(kPointwise, type, layout)});
    }
  }
  return out;
}

// Whether plan's configuration text plans it again.
bool replays(const detail::Problem& prob, const detail::DeviceLimits& limits, const detail::Plan& plan) {
  try {
    return detail::same_launch(detail::make_plan(prob, limits, detail::config_text(plan)), plan);
  } catch (const Error& e) {
    UNSCOPED_INFO(e.what());
    return false;
  }
}

}  // namespace

TEST_CASE("tuning candidates: the heuristic's first, all distinct, each planned again by its text") {
  for (const char* arch : {"sm_90", "sm_80"}) {
    const detail::DeviceLimits limits = detail::limits_for_arch(arch);
    for (const Layer& layer : layers()) {
      INFO(arch << " " << layer.name << ": " << describe(layer.desc));
      const detail::Problem prob = detail::make_problem(layer.desc);
      const std::vector<detail::Candidate> all = detail::tuning_candidates(prob, limits, 8);
      REQUIRE_FALSE(all.empty());
      CHECK(all.size() <= 8);
      CHECK(all[0].heuristic);
      CHECK(detail::same_launch(all[0].plan, detail::make_plan(prob, limits, "")));
      for (size_t i = 0; i < all.size(); ++i) {
        INFO(all[i].config);
        CHECK(all[i].heuristic == (i == 0));
        CHECK(all[i].config == detail::config_text(all[i].plan));
        CHECK(detail::same_launch(detail::make_plan(prob, limits, all[i].config), all[i].plan));
        for (size_t j = 0; j < i; ++j) CHECK_FALSE(detail::same_launch(all[i].plan, all[j].plan));
      }
      CHECK(detail::tuning_candidates(prob, limits, 2).size() <= 2);
      CHECK(detail::tuning_candidates(prob, limits, 0).empty());
    }
  }
}

TEST_CASE("every family's candidates: its choice first, distinct keys, within the count, each its text's plan") {
  for (const char* arch : {"sm_90", "sm_80"}) {
    const detail::DeviceLimits limits = detail::limits_for_arch(arch);
    for (const Layer& layer : layers()) {
      const detail::Problem prob = detail::make_problem(layer.desc);
      for (const detail::Family* family : detail::registry()) {
        if (family->serves_types(prob) || family->can_implement(prob, limits)) continue;
        INFO(arch << " " << layer.name << ": " << family->kernel().name);
        const std::vector<detail::Plan> plans = family->candidates(prob, limits, 8);
        CHECK(plans.size() <= 8);
        if (auto choice = family->choose(prob, limits)) {
          REQUIRE_FALSE(plans.empty());
          CHECK(detail::same_launch(plans[0], *choice));
        }
        for (size_t i = 0; i < plans.size(); ++i) {
          INFO(detail::config_text(plans[i]));
          CHECK(plans[i].family == family);
          CHECK(replays(prob, limits, plans[i]));
          for (size_t j = 0; j < i; ++j) CHECK_FALSE(plans[i].key == plans[j].key);
        }
        CHECK(family->candidates(prob, limits, 2).size() <= 2);
        CHECK(family->candidates(prob, limits, 0).empty());
      }
    }
  }
}

TEST_CASE("many channels and small C on sm_90: alternatives of each family that serves them") {
  // The counts seen: below them a family's candidates() lost configurations (the default offers
  // one a family). igemm_sm80 offers no float32 tile of 512 threads (they spill).
  struct Expected {
    std::string layer;
    size_t total;
    std::map<std::string, size_t> at_least;  // by family
  };
  const std::vector<Expected> expected = {
      {"small C", 8, {{"igemm_sm90", 5}, {"igemm_sm80", 4}, {"direct_tiled", 8}}},
      {"small C tf32", 8, {{"igemm_sm90", 5}, {"igemm_sm80", 4}, {"direct_tiled", 8}}},
      {"C = 256", 8, {{"igemm_sm90", 6}, {"igemm_sm80", 5}, {"direct_tiled", 8}}},
      {"C = 256 tf32", 8, {{"igemm_sm90", 6}, {"igemm_sm80", 5}, {"direct_tiled", 8}}},
      {"C = 512", 8, {{"igemm_sm90", 6}, {"igemm_sm80", 5}, {"direct_tiled", 8}}},
      {"C = 512 tf32", 8, {{"igemm_sm90", 6}, {"igemm_sm80", 5}, {"direct_tiled", 8}}},
      {"bf16 NDHWC C = 512", 8, {{"igemm_sm90_half", 6}, {"igemm_sm80", 6}}},
      {"fp16 NDHWC C = 512", 8, {{"igemm_sm90_half", 6}, {"igemm_sm80", 6}}},
      {"bf16 NCDHW C = 512", 7, {{"igemm_sm80", 6}}},
      {"bf16 NDHWC small C", 5, {{"igemm_sm90_half", 2}, {"igemm_sm80", 2}}},
      {"fp16 NDHWC small C", 5, {{"igemm_sm90_half", 2}, {"igemm_sm80", 2}}},
      {"bf16 NDHWC C = 3", 5, {{"igemm_sm80", 4}}},
      {"fp16 NCDHW C = 3", 5, {{"igemm_sm80", 4}}},
  };
  const detail::DeviceLimits limits = detail::limits_for_arch("sm_90");
  const std::vector<Layer> all = layers();
  for (const Expected& e : expected) {
    INFO(e.layer);
    const auto layer = std::find_if(all.begin(), all.end(), [&](const Layer& l) { return l.name == e.layer; });
    REQUIRE(layer != all.end());
    const detail::Problem prob = detail::make_problem(layer->desc);
    const std::vector<detail::Candidate> candidates = detail::tuning_candidates(prob, limits, 8);
    std::set<const detail::Family*> families;
    for (const detail::Candidate& c : candidates) families.insert(c.plan.family);
    CHECK(candidates.size() >= e.total);
    CHECK(candidates.size() >= 3);
    CHECK(families.size() >= 2);
    // The fallback takes only the places the others leave: here they fill all 8.
    if (e.total == 8) {
      CHECK(std::none_of(candidates.begin(), candidates.end(), [](const detail::Candidate& c) {
        return c.plan.family == detail::registry().back();
      }));
    }
    for (const auto& [name, count] : e.at_least) {
      INFO(name);
      const auto family = std::find_if(detail::registry().begin(), detail::registry().end(),
                                       [&](const detail::Family* f) { return name == f->kernel().name; });
      REQUIRE(family != detail::registry().end());
      const std::vector<detail::Plan> plans = (*family)->candidates(prob, limits, 8);
      CHECK(plans.size() >= count);
      // Each of them has its turn in the tuned set.
      CHECK(std::any_of(candidates.begin(), candidates.end(), [&](const detail::Candidate& c) {
        return c.plan.family == *family;
      }));
    }
  }
}
