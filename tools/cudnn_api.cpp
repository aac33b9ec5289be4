#include "cudnn_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <algorithm>
#include <array>
#include <climits>
#include <optional>
#include <stdexcept>

namespace conv3djit::cli {
namespace {

// The library stays loaded for the life of the process (it is never dlclose'd): cuDNN keeps
// sub-libraries and kernels loaded behind the handle.
std::optional<CudnnApi> load_api(std::string& why) {
  void* lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* error = dlerror();
    why = fmt::format("dlopen libcudnn.so.9: {}", error ? error : "?");
    lib = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return std::nullopt;
  }
  CudnnApi api;
#define CONV3DJIT_CUDNN_RESOLVE(name)                                 \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(lib, #name)); \
  if (api.name == nullptr) {                                          \
    why = "libcudnn lacks " #name;                                    \
    return std::nullopt;                                              \
  }
  CONV3DJIT_CUDNN_FUNCTIONS(CONV3DJIT_CUDNN_RESOLVE)
#undef CONV3DJIT_CUDNN_RESOLVE
  // The structs and enums come from cudnn.h, so the library must be of the same major version.
  const size_t version = api.cudnnGetVersion();
  if (version / 10000 != CUDNN_MAJOR) {
    why = fmt::format("libcudnn reports version {}, cudnn.h is for {}.x", version, CUDNN_MAJOR);
    return std::nullopt;
  }
  return api;
}

int to_int(int64_t value) {
  if (value > INT_MAX) {
    throw std::runtime_error(fmt::format("extent {} does not fit cuDNN's int arguments", value));
  }
  return static_cast<int>(value);
}

cudnnDataType_t cudnn_type(DataType type) {
  switch (type) {
    case DataType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DataType::Float16: return CUDNN_DATA_HALF;
    case DataType::Float32: break;
  }
  return CUDNN_DATA_FLOAT;
}

// A packed tensor of extents `dims` in N, C, D, H, W order, laid out in memory as `layout` says
// (NDHWC: C innermost, through the strides). cuDNN's legacy API indexes with int, so larger
// tensors are refused here rather than left to fail (or wrap) inside cuDNN.
void set_tensor(const CudnnApi& api, cudnnTensorDescriptor_t tensor, const std::array<int64_t, 5>& dims,
                DataType type, Layout layout) {
  // The axes from innermost to outermost in memory.
  const std::array<int, 5> order = layout == Layout::NDHWC ? std::array<int, 5>{1, 4, 3, 2, 0}
                                                           : std::array<int, 5>{4, 3, 2, 1, 0};
  std::array<int, 5> d{}, strides{};
  int64_t stride = 1;
  for (const int axis : order) {
    d[axis] = to_int(dims[axis]);
    strides[axis] = to_int(stride);
    stride *= dims[axis];
  }
  if (stride > INT_MAX) {
    throw std::runtime_error(fmt::format("a tensor of {} elements exceeds cuDNN's 2^31-1", stride));
  }
  check_cudnn(api, api.cudnnSetTensorNdDescriptor(tensor, cudnn_type(type), 5, d.data(), strides.data()),
              "cudnnSetTensorNdDescriptor");
}

bool uses_tensor_cores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

}  // namespace

void check_cudnn(const CudnnApi& api, cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(fmt::format("{}: {}", what, api.cudnnGetErrorString(status)));
  }
}

std::unique_ptr<Cudnn> Cudnn::open(CUstream stream, std::string& why) {
  const std::optional<CudnnApi> api = load_api(why);
  if (!api) return nullptr;
  cudnnHandle_t handle = nullptr;
  if (const cudnnStatus_t status = api->cudnnCreate(&handle); status != CUDNN_STATUS_SUCCESS) {
    why = fmt::format("cudnnCreate: {}", api->cudnnGetErrorString(status));
    return nullptr;
  }
  std::unique_ptr<Cudnn> cudnn(new Cudnn(*api, handle));
  if (const cudnnStatus_t status = api->cudnnSetStream(handle, stream); status != CUDNN_STATUS_SUCCESS) {
    why = fmt::format("cudnnSetStream: {}", api->cudnnGetErrorString(status));
    return nullptr;
  }
  return cudnn;
}

Cudnn::~Cudnn() { api_.cudnnDestroy(handle_); }

std::string Cudnn::version() const {
  const size_t v = api_.cudnnGetVersion();
  return fmt::format("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100);
}

CudnnConv::CudnnConv(const Cudnn& cudnn, const Conv3dDesc& desc, const Conv3dTensors& tensors)
    : cudnn_(cudnn),
      tensors_(tensors),
      bias_(desc.bias),
      x_(cudnn.api(), cudnn.api().cudnnCreateTensorDescriptor, cudnn.api().cudnnDestroyTensorDescriptor),
      y_(cudnn.api(), cudnn.api().cudnnCreateTensorDescriptor, cudnn.api().cudnnDestroyTensorDescriptor),
      b_(cudnn.api(), cudnn.api().cudnnCreateTensorDescriptor, cudnn.api().cudnnDestroyTensorDescriptor),
      w_(cudnn.api(), cudnn.api().cudnnCreateFilterDescriptor, cudnn.api().cudnnDestroyFilterDescriptor),
      conv_(cudnn.api(), cudnn.api().cudnnCreateConvolutionDescriptor,
            cudnn.api().cudnnDestroyConvolutionDescriptor) {
  const CudnnApi& api = cudnn.api();
  // cuDNN pads both sides of an axis alike; `same` with an even kernel extent does not.
  const ResolvedPadding pad = resolved_padding(desc);
  if (!(pad.before == pad.after)) throw std::runtime_error("asymmetric padding (cuDNN pads symmetrically)");
  if (desc.padding_mode != PaddingMode::Zeros) throw std::runtime_error("a padding mode other than zeros");
  // Its result would be the convolution alone; python/benchmarks/bench_fusion.py times the fused
  // call against cuDNN followed by PyTorch's pointwise kernels.
  if (desc.epilogue.activation != Activation::Identity || desc.epilogue.residual || desc.epilogue.alpha != 1.f ||
      desc.epilogue.gamma != 1.f) {
    throw std::runtime_error("an epilogue (cuDNN here runs the convolution alone)");
  }

  // The same element types and layout as conv3djit's tensors: the input's type for the input,
  // weight and bias, the output's (float32 with fp32_output) for the output.
  const OutputExtents out = output_extents(desc);
  const DataType out_type = output_dtype(desc);
  set_tensor(api, x_.get(), {desc.n, desc.c, desc.d, desc.h, desc.w}, desc.dtype, desc.layout);
  set_tensor(api, y_.get(), {out.n, out.k, out.d, out.h, out.w}, out_type, desc.layout);
  set_tensor(api, b_.get(), {1, desc.k, 1, 1, 1}, desc.dtype, desc.layout);
  // The filter's extents are given as K, C/groups, KD, KH, KW in either format; NHWC's memory
  // order is K, KD, KH, KW, C/groups, conv3djit's NDHWC weight.
  const std::array<int, 5> filter = {to_int(desc.k), to_int(desc.c / desc.groups), to_int(desc.kernel.d),
                                     to_int(desc.kernel.h), to_int(desc.kernel.w)};
  check_cudnn(api,
              api.cudnnSetFilterNdDescriptor(w_.get(), cudnn_type(desc.dtype),
                                             desc.layout == Layout::NDHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                             5, filter.data()),
              "cudnnSetFilterNdDescriptor");
  const std::array<int, 3> padding = {to_int(pad.before.d), to_int(pad.before.h), to_int(pad.before.w)};
  const std::array<int, 3> stride = {to_int(desc.stride.d), to_int(desc.stride.h), to_int(desc.stride.w)};
  const std::array<int, 3> dilation = {to_int(desc.dilation.d), to_int(desc.dilation.h),
                                       to_int(desc.dilation.w)};
  check_cudnn(api,
              api.cudnnSetConvolutionNdDescriptor(conv_.get(), 3, padding.data(), stride.data(),
                                                  dilation.data(), CUDNN_CROSS_CORRELATION,
                                                  CUDNN_DATA_FLOAT),  // the compute type: float32 sums
              "cudnnSetConvolutionNdDescriptor");
  check_cudnn(api, api.cudnnSetConvolutionGroupCount(conv_.get(), to_int(desc.groups)),
              "cudnnSetConvolutionGroupCount");
  // The fp32 class forbids TF32 (its error is ~1e-4, far above the class's 1e-6): FFMA only.
  // The tf32 class allows tensor cores, as PyTorch's default for convolutions does, and so do
  // half inputs (summed in float32: CUDNN_DATA_FLOAT is the compute type of every type above).
  const bool fp32 = desc.dtype == DataType::Float32 && desc.precision == Precision::Fp32;
  check_cudnn(api, api.cudnnSetConvolutionMathType(conv_.get(), fp32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH),
              "cudnnSetConvolutionMathType");

  std::array<int, 5> dims{};
  check_cudnn(api, api.cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x_.get(), w_.get(), 5, dims.data()),
              "cudnnGetConvolutionNdForwardOutputDim");
  if (dims != std::array<int, 5>{to_int(out.n), to_int(out.k), to_int(out.d), to_int(out.h), to_int(out.w)}) {
    throw std::runtime_error(
        fmt::format("cuDNN's output extents {} differ from conv3djit's", fmt::join(dims, "x")));
  }

  // Find runs every algorithm once on its own scratch tensors and returns them fastest first.
  // Half inputs with a float32 output are no configuration of cuDNN's legacy API (its outputs
  // are of the inputs' type); the refusal says so rather than cuDNN's bare status.
  const std::string mixed =
      out_type != desc.dtype ? fmt::format("{} inputs with a float32 output", dtype_name(desc.dtype)) : "";
  const std::string find = mixed.empty() ? std::string("cudnnFindConvolutionForwardAlgorithm")
                                         : fmt::format("cudnnFindConvolutionForwardAlgorithm ({})", mixed);
  std::array<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT> perf{};
  int count = 0;
  check_cudnn(api,
              api.cudnnFindConvolutionForwardAlgorithm(cudnn.handle(), x_.get(), w_.get(), conv_.get(), y_.get(),
                                                       static_cast<int>(perf.size()), &count, perf.data()),
              find.c_str());
  const auto best = std::find_if(perf.begin(), perf.begin() + count, [fp32](const auto& p) {
    return p.status == CUDNN_STATUS_SUCCESS && !(fp32 && uses_tensor_cores(p.mathType));
  });
  if (best == perf.begin() + count) {
    throw std::runtime_error(mixed.empty() ? std::string("cuDNN found no algorithm for this convolution")
                                           : "cuDNN has no algorithm for " + mixed);
  }
  algo_ = best->algo;
  // As cuDNN advises, run with the math type the algorithm was found with; the fp32 class keeps
  // FMA_MATH, which the search was restricted to.
  math_ = fp32 ? CUDNN_FMA_MATH : best->mathType;
  check_cudnn(api, api.cudnnSetConvolutionMathType(conv_.get(), math_), "cudnnSetConvolutionMathType");
  size_t workspace = 0;
  check_cudnn(api,
              api.cudnnGetConvolutionForwardWorkspaceSize(cudnn.handle(), x_.get(), w_.get(), conv_.get(),
                                                          y_.get(), algo_, &workspace),
              "cudnnGetConvolutionForwardWorkspaceSize");
  workspace_ = DeviceBuffer(workspace);
}

void CudnnConv::run() const {
  const CudnnApi& api = cudnn_.api();
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(api,
              api.cudnnConvolutionForward(cudnn_.handle(), &one, x_.get(), tensors_.input, w_.get(),
                                          tensors_.weight, conv_.get(), algo_, workspace_.ptr(),
                                          workspace_.bytes(), &zero, y_.get(), tensors_.output),
              "cudnnConvolutionForward");
  if (bias_) {
    check_cudnn(
        api,
        api.cudnnAddTensor(cudnn_.handle(), &one, b_.get(), tensors_.bias, &one, y_.get(), tensors_.output),
        "cudnnAddTensor");
  }
}

std::string CudnnConv::algorithm() const {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM",
                                      "DIRECT",        "FFT",                   "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  const int index = static_cast<int>(algo_);
  return index >= 0 && index < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? names[index]
                                                                : fmt::format("algo {}", index);
}

std::string CudnnConv::math() const {
  switch (math_) {
    case CUDNN_FMA_MATH:
      return "fma";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_op_allow_conversion";
    default:
      return "default";
  }
}

}  // namespace conv3djit::cli
