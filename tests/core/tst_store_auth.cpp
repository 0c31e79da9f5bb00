// The rendezvous store's authentication (dist/store_auth.h, docs/parallel.md):
//   - SHA-256 / HMAC-SHA256 against RFC 4231's test vectors and against Python's hmac module
//     (tests/reference/store_auth_oracle.py), over lengths around the 64-byte block;
//   - the key names and the tags against the same oracle;
//   - AuthStore against a real in-process TCPStore server: the happy path round-trips (set,
//     get, compareSet, append, multiSet/multiGet, add, check, wait, delete), the server never
//     sees a logical key; a forger writing under the right derived name with a wrong secret, a
//     truncated value, a 1-byte value, another run's message and a message moved to another key
//     are each refused with "failed authentication" before a byte is used;
//   - the store transport's message header: a replayed message (sequence number), another
//     dtype, shape, sender, group, run id or byte count, a cut-off header, each refused with what
//     was expected and what came, end to end through a real store group;
//   - authenticate_store: two ranks agree on a run id drawn by rank 0; without a secret the
//     store is returned as is.
// LibTorch before Qt: Qt's keyword macros clash with its headers.
#include "dist/comm.h"
#include "dist/hmac_sha256.h"
#include "dist/store_auth.h"
#include "dist/store_message.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include <cstdlib>
#include <random>
#include <thread>

using namespace odyssey;
using dist::AuthStore;

namespace {

const std::string kSecret = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const std::string kOther = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

std::string bytes_hex(const std::string& s) {
  return dist::to_hex(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
}
std::string bytes_hex(const std::vector<std::uint8_t>& v) { return dist::to_hex(v.data(), v.size()); }
std::string unhex(const std::string& h) {
  std::string s;
  for (std::size_t i = 0; i + 1 < h.size(); i += 2)
    s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}
std::vector<std::uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

// The error message of f(), or "" when it did not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

#define VERIFY_ERROR(expr, needle)                                                                 \
  do {                                                                                             \
    const std::string e_ = error_of([&] { (void)(expr); });                                        \
    QVERIFY2(!e_.empty(), "no error: " #expr);                                                     \
    QVERIFY2(e_.find(needle) != std::string::npos,                                                 \
             qPrintable(QString::fromStdString("\"" + std::string(needle) + "\" not in: " + e_))); \
  } while (0)

// Runs the Python oracle on a request; empty when no Python is configured.
QJsonObject oracle(const QJsonObject& request) {
  const QString py = QStringLiteral(ODYSSEY_PYTHON);
  if (py.isEmpty()) return {};
  QProcess p;
  p.start(py, {QStringLiteral(ODYSSEY_SOURCE_DIR) + "/tests/reference/store_auth_oracle.py"});
  p.write(QJsonDocument(request).toJson(QJsonDocument::Compact));
  p.closeWriteChannel();
  if (!p.waitForFinished(60000) || p.exitCode() != 0)
    qFatal("the oracle failed: %s", qPrintable(QString::fromUtf8(p.readAllStandardError())));
  return QJsonDocument::fromJson(p.readAllStandardOutput()).object();
}

c10::intrusive_ptr<c10d::TCPStore> server() {
  c10d::TCPStoreOptions o;
  o.port = 0;  // a free one
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(10);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

c10::intrusive_ptr<c10d::TCPStore> client(const c10::intrusive_ptr<c10d::TCPStore>& s) {
  c10d::TCPStoreOptions o;
  o.port = s->getPort();
  o.isServer = false;
  o.waitWorkers = false;
  o.timeout = std::chrono::seconds(10);
  return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
}

}  // namespace

class TstStoreAuth : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void rfc4231() {
    struct V {
      std::string key, data, mac;
    };
    // RFC 4231 section 4, test cases 1-7 (case 5: the first 128 bits).
    const std::vector<V> vectors = {
        {std::string(20, '\x0b'), "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {std::string(20, '\xaa'), std::string(50, '\xdd'),
         "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"), std::string(50, '\xcd'),
         "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {std::string(20, '\x0c'), "Test With Truncation", "a3b6167473100ee06e0c796c2955552b"},
        {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
         "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {std::string(131, '\xaa'),
         "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
         "hashed before being used by the HMAC algorithm.",
         "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (std::size_t i = 0; i < vectors.size(); ++i) {
      const std::string got = dist::to_hex(dist::hmac_sha256(vectors[i].key, vectors[i].data));
      QCOMPARE(QString::fromStdString(got.substr(0, vectors[i].mac.size())), QString::fromStdString(vectors[i].mac));
    }
    // FIPS 180-2 appendix B.1 and the empty string.
    QCOMPARE(QString::fromStdString(dist::to_hex(dist::sha256("abc"))),
             QString("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
    QCOMPARE(QString::fromStdString(dist::to_hex(dist::sha256(""))),
             QString("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  }

  void againstPythonHmac() {
    // Keys and messages of every length around the block size (0..200), bytes from a seeded
    // generator; pieces fed in random splits to the streaming API must give the same digest.
    std::mt19937 rng(21);
    QJsonArray cases;
    std::vector<std::pair<std::string, std::string>> inputs;
    for (int n = 0; n <= 200; n += (n < 130 ? 1 : 7)) {
      std::string k(static_cast<std::size_t>((n * 37) % 150), '\0'), m(static_cast<std::size_t>(n), '\0');
      for (char& c : k) c = static_cast<char>(rng());
      for (char& c : m) c = static_cast<char>(rng());
      inputs.emplace_back(k, m);
      cases.append(QJsonArray{QString::fromStdString(bytes_hex(k)), QString::fromStdString(bytes_hex(m))});
    }
    const QJsonObject out = oracle(QJsonObject{{"hmac", cases}});
    if (out.isEmpty()) QSKIP("no ODYSSEY_PYTHON for the oracle");
    const QJsonArray want = out.value("hmac").toArray();
    QCOMPARE(want.size(), static_cast<qsizetype>(inputs.size()));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const auto& [k, m] = inputs[i];
      QCOMPARE(QString::fromStdString(dist::to_hex(dist::hmac_sha256(k, m))),
               want[static_cast<qsizetype>(i)].toString());
      dist::HmacSha256 h(k);
      std::size_t at = 0;
      while (at < m.size()) {
        const std::size_t take = std::min<std::size_t>(m.size() - at, rng() % 70);
        h.update(m.data() + at, take);
        at += take;
      }
      QCOMPARE(QString::fromStdString(dist::to_hex(h.finish())), want[static_cast<qsizetype>(i)].toString());
    }
    qInfo("HMAC-SHA256 equals Python's hmac on %zu key/message pairs (lengths 0-200)", inputs.size());
  }

  void namesAndTagsAgainstPython() {
    struct C {
      std::string secret, run_id, key, value;
    };
    const std::vector<C> cs = {{kSecret, "", "odyssey/run_id", "abc"},
                               {kSecret, "5f3a", "odyssey/ulysses/dp0/ring0/0:0>1", std::string(300, '\x11')},
                               {kOther, "run-2", "k", ""}};
    QJsonArray req;
    for (const auto& c : cs)
      req.append(QJsonObject{{"secret", QString::fromStdString(c.secret)},
                             {"run_id", QString::fromStdString(c.run_id)},
                             {"key", QString::fromStdString(c.key)},
                             {"value_hex", QString::fromStdString(bytes_hex(c.value))}});
    const QJsonObject out = oracle(QJsonObject{{"store", req}});
    if (out.isEmpty()) QSKIP("no ODYSSEY_PYTHON for the oracle");
    const auto srv = server();
    for (std::size_t i = 0; i < cs.size(); ++i) {
      AuthStore a(srv, cs[i].secret, cs[i].run_id);
      const QJsonObject w = out.value("store").toArray()[static_cast<qsizetype>(i)].toObject();
      QCOMPARE(QString::fromStdString(a.name_of(cs[i].key)), w.value("name").toString());
      QCOMPARE(QString::fromStdString(bytes_hex(a.seal(cs[i].key, bytes(cs[i].value)))),
               w.value("sealed_hex").toString());
    }
  }

  void constantTimeCompare() {
    const std::uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5}, c[4] = {9, 2, 3, 4};
    QVERIFY(dist::equal_constant_time(a, a, 4));
    QVERIFY(!dist::equal_constant_time(a, b, 4));
    QVERIFY(!dist::equal_constant_time(a, c, 4));
  }

  void secrets() {
    const std::string s1 = dist::generate_store_secret(), s2 = dist::generate_store_secret();
    QCOMPARE(s1.size(), std::size_t{64});
    QVERIFY(s1 != s2);
    QVERIFY(dist::store_secret_problem(s1).empty());
    QVERIFY(dist::store_secret_problem("short").find("at least 32") != std::string::npos);
    ::unsetenv(dist::kStoreSecretVariable);
    QVERIFY(dist::multi_node_secret_problem().find("is not set") != std::string::npos);
    ::setenv(dist::kStoreSecretVariable, kSecret.c_str(), 1);
    QVERIFY(dist::multi_node_secret_problem().empty());
    ::unsetenv(dist::kStoreSecretVariable);
  }

  void happyPathRoundTrips() {
    const auto srv = server();
    const auto raw = client(srv);
    auto a = c10::make_intrusive<AuthStore>(client(srv), kSecret, "run-a");
    auto b = c10::make_intrusive<AuthStore>(client(srv), kSecret, "run-a");  // another rank
    a->set("x", bytes("hello"));
    QCOMPARE(b->get("x"), bytes("hello"));
    QVERIFY(!raw->check({"x"}));  // the server never sees the logical name
    QVERIFY(raw->check({a->name_of("x")}));
    QCOMPARE(raw->get(a->name_of("x")).size(), std::size_t{5 + AuthStore::kTagBytes});
    QVERIFY(b->check({"x"}));
    b->wait({"x"}, std::chrono::seconds(1));
    QCOMPARE(a->compareSet("c", {}, bytes("one")), bytes("one"));
    QCOMPARE(b->compareSet("c", bytes("nope"), bytes("two")), bytes("one"));
    QCOMPARE(b->compareSet("c", bytes("one"), bytes("two")), bytes("two"));
    a->append("l", bytes("ab"));
    b->append("l", bytes("cd"));
    QCOMPARE(a->get("l"), bytes("abcd"));
    a->multiSet({"m1", "m2"}, {bytes("1"), bytes("22")});
    QCOMPARE(b->multiGet({"m1", "m2"}), (std::vector<std::vector<std::uint8_t>>{bytes("1"), bytes("22")}));
    QCOMPARE(a->add("n", 3), std::int64_t{3});
    QCOMPARE(b->add("n", 4), std::int64_t{7});
    QVERIFY(!raw->check({"n"}));
    QVERIFY(a->deleteKey("x"));
    QVERIFY(!b->check({"x"}));
    // Through a PrefixStore (what the groups and ProcessGroupNCCL use), and a clone.
    auto p = c10::make_intrusive<c10d::PrefixStore>("odyssey/dp", c10::intrusive_ptr<c10d::Store>(a));
    p->set("k", bytes("v"));
    QCOMPARE(b->clone()->get("odyssey/dp/k"), bytes("v"));
    QCOMPARE(QString::fromStdString(dist::store_run_id(p)), QString("run-a"));
    QCOMPARE(QString::fromStdString(dist::store_run_id(raw)), QString());
  }

  void forgeriesAreRefused() {
    const auto srv = server();
    const auto raw = client(srv);
    auto a = c10::make_intrusive<AuthStore>(client(srv), kSecret, "run-a");
    const std::string k = "odyssey/ulysses/dp0/ring0/0:0>1";
    const std::string name = a->name_of(k);  // known to the forger (the server lists keys)
    // A forger with another secret, writing under the right derived name.
    AuthStore forger(client(srv), kOther, "run-a");
    raw->set(name, forger.seal(k, std::vector<std::uint8_t>(121344, 0x41)));
    VERIFY_ERROR(a->get(k), "rendezvous store: message for key \"" + k + "\" failed authentication");
    VERIFY_ERROR(a->get(k), "written by a process without this run's secret");
    // The run's own message, truncated by one byte, and a 1-byte value.
    a->set(k, std::vector<std::uint8_t>(64, 7));
    std::vector<std::uint8_t> cut = raw->get(name);
    cut.pop_back();
    raw->set(name, cut);
    VERIFY_ERROR(a->get(k), "its tag does not match its 63 byte(s)");
    raw->set(name, std::vector<std::uint8_t>{0x7f});
    VERIFY_ERROR(a->get(k), "1 byte(s), shorter than the 32-byte tag");
    // A genuine message of another run (same secret), and one moved to another key.
    AuthStore old_run(client(srv), kSecret, "run-0");
    raw->set(name, old_run.seal(k, bytes("old")));
    VERIFY_ERROR(a->get(k), "failed authentication");
    a->set("odyssey/world/0:0>1", bytes("moved"));
    raw->set(name, raw->get(a->name_of("odyssey/world/0:0>1")));
    VERIFY_ERROR(a->get(k), "failed authentication");
    // compareSet and multiGet check too.
    VERIFY_ERROR(a->compareSet(k, {}, bytes("x")), "failed authentication");
    VERIFY_ERROR(a->multiGet({k}), "failed authentication");
  }

  // The store transport's header, message by message.
  void headerMismatchesAreRefused() {
    const torch::Tensor t = torch::arange(12, torch::kFloat32).view({3, 4});
    dist::MessageHeader h;
    h.run_id = "run-a";
    h.group = "odyssey/world";
    h.src = 0;
    h.dst = 1;
    h.seq = 4;
    const dist::MessageHeader want = dist::describe(h, t);
    torch::Tensor out = torch::empty_like(t);
    dist::unpack_message(dist::pack_message(want, t), want, out, "all_reduce");
    QVERIFY(torch::equal(out, t));
    auto refused = [&](dist::MessageHeader sent, const torch::Tensor& payload) {
      torch::Tensor o = torch::empty_like(t);
      return error_of([&] { dist::unpack_message(dist::pack_message(sent, payload), want, o, "all_reduce"); });
    };
    dist::MessageHeader m = want;
    m.seq = 3;
    QVERIFY(refused(m, t).find("sequence number 3 came, 4 expected (a replayed or reordered message)") !=
            std::string::npos);
    m = want;
    m.src = 2;
    QVERIFY(refused(m, t).find("sender rank 2 came, 0 expected") != std::string::npos);
    m = want;
    m.dst = 0;
    QVERIFY(refused(m, t).find("receiver rank 0 came, 1 expected") != std::string::npos);
    m = want;
    m.group = "odyssey/dp/sp0";
    QVERIFY(refused(m, t).find("group \"odyssey/dp/sp0\" came, \"odyssey/world\" expected") != std::string::npos);
    m = want;
    m.run_id = "run-0";
    QVERIFY(refused(m, t).find("run id \"run-0\" came, \"run-a\" expected") != std::string::npos);
    const torch::Tensor d = t.to(torch::kInt32);
    QVERIFY(refused(dist::describe(want, d), d).find("dtype Int came, Float expected") != std::string::npos);
    const torch::Tensor s = t.view({4, 3}).contiguous();
    QVERIFY(refused(dist::describe(want, s), s).find("shape [4, 3] came, [3, 4] expected") != std::string::npos);
    m = want;
    m.bytes = 44;
    const std::string e = refused(m, t.flatten().slice(0, 0, 11).contiguous());
    QVERIFY2(e.find("byte count 44 came, 48 expected") != std::string::npos, e.c_str());
    std::vector<std::uint8_t> msg = dist::pack_message(want, t);
    msg.resize(10);
    QVERIFY(error_of([&] { dist::unpack_message(msg, want, out, "all_reduce"); }).find("cut off inside its header") !=
            std::string::npos);
    msg = dist::pack_message(want, t);
    msg.pop_back();
    QVERIFY(error_of([&] {
              dist::unpack_message(msg, want, out, "all_reduce");
            }).find("payload of 47 byte(s) came, 48") != std::string::npos);
    QVERIFY(error_of([&] {
              dist::unpack_message({0x41}, want, out, "all_reduce");
            }).find("cut off inside its header") != std::string::npos);
  }

  // End to end through a real store group (rank 1 of 2; the test plays rank 0 with the secret):
  // a genuine message is taken; the same message again (replayed by a holder of the secret, or
  // a peer out of step) is refused by its sequence number; a forger's right-sized payload
  // under the derived name is refused by the tag.
  void storeGroupRefusesReplaysAndForgeries() {
    const auto srv = server();
    auto peer = c10::make_intrusive<AuthStore>(client(srv), kSecret, "run-a");
    auto mine = c10::make_intrusive<AuthStore>(client(srv), kSecret, "run-a");
    const auto g = dist::make_group(dist::Transport::Store, "world", "odyssey/world", mine, 1, 2, torch::kCPU,
                                    std::chrono::seconds(5));
    const torch::Tensor x = torch::full({2, 3}, 2.0f), from0 = torch::full({2, 3}, 5.0f);
    dist::MessageHeader h;
    h.run_id = "run-a";
    h.group = "odyssey/world";
    h.src = 0;
    h.dst = 1;
    h.seq = 0;
    const std::vector<std::uint8_t> first = dist::pack_message(dist::describe(h, from0), from0);
    peer->set("odyssey/world/0:0>1", first);
    torch::Tensor a = x.clone();
    g->all_reduce(a);
    QVERIFY(torch::equal(a, torch::full({2, 3}, 7.0f)));
    QCOMPARE(peer->get("odyssey/world/0:1>0").size(), first.size());  // rank 1's message to rank 0
    // The first message replayed as the second collective's.
    peer->set("odyssey/world/1:0>1", first);
    torch::Tensor b = x.clone();
    const std::string e = error_of([&] { g->all_reduce(b); });
    QVERIFY2(e.find("sequence number 0 came, 1 expected (a replayed or reordered message)") != std::string::npos,
             e.c_str());
    QVERIFY(torch::equal(b, x));  // nothing was used
    // A right-sized forgery under the derived name of the third collective's key.
    const auto raw = client(srv);
    h.seq = 1;
    AuthStore forger(client(srv), kOther, "run-a");
    raw->set(mine->name_of("odyssey/world/2:0>1"),
             forger.seal("odyssey/world/2:0>1", dist::pack_message(dist::describe(h, from0), from0)));
    torch::Tensor c = x.clone();
    const std::string f = error_of([&] { g->all_reduce(c); });
    QVERIFY2(
        f.find("failed authentication") != std::string::npos && f.find("receiving from rank 0") != std::string::npos,
        f.c_str());
    QVERIFY(torch::equal(c, x));
  }

  void authenticateStoreAgreesOnARunId() {
    const auto srv = server();
    ::setenv(dist::kStoreSecretVariable, kSecret.c_str(), 1);
    c10::intrusive_ptr<c10d::Store> s0, s1;
    std::string e0, e1;
    std::thread r1([&] {
      e1 = error_of([&] { s1 = dist::authenticate_store(client(srv), 1, "test", std::chrono::seconds(10)); });
    });
    e0 = error_of([&] { s0 = dist::authenticate_store(client(srv), 0, "test", std::chrono::seconds(10)); });
    r1.join();
    QVERIFY2(e0.empty() && e1.empty(), (e0 + e1).c_str());
    const std::string id = dist::store_run_id(s0);
    QCOMPARE(id.size(), std::size_t{32});
    QCOMPARE(dist::store_run_id(s1), id);
    // Rank 0 started again on the same store and secret: refused, not a second run id.
    QVERIFY(error_of([&] {
              dist::authenticate_store(client(srv), 0, "test", std::chrono::seconds(10));
            }).find("already holds a run id") != std::string::npos);
    // A rank with another secret never finds rank 0's run id.
    ::setenv(dist::kStoreSecretVariable, kOther.c_str(), 1);
    QVERIFY(error_of([&] {
              dist::authenticate_store(client(srv), 1, "test", std::chrono::milliseconds(500));
            }).find("did not publish the run id") != std::string::npos);
    // Without a secret: the store itself, unauthenticated.
    ::unsetenv(dist::kStoreSecretVariable);
    const auto plain = client(srv);
    QVERIFY(dist::authenticate_store(plain, 0, "test", std::chrono::seconds(1)).get() == plain.get());
  }
};

QTEST_GUILESS_MAIN(TstStoreAuth)
#include "tst_store_auth.moc"
