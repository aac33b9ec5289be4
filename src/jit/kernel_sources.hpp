#pragma once
// The kernels/ files, embedded at build time (cmake/embed_kernels.cmake).
#include <string>

namespace conv3djit::detail {
struct KernelSource {
  const char* name;  // path below kernels/, also the header name NVRTC resolves #include "name" to
  const char* text;
  const char* sha256;  // of text
};
const KernelSource* kernel_sources(int* count);
/// SHA-256 over all embedded kernel files (recorded in benchmark results).
const char* kernel_sources_hash();
/// A hash of `entry` (a path below kernels/) and every embedded file it includes, directly or
/// not: the part of a cache key that changes when, and only when, that kernel's code does.
/// Throws Error(InvalidArgument) for a name that is not embedded.
const std::string& kernel_source_hash(const char* entry);
}  // namespace conv3djit::detail
