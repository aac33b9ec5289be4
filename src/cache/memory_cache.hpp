#pragma once
// MemoryCache: key -> value, thread-safe and single-flight: when many threads ask for one missing
// key at once, make() runs exactly once and the others wait for its result. A make() that throws
// is not cached; its waiters get the same exception and a later call tries again.
#include <future>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace conv3djit::detail {

template <class Key, class Value, class Hash>
class MemoryCache {
 public:
  /// The value for key; *hit says whether it existed (or was being made) before this call.
  template <class Make>
  Value get_or_create(const Key& key, Make&& make, bool* hit = nullptr) {
    std::shared_future<Value> future;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) future = it->second;
    }
    if (future.valid()) {  // the hot path: no promise, no allocation
      if (hit != nullptr) *hit = true;
      return future.get();  // waits if another thread is still making it
    }
    std::promise<Value> promise;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto [it, inserted] = map_.emplace(key, promise.get_future().share());
      if (!inserted) future = it->second;  // another thread got here between the two locks
    }
    if (future.valid()) {
      if (hit != nullptr) *hit = true;
      return future.get();
    }
    if (hit != nullptr) *hit = false;
    try {
      Value value = make();
      promise.set_value(value);
      return value;
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        map_.erase(key);
      }
      promise.set_exception(std::current_exception());
      throw;
    }
  }

  /// The value for key if it exists (waiting while another thread makes it), without making it.
  std::optional<Value> find(const Key& key) {
    std::shared_future<Value> future;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it == map_.end()) return std::nullopt;
      future = it->second;
    }
    try {
      return future.get();
    } catch (...) {
      return std::nullopt;  // its make() failed: as if it were not there
    }
  }

  void erase(const Key& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_.erase(key);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return map_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<Key, std::shared_future<Value>, Hash> map_;
};

}  // namespace conv3djit::detail
