#pragma once
// cuDNN's legacy convolution API for `conv3djit bench`, loaded with dlopen: the library never
// depends on cuDNN, and bench still times conv3djit (cuDNN columns n/a) where it is missing.
// cudnn.h is used for its types and prototypes only; libcudnn is never linked.
#include <cudnn.h>

#include <memory>
#include <string>

#include "conv3djit/conv3d.hpp"
#include "device.hpp"

namespace conv3djit::cli {

struct CudnnApi {
#define CONV3DJIT_CUDNN_FUNCTIONS(X)                                                           \
  X(cudnnGetVersion) X(cudnnGetErrorString) X(cudnnCreate) X(cudnnDestroy) X(cudnnSetStream)   \
  X(cudnnCreateTensorDescriptor) X(cudnnDestroyTensorDescriptor) X(cudnnSetTensorNdDescriptor) \
  X(cudnnCreateFilterDescriptor) X(cudnnDestroyFilterDescriptor) X(cudnnSetFilterNdDescriptor) \
  X(cudnnCreateConvolutionDescriptor) X(cudnnDestroyConvolutionDescriptor)                     \
  X(cudnnSetConvolutionNdDescriptor) X(cudnnSetConvolutionGroupCount)                          \
  X(cudnnSetConvolutionMathType) X(cudnnGetConvolutionNdForwardOutputDim)                      \
  X(cudnnFindConvolutionForwardAlgorithm) X(cudnnGetConvolutionForwardWorkspaceSize)           \
  X(cudnnConvolutionForward) X(cudnnAddTensor)
#define CONV3DJIT_CUDNN_DECLARE(name) decltype(&::name) name = nullptr;
  CONV3DJIT_CUDNN_FUNCTIONS(CONV3DJIT_CUDNN_DECLARE)
#undef CONV3DJIT_CUDNN_DECLARE
};

/// Throws std::runtime_error naming `what` and cuDNN's text for `status` unless it is success.
void check_cudnn(const CudnnApi& api, cudnnStatus_t status, const char* what);

/// A cuDNN handle whose work goes to one stream.
class Cudnn {
 public:
  /// Loads libcudnn.so.9 (else libcudnn.so) and makes a handle on `stream`; nullptr, with the
  /// reason in `why`, where cuDNN is missing or unusable.
  static std::unique_ptr<Cudnn> open(CUstream stream, std::string& why);
  ~Cudnn();
  Cudnn(const Cudnn&) = delete;
  Cudnn& operator=(const Cudnn&) = delete;

  const CudnnApi& api() const { return api_; }
  cudnnHandle_t handle() const { return handle_; }
  std::string version() const;  ///< of the loaded library, "9.14.0"

 private:
  Cudnn(const CudnnApi& api, cudnnHandle_t handle) : api_(api), handle_(handle) {}
  CudnnApi api_;
  cudnnHandle_t handle_;
};

/// A cuDNN descriptor, destroyed with its owner (also when a later member's constructor throws).
template <typename T>
class CudnnDescriptor {
 public:
  CudnnDescriptor(const CudnnApi& api, cudnnStatus_t (*create)(T*), cudnnStatus_t (*destroy)(T))
      : destroy_(destroy) {
    check_cudnn(api, create(&handle_), "cudnnCreate...Descriptor");
  }
  ~CudnnDescriptor() { destroy_(handle_); }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  T get() const { return handle_; }

 private:
  cudnnStatus_t (*destroy_)(T);
  T handle_ = nullptr;
};

/// One convolution prepared for cuDNN on a problem's device tensors: descriptors of the
/// description's element types and layout (NDHWC through strides, the filter as
/// CUDNN_TENSOR_NHWC; float32 compute for every type), the fastest algorithm its accuracy class
/// allows (cudnnFindConvolutionForwardAlgorithm; tensor-op math for tf32 and half inputs) and its
/// workspace, all made here so that run() only enqueues. Throws std::runtime_error, its message
/// the reason, when cuDNN cannot serve the description (asymmetric `same` padding, > 2^31
/// elements, a float32 output of half inputs where cuDNN has no such configuration).
class CudnnConv {
 public:
  CudnnConv(const Cudnn& cudnn, const Conv3dDesc& desc, const Conv3dTensors& tensors);

  /// Enqueues the convolution, then the bias if the description has one, on the handle's stream.
  void run() const;
  std::string algorithm() const;  ///< "IMPLICIT_PRECOMP_GEMM"
  std::string math() const;       ///< "fma", "tensor_op", ...
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  const Cudnn& cudnn_;
  Conv3dTensors tensors_;
  bool bias_;
  CudnnDescriptor<cudnnTensorDescriptor_t> x_, y_, b_;
  CudnnDescriptor<cudnnFilterDescriptor_t> w_;
  CudnnDescriptor<cudnnConvolutionDescriptor_t> conv_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math_ = CUDNN_DEFAULT_MATH;
  DeviceBuffer workspace_;
};

}  // namespace conv3djit::cli
