#pragma once
// The kernels/ files, embedded at build time (cmake/embed_kernels.cmake).
namespace conv3djit::detail {
struct KernelSource {
  const char* name;  // file name, also the header name NVRTC resolves #include "name" to
  const char* text;
};
const KernelSource* kernel_sources(int* count);
/// SHA-256 over all embedded kernel files; part of every cache key.
const char* kernel_sources_hash();
}  // namespace conv3djit::detail
