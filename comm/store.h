// The Store: the key-value rendezvous that the processes of a world meet through before
// they can communicate (exchange addresses, NCCL unique ids, barriers at start-up), with
// the operations of c10d's Store. Implementations: an in-process one here (for ranks that
// share a process, and for tests); c10d's TCPStore for real processes goes behind the same
// interface (comm/). Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel::comm {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;
  // Sets `key` to `value` (replacing any value), waking those waiting for it.
  virtual void set(const std::string& key, const Bytes& value) = 0;
  // The value of `key`, waiting up to timeout() for it to be set (Timeout error naming the
  // key after that).
  virtual Bytes get(const std::string& key) = 0;
  // Adds `delta` to the integer at `key` (0 when absent; stored as decimal text, as c10d's)
  // and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `key` to `desired` if its value is `expected` (an absent key matches an empty
  // `expected`); returns the value after the operation, as c10d's compareSet does.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Waits until every key is set, up to `timeout` (Timeout error naming the missing keys).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // Whether `key` is set now (no waiting).
  virtual bool check(const std::string& key) = 0;
  // Removes `key`; true when it was set.
  virtual bool remove(const std::string& key) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // Text conveniences.
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }
};

// A store in this process's memory, safe to share between threads (c10d's HashStore).
std::shared_ptr<Store> make_memory_store(std::chrono::milliseconds timeout = std::chrono::seconds(300));

}  // namespace accel::comm
