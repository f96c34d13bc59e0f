// The in-process Store (see store.h).
#include "comm/store.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/communicator.h"

namespace accel::comm {

namespace {

class MemoryStore final : public Store {
 public:
  explicit MemoryStore(std::chrono::milliseconds timeout) : timeout_(timeout) { check_timeout(timeout); }

  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      data_[key] = value;
    }
    cv_.notify_all();
  }

  Bytes get(const std::string& key) override {
    std::unique_lock<std::mutex> lk(mu_);
    wait_locked(lk, {key}, timeout_, "get");
    return data_.at(key);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = data_.find(key);
      if (it != data_.end()) {
        const std::string text(it->second.begin(), it->second.end());
        size_t used = 0;
        bool ok = !text.empty();
        try {
          v = ok ? std::stoll(text, &used) : 0;
        } catch (const std::exception&) {
          ok = false;
        }
        if (!ok || used != text.size())
          throw CommError(Result::InvalidArgument, "store: add on key '" + key + "', whose value is not an integer");
      }
      v += delta;
      const std::string text = std::to_string(v);
      data_[key] = Bytes(text.begin(), text.end());
    }
    cv_.notify_all();
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Bytes out;
    {
      std::lock_guard<std::mutex> lk(mu_);
      auto it = data_.find(key);
      if ((it == data_.end() && expected.empty()) || (it != data_.end() && it->second == expected)) {
        data_[key] = desired;
        out = desired;
      } else {
        out = it == data_.end() ? expected : it->second;  // c10d: the current value, or `expected` when absent
      }
    }
    cv_.notify_all();
    return out;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    check_timeout(timeout);
    std::unique_lock<std::mutex> lk(mu_);
    wait_locked(lk, keys, timeout, "wait");
  }

  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lk(mu_);
    return data_.count(key) != 0;
  }

  bool remove(const std::string& key) override {
    std::lock_guard<std::mutex> lk(mu_);
    return data_.erase(key) != 0;
  }

  std::chrono::milliseconds timeout() const override {
    std::lock_guard<std::mutex> lk(mu_);
    return timeout_;
  }
  void set_timeout(std::chrono::milliseconds timeout) override {
    check_timeout(timeout);
    std::lock_guard<std::mutex> lk(mu_);
    timeout_ = timeout;
  }

 private:
  static void check_timeout(std::chrono::milliseconds t) {
    if (t.count() <= 0)
      throw CommError(Result::InvalidArgument, "store: the timeout must be > 0 ms, got " + std::to_string(t.count()));
  }

  void wait_locked(std::unique_lock<std::mutex>& lk, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                   const char* what) {
    auto missing = [&] {
      std::string m;
      for (const auto& k : keys)
        if (!data_.count(k)) m += (m.empty() ? "'" : ", '") + k + "'";
      return m;
    };
    if (cv_.wait_for(lk, timeout, [&] { return missing().empty(); })) return;
    throw CommError(Result::Timeout, std::string("store: ") + what + " timed out after " + std::to_string(timeout.count()) +
                                         " ms waiting for " + missing() + " (did every process reach the rendezvous?)");
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Bytes> data_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout) { return std::make_shared<MemoryStore>(timeout); }

}  // namespace accel::comm
