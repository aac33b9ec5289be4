// SpecKey and the disk cache key: equal inputs give equal keys; changing any single field that is
// baked into the kernel (or that makes a cubin valid) changes the key; key texts, traits and logs
// name every field.
#include <functional>
#include <set>
#include <vector>

#include "catch.hpp"
#include "core/problem.hpp"
#include "jit/codegen.hpp"
#include "jit/kernel_sources.hpp"
#include "jit/spec_key.hpp"
#include "plan/family.hpp"

using namespace conv3djit;
using namespace conv3djit::detail;

namespace {
// A kernel of twelve fields (as many as a key holds), so that every slot can be mutated.
const KernelDef kTwelve{"direct", "direct/direct.cu", kUsesConvolution, false,
                        {{"a", FieldRole::Chosen, ""}, {"b", FieldRole::Chosen, ""}, {"c", FieldRole::Chosen, ""},
                         {"d", FieldRole::Chosen, ""}, {"e", FieldRole::Chosen, ""}, {"f", FieldRole::Chosen, ""},
                         {"g", FieldRole::Chosen, ""}, {"h", FieldRole::Chosen, ""}, {"i", FieldRole::Chosen, ""},
                         {"j", FieldRole::Chosen, ""}, {"k", FieldRole::Chosen, ""}, {"l", FieldRole::Chosen, ""}}};
const KernelDef kOther{"direct_tiled", "direct_tiled/direct_tiled.cu", kUsesConvolution, false, kTwelve.fields};

SpecKey base_key() {
  SpecKey k;
  k.kernel = &kTwelve;
  k.c_per_group = 3;
  k.kd = 3; k.kh = 5; k.kw = 7;
  k.sd = k.sh = k.sw = 1;
  k.dd = k.dh = k.dw = 1;
  k.config[0] = 4;
  return k;
}

Conv3dDesc reference_problem() {
  Conv3dDesc d;
  d.n = 16; d.c = 3; d.d = d.h = d.w = 64; d.k = 64; d.kernel = {3, 5, 7};
  return d;
}
}  // namespace

TEST_CASE("canonical text names every field") {
  CHECK(canonical_text(base_key()) ==
        "direct fp32 ncdhw class=fp32 epi=bias cg=3 k=3x5x7 s=1x1x1 d=1x1x1 a=4 b=0 c=0 d=0 e=0 f=0 g=0 h=0 i=0 j=0 k=0 l=0");
  // The reference problem's kernel on sm_90, as the cache listing, logs and bench print it.
  const Plan plan = make_plan(make_problem(reference_problem()), limits_for_arch("sm_90"));
  CHECK(canonical_text(plan.key) ==
        "igemm_sm90 fp32 ncdhw class=fp32 epi=bias cg=3 k=3x5x7 s=1x1x1 d=1x1x1 th=4 tw=64 bn=64 cc=3 rp=84 pp=840 "
        "cp=2520 tma=1 rows=58 planes=1 parity=0 across=0");
  CHECK(plan.key.field("rows") == 58);
  CHECK_THROWS_AS(plan.key.field("bm"), std::out_of_range);
  // Its helpers: the weights of a chunked plan carry the kernel extents and class only; the input
  // copy is shape-generic and carries none.
  REQUIRE(plan.input_copy);
  CHECK(canonical_text(plan.input_copy->key) == "pitch_rows fp32 ncdhw");
  Conv3dDesc chunked = reference_problem();
  chunked.c = 256; chunked.kernel = 3; chunked.d = chunked.h = chunked.w = 16;
  const Plan c = make_plan(make_problem(chunked), limits_for_arch("sm_90"));
  REQUIRE(c.prep);
  CHECK(canonical_text(c.prep->key).rfind("igemm_sm90_weights fp32 ncdhw class=fp32 cg=256 k=3x3x3 bn=", 0) == 0);
}

TEST_CASE("changing any single field changes the key, the text and (here) the hash") {
  const std::vector<std::function<void(SpecKey&)>> mutations = {
      [](SpecKey& k) { k.kernel = &kOther; },
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
      [](SpecKey& k) { k.config[11] = 1; },
      [](SpecKey& k) { k.epilogue.activation = Activation::Silu; },
      [](SpecKey& k) { k.epilogue.activation = Activation::Clamp; },
      [](SpecKey& k) { k.epilogue.scaled = true; },
      [](SpecKey& k) { k.epilogue.residual = true; },
      [](SpecKey& k) { k.padding_mode = PaddingMode::Reflect; },
      [](SpecKey& k) { k.padding_mode = PaddingMode::Circular; },
      [](SpecKey& k) { k.dtype = DataType::BFloat16; k.out_dtype = DataType::BFloat16; },
      [](SpecKey& k) { k.dtype = DataType::Float16; k.out_dtype = DataType::Float16; },
      [](SpecKey& k) { k.dtype = DataType::BFloat16; },  // float32 output of bf16 inputs
      [](SpecKey& k) { k.layout = Layout::NDHWC; },
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

TEST_CASE("a kernel's source hash covers its own files and the headers they include, no others") {
  const std::string direct = kernel_source_hash("direct/direct.cu");
  const std::string sm90 = kernel_source_hash("igemm_sm90/igemm_sm90.cu");
  CHECK(direct.size() == 32);
  CHECK(direct != sm90);
  CHECK(direct == kernel_source_hash("direct/direct.cu"));
  // The disk key of a kernel carries its own hash: editing another family leaves it valid.
  SpecKey tiled = base_key();
  tiled.kernel = &kOther;
  CHECK(cache_key_text(base_key(), "sm_90", {}).find("|src=" + direct + "|") != std::string::npos);
  CHECK(cache_key_text(tiled, "sm_90", {}).find("|src=" + kernel_source_hash("direct_tiled/direct_tiled.cu") + "|") !=
        std::string::npos);
  CHECK_THROWS_AS(kernel_source_hash("no_such/kernel.cu"), Error);
}

TEST_CASE("codegen declares the specialisation as a traits struct of named constants") {
  const GeneratedKernel g = generate(base_key(), "sm_90");
  CHECK(g.name_expression.rfind("conv3djit::direct<conv3djit::spec::direct_", 0) == 0);
  CHECK(g.source.find("#include \"direct/direct.cu\"") != std::string::npos);
  for (const char* line : {"using element = float;", "static constexpr int cg = 3;", "static constexpr int kw = 7;",
                           "static constexpr int a = 4;", "static constexpr int k = 0;"}) {
    INFO(line);
    CHECK(g.source.find(line) != std::string::npos);
  }
  CHECK(std::is_sorted(g.options.begin(), g.options.end()));
  CHECK(std::find(g.options.begin(), g.options.end(), "--gpu-architecture=sm_90") != g.options.end());
  // Two specialisations, two struct names (profilers tell them apart).
  SpecKey other = base_key();
  other.config[0] = 2;
  CHECK(generate(other, "sm_90").name_expression != g.name_expression);
}

TEST_CASE("the epilogue's kind is in the key and the traits, its scalar values are not") {
  Conv3dDesc d = reference_problem();
  d.epilogue.activation = Activation::LeakyRelu;
  d.epilogue.slope = 0.2f;
  d.epilogue.residual = true;
  const Plan plan = make_plan(make_problem(d), limits_for_arch("sm_90"));
  CHECK(canonical_text(plan.key).find(" epi=bias+leaky_relu+res cg=3 ") != std::string::npos);
  CHECK(plan.params.act_a == 0.2f);
  CHECK(plan.params.beta == 1.f);
  Conv3dDesc other_slope = d;
  other_slope.epilogue.slope = 0.1f;
  other_slope.epilogue.beta = 0.5f;
  CHECK(make_plan(make_problem(other_slope), limits_for_arch("sm_90")).key == plan.key);
  // alpha or gamma other than 1 compile the scaling in; their values stay run-time.
  Conv3dDesc scaled = d;
  scaled.epilogue.gamma = 2.f;
  const Plan scaled_plan = make_plan(make_problem(scaled), limits_for_arch("sm_90"));
  CHECK(canonical_text(scaled_plan.key).find(" epi=bias+scale+leaky_relu+res ") != std::string::npos);
  CHECK(scaled_plan.params.gamma == 2.f);
  const GeneratedKernel g = generate(scaled_plan.key, "sm_90");
  for (const char* line : {"static constexpr int act = 2;", "static constexpr int scaled = 1;",
                           "static constexpr int residual = 1;"}) {
    INFO(line);
    CHECK(g.source.find(line) != std::string::npos);
  }
  // The plain convolution keeps the key text it always had.
  CHECK(canonical_text(make_plan(make_problem(reference_problem()), limits_for_arch("sm_90")).key).find(" epi=bias cg=3 ") !=
        std::string::npos);
}

TEST_CASE("the padding mode is in the key and the traits; the amounts are not") {
  Conv3dDesc d = reference_problem();
  d.padding = Padding(Dims3{1, 2, 3});
  d.padding_mode = PaddingMode::Replicate;
  const Plan plan = make_plan(make_problem(d), limits_for_arch("sm_90"));
  CHECK(canonical_text(plan.key).find(" d=1x1x1 pad=replicate ") != std::string::npos);
  CHECK(plan.params.pad_mode == static_cast<int>(PaddingMode::Replicate));
  CHECK(generate(plan.key, "sm_90").source.find("static constexpr int pad_mode = 2;") != std::string::npos);
  CHECK(readable_key(cache_key_text(plan.key, "sm_90", {})).find(" pad=replicate sm_90") != std::string::npos);
  Conv3dDesc more = d;
  more.padding = Padding::per_side({2, 1, 0}, {0, 3, 3});
  CHECK(make_plan(make_problem(more), limits_for_arch("sm_90")).key == plan.key);
  Conv3dDesc reflect = d;
  reflect.padding_mode = PaddingMode::Reflect;
  CHECK(make_plan(make_problem(reflect), limits_for_arch("sm_90")).key != plan.key);
  // Zero padding's keys keep the text they always had.
  d.padding_mode = PaddingMode::Zeros;
  CHECK(canonical_text(make_plan(make_problem(d), limits_for_arch("sm_90")).key).find("pad=") == std::string::npos);
}

TEST_CASE("element types, layout and output type are in the key, the traits and the listing") {
  Conv3dDesc d = reference_problem();
  d.dtype = DataType::BFloat16;
  d.layout = Layout::NDHWC;
  const Plan plan = make_plan(make_problem(d), limits_for_arch("sm_90"));
  CHECK(plan.key.dtype == DataType::BFloat16);
  CHECK(plan.key.out_dtype == DataType::BFloat16);
  CHECK(canonical_text(plan.key).find(" bf16 ndhwc class=fp32 ") != std::string::npos);
  const std::string traits = generate(plan.key, "sm_90").source;
  CHECK(traits.find("using element = conv3djit::bf16;") != std::string::npos);
  CHECK(traits.find("using out_element = conv3djit::bf16;") != std::string::npos);
  CHECK(traits.find("static constexpr int ndhwc = 1;") != std::string::npos);
  CHECK(readable_key(cache_key_text(plan.key, "sm_90", {})).find(" bf16 ndhwc class=fp32 ") != std::string::npos);

  Conv3dDesc out32 = d;
  out32.fp32_output = true;
  const Plan wide = make_plan(make_problem(out32), limits_for_arch("sm_90"));
  CHECK(wide.key != plan.key);
  CHECK(canonical_text(wide.key).find(" bf16 ndhwc out=fp32 class=") != std::string::npos);
  CHECK(generate(wide.key, "sm_90").source.find("using out_element = float;") != std::string::npos);
  CHECK(readable_key(cache_key_text(wide.key, "sm_90", {})).find(" ndhwc out=fp32 ") != std::string::npos);

  // Half inputs have one class: a tf32 request shares the kernel.
  Conv3dDesc tf32 = d;
  tf32.precision = Precision::Tf32;
  CHECK(make_plan(make_problem(tf32), limits_for_arch("sm_90")).key == plan.key);
  // fp32_output means nothing for float32 inputs.
  Conv3dDesc plain = reference_problem(), flagged = plain;
  flagged.fp32_output = true;
  CHECK(make_plan(make_problem(flagged), limits_for_arch("sm_90")).key ==
        make_plan(make_problem(plain), limits_for_arch("sm_90")).key);
  // NCDHW float32 keys keep their text; the listing leaves the default layout out.
  CHECK(readable_key(cache_key_text(make_plan(make_problem(plain), limits_for_arch("sm_90")).key, "sm_90", {}))
            .rfind("igemm_sm90 fp32 class=fp32 ", 0) == 0);
}

TEST_CASE("past two waves of blocks, batch size and depth do not change the key; channels per group do") {
  // (Up to two waves of 132 blocks the SMs a last wave leaves idle count: other tiles, another key.)
  Conv3dDesc d;
  d.n = 16; d.c = 8; d.d = d.h = d.w = 16; d.k = 16; d.kernel = {3, 3, 3};
  const DeviceLimits limits;
  const SpecKey a = make_plan(make_problem(d), limits).key;
  Conv3dDesc bigger = d;
  // H, W and K may change the tile the planner picks, so they can change the key; N and D never do.
  bigger.n = 23; bigger.d = 40;
  CHECK(make_plan(make_problem(bigger), limits).key == a);
  Conv3dDesc grouped = d;
  grouped.groups = 2;
  CHECK(make_plan(make_problem(grouped), limits).key != a);
}

TEST_CASE("a key does not depend on the SM count: a cache warmed for an arch serves all its devices") {
  std::vector<Conv3dDesc> descs;
  for (int64_t groups : {1, 4, 64}) {
    for (int64_t depth : {2, 8, 16, 64}) {
      Conv3dDesc d;
      d.n = 1; d.c = 64; d.k = 64; d.d = depth; d.h = d.w = 28; d.kernel = 3; d.padding = 1;
      d.groups = groups;
      descs.push_back(d);
    }
  }
  for (const char* arch : {"sm_90", "sm_80", "sm_86"}) {
    for (const Conv3dDesc& d : descs) {
      const Problem prob = make_problem(d);
      DeviceLimits small = limits_for_arch(arch), large = small;
      small.sm_count = 46;
      large.sm_count = 144;
      INFO(arch << " groups " << d.groups << " depth " << d.d);
      CHECK(make_plan(prob, small).key == make_plan(prob, limits_for_arch(arch)).key);
      CHECK(make_plan(prob, large).key == make_plan(prob, limits_for_arch(arch)).key);
    }
  }
}

TEST_CASE("arch strings are checked") {
  CHECK(limits_for_arch("sm_90").cc_major == 9);
  CHECK(limits_for_arch("sm_90a").cc_minor == 0);
  CHECK(limits_for_arch("sm_120").cc_major == 12);
  CHECK_THROWS_AS(limits_for_arch("compute_90"), Error);
  CHECK_THROWS_AS(limits_for_arch("sm90"), Error);
}
