// SpecKey and the disk cache key: equal inputs give equal keys; changing any single field that is
// baked into the kernel (or that makes a cubin valid) changes the key.
#include <functional>
#include <set>
#include <vector>

#include "catch.hpp"
#include "jit/codegen.hpp"
#include "plan/plan.hpp"
#include "core/problem.hpp"
#include "jit/spec_key.hpp"

using namespace conv3djit;
using namespace conv3djit::detail;

namespace {
SpecKey base_key() {
  SpecKey k;
  k.algorithm = Algorithm::DirectGeneric;
  k.c_per_group = 3;
  k.kd = 3; k.kh = 5; k.kw = 7;
  k.sd = k.sh = k.sw = 1;
  k.dd = k.dh = k.dw = 1;
  k.config[0] = 4;
  return k;
}
}  // namespace

TEST_CASE("canonical text names every field") {
  CHECK(canonical_text(base_key()) == "direct_fp32;fp32;cg=3;k=3x5x7;s=1x1x1;d=1x1x1;cfg=4,0,0,0,0,0,0,0,0,0,0");
}

TEST_CASE("changing any single field changes the key, the text and (here) the hash") {
  const std::vector<std::function<void(SpecKey&)>> mutations = {
      [](SpecKey& k) { k.algorithm = Algorithm::ReferenceFp64; },
      [](SpecKey& k) { k.precision = Precision::Tf32; },
      [](SpecKey& k) { k.c_per_group = 4; },
      [](SpecKey& k) { k.kd = 2; }, [](SpecKey& k) { k.kh = 2; }, [](SpecKey& k) { k.kw = 2; },
      [](SpecKey& k) { k.sd = 2; }, [](SpecKey& k) { k.sh = 2; }, [](SpecKey& k) { k.sw = 2; },
      [](SpecKey& k) { k.dd = 2; }, [](SpecKey& k) { k.dh = 2; }, [](SpecKey& k) { k.dw = 2; },
      [](SpecKey& k) { k.config[0] = 1; }, [](SpecKey& k) { k.config[1] = 1; },
      [](SpecKey& k) { k.config[2] = 1; }, [](SpecKey& k) { k.config[3] = 1; },
      [](SpecKey& k) { k.config[4] = 1; }, [](SpecKey& k) { k.config[5] = 1; },
      [](SpecKey& k) { k.config[6] = 1; },
      [](SpecKey& k) { k.config[7] = 1; }, [](SpecKey& k) { k.config[8] = 1; },
      [](SpecKey& k) { k.config[9] = 1; }, [](SpecKey& k) { k.config[10] = 1; },
  };
  const SpecKey base = base_key();
  std::set<std::string> texts{canonical_text(base)};
  for (size_t i = 0; i < mutations.size(); ++i) {
    SpecKey k = base;
    mutations[i](k);
    INFO("mutation " << i);
    CHECK(k != base);
    CHECK(SpecKeyHash{}(k) != SpecKeyHash{}(base));
    CHECK(texts.insert(canonical_text(k)).second);
    CHECK(cache_key_text(k, "sm_90", {"-std=c++17"}) != cache_key_text(base, "sm_90", {"-std=c++17"}));
  }
  SpecKey same = base_key();
  CHECK(same == base);
  CHECK(SpecKeyHash{}(same) == SpecKeyHash{}(base));
}

TEST_CASE("the disk key covers arch, options, toolchain, sources, library and format") {
  const SpecKey k = base_key();
  const std::string key = cache_key_text(k, "sm_90", {"-std=c++17"});
  CHECK(key == cache_key_text(k, "sm_90", {"-std=c++17"}));
  CHECK(key != cache_key_text(k, "sm_90a", {"-std=c++17"}));
  CHECK(key != cache_key_text(k, "sm_80", {"-std=c++17"}));
  CHECK(key != cache_key_text(k, "sm_90", {"-std=c++20"}));
  for (const char* part : {"|nvrtc=", "|src=", "|lib=", "|keyfmt=", "|opts=", "|arch=sm_90"}) {
    CHECK(key.find(part) != std::string::npos);
  }
}

TEST_CASE("codegen options are canonical and include the arch") {
  const GeneratedKernel g = generate(base_key(), "sm_90");
  CHECK(g.name_expression == "conv3djit::direct_fp32<3,3,5,7,1,1,1,1,1,1,4>");
  CHECK(std::is_sorted(g.options.begin(), g.options.end()));
  CHECK(std::find(g.options.begin(), g.options.end(), "--gpu-architecture=sm_90") != g.options.end());
}

TEST_CASE("batch size and depth do not change the key; channels per group do") {
  Conv3dDesc d;
  d.n = 2; d.c = 8; d.d = d.h = d.w = 16; d.k = 16; d.kernel = {3, 3, 3};
  const DeviceLimits limits;
  const SpecKey a = make_plan(make_problem(d), limits).key;
  Conv3dDesc bigger = d;
  // H, W and K may change the tile the planner picks, so they can change the key; N and D never do.
  bigger.n = 7; bigger.d = 40;
  CHECK(make_plan(make_problem(bigger), limits).key == a);
  Conv3dDesc grouped = d;
  grouped.groups = 2;
  CHECK(make_plan(make_problem(grouped), limits).key != a);
}

TEST_CASE("arch strings are checked") {
  CHECK(limits_for_arch("sm_90").cc_major == 9);
  CHECK(limits_for_arch("sm_90a").cc_minor == 0);
  CHECK(limits_for_arch("sm_120").cc_major == 12);
  CHECK_THROWS_AS(limits_for_arch("compute_90"), Error);
  CHECK_THROWS_AS(limits_for_arch("sm90"), Error);
}
