// MemoryCache: single-flight under contention, hits, and failures that are not cached.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "catch.hpp"
#include "cache/memory_cache.hpp"

using conv3djit::detail::MemoryCache;

TEST_CASE("16 threads asking for one new key cause exactly one make") {
  MemoryCache<int, int, std::hash<int>> cache;
  std::atomic<int> makes{0}, hits{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  std::vector<int> results(16, -1);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      bool hit = false;
      results[i] = cache.get_or_create(42, [&] {
        makes.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a "compile"
        return 4242;
      }, &hit);
      if (hit) hits.fetch_add(1);
    });
  }
  go = true;
  for (auto& t : threads) t.join();
  CHECK(makes.load() == 1);
  CHECK(hits.load() == 15);
  for (int r : results) CHECK(r == 4242);
}

TEST_CASE("distinct keys are made independently and then hit") {
  MemoryCache<int, int, std::hash<int>> cache;
  int makes = 0;
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 5; ++k) {
      bool hit = true;
      CHECK(cache.get_or_create(k, [&] { ++makes; return k * 10; }, &hit) == k * 10);
      CHECK(hit == (round > 0));
    }
  }
  CHECK(makes == 5);
  CHECK(cache.size() == 5);
}

TEST_CASE("a failed make is reported to its waiters and retried later") {
  MemoryCache<int, int, std::hash<int>> cache;
  int makes = 0;
  CHECK_THROWS_AS(cache.get_or_create(1, [&]() -> int { ++makes; throw std::runtime_error("boom"); }),
                  std::runtime_error);
  CHECK(cache.size() == 0);
  CHECK(cache.get_or_create(1, [&] { ++makes; return 7; }) == 7);
  CHECK(makes == 2);
  cache.erase(1);
  CHECK(cache.get_or_create(1, [&] { ++makes; return 8; }) == 8);
}
