// The native Jinja engine (core/tokenizer/jinja.h) against jinja2 as transformers configures it:
//  - constructs(): small templates with the text jinja2 3.1.6 renders (checked with Python when
//    the cases were written), errors(): what fails, with template name, line and column;
//  - corpus(): every real chat template of tests/reference/chat_templates/ x every conversation
//    fixture, rendered by transformers 5.17 (chat_template_oracle.py, run here through
//    ODYSSEY_PYTHON) and natively: byte-identical text, the same {% generation %} spans, and an
//    error where the oracle raised (raise_exception: the same message);
//  - differential(): ~2000 generated templates x contexts (jinja_differential.py, fixed seed)
//    rendered by jinja2 and natively: 0 mismatches;
//  - trainingSamples(): the corpus fixtures that are training samples (tool calls and results
//    among them) read as dataset records, tokenized by the data pipeline with every template:
//    the ids and trained mask of apply_chat_template(tokenize=True) (tool_chat_oracle.py).
#include <QtTest>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "data/tokenize.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja.h"
#include "tokenizer/tokenizer.h"

using namespace odyssey;
using nlohmann::ordered_json;
namespace jj = odyssey::jinja;

namespace {

const char* kNow = "2026-01-15T12:00:00";

std::string read_file(const QString& path) {
  std::ifstream in(path.toStdString(), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string render(const std::string& tpl, const ordered_json& ctx = ordered_json::object()) {
  jj::RenderOptions o;
  o.now = kNow;
  return jj::Template(tpl, "t.jinja").render(ctx, o).text;
}

// Runs `python script args...` once per input hash; the output file is cached in the build
// directory under `stem-<hash>.jsonl`.
QString run_oracle(const QString& stem, const QStringList& args, const QByteArray& key, QString* error) {
  const QString python = QStringLiteral(ODYSSEY_PYTHON);
  QCryptographicHash h(QCryptographicHash::Sha1);
  h.addData(key);
  h.addData(python.toUtf8());
  const QString dir = QStringLiteral(ODYSSEY_TEST_BINARY_DIR) + "/jinja-oracle";
  QDir().mkpath(dir);
  const QString out = dir + "/" + stem + "-" + h.result().toHex().left(12) + ".jsonl";
  if (QFile::exists(out)) return out;
  const QString tmp = out + ".tmp";
  QProcess p;
  p.setProcessChannelMode(QProcess::MergedChannels);
  QStringList full = args;
  full << "--jsonl" << tmp;
  p.start(python, full);
  if (!p.waitForFinished(900000) || p.exitStatus() != QProcess::NormalExit || p.exitCode() != 0) {
    *error = python + " " + full.join(' ') + " failed:\n" + QString::fromUtf8(p.readAll());
    QFile::remove(tmp);
    return {};
  }
  QFile::remove(out);
  QFile::rename(tmp, out);
  return out;
}

bool python_has_transformers() {
  const QString python = QStringLiteral(ODYSSEY_PYTHON);
  if (python.isEmpty()) return false;
  QProcess p;
  p.start(python, {"-c", "import jinja2, transformers"});
  return p.waitForFinished(120000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

}  // namespace

class TstJinja : public QObject {
  Q_OBJECT

 private slots:
  void constructs_data();
  void constructs();
  void whitespace_data();
  void whitespace();
  void errors_data();
  void errors();
  void generationRanges();
  void limits();
  void corpus();
  void differential();
  void trainingSamples();
  void templateFile();
  void chatTemplateFastPathsAreIdentical();
  void chatTemplateMasks();
};

// ---- constructs -------------------------------------------------------------------------
void TstJinja::constructs_data() {
  QTest::addColumn<QString>("tpl");
  QTest::addColumn<QString>("ctx");
  QTest::addColumn<QString>("expected");
  auto row = [](const char* name, const char* t, const char* c, const char* e) {
    QTest::newRow(name) << QString::fromUtf8(t) << QString::fromUtf8(c) << QString::fromUtf8(e);
  };
  // literals and Python str()
  row("bool", "{{ true }} {{ False }} {{ none }} {{ None }}", "{}", "True False None None");
  row("numbers",
      "{{ 1 }} {{ 1.0 }} {{ 10/4 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e20 }} {{ 0.0001 }} {{ 1.5e-5 "
      "}}",
      "{}", "1 1.0 2.5 3 -4 2 1024 1e+20 0.0001 1.5e-05");
  row("repr", "{{ ['a', 1, none, true, 1.5] }} {{ {'a': 'it\\'s', 'b': [1]} }} {{ (1,) }} {{ () }}", "{}",
      "['a', 1, None, True, 1.5] {'a': \"it's\", 'b': [1]} (1,) ()");
  row("escapes", "{{ 'a\\nb\\tc\\\\d\\x41\\u00e9' }}", "{}", "a\nb\tc\\dAé");
  row("repr escapes", "{{ ['a\\nb', 'é'] }}", "{}", "['a\\nb', 'é']");
  row("adjacent strings", "{{ 'a' \"b\" }}", "{}", "ab");
  row("concat", "{{ 1 ~ 'x' ~ none ~ true }}", "{}", "1xNoneTrue");
  row("undefined prints empty", "[{{ nope }}]", "{}", "[]");
  // access
  row("attr and item", "{{ m.role }} {{ m['content'] }} {{ m.get('x', 'd') }} {{ l[0] }} {{ l[-1] }} {{ l.1 }}",
      R"({"m": {"role": "user", "content": "hi"}, "l": [1, 2, 3]})", "user hi d 1 3 2");
  row("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[-2:] }}",
      R"({"l": [1, 2, 3], "s": "héllo"})", "[2, 3] [1, 2] [3, 2, 1] él olléh lo");
  row("missing key is undefined", "{{ m.nope is defined }} {{ m.nope }}", R"({"m": {}})", "False ");
  row("dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}{{ d.values()|list }}",
      R"({"d": {"b": 1, "a": 2}})", "b=1;a=2;['b', 'a'][1, 2]");
  // operators
  row("comparisons",
      "{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }}", "{}",
      "True True True True True True");
  row("and or", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ not none }} {{ [] or {} }}", "{}", "x b True {}");
  row("inline if", "{{ 'y' if x else 'n' }}{{ 'z' if false }}", R"({"x": 1})", "y");
  row("filters precedence", "{{ -1|abs }} {{ 'ab' ~ 'cd'|upper }}", "{}", "1 abCD");
  row("list plus", "{{ [1] + [2] }} {{ 'a' * 3 }}", "{}", "[1, 2] aaa");
  // statements
  row("if elif else", "{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", R"({"x": 2})", "two");
  row("for loop vars",
      "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ "
      "loop.length }}|{% endfor %}",
      R"({"l": ["a", "b"]})", "102TrueFalse2|211FalseTrue2|");
  row("previtem nextitem", "{% for x in l %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}",
      R"({"l": [1, 2, 3]})", "<1>2;1<2>3;2<3>;");
  row("for else", "{% for x in [] %}x{% else %}empty{% endfor %}", "{}", "empty");
  row("for filter", "{% for x in l if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}", R"({"l": [1, 2, 3]})", "2232");
  row("break continue",
      "{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% "
      "endfor %}",
      "{}", "023");
  row("set scoping", "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "{}", "21");
  row("namespace",
      "{% set ns = namespace(n=0, s='') %}{% for i in [1, 2] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}", "{}",
      "3");
  row("block set", "{% set x %}a{{ 1 }}b{% endset %}[{{ x }}]", "{}", "[a1b]");
  row("tuple set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "{}", "12");
  row("macro", "{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, b=2) }} {{ m() }}", "{}",
      "1-d 1-2 -d");
  row("macro sees later globals", "{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}", "{}", "3");
  row("filter block", "{% filter upper %}abc{% endfilter %}", "{}", "ABC");
  row("raw", "{% raw %}{{ x }}{% endraw %}", "{}", "{{ x }}");
  row("with", "{% with a = 1 %}{{ a }}{% endwith %}{{ a is defined }}", "{}", "1False");
  row("call block", "{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}", "{}", "<in>");
  // filters
  row("trim lower upper", "[{{ '  a B '|trim }}][{{ 'aB'|lower }}][{{ 'aB'|upper }}][{{ 'xxaxx'|trim('x') }}]", "{}",
      "[a B][ab][AB][a]");
  row("tojson", "{{ d|tojson }} {{ d|tojson(indent=2) }} {{ 'é\"'|tojson }} {{ [1.0, none, true]|tojson }}",
      R"({"d": {"a": [1, {"b": "c"}]}})",
      "{\"a\": [1, {\"b\": \"c\"}]} {\n  \"a\": [\n    1,\n    {\n      \"b\": \"c\"\n    }\n  ]\n} \"é\\\"\" [1.0, "
      "null, true]");
  row("tojson sort separators", "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}", "{}",
      "{\"a\":2,\"b\":1}");
  row("length join first last", "{{ l|length }} {{ l|join(', ') }} {{ l|first }} {{ l|last }} {{ 'héllo'|length }}",
      R"({"l": ["a", "b"]})", "2 a, b a b 5");
  row("default", "{{ x|default('d') }} {{ ''|default('e', true) }} {{ 0|d(1) }}", "{}", "d e 0");
  row("items dictsort", "{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %} {{ d|dictsort }}",
      R"({"d": {"b": 1, "a": 2}})", "b1a2 [('a', 2), ('b', 1)]");
  row("selectattr map",
      "{{ l|selectattr('r', 'equalto', 'u')|map(attribute='c')|list }} {{ l|rejectattr('r', 'equalto', "
      "'u')|list|length }}",
      R"({"l": [{"r": "u", "c": 1}, {"r": "a", "c": 2}, {"r": "u", "c": 3}]})", "[1, 3] 1");
  row("select reject", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ ['a', 'b']|reject('equalto', 'a')|list }}", "{}",
      "[1, 3] ['b']");
  row("map filter", "{{ ['a', 'b']|map('upper')|join }}", "{}", "AB");
  row("string int float round",
      "{{ 1|string }} {{ '42'|int }} {{ 'x'|int }} {{ '1.5'|float }} {{ 2.675|round(2) }} {{ 2.5|round }}", "{}",
      "1 42 0 1.5 2.67 2.0");
  row("replace capitalize title",
      "{{ 'aaa'|replace('a', 'b', 2) }} {{ 'hELLO'|capitalize }} {{ 'hello world-x'|title }}", "{}",
      "bba Hello Hello World-X");
  row("unique reverse sort", "{{ ['a', 'A', 'b']|unique|list }} {{ [1, 2]|reverse|list }} {{ [3, 1, 2]|sort }}", "{}",
      "['a', 'b'] [2, 1] [1, 2, 3]");
  row("indent", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, first=true) }}", "{}", "a\n  b\n\n  c|  a\n  b");
  row("wordcount abs sum", "{{ 'a b  c'|wordcount }} {{ -2|abs }} {{ [1, 2]|sum }}", "{}", "3 2 3");
  // tests
  row("tests",
      "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ {} is mapping }}{{ [] is sequence "
      "}}"
      "{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 3 is odd }}{{ 4 is even }}"
      "{{ 6 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 1 is eq 1 }}{{ false is false }}{{ 'A' is upper }}",
      R"({"x": 1})", "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  row("is not", "{{ x is not none }} {{ x is not string }}", R"({"x": 1})", "True True");
  // methods
  row("str methods",
      "{{ ' a '.strip() }}|{{ 'xax'.lstrip('x') }}|{{ 'a,b'.split(',') }}|{{ 'a b'.split() }}|{{ 'ab'.startswith('a') "
      "}}"
      "|{{ 'ab'.endswith(('x', 'b')) }}|{{ 'ab cd'.title() }}|{{ 'a'.upper() }}|{{ 'aXa'.replace('a', 'b') }}",
      "{}", "a|ax|['a', 'b']|['a', 'b']|True|True|Ab Cd|A|bXb");
  row("split maxsplit", "{{ 'a b c'.split(' ', 1) }} {{ 'a/b/c'.rsplit('/', 1) }}", "{}", "['a', 'b c'] ['a/b', 'c']");
  row("format", "{{ '{} and {}'.format(1, 'x') }}", "{}", "1 and x");
  row("strftime_now", "{{ strftime_now('%d %b %Y') }}", "{}", "15 Jan 2026");
  row("none tools", "{{ tools is none }}", R"({"tools": null})", "True");
  // jinja2 quirks the differential test found
  row("for else after break",
      "{% for x in [1, 2] %}{{ x }}{% break %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{{ x }}{% else %}E{% endfor "
      "%}",
      "{}", "1E|12");
  row("constant slice folds", "[{{ (([1, 2])[0])[:1] }}]", "{}", "[]");
  row("range object", "{{ range(3) }} {{ range(1, 10, 2)[1:3] }} {{ range(3)|list }}", "{}",
      "range(0, 3) range(3, 7, 2) [0, 1, 2]");
  row("float divmod", "{{ 1 % -1.0 }} {{ -1.25 // 5 }} {{ 7.5 % 2 }}", "{}", "-0.0 -1.0 1.5");
  row("undefined is callable", "{{ x is callable }} {{ x is iterable }} {{ x is sequence }}", "{}", "True True True");
  row("generator truthiness", "{{ ([]|select) is sequence }} {{ 'y' if []|select else 'n' }}", "{}", "False y");
  row("title method vs filter", "{{ '你a b1c'.title() }}|{{ '你a b1c'|title }}", "{}", "你A B1C|你a B1c");
}

void TstJinja::constructs() {
  QFETCH(QString, tpl);
  QFETCH(QString, ctx);
  QFETCH(QString, expected);
  try {
    const std::string got = render(tpl.toStdString(), ordered_json::parse(ctx.toStdString()));
    QCOMPARE(QString::fromStdString(got), expected);
  } catch (const jj::Error& e) {
    QFAIL(e.what());
  }
}

// ---- whitespace control -----------------------------------------------------------------
void TstJinja::whitespace_data() {
  QTest::addColumn<QString>("tpl");
  QTest::addColumn<QString>("expected");
  auto row = [](const char* name, const char* t, const char* e) { QTest::newRow(name) << QString(t) << QString(e); };
  row("trim_blocks", "{% if true %}\nA\n{% endif %}\nB", "A\nB");
  row("lstrip_blocks", "x\n    {% if true %}\n    y\n    {% endif %}\nz", "x\n    y\nz");
  row("plus disables lstrip", "x\n  {%+ if true %}y{% endif %}", "x\n  y");
  row("minus strips", "a  \n  {%- if true -%}  \n  b  {{- ' c ' -}}  \n d{% endif %}", "ab c d");
  row("comments", "a\n  {# c #}\nb {#- c -#} c", "a\nbc");
  row("trailing newline dropped", "a\n", "a");
  row("only one trailing newline", "a\n\n", "a\n");
  row("crlf normalized", "a\r\nb\rc", "a\nb\nc");
  row("var tags are not lstripped", "x\n  {{ 'y' }}\n", "x\n  y");
  row("after trimmed newline", "{% if true %}\n  {% if true %}\nZ{% endif %}{% endif %}", "Z");
  row("dict literal closing braces", "{{ {'a': {'b': 1}} }}", "{'a': {'b': 1}}");
}

void TstJinja::whitespace() {
  QFETCH(QString, tpl);
  QFETCH(QString, expected);
  try {
    QCOMPARE(QString::fromStdString(render(tpl.toStdString())), expected);
  } catch (const jj::Error& e) {
    QFAIL(e.what());
  }
}

// ---- errors -----------------------------------------------------------------------------
void TstJinja::errors_data() {
  QTest::addColumn<QString>("tpl");
  QTest::addColumn<int>("kind");
  QTest::addColumn<int>("line");
  QTest::addColumn<int>("col");
  QTest::addColumn<QString>("message");
  auto row = [](const char* name, const char* t, jj::ErrorKind k, int l, int c, const char* m) {
    QTest::newRow(name) << QString::fromUtf8(t) << static_cast<int>(k) << l << c << QString::fromUtf8(m);
  };
  using K = jj::ErrorKind;
  row("raise_exception", "a\n  {{ raise_exception('Roles must alternate') }}", K::Raised, 2, 6, "Roles must alternate");
  row("unknown filter", "{{ x|frobnicate }}", K::Syntax, 1, 6, "No filter named 'frobnicate'.");
  row("unknown test", "{{ x is frob }}", K::Syntax, 1, 9, "No test named 'frob'.");
  row("unknown tag", "{% frob %}", K::Syntax, 1, 4, "Encountered unknown tag 'frob'.");
  row("unclosed if", "{% if x %}\nabc", K::Syntax, 2, 4,
      "unexpected end of template: expected 'elif' or 'else' or 'endif'");
  row("unclosed tag", "ab {{ x ", K::Syntax, 1, 4, "unexpected end of template: the {{ tag is not closed");
  row("bad token", "{{ x $ y }}", K::Syntax, 1, 6, "unexpected char '$'");
  row("unbalanced", "{{ (x }}", K::Syntax, 1, 7, "unexpected '}', expected ')'");
  row("loop over none", "{% for x in none %}{% endfor %}", K::Runtime, 1, 4,
      "TypeError: 'NoneType' object is not iterable");
  row("loop over int", "{% for x in 3 %}{% endfor %}", K::Runtime, 1, 4, "TypeError: 'int' object is not iterable");
  row("str plus list", "{{ 'a' + [1] }}", K::Runtime, 1, 8,
      "TypeError: can only concatenate str (not \"list\") to str");
  row("undefined attribute", "{{ m.content.strip() }}", K::Runtime, 1, 4, "UndefinedError: 'm' is undefined");
  row("missing key call", "{{ m.content.strip() }}", K::Runtime, 1, 4, "");
  row("unsupported filter", "{{ 'x'|urlize }}", K::Runtime, 1, 8,
      "the filter 'urlize' is not supported by Odyssey's Jinja engine");
  row("unsafe append", "{% set l = [] %}{{ l.append(1) }}", K::Runtime, 1, 20,
      "SecurityError: access to attribute 'append' of 'list' object is unsafe.");
  row("break outside loop", "{% break %}", K::Syntax, 1, 4, "'break' outside of a loop");
  row("include", "{% include 'x' %}", K::Syntax, 1, 4,
      "the 'include' tag is not supported by Odyssey's Jinja engine (chat templates are one file)");
  row("invalid utf8", "a\xff", K::Syntax, 1, 2, "the template is not valid UTF-8 (byte offset 1)");
  row("division by zero", "{{ 1 // 0 }}", K::Runtime, 1, 6, "ZeroDivisionError: integer division or modulo by zero");
}

void TstJinja::errors() {
  QFETCH(QString, tpl);
  QFETCH(int, kind);
  QFETCH(int, line);
  QFETCH(int, col);
  QFETCH(QString, message);
  std::string src = tpl.toStdString();
  if (QString(QTest::currentDataTag()) == "invalid utf8") src = std::string("a\xff", 2);
  if (QString(QTest::currentDataTag()) == "missing key call") {
    try {
      render(src, ordered_json::parse(R"({"m": {}})"));
      QFAIL("no error");
    } catch (const jj::Error& e) {
      QCOMPARE(e.message(), std::string("UndefinedError: 'dict object' has no attribute 'content'"));
      QCOMPARE(e.line(), 1);
    }
    return;
  }
  try {
    render(src);
    QFAIL("no error");
  } catch (const jj::Error& e) {
    QCOMPARE(static_cast<int>(e.kind()), kind);
    QCOMPARE(QString::fromStdString(e.template_name()), QString("t.jinja"));
    QCOMPARE(QString::fromStdString(e.message()), message);
    QCOMPARE(e.line(), line);
    QCOMPARE(e.column(), col);
    // the formatted text names all three
    const std::string what = e.what();
    QVERIFY2(what.rfind("t.jinja", 0) == 0, what.c_str());
  }
}

void TstJinja::generationRanges() {
  const std::string tpl =
      "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}!{% "
      "endgeneration %}"
      "{% else %}{{ m.content }}{% endif %}\n{% endfor %}";
  const auto ctx = ordered_json::parse(
      R"({"messages": [{"role": "user", "content": "hé"}, {"role": "assistant", "content": "yö"}]})");
  jj::Template t(tpl, "g.jinja");
  QVERIFY(t.has_generation_blocks());
  const auto r = t.render(ctx);
  QCOMPARE(r.text, std::string("<user>hé<assistant>yö!"));
  QCOMPARE(r.generation_ranges.size(), std::size_t{1});
  QCOMPARE(r.text.substr(r.generation_ranges[0].first, r.generation_ranges[0].second - r.generation_ranges[0].first),
           std::string("yö!"));
  // the house's Result API
  const auto res = jj::render_template("{{ raise_exception('no') }}", "x.jinja", ordered_json::object());
  QVERIFY(!res.ok());
  QVERIFY2(format_all(res.diagnostics).find("x.jinja:1:4") != std::string::npos, format_all(res.diagnostics).c_str());
}

void TstJinja::limits() {
  auto fails = [](const std::string& tpl, const char* what) {
    try {
      jj::RenderOptions o;
      o.max_output_bytes = 1 << 20;
      o.max_steps = 2'000'000;
      jj::Template(tpl, "l.jinja").render(ordered_json::object(), o);
      return false;
    } catch (const jj::Error& e) {
      return std::string(e.message()).find(what) != std::string::npos;
    }
  };
  QVERIFY(fails("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "nest"));
  QVERIFY(fails("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "work limit"));
  QVERIFY(fails("{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                "limit"));
  QVERIFY(fails("{{ range(1000000) }}", "Range too big"));
  QVERIFY(
      fails("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}", "nested"));
  QVERIFY(fails("{% set ns = namespace() %}{% set ns.a = ns %}", "namespace"));
  QVERIFY(fails("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nested too deeply"));
}

// ---- the corpus against transformers ----------------------------------------------------
void TstJinja::corpus() {
  if (!python_has_transformers())
    QSKIP(
        "ODYSSEY_PYTHON is empty or lacks jinja2/transformers: configure with -DODYSSEY_PYTHON=<python with the "
        "pinned transformers> to compare the engine with apply_chat_template");
  const QString root = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference");
  const QString corpus_dir = root + "/chat_templates";
  QByteArray key = QByteArray::fromStdString(read_file(root + "/chat_template_oracle.py"));
  key += QByteArray::fromStdString(read_file(corpus_dir + "/sources.json"));
  for (const QString& f : QDir(corpus_dir + "/conversations").entryList({"*.json"}, QDir::Files, QDir::Name))
    key += QByteArray::fromStdString(read_file(corpus_dir + "/conversations/" + f));
  QString error;
  const QString jsonl = run_oracle(
      "corpus", {root + "/chat_template_oracle.py", "--all", "--no-tokenizer-check", "--now", kNow}, key, &error);
  QVERIFY2(!jsonl.isEmpty(), qPrintable(error));

  std::map<std::string, ordered_json> fixtures;
  std::map<std::string, std::unique_ptr<jj::Template>> templates;
  struct Row {
    int fixtures = 0, rendered = 0, identical = 0, raised = 0, raised_ok = 0, errors_ok = 0, mismatched = 0;
    std::vector<std::string> notes;
  };
  std::map<std::string, Row> rows;
  std::vector<std::string> order;
  std::ifstream in(jsonl.toStdString());
  std::string line;
  int total = 0, spans_checked = 0;
  while (std::getline(in, line)) {
    const ordered_json rec = ordered_json::parse(line);
    const std::string tf = rec["template"].get<std::string>();
    const std::string fx = rec["fixture"].get<std::string>();
    if (!rows.count(tf)) order.push_back(tf);
    Row& row = rows[tf];
    ++row.fixtures;
    ++total;
    if (!fixtures.count(fx)) {
      fixtures[fx] =
          ordered_json::parse(read_file(corpus_dir + "/conversations/" + QString::fromStdString(fx) + ".json"));
    }
    const ordered_json& fixture = fixtures[fx];
    std::string parse_error;
    if (!templates.count(tf)) {
      try {
        templates[tf] = std::make_unique<jj::Template>(read_file(corpus_dir + "/" + QString::fromStdString(tf)), tf);
      } catch (const jj::Error& e) {
        templates[tf] = nullptr;
        row.notes.push_back(std::string("parse: ") + e.what());
      }
    }
    ordered_json ctx = ordered_json::object();
    ctx["messages"] = fixture["messages"];
    ctx["tools"] = fixture.contains("tools") ? fixture["tools"] : ordered_json();
    ctx["documents"] = nullptr;
    ctx["add_generation_prompt"] = fixture["add_generation_prompt"];
    for (auto it = rec["special_tokens"].begin(); it != rec["special_tokens"].end(); ++it) ctx[it.key()] = it.value();
    if (fixture.contains("extra"))
      for (auto it = fixture["extra"].begin(); it != fixture["extra"].end(); ++it) ctx[it.key()] = it.value();
    const bool ok = rec["ok"].get<bool>();
    if (ok) ++row.rendered;
    else if (rec["error"]["raised_by_template"].get<bool>()) ++row.raised;
    jj::RenderOptions o;
    o.now = kNow;
    const jj::Template* t = templates[tf].get();
    if (!t) {
      ++row.mismatched;
      continue;
    }
    try {
      const auto r = t->render(ctx, o);
      if (!ok) {
        ++row.mismatched;
        row.notes.push_back(fx + ": rendered, the oracle raised " + rec["error"]["message"].get<std::string>());
        continue;
      }
      bool same = r.text == rec["text"].get<std::string>();
      if (same && !rec["assistant_spans_utf8"].is_null()) {
        std::vector<std::pair<std::size_t, std::size_t>> want;
        for (const auto& s : rec["assistant_spans_utf8"])
          want.emplace_back(s[0].get<std::size_t>(), s[1].get<std::size_t>());
        same = want == r.generation_ranges;
        ++spans_checked;
        if (!same) row.notes.push_back(fx + ": generation spans differ");
      } else if (!same) {
        const std::string want = rec["text"].get<std::string>();
        std::size_t k = 0;
        while (k < want.size() && k < r.text.size() && want[k] == r.text[k]) ++k;
        row.notes.push_back(fx + ": text differs at byte " + std::to_string(k) + ": oracle «" +
                            want.substr(k >= 20 ? k - 20 : 0, 60) + "» engine «" +
                            r.text.substr(k >= 20 ? k - 20 : 0, 60) + "»");
      }
      if (same) ++row.identical;
      else ++row.mismatched;
    } catch (const jj::Error& e) {
      if (ok) {
        ++row.mismatched;
        row.notes.push_back(fx + ": engine error " + e.what());
        continue;
      }
      const bool raised = rec["error"]["raised_by_template"].get<bool>();
      if (raised) {
        if (e.kind() == jj::ErrorKind::Raised && e.message() == rec["error"]["message"].get<std::string>() &&
            e.line() > 0) {
          ++row.raised_ok;
        } else {
          ++row.mismatched;
          row.notes.push_back(fx + ": oracle raised «" + rec["error"]["message"].get<std::string>() +
                              "», engine: " + e.what());
        }
      } else if (e.kind() == jj::ErrorKind::Runtime && e.line() > 0) {
        ++row.errors_ok;
      } else {
        ++row.mismatched;
        row.notes.push_back(fx + ": oracle runtime error, engine: " + e.what());
      }
    }
  }
  QVERIFY2(total > 0, "the oracle wrote no records");
  int sum_id = 0, sum_raised = 0, sum_err = 0, sum_mis = 0, sum_rendered = 0;
  std::string table =
      "| template | fixtures | rendered by transformers | identical | raised as the oracle | "
      "runtime error as the oracle | mismatched |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& tf : order) {
    const Row& r = rows[tf];
    table += "| " + tf + " | " + std::to_string(r.fixtures) + " | " + std::to_string(r.rendered) + " | " +
             std::to_string(r.identical) + " | " + std::to_string(r.raised_ok) + "/" + std::to_string(r.raised) +
             " | " + std::to_string(r.errors_ok) + " | " + std::to_string(r.mismatched) + " |\n";
    sum_id += r.identical;
    sum_raised += r.raised_ok;
    sum_err += r.errors_ok;
    sum_mis += r.mismatched;
    sum_rendered += r.rendered;
  }
  table += "| **total** | " + std::to_string(total) + " | " + std::to_string(sum_rendered) + " | " +
           std::to_string(sum_id) + " | " + std::to_string(sum_raised) + " | " + std::to_string(sum_err) + " | " +
           std::to_string(sum_mis) + " |\n";
  std::printf("%s\n{%% generation %%} spans compared: %d renders\n", table.c_str(), spans_checked);
  {
    std::ofstream md((QStringLiteral(ODYSSEY_TEST_BINARY_DIR) + "/jinja-oracle/corpus_table.md").toStdString());
    md << table;
  }
  for (const auto& tf : order)
    for (const auto& n : rows[tf].notes) std::printf("MISMATCH %s: %s\n", tf.c_str(), n.c_str());
  QCOMPARE(sum_mis, 0);
}

// ---- generated templates against jinja2 -------------------------------------------------
void TstJinja::differential() {
  if (!python_has_transformers())
    QSKIP("ODYSSEY_PYTHON is empty or lacks jinja2/transformers: the differential test needs them");
  const QString script = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/jinja_differential.py");
  QString error;
  const QString jsonl = run_oracle("differential", {script, "--seed", "22", "--n", "2000"},
                                   QByteArray::fromStdString(read_file(script)), &error);
  QVERIFY2(!jsonl.isEmpty(), qPrintable(error));
  std::ifstream in(jsonl.toStdString());
  std::string line;
  int n = 0, rendered = 0, errors = 0, mismatches = 0;
  while (std::getline(in, line)) {
    const ordered_json rec = ordered_json::parse(line);
    ++n;
    const std::string tpl = rec["template"].get<std::string>();
    std::string got;
    std::string err;
    try {
      jj::RenderOptions o;
      o.now = kNow;
      got = jj::Template(tpl, "case" + std::to_string(n)).render(rec["context"], o).text;
    } catch (const jj::Error& e) {
      err = e.what();
    }
    const bool ok = rec["ok"].get<bool>();
    bool same;
    if (ok) {
      same = err.empty() && got == rec["text"].get<std::string>();
      ++rendered;
    } else {
      same = !err.empty();
      ++errors;
    }
    if (!same) {
      ++mismatches;
      if (mismatches <= 25)
        std::printf("DIFF case %d\n  template: %s\n  context: %s\n  jinja2: %s\n  engine: %s\n", n, tpl.c_str(),
                    rec["context"].dump().c_str(),
                    ok ? ("«" + rec["text"].get<std::string>() + "»").c_str() : rec["error"].dump().c_str(),
                    err.empty() ? ("«" + got + "»").c_str() : err.c_str());
    }
  }
  std::printf("differential: %d cases (%d rendered by jinja2, %d raised), %d mismatches\n", n, rendered, errors,
              mismatches);
  QVERIFY(n >= 1000);
  QCOMPARE(mismatches, 0);
}

// ---- ChatTemplate through the engine ----------------------------------------------------
namespace {
const QString kCorpus = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference/chat_templates");

std::vector<std::pair<std::string, std::string>> special_tokens_of(const std::string& file) {
  const auto manifest = ordered_json::parse(read_file(kCorpus + "/sources.json"));
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& t : manifest["templates"])
    if (t["file"] == file)
      for (auto it = t["special_tokens"].begin(); it != t["special_tokens"].end(); ++it)
        out.emplace_back(it.key(), it.value().get<std::string>());
  return out;
}

Result<ChatTemplate> corpus_template(const std::string& file) {
  return ChatTemplate::from_jinja(read_file(kCorpus + "/" + QString::fromStdString(file)), file,
                                  special_tokens_of(file));
}
}  // namespace

// The built-in variants are fast paths only where they render what the model's template
// renders: every plain conversation fixture (system/user/assistant, string content) through
// both.
void TstJinja::chatTemplateFastPathsAreIdentical() {
  int compared = 0;
  for (const char* file : {"Qwen--Qwen2.5-7B-Instruct.jinja", "Qwen--Qwen3-0.6B-earlier.jinja",
                           "meta-llama--Llama-3.1-8B-Instruct.jinja", "meta-llama--Llama-3.3-70B-Instruct.jinja"}) {
    const std::string source = read_file(kCorpus + "/" + file);
    const auto kind = recognize_chat_template(source);
    QVERIFY2(kind.has_value(), file);
    std::string bos;
    for (const auto& [k, v] : special_tokens_of(file))
      if (k == "bos_token") bos = v;
    const ChatTemplate builtin(*kind, bos);
    const auto engine = corpus_template(file);
    QVERIFY2(engine.ok(), format_all(engine.diagnostics).c_str());
    QCOMPARE(engine.value.kind(), ChatTemplateKind::Jinja);
    for (const QString& f : QDir(kCorpus + "/conversations").entryList({"*.json"}, QDir::Files, QDir::Name)) {
      const auto fx = ordered_json::parse(read_file(kCorpus + "/conversations/" + f));
      if (fx.contains("tools")) continue;
      std::vector<ChatMessage> msgs;
      bool plain = !fx["messages"].empty();
      for (const auto& m : fx["messages"]) {
        const std::string role = m["role"].get<std::string>();
        if ((role != "system" && role != "user" && role != "assistant") || !m["content"].is_string() ||
            m.contains("tool_calls")) {
          plain = false;
          break;
        }
        ChatMessage cm{role, m["content"].get<std::string>(), {}};
        if (m.contains("reasoning_content")) cm.reasoning_content = m["reasoning_content"].get<std::string>();
        msgs.push_back(std::move(cm));
      }
      if (!plain) continue;
      ChatOptions o;
      o.add_generation_prompt = fx["add_generation_prompt"].get<bool>();
      o.now = kNow;
      if (fx.contains("extra") && fx["extra"].contains("enable_thinking"))
        o.enable_thinking = fx["extra"]["enable_thinking"].get<bool>();
      if (fx.contains("extra") && fx["extra"].size() > (fx["extra"].contains("enable_thinking") ? 1u : 0u)) continue;
      const auto a = builtin.render(msgs, o);
      auto b = engine.value.render(msgs, o);
      if (!b.ok() && format_all(b.diagnostics).find("rendering prefixes") != std::string::npos) {
        // Qwen3 renders an earlier assistant turn differently once a user follows: no prefix
        // masks (the built-in variant is what trains it); the text is still compared.
        ordered_json ctx = {{"messages", fx["messages"]},
                            {"tools", nullptr},
                            {"documents", nullptr},
                            {"add_generation_prompt", o.add_generation_prompt}};
        for (const auto& [k, v] : special_tokens_of(file)) ctx[k] = v;
        if (o.enable_thinking) ctx["enable_thinking"] = *o.enable_thinking;
        jj::RenderOptions ro;
        ro.now = kNow;
        b.diagnostics.clear();
        b.value.text = jj::Template(source, file).render(ctx, ro).text;
      }
      QVERIFY2(a.ok() == b.ok(),
               qPrintable(QString(file) + " " + f + ": " + QString::fromStdString(format_all(b.diagnostics))));
      if (!a.ok()) continue;
      QVERIFY2(a.value.text == b.value.text,
               qPrintable(QString(file) + " x " + f + ":\n" + QString::fromStdString(a.value.text) + "\n---\n" +
                          QString::fromStdString(b.value.text)));
      ++compared;
    }
  }
  std::printf("built-in variants vs the engine: %d renders identical\n", compared);
  QVERIFY(compared >= 40);
}

void TstJinja::chatTemplateMasks() {
  const std::vector<ChatMessage> conv = {{"system", "Be brief.", {}},
                                         {"user", "Hi", {}},
                                         {"assistant", "Hello!", {}},
                                         {"user", "Again", {}},
                                         {"assistant", "Sure.", {}}};
  auto spans_text = [](const RenderedChat& r) {
    std::vector<std::string> out;
    for (const auto& [b, e] : r.assistant_ranges) out.push_back(r.text.substr(b, e - b));
    return out;
  };
  // No {% generation %}: prefix rendering (what each assistant message adds after its prompt).
  {
    const auto t = corpus_template("meta-llama--Meta-Llama-3-8B-Instruct.jinja");
    QVERIFY(t.ok());
    QVERIFY(!t.value.has_generation_blocks());
    const auto r = t.value.render(conv);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(spans_text(r.value), (std::vector<std::string>{"Hello!<|eot_id|>", "Sure.<|eot_id|>"}));
  }
  {
    const auto t = corpus_template("google--gemma-2-2b-it.jinja");
    QVERIFY(t.ok());
    const std::vector<ChatMessage> c2(conv.begin() + 1, conv.end());
    const auto r = t.value.render(c2);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(spans_text(r.value), (std::vector<std::string>{"Hello!<end_of_turn>\n", "Sure.<end_of_turn>\n"}));
    // Gemma raises on a system message: the template's own message, located.
    const auto bad = t.value.render(conv);
    QVERIFY(!bad.ok());
    QVERIFY2(format_all(bad.diagnostics).find("System role not supported") != std::string::npos,
             format_all(bad.diagnostics).c_str());
    QVERIFY2(format_all(bad.diagnostics).find("google--gemma-2-2b-it.jinja:1:") != std::string::npos,
             format_all(bad.diagnostics).c_str());
  }
  // {% generation %}: the template's own spans (SmolLM3).
  {
    const auto t = corpus_template("HuggingFaceTB--SmolLM3-3B.jinja");
    QVERIFY(t.ok());
    QVERIFY(t.value.has_generation_blocks());
    ChatOptions o;
    o.now = kNow;
    const auto r = t.value.render(conv, o);
    QVERIFY2(r.ok(), format_all(r.diagnostics).c_str());
    QCOMPARE(r.value.assistant_ranges.size(), std::size_t{2});
    QVERIFY(spans_text(r.value)[0].find("Hello!") != std::string::npos);
  }
  // A template that rewrites earlier assistant turns (Qwen3 drops their reasoning): prefix
  // rendering cannot find the trained tokens, and says so.
  {
    const auto t = corpus_template("Qwen--Qwen3-0.6B.jinja");
    QVERIFY(t.ok());
    std::vector<ChatMessage> c = conv;
    c[2].reasoning_content = "think";
    const auto r = t.value.render(c);
    QVERIFY(!r.ok());
    QVERIFY2(format_all(r.diagnostics).find("messages[2]") != std::string::npos, format_all(r.diagnostics).c_str());
  }
  // Token caches key on the template's text.
  {
    const auto a = corpus_template("meta-llama--Meta-Llama-3-8B-Instruct.jinja");
    const auto b = corpus_template("google--gemma-2-2b-it.jinja");
    QVERIFY(a.value.identity().rfind("jinja:", 0) == 0);
    QVERIFY(a.value.identity() != b.value.identity());
    QCOMPARE(ChatTemplate(ChatTemplateKind::Qwen3).identity(), std::string("qwen3"));
  }
  // A syntax error is located in the template.
  {
    const auto t = ChatTemplate::from_jinja("{% for m in messages %}\n{{ m.content | nope }}{% endfor %}",
                                            "x/tokenizer_config.json[chat_template]", {});
    QVERIFY(!t.ok());
    QVERIFY2(format_all(t.diagnostics).find("x/tokenizer_config.json[chat_template]:2:16") != std::string::npos,
             format_all(t.diagnostics).c_str());
  }
}

// ---- the data pipeline's samples against apply_chat_template(tokenize=True) ---------------
void TstJinja::trainingSamples() {
  if (!python_has_transformers()) QSKIP("ODYSSEY_PYTHON is empty or lacks jinja2/transformers (see corpus())");
  const QString root = QStringLiteral(ODYSSEY_SOURCE_DIR "/tests/reference");
  const QString corpus_dir = root + "/chat_templates";
  QByteArray key = QByteArray::fromStdString(read_file(root + "/tool_chat_oracle.py"));
  key += QByteArray::fromStdString(read_file(root + "/chat_template_oracle.py"));
  key += QByteArray::fromStdString(read_file(corpus_dir + "/sources.json"));
  for (const QString& f : QDir(corpus_dir + "/conversations").entryList({"*.json"}, QDir::Files, QDir::Name))
    key += QByteArray::fromStdString(read_file(corpus_dir + "/conversations/" + f));
  QString error;
  const QString jsonl = run_oracle("samples", {root + "/tool_chat_oracle.py", "--now", kNow}, key, &error);
  QVERIFY2(!jsonl.isEmpty(), qPrintable(error));

  auto tok = Tokenizer::load(ODYSSEY_SOURCE_DIR "/resources/quickstart/model/tokenizer.json");
  QVERIFY(tok.ok());
  QTemporaryDir tmp;
  QVERIFY(tmp.isValid());
  data::TokenizeOptions options;
  options.chat.now = kNow;
  int rows = 0, same = 0, refused_alike = 0, tool_rows = 0;
  std::vector<std::string> problems;
  std::ifstream in(jsonl.toStdString());
  for (std::string line; std::getline(in, line);) {
    const ordered_json rec = ordered_json::parse(line);
    const std::string tfile = rec["template"], fx = rec["fixture"];
    const std::string where = tfile + " x " + fx;
    ++rows;
    // The fixture as a dataset record (messages format), read by the dataset loader.
    const ordered_json fixture =
        ordered_json::parse(read_file(corpus_dir + "/conversations/" + QString::fromStdString(fx) + ".json"));
    ordered_json record = {{"messages", fixture["messages"]}};
    if (fixture.contains("tools")) record["tools"] = fixture["tools"];
    const std::string data_file = (tmp.path() + "/" + QString::fromStdString(fx) + ".jsonl").toStdString();
    std::ofstream(data_file, std::ios::binary) << record.dump() << '\n';
    auto loaded = data::read_dataset_file(data_file);
    if (!loaded.ok() || loaded.value.samples.size() != 1) {
      problems.push_back(where + ": the dataset loader refused the record");
      continue;
    }
    const data::Sample& sample = loaded.value.samples[0];
    if (!sample.tools.empty() || std::any_of(sample.messages.begin(), sample.messages.end(),
                                             [](const ChatMessage& m) { return m.uses_tools(); }))
      ++tool_rows;
    std::vector<std::pair<std::string, std::string>> special;
    for (const auto& [k, v] : rec["special_tokens"].items()) special.emplace_back(k, v.get<std::string>());
    auto tmpl = ChatTemplate::from_jinja(read_file(corpus_dir + "/" + QString::fromStdString(tfile)), tfile, special);
    QVERIFY2(tmpl.ok(), where.c_str());
    auto got = data::tokenize_sample(sample, tok.value, tmpl.value, options);
    if (!rec["ok"].get<bool>()) {
      if (got.ok())
        problems.push_back(where + ": transformers fails (" + rec.value("error", std::string("prefix mismatch")) +
                           "), the pipeline tokenized it");
      else ++refused_alike;
      continue;
    }
    if (!got.ok()) {
      problems.push_back(where + ": the pipeline failed: " + got.diagnostics.front().message);
      continue;
    }
    const auto ids = rec["ids"].get<std::vector<std::int32_t>>();
    const auto trained = rec["trained"].get<std::vector<int>>();
    std::vector<int> mask;
    for (std::int32_t l : got.value.labels) mask.push_back(l != data::kIgnoreIndex ? 1 : 0);
    if (got.value.ids != ids) problems.push_back(where + ": ids differ");
    else if (mask != trained)
      problems.push_back(where + ": trained mask differs (" + rec["mask_source"].get<std::string>() + ")");
    else ++same;
  }
  std::string all;
  for (const auto& p : problems) all += p + "\n";
  qInfo(
      "training samples: %d template x fixture rows (%d with tools): %d identical ids and masks, %d refused as "
      "transformers refuses them, %zu problems",
      rows, tool_rows, same, refused_alike, problems.size());
  QVERIFY2(rows >= 200, "the oracle wrote too few rows");
  QVERIFY2(problems.empty(), all.c_str());
}

// template_file: a Jinja file in place of the model's template, through data::template_for.
void TstJinja::templateFile() {
  auto tok = Tokenizer::load(ODYSSEY_SOURCE_DIR "/resources/quickstart/model");
  QVERIFY(tok.ok());
  const std::string qwen = ODYSSEY_SOURCE_DIR "/tests/reference/chat_templates/Qwen--Qwen2.5-7B-Instruct.jinja";
  auto t = data::template_for("auto", tok.value, "qwen2", qwen);
  QVERIFY(t.ok());
  // Qwen2.5's template is recognized: the built-in renderer is its fast path, the engine keeps
  // the file for tool conversations (renders_tools).
  QCOMPARE(t.value.kind(), ChatTemplateKind::Qwen2_5);
  QVERIFY(t.value.renders_tools());
  const std::vector<ChatMessage> m = {{"user", "Hi", {}}, {"assistant", "Hello", {}}};
  QCOMPARE(t.value.render(m).value.text, ChatTemplate(ChatTemplateKind::Qwen2_5).render(m).value.text);
  // A template no variant recognizes is rendered by the engine.
  QTemporaryDir own;
  const std::string plain = (own.path() + "/plain.jinja").toStdString();
  std::ofstream(plain) << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}";
  auto e = data::template_for("auto", tok.value, "qwen2", plain);
  QVERIFY(e.ok());
  QCOMPARE(e.value.kind(), ChatTemplateKind::Jinja);
  QCOMPARE(e.value.render(m).value.text, std::string("[user] Hi\n[assistant] Hello\n"));
  // template: must stay auto; a missing file and a syntax error name the file.
  auto clash = data::template_for("chatml", tok.value, "qwen2", qwen);
  QVERIFY(!clash.ok());
  QCOMPARE(clash.diagnostics.front().key, std::string("template"));
  auto missing = data::template_for("auto", tok.value, "qwen2", "/nonexistent/t.jinja");
  QVERIFY(!missing.ok());
  QVERIFY(missing.diagnostics.front().message.find("/nonexistent/t.jinja") != std::string::npos);
  QTemporaryDir tmp;
  const std::string bad = (tmp.path() + "/bad.jinja").toStdString();
  std::ofstream(bad) << "{% for m in messages %}\n{{ m.content }\n{% endfor %}";
  auto broken = data::template_for("auto", tok.value, "qwen2", bad);
  QVERIFY(!broken.ok());
  QCOMPARE(broken.diagnostics.front().file, bad);
  QCOMPARE(broken.diagnostics.front().line, 2);
}

QTEST_APPLESS_MAIN(TstJinja)
#include "tst_jinja.moc"
