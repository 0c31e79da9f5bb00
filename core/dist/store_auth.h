// The rendezvous store's authentication (docs/parallel.md, "The rendezvous store and its
// secret").
//
// c10d's TCPStore server answers any process that connects and cannot refuse one, so the
// ranks authenticate every request end to end instead: AuthStore wraps the TCPStore client
// that the ranks use (the store transport, and ProcessGroupNCCL for its bootstrap) and
//  - names every key by an HMAC of the logical key under the run's secret: a process without
//    the secret cannot tell which key a rank will read next, nor write one in advance;
//  - appends HMAC-SHA256(run id, key, value) to every value it sets, and checks it on every
//    value it returns, before any byte is used: a value written by anyone else is refused
//    with "rendezvous store: message for key ... failed authentication".
// Counters (add) are computed by the server and cannot carry a tag; they rely on the
// secret-derived key name alone. The bytes themselves are not encrypted: the store's one
// server cannot refuse a `list keys` or a get, so a local process can still read tensor bytes
// as they pass, or delete an entry (the run then ends with a clear error or a timeout) — it
// cannot make a rank use data it wrote.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/hmac_sha256.h"

namespace odyssey::dist {

// The variable that hands the run's secret to its ranks (the launcher sets it; with several
// nodes, or under torchrun, whoever starts the job exports the same value on every node).
inline constexpr const char* kStoreSecretVariable = "ODYSSEY_STORE_SECRET";
inline constexpr std::size_t kMinStoreSecretLength = 32;

// 32 bytes from the OS CSPRNG (getrandom(2)) as 64 hex digits.
std::string generate_store_secret();

// "" when `secret` can serve as a store secret, else why not (naming the variable).
std::string store_secret_problem(const std::string& secret);

// The refusal of a multi-node launch without a secret in the environment ("" when it is set
// and valid): what to export, and how.
std::string multi_node_secret_problem();

// A message that failed authentication (distinct from c10::Error, which the store transport
// reports as a peer that sent nothing).
class StoreAuthError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class AuthStore final : public c10d::Store {
 public:
  static constexpr std::size_t kTagBytes = 32;

  AuthStore(c10::intrusive_ptr<c10d::Store> inner, const std::string& secret, std::string run_id);
  // The keys derived from a secret (clone() shares them; the secret itself is not kept).
  struct Keys {
    std::string names, tags;
  };
  AuthStore(c10::intrusive_ptr<c10d::Store> inner, Keys keys, std::string run_id);

  // Binds every later tag to this run (rendezvous: rank 0 draws it, every rank reads it).
  void set_run_id(std::string run_id) { run_id_ = std::move(run_id); }
  const std::string& run_id() const { return run_id_; }

  // The name the server sees for `key`, and the value it stores for `value` under it.
  std::string name_of(const std::string& key) const;
  std::vector<std::uint8_t> seal(const std::string& key, const std::vector<std::uint8_t>& value) const;
  // The value inside `stored`, once its tag is checked; throws StoreAuthError otherwise.
  std::vector<std::uint8_t> open(const std::string& key, const std::vector<std::uint8_t>& stored) const;

  using c10d::Store::compareSet;  // the std::string forms, which call the ones below
  using c10d::Store::set;
  c10::intrusive_ptr<c10d::Store> clone() override;
  void set(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::uint8_t> compareSet(const std::string& key, const std::vector<std::uint8_t>& expected,
                                       const std::vector<std::uint8_t>& desired) override;
  std::vector<std::uint8_t> get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  std::int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
  void setTimeout(const std::chrono::milliseconds& timeout) override;
  void append(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::vector<std::uint8_t>> multiGet(const std::vector<std::string>& keys) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<std::vector<std::uint8_t>>& values) override;
  bool hasExtendedApi() const override;
  void queuePush(const std::string& key, const std::vector<std::uint8_t>& value) override;
  std::vector<std::uint8_t> queuePop(const std::string& key, bool block) override;
  std::int64_t queueLen(const std::string& key) override;

 private:
  Digest tag(const std::string& key, const std::uint8_t* value, std::size_t n) const;
  std::vector<std::string> names_of(const std::vector<std::string>& keys) const;

  c10::intrusive_ptr<c10d::Store> inner_;
  Keys keys_;
  std::string run_id_;
};

// The run id an AuthStore binds its tags to, looking through PrefixStores; "" for a store
// without authentication.
std::string store_run_id(const c10::intrusive_ptr<c10d::Store>& store);

// Wraps `tcp` for the ranks of one run: with a secret, an AuthStore whose run id rank 0 draws
// (16 random bytes) and every rank reads through the store, authenticated, within `timeout`;
// without one (torchrun's agent store, nobody exported ODYSSEY_STORE_SECRET), `tcp` itself
// and one line on stdout saying the store is unauthenticated.
c10::intrusive_ptr<c10d::Store> authenticate_store(c10::intrusive_ptr<c10d::Store> tcp, int rank,
                                                   const std::string& where, std::chrono::milliseconds timeout);

}  // namespace odyssey::dist
