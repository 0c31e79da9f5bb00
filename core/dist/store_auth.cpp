#include "dist/store_auth.h"

#include <sys/random.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace odyssey::dist {

namespace {

std::string random_hex(std::size_t bytes) {
  std::vector<std::uint8_t> b(bytes);
  std::size_t got = 0;
  while (got < b.size()) {
    const ssize_t n = ::getrandom(b.data() + got, b.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    got += static_cast<std::size_t>(n);
  }
  return to_hex(b.data(), b.size());
}

std::string as_string(const Digest& d) { return std::string(reinterpret_cast<const char*>(d.data()), d.size()); }

// Names in messages: quoted, cut to ~200 bytes (a key is ours, but its length is not bounded).
std::string quoted(const std::string& key) {
  if (key.size() <= 200) return "\"" + key + "\"";
  return "\"" + key.substr(0, 200) + "...\" (" + std::to_string(key.size()) + " bytes)";
}

}  // namespace

std::string generate_store_secret() { return random_hex(32); }

std::string store_secret_problem(const std::string& secret) {
  if (secret.size() < kMinStoreSecretLength)
    return std::string(kStoreSecretVariable) + " holds " + std::to_string(secret.size()) +
           " character(s); it needs at least " + std::to_string(kMinStoreSecretLength) +
           " (e.g. 64 hex digits: python3 -c 'import secrets; print(secrets.token_hex(32))')";
  return {};
}

std::string multi_node_secret_problem() {
  const char* s = std::getenv(kStoreSecretVariable);
  const std::string how =
      "a job on several nodes needs the same random secret on every node, exported in the job's environment: "
      "export " +
      std::string(kStoreSecretVariable) +
      "=$(python3 -c 'import secrets; print(secrets.token_hex(32))') "
      "once, before srun/the per-node commands (Slurm and torchrun pass the environment on); the rendezvous store "
      "listens on the network and authenticates every request with it";
  if (!s || !*s) return std::string(kStoreSecretVariable) + " is not set: " + how;
  const std::string p = store_secret_problem(s);
  return p.empty() ? std::string() : p + "; " + how;
}

AuthStore::AuthStore(c10::intrusive_ptr<c10d::Store> inner, const std::string& secret, std::string run_id)
    : AuthStore(std::move(inner),
                Keys{as_string(hmac_sha256(secret, "odyssey rendezvous store: key names")),
                     as_string(hmac_sha256(secret, "odyssey rendezvous store: tags"))},
                std::move(run_id)) {}

AuthStore::AuthStore(c10::intrusive_ptr<c10d::Store> inner, Keys keys, std::string run_id)
    : c10d::Store(inner->getTimeout()), inner_(std::move(inner)), keys_(std::move(keys)), run_id_(std::move(run_id)) {}

std::string AuthStore::name_of(const std::string& key) const {
  return "odyssey-auth/" + to_hex(hmac_sha256(keys_.names, key));
}

Digest AuthStore::tag(const std::string& key, const std::uint8_t* value, std::size_t n) const {
  HmacSha256 h(keys_.tags);
  h.field(run_id_);
  h.field(key);
  h.field(value, n);
  return h.finish();
}

std::vector<std::uint8_t> AuthStore::seal(const std::string& key, const std::vector<std::uint8_t>& value) const {
  std::vector<std::uint8_t> out;
  out.reserve(value.size() + kTagBytes);
  out.insert(out.end(), value.begin(), value.end());
  const Digest t = tag(key, value.data(), value.size());
  out.insert(out.end(), t.begin(), t.end());
  return out;
}

std::vector<std::uint8_t> AuthStore::open(const std::string& key, const std::vector<std::uint8_t>& stored) const {
  const std::string head = "rendezvous store: message for key " + quoted(key) + " failed authentication: ";
  if (stored.size() < kTagBytes)
    throw StoreAuthError(head + std::to_string(stored.size()) + " byte(s), shorter than the " +
                         std::to_string(kTagBytes) +
                         "-byte tag every message carries: written by a process without this run's secret");
  const std::size_t n = stored.size() - kTagBytes;
  const Digest want = tag(key, stored.data(), n);
  if (!equal_constant_time(want.data(), stored.data() + n, kTagBytes))
    throw StoreAuthError(head + "its tag does not match its " + std::to_string(n) +
                         " byte(s): written by a process without this run's secret (or for another run)");
  return std::vector<std::uint8_t>(stored.begin(), stored.begin() + static_cast<std::ptrdiff_t>(n));
}

std::vector<std::string> AuthStore::names_of(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(name_of(k));
  return out;
}

c10::intrusive_ptr<c10d::Store> AuthStore::clone() {
  return c10::make_intrusive<AuthStore>(inner_->clone(), keys_, run_id_);
}

void AuthStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  inner_->set(name_of(key), seal(key, value));
}

std::vector<std::uint8_t> AuthStore::compareSet(const std::string& key, const std::vector<std::uint8_t>& expected,
                                                const std::vector<std::uint8_t>& desired) {
  // Tags are deterministic, so the stored form of `expected` is known; empty means "absent".
  const std::vector<std::uint8_t> stored_expected = expected.empty() ? expected : seal(key, expected);
  return open(key, inner_->compareSet(name_of(key), stored_expected, seal(key, desired)));
}

std::vector<std::uint8_t> AuthStore::get(const std::string& key) { return open(key, inner_->get(name_of(key))); }

std::int64_t AuthStore::add(const std::string& key, std::int64_t value) { return inner_->add(name_of(key), value); }

bool AuthStore::deleteKey(const std::string& key) { return inner_->deleteKey(name_of(key)); }

bool AuthStore::check(const std::vector<std::string>& keys) { return inner_->check(names_of(keys)); }

std::int64_t AuthStore::getNumKeys() { return inner_->getNumKeys(); }

void AuthStore::wait(const std::vector<std::string>& keys) { inner_->wait(names_of(keys)); }

void AuthStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  inner_->wait(names_of(keys), timeout);
}

void AuthStore::setTimeout(const std::chrono::milliseconds& timeout) {
  c10d::Store::setTimeout(timeout);
  inner_->setTimeout(timeout);
}

void AuthStore::append(const std::string& key, const std::vector<std::uint8_t>& value) {
  // The server would append to the stored bytes, tag included: read, extend and re-tag under a
  // compare-and-set instead, retrying while another writer got there first.
  const std::string name = name_of(key);
  std::vector<std::uint8_t> stored;  // empty: absent
  for (;;) {
    std::vector<std::uint8_t> next = stored.empty() ? std::vector<std::uint8_t>{} : open(key, stored);
    next.insert(next.end(), value.begin(), value.end());
    const std::vector<std::uint8_t> sealed = seal(key, next);
    std::vector<std::uint8_t> now = inner_->compareSet(name, stored, sealed);
    if (now == sealed) return;
    stored = now == stored ? std::vector<std::uint8_t>{} : std::move(now);  // deleted meanwhile: start afresh
  }
}

std::vector<std::vector<std::uint8_t>> AuthStore::multiGet(const std::vector<std::string>& keys) {
  std::vector<std::vector<std::uint8_t>> stored = inner_->multiGet(names_of(keys));
  for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = open(keys[i], stored[i]);
  return stored;
}

void AuthStore::multiSet(const std::vector<std::string>& keys, const std::vector<std::vector<std::uint8_t>>& values) {
  std::vector<std::vector<std::uint8_t>> sealed;
  for (std::size_t i = 0; i < keys.size() && i < values.size(); ++i) sealed.push_back(seal(keys[i], values[i]));
  inner_->multiSet(names_of(keys), sealed);
}

bool AuthStore::hasExtendedApi() const { return inner_->hasExtendedApi(); }

void AuthStore::queuePush(const std::string& key, const std::vector<std::uint8_t>& value) {
  inner_->queuePush(name_of(key), seal(key, value));
}

std::vector<std::uint8_t> AuthStore::queuePop(const std::string& key, bool block) {
  return open(key, inner_->queuePop(name_of(key), block));
}

std::int64_t AuthStore::queueLen(const std::string& key) { return inner_->queueLen(name_of(key)); }

std::string store_run_id(const c10::intrusive_ptr<c10d::Store>& store) {
  c10::intrusive_ptr<c10d::Store> s = store;
  while (auto* p = dynamic_cast<c10d::PrefixStore*>(s.get())) s = p->getUnderlyingStore();
  if (const auto* a = dynamic_cast<const AuthStore*>(s.get())) return a->run_id();
  return {};
}

c10::intrusive_ptr<c10d::Store> authenticate_store(c10::intrusive_ptr<c10d::Store> tcp, int rank,
                                                   const std::string& where, std::chrono::milliseconds timeout) {
  const char* secret = std::getenv(kStoreSecretVariable);
  if (!secret || !*secret) {
    // torchrun's agent store (or a store started by hand) with no secret exported: as
    // unauthenticated as torchrun's own, and said so once.
    std::cout
        << "rank " << rank << ": the rendezvous store at " << where << " is unauthenticated (" << kStoreSecretVariable
        << " is not set, as under torchrun's agent store): any process that reaches it can read and write its keys; "
        << "export the same " << kStoreSecretVariable << " on every node to authenticate it\n"
        << std::flush;
    return tcp;
  }
  if (const std::string p = store_secret_problem(secret); !p.empty())
    throw std::runtime_error("rank " + std::to_string(rank) + ": " + p);
  auto auth = c10::make_intrusive<AuthStore>(std::move(tcp), secret, "");
  // One key per (elastic) attempt: torchrun's agent keeps its store across restarts.
  std::string key = "odyssey/run_id";
  if (const char* r = std::getenv("TORCHELASTIC_RESTART_COUNT"); r && *r) key += std::string("/restart-") + r;
  std::string id;
  if (rank == 0) {
    id = random_hex(16);
    const std::vector<std::uint8_t> mine(id.begin(), id.end());
    if (auth->compareSet(key, {}, mine) != mine)
      throw std::runtime_error("rank 0: the rendezvous store at " + where +
                               " already holds a run id under this secret: another job uses the same store and " +
                               kStoreSecretVariable + ", or rank 0 was started twice");
  } else {
    try {
      auth->wait({key}, timeout);
    } catch (const c10::Error& e) {
      throw std::runtime_error("rank " + std::to_string(rank) +
                               ": rank 0 did not publish the run id in the rendezvous store at " + where + " within " +
                               std::to_string(timeout.count() / 1000) + " s (is every node started with the same " +
                               kStoreSecretVariable + "?): " + e.what_without_backtrace());
    }
    const std::vector<std::uint8_t> v = auth->get(key);
    id.assign(v.begin(), v.end());
  }
  auth->set_run_id(id);
  return auth;
}

}  // namespace odyssey::dist
