#pragma once
// Catch2 v2 (Debian: catch2/catch.hpp, header-only) and v3 (catch2/catch_all.hpp) behind one name.
#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define CONV3DJIT_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#endif
