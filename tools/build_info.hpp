#pragma once
// What the JSON reports of run and bench record about the build they came from.

namespace conv3djit::cli {

/// `git describe --always --dirty` of the source tree when the build was configured, "unknown"
/// outside git: the reports' "commit", beside "kernel_sources_sha256".
const char* source_commit() noexcept;

}  // namespace conv3djit::cli
