#pragma once
// A fresh folder under the system's temp folder (mkdtemp), removed with everything in it when
// the test is done.
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "catch.hpp"

namespace conv3djit::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* prefix = "conv3djit-test") {
    std::string pattern = (std::filesystem::temp_directory_path() / prefix).string() + "-XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace conv3djit::test
