// The safetensors header parser on hand-built files: each rule of the format (as the
// reference implementation, huggingface/safetensors tensor.rs, enforces it) has a file that
// breaks it, and the diagnostic must name the file, the tensor and what is wrong. The valid
// cases include the example file from the reference's own documentation.
#include <QtTest>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/safetensors_header.h"

using namespace odyssey;
namespace fs = std::filesystem;

namespace {

// JSON written with single quotes for readability (no raw strings: moc chokes on them).
std::string q(std::string s) {
  for (auto& c : s)
    if (c == '\'') c = '"';
  return s;
}

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file: the header padded to 8 bytes with spaces (as the reference writes it), then
// `data` bytes of payload.
std::string file_of(const std::string& header, std::size_t data) {
  std::string h = header;
  while (h.size() % 8 != 0) h += ' ';
  return le64(h.size()) + h + std::string(data, '\x11');
}

const std::string kFile = "t.safetensors";

Result<SafetensorsHeader> parse(const std::string& bytes) {
  return parse_safetensors_header(bytes, bytes.size(), kFile);
}

std::string all(const Diagnostics& d) { return format_all(d); }

}  // namespace

class TstSafetensorsHeader : public QObject {
  Q_OBJECT
 private slots:
  void referenceDocExample() {
    // From the reference's SafeTensors::deserialize doc comment: N = 60, unpadded.
    const std::string json = q("{'test':{'dtype':'I32','shape':[2,2],'data_offsets':[0,16]}}");
    QCOMPARE(json.size(), std::size_t(60));
    const auto r = parse(le64(60) + json + std::string(16, '\0'));
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    QCOMPARE(r.value.tensors.size(), std::size_t(1));
    const auto* t = r.value.find("test");
    QVERIFY(t != nullptr);
    QCOMPARE(t->dtype, SafetensorsDtype::I32);
    QCOMPARE(t->numel(), std::int64_t(4));
    QCOMPARE(r.value.data_start(), std::uint64_t(68));
    QCOMPARE(r.value.data_length, std::uint64_t(16));
    QVERIFY(!dtype_supported(t->dtype));
    QCOMPARE(std::string(dtype_name(t->dtype)), std::string("I32"));
  }

  void validMixed() {
    // Entries listed out of offset order, a 0-d tensor, an empty tensor, metadata.
    const std::string h =
        q("{'__metadata__':{'format':'pt','note':'x'},"
          "'w':{'dtype':'BF16','shape':[2,3],'data_offsets':[4,16]},"
          "'scalar':{'dtype':'F32','shape':[],'data_offsets':[0,4]},"
          "'empty':{'dtype':'F16','shape':[0,7],'data_offsets':[16,16]},"
          "'h':{'dtype':'F16','shape':[1],'data_offsets':[16,18],'extra':'ignored'}}");
    const auto r = parse(file_of(h, 18));
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    const auto& ts = r.value.tensors;
    QCOMPARE(ts.size(), std::size_t(4));
    QCOMPARE(ts[0].name, std::string("scalar"));
    QCOMPARE(ts[1].name, std::string("w"));
    QCOMPARE(ts[2].name, std::string("empty"));
    QCOMPARE(ts[3].name, std::string("h"));
    QCOMPARE(ts[0].numel(), std::int64_t(1));
    QVERIFY(ts[0].shape.empty());
    QCOMPARE(ts[2].numel(), std::int64_t(0));
    QCOMPARE(r.value.metadata.at("format"), std::string("pt"));
    QCOMPARE(r.value.find("w")->begin, std::uint64_t(4));
    QVERIFY(r.value.find("nope") == nullptr);
  }

  void validEdgeCases() {
    auto r = parse(file_of("{}", 0));
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    QVERIFY(r.value.tensors.empty());
    r = parse(file_of(q("{'__metadata__':null,'f':{'dtype':'F4','shape':[2],'data_offsets':[0,1]}}"), 1));
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    // Dtypes Odyssey refuses to load are still parsed, so they can be refused by name.
    r = parse(file_of(q("{'d':{'dtype':'F64','shape':[1],'data_offsets':[0,8]}}"), 8));
    QVERIFY(r.ok());
    QCOMPARE(std::string(dtype_name(r.value.tensors[0].dtype)), std::string("F64"));
    QVERIFY(dtype_from_name("F8_E4M3").has_value());
    QVERIFY(!dtype_from_name("bf16").has_value());
  }

  void errors_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("tensor");
    QTest::addColumn<QString>("fragment");
    auto row = [](const char* tag, const std::string& b, const char* tensor, const char* frag) {
      QTest::newRow(tag) << QByteArray(b.data(), static_cast<qsizetype>(b.size())) << QString(tensor) << QString(frag);
    };
    auto f32 = [](const char* name, int b, int e) {
      return "'" + std::string(name) + "':{'dtype':'F32','shape':[2],'data_offsets':[" + std::to_string(b) + "," +
             std::to_string(e) + "]}";
    };
    row("short file", std::string("\x08\x00\x00", 3), "", "too short for the 8-byte header length");
    row("length over limit", le64(100'000'001) + "{}", "", "over the format's limit");
    row("length past eof", le64(64) + "{}      ", "", "runs past the end of the file");
    row("empty header", le64(0), "", "header is empty");
    row("invalid json", file_of("{'a':", 0), "", "not valid JSON");
    row("invalid utf8", file_of(q("{'\xff\xfe':1}"), 0), "", "not valid JSON");
    row("trailing garbage", file_of("{}x", 0), "", "not valid JSON");
    row("array", file_of("[1,2]", 0), "", "header is an array, expected an object");
    row("entry not object", file_of(q("{'a':[1]}"), 0), "a", "entry is an array");
    row("no dtype", file_of(q("{'a':{'shape':[1],'data_offsets':[0,4]}}"), 4), "a", "no \"dtype\"");
    row("no shape", file_of(q("{'a':{'dtype':'F32','data_offsets':[0,4]}}"), 4), "a", "no \"shape\"");
    row("no offsets", file_of(q("{'a':{'dtype':'F32','shape':[1]}}"), 4), "a", "no \"data_offsets\"");
    row("dtype number", file_of(q("{'a':{'dtype':7,'shape':[1],'data_offsets':[0,4]}}"), 4), "a",
        "dtype is an integer");
    row("unknown dtype", file_of(q("{'a':{'dtype':'F128','shape':[1],'data_offsets':[0,16]}}"), 16), "a",
        "unknown dtype \"F128\"");
    row("shape string", file_of(q("{'a':{'dtype':'F32','shape':'2','data_offsets':[0,8]}}"), 8), "a",
        "shape is a string");
    row("negative dim", file_of(q("{'a':{'dtype':'F32','shape':[2,-1],'data_offsets':[0,8]}}"), 8), "a",
        "shape dimension 1 is negative (-1)");
    row("float dim", file_of(q("{'a':{'dtype':'F32','shape':[2.0],'data_offsets':[0,8]}}"), 8), "a",
        "floating-point number");
    row("dim over int64", file_of(q("{'a':{'dtype':'U8','shape':[18446744073709551615],'data_offsets':[0,8]}}"), 8),
        "a", "larger than 2^63 - 1");
    row("dim beyond uint64",
        file_of(q("{'a':{'dtype':'U8','shape':[99999999999999999999999],'data_offsets':[0,8]}}"), 8), "a",
        "floating-point number");
    row("numel overflow", file_of(q("{'a':{'dtype':'U8','shape':[4294967296,4294967296],'data_offsets':[0,8]}}"), 8),
        "a", "more than 2^63 - 1 elements");
    row("bytes overflow", file_of(q("{'a':{'dtype':'F64','shape':[2305843009213693952,2],'data_offsets':[0,8]}}"), 8),
        "a", "needs more than");
    row("partial bytes", file_of(q("{'a':{'dtype':'F4','shape':[3],'data_offsets':[0,2]}}"), 2), "a",
        "whole number of bytes");
    row("offsets one", file_of(q("{'a':{'dtype':'F32','shape':[2],'data_offsets':[0]}}"), 8), "a", "[begin, end]");
    row("offsets negative", file_of(q("{'a':{'dtype':'F32','shape':[2],'data_offsets':[-8,0]}}"), 8), "a",
        "begin is negative");
    row("offsets reversed", file_of(q("{'a':{'dtype':'F32','shape':[0],'data_offsets':[8,0]}}"), 8), "a",
        "end before they begin");
    row("span mismatch", file_of(q("{'a':{'dtype':'BF16','shape':[2,3],'data_offsets':[0,10]}}"), 10), "a",
        "dtype BF16 with shape [2, 3] needs 12 bytes, but data_offsets [0, 10) span 10");
    row("truncated", file_of(q("{" + f32("a", 0, 8) + "," + f32("b", 8, 16) + "}"), 12), "b", "the file is truncated");
    row("overlap", file_of(q("{" + f32("a", 0, 8) + "," + f32("b", 4, 12) + "}"), 12), "b",
        "overlap tensor 'a' at [0, 8)");
    row("same span", file_of(q("{" + f32("a", 0, 8) + "," + f32("b", 0, 8) + "}"), 8), "b", "overlap tensor 'a'");
    row("hole", file_of(q("{" + f32("a", 0, 8) + "," + f32("b", 16, 24) + "}"), 24), "b",
        "hole of 8 bytes before this tensor (after 'a')");
    row("hole at start", file_of(q("{" + f32("a", 8, 16) + "}"), 16), "a", "(at the start)");
    row("trailing bytes", file_of(q("{" + f32("a", 0, 8) + "}"), 12), "",
        "4 bytes after the last tensor are not part of any tensor");
    row("duplicate name", file_of(q("{" + f32("a", 0, 8) + "," + f32("a", 8, 16) + "}"), 16), "a",
        "appears more than once");
    row("duplicate field", file_of(q("{'a':{'dtype':'F32','dtype':'F16','shape':[2],'data_offsets':[0,8]}}"), 8),
        "a/dtype", "appears more than once in this entry");
    row("metadata not object", file_of(q("{'__metadata__':[1]}"), 0), "__metadata__", "expected an object");
    row("metadata value", file_of(q("{'__metadata__':{'k':1}}"), 0), "__metadata__", "value of \"k\" is an integer");
  }

  void errors() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, tensor);
    QFETCH(QString, fragment);
    const auto r = parse(bytes.toStdString());
    QVERIFY2(!r.ok(), "a broken header was accepted");
    bool found = false;
    for (const auto& d : r.diagnostics) {
      QCOMPARE(QString::fromStdString(d.file), QString::fromStdString(kFile));
      if (QString::fromStdString(d.key) == tensor && QString::fromStdString(d.message).contains(fragment)) found = true;
    }
    QVERIFY2(found, ("expected [" + tensor + "] " + fragment + "\ngot:\n" + QString::fromStdString(all(r.diagnostics)))
                        .toUtf8()
                        .constData());
  }

  void headerBytesShorterThanClaimed() {
    // The caller passed fewer bytes than 8 + N although the file is long enough.
    const std::string f = file_of(q("{" + std::string("'a':{'dtype':'U8','shape':[1],'data_offsets':[0,1]}") + "}"), 1);
    const auto r = parse_safetensors_header(std::string_view(f).substr(0, 20), f.size(), kFile);
    QVERIFY(!r.ok());
    QVERIFY(all(r.diagnostics).find("header bytes could be read") != std::string::npos);
  }

  void manyErrorsAreCapped() {
    std::string h = "{";
    for (int i = 0; i < 500; ++i) h += (i ? "," : "") + q("'t" + std::to_string(i) + "':{'dtype':'X'}");
    const auto r = parse(file_of(h + "}", 0));
    QVERIFY(!r.ok());
    QVERIFY(r.diagnostics.size() <= 21);
    QVERIFY(r.diagnostics.back().message.find("and 480 more problems") != std::string::npos);
  }

  void readFromDisk() {
    const fs::path dir = fs::temp_directory_path() / ("odyssey-sth-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string good = file_of(q("{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]}}"), 8);
    std::ofstream(dir / "good.safetensors", std::ios::binary) << good;
    std::ofstream(dir / "cut.safetensors", std::ios::binary) << good.substr(0, good.size() - 3);
    std::ofstream(dir / "tiny.safetensors", std::ios::binary) << good.substr(0, 30);
    const auto r = read_safetensors_header((dir / "good.safetensors").string());
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    QCOMPARE(r.value.tensors.at(0).name, std::string("a"));
    const auto cut = read_safetensors_header((dir / "cut.safetensors").string());
    QVERIFY(!cut.ok());
    QVERIFY(all(cut.diagnostics).find("cut.safetensors: error: a: data_offsets [0, 8) run past") != std::string::npos);
    const auto tiny = read_safetensors_header((dir / "tiny.safetensors").string());
    QVERIFY(all(tiny.diagnostics).find("runs past the end of the file") != std::string::npos);
    const auto missing = read_safetensors_header((dir / "missing.safetensors").string());
    QVERIFY(all(missing.diagnostics).find("missing.safetensors: error: cannot read the file") != std::string::npos);
    fs::remove_all(dir);
  }

  void index() {
    const std::string ok =
        q("{'metadata':{'total_size':24,'total_parameters':6},'weight_map':{"
          "'b':'model-00002-of-00002.safetensors','a':'model-00001-of-00002.safetensors',"
          "'c':'model-00002-of-00002.safetensors'}}");
    const auto r = parse_safetensors_index(ok, "model.safetensors.index.json");
    QVERIFY2(r.ok(), all(r.diagnostics).c_str());
    QCOMPARE(r.value.weight_map.size(), std::size_t(3));
    QCOMPARE(r.value.shards.size(), std::size_t(2));
    QCOMPARE(r.value.shards[0], safetensors_shard_name(1, 2));
    QCOMPARE(r.value.total_size.value_or(0), std::uint64_t(24));

    auto err = [](const std::string& text, const std::string& frag) {
      const auto e = parse_safetensors_index(q(text), "idx.json");
      const std::string s = all(e.diagnostics);
      return !e.ok() && s.find(frag) != std::string::npos && s.find("idx.json") != std::string::npos;
    };
    QVERIFY(err("{'weight_map':", "not valid JSON"));
    QVERIFY(err("[]", "expected an object with \"weight_map\""));
    QVERIFY(err("{'metadata':{}}", "weight_map: missing"));
    QVERIFY(err("{'weight_map':{}}", "weight_map: is empty"));
    QVERIFY(err("{'weight_map':{'a':'s1','a':'s2'}}", "a: the tensor is mapped more than once"));
    QVERIFY(err("{'weight_map':{'a':3}}", "a: weight_map value is an integer"));
    QVERIFY(err("{'weight_map':{'a':'../x.safetensors'}}", "is not a plain file name"));
    QVERIFY(err("{'weight_map':{'a':'/etc/x'}}", "is not a plain file name"));
  }

  // Issue 21 item 5: read_safetensors_header opened its file with a blocking ifstream; a
  // FIFO named model.safetensors is now refused at once (stat, then O_NONBLOCK and fstat).
  void fifoIsRefusedNotWaitedOn() {
    const std::string dir = std::filesystem::temp_directory_path() / ("odyssey-st-fifo-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string fifo = dir + "/model.safetensors";
    QCOMPARE(::mkfifo(fifo.c_str(), 0600), 0);
    auto fut = std::async(std::launch::async, [&] { return read_safetensors_header(fifo); });
    const bool in_time = fut.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    if (!in_time) {  // release the blocked open so that the test fails instead of hanging
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
    const auto r = fut.get();
    std::filesystem::remove_all(dir);
    QVERIFY(in_time);
    QVERIFY2(format_all(r.diagnostics).find(fifo + ": error: cannot read the file: is a FIFO (named pipe)") !=
                 std::string::npos,
             format_all(r.diagnostics).c_str());
    QVERIFY(!find_safetensors_files(dir + "/absent").ok());
  }
};

QTEST_APPLESS_MAIN(TstSafetensorsHeader)
#include "tst_safetensors_header.moc"
