#pragma once
// What a compiled kernel asks of the device, read from its cubin without a GPU: the registers a
// thread and the bytes of stack frame (local memory: spilled values or arrays ptxas could not
// keep in registers), the same numbers cuFuncGetAttribute gives once the module is loaded; and
// the bytes of its machine code.
#include <string>

namespace conv3djit::detail {

struct CubinResources {
  int registers = -1;    // -1: not recorded in the cubin
  int stack_bytes = -1;  // -1: not recorded
  long long code_bytes = -1;  // the kernel's .text section (16 bytes an instruction from sm_70); -1: none
};

/// The resources of the kernel `lowered_name` (its mangled symbol) in `cubin`, from the ELF's
/// .nv.info attributes and its section .text.<lowered_name>. Fields stay -1 where the cubin does
/// not say; a cubin that is not a 64-bit little-endian ELF gives all -1.
CubinResources cubin_resources(const std::string& cubin, const std::string& lowered_name);

}  // namespace conv3djit::detail
