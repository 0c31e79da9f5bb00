// kernels/grouped_gemm.h: the grouped GEMM (ATen's at::_grouped_mm with Odyssey's backward)
// against the per-expert loop it replaces, on the CPU in fp32, where the two must agree bit
// for bit in the output, the input gradient and the weight gradient; with empty experts, one
// expert holding every row, and shapes the grouped path refuses (unaligned rows: the loop).
// The 4-bit form (grouped_linear_quant4, 4-bit experts of a QLoRA base) against the 16-bit
// product on its dequantized stack, whose dequantizer tst_quant4 checks against bitsandbytes.
// kernels/moe_rows.h, the rows' way back to their tokens (combine_rows: gather, weight, sum over
// the k choices, in one op) and the gather's backward (sum_rows), against the unfused formula
// differentiated by autograd.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include <QtTest>

#include "kernels/grouped_gemm.h"
#include "kernels/moe_rows.h"

using namespace odyssey::kernels;

namespace {

struct Run {
  torch::Tensor y, dx, dw;
};

Run run(bool grouped, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& ends,
        const torch::Tensor& dy) {
  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor y = grouped ? grouped_linear(x, w, ends) : grouped_linear_reference(x, w, ends);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad()};
}

}  // namespace

class TstGroupedGemm : public QObject {
  Q_OBJECT
 private Q_SLOTS:
  void bitwiseAgainstLoop_data() {
    QTest::addColumn<QList<int>>("counts");
    QTest::addColumn<int>("in");
    QTest::addColumn<int>("out");
    QTest::newRow("7 experts, two empty") << QList<int>{5, 0, 13, 1, 0, 29, 3} << 64 << 40;
    QTest::newRow("one expert holds every row") << QList<int>{0, 0, 57, 0} << 32 << 96;
    QTest::newRow("single expert") << QList<int>{23} << 16 << 8;
    QTest::newRow("unaligned width (the loop)") << QList<int>{4, 9, 2} << 30 << 7;
  }
  void bitwiseAgainstLoop() {
    QFETCH(QList<int>, counts);
    QFETCH(int, in);
    QFETCH(int, out);
    torch::manual_seed(7);
    std::vector<std::int32_t> ends;
    std::int32_t total = 0;
    for (const int c : counts) ends.push_back(total += c);
    const auto e = static_cast<std::int64_t>(counts.size());
    const torch::Tensor x = torch::randn({total, in}), w = torch::randn({e, out, in}), dy = torch::randn({total, out});
    const torch::Tensor end_t = torch::tensor(ends, torch::kInt32);
    const bool aligned = in % 4 == 0 && out % 4 == 0;
    QCOMPARE(grouped_gemm_applies(x, w), aligned);
    const Run a = run(true, x, w, end_t, dy), b = run(false, x, w, end_t, dy);
    QVERIFY(torch::equal(a.y, b.y));
    QVERIFY(torch::equal(a.dx, b.dx));
    QVERIFY(torch::equal(a.dw, b.dw));
    // A frozen w (attention-only LoRA on a MoE model) keeps no x and gives the same dx.
    torch::Tensor xf = x.clone().requires_grad_(true);
    grouped_linear(xf, w, end_t).backward(dy);
    QVERIFY(torch::equal(xf.grad(), a.dx));
    // And the loop is what it claims: row r of expert g is x[r] · w[g]ᵀ.
    std::int64_t start = 0;
    for (std::int64_t g = 0; g < e; ++g) {
      const std::int64_t n = ends[static_cast<std::size_t>(g)] - start;
      if (n > 0)
        QVERIFY(torch::allclose(b.y.narrow(0, start, n), torch::matmul(x.narrow(0, start, n), w[g].t()), 1e-5, 1e-5));
      start += n;
    }
  }

  // grouped_linear_quant4 computes what grouped_linear computes on the dequantized stack, bit
  // for bit (output and input gradient), and gives the 4-bit weight no gradient: NF4 and FP4,
  // with and without double quantization, aligned (grouped GEMM) and not (the loop).
  void quant4AgainstDequantized_data() {
    QTest::addColumn<QString>("type");
    QTest::addColumn<bool>("nested");
    QTest::addColumn<int>("in");
    QTest::addColumn<int>("out");
    QTest::newRow("nf4, double quantization") << "nf4" << true << 64 << 48;
    QTest::newRow("fp4, plain absmax") << "fp4" << false << 32 << 96;
    QTest::newRow("nf4, unaligned width (the loop)") << "nf4" << true << 30 << 7;
  }
  void quant4AgainstDequantized() {
    QFETCH(QString, type);
    QFETCH(bool, nested);
    QFETCH(int, in);
    QFETCH(int, out);
    torch::manual_seed(11);
    const QList<int> counts{9, 0, 17, 4, 0};
    std::vector<std::int32_t> ends;
    std::int32_t total = 0;
    for (const int c : counts) ends.push_back(total += c);
    const auto e = static_cast<std::int64_t>(counts.size());
    const torch::Tensor end_t = torch::tensor(ends, torch::kInt32);
    const auto q = quantize_4bit(torch::randn({e, out, in}), *parse_quant4_type(type.toStdString()), 64, nested);
    const torch::Tensor w = dequantize_4bit(*q, torch::kFloat32);
    QCOMPARE(w.sizes(), (c10::IntArrayRef{e, out, in}));
    const torch::Tensor x0 = torch::randn({total, in}), dy = torch::randn({total, out});

    torch::Tensor x = x0.clone().requires_grad_(true);
    const torch::Tensor y = grouped_linear_quant4(x, q, end_t);
    y.backward(dy);
    torch::Tensor xr = x0.clone().requires_grad_(true);
    const torch::Tensor yr = grouped_linear(xr, w, end_t);
    yr.backward(dy);
    QVERIFY(torch::equal(y.detach(), yr.detach()));
    QVERIFY(torch::equal(x.grad(), xr.grad()));
    // The per-expert loop too (the 16-bit path's own oracle), within fp32 rounding.
    QVERIFY(torch::allclose(y.detach(), grouped_linear_reference(x0, w, end_t), 1e-5, 1e-5));
    // A wrong input width or group count is refused, naming the function.
    for (const auto& [xi, ei] :
         {std::pair{torch::randn({total, in + 1}), end_t}, std::pair{x0, torch::tensor({total}, torch::kInt32)}}) {
      bool threw = false;
      try {
        grouped_linear_quant4(xi, q, ei);
      } catch (const c10::Error& err) {
        threw = std::string(err.what()).find("grouped_linear_quant4") != std::string::npos;
      }
      QVERIFY(threw);
    }
  }

  void combineRowsAgainstFormula_data() {
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("h");
    QTest::newRow("top 8 of 37 tokens") << 37 << 8 << 48;
    QTest::newRow("top 1") << 11 << 1 << 30;
    QTest::newRow("top 3, odd width") << 5 << 3 << 7;
  }
  // combine_rows against (rows[index] · weights).sum over k: fp32 on the CPU runs the same
  // products in the same order, so output and both gradients agree bit for bit; bf16 rows with
  // fp32 weights (Qwen3-MoE's) too (the sum in fp32, rounded once, as the promoted formula).
  void combineRowsAgainstFormula() {
    QFETCH(int, tokens);
    QFETCH(int, k);
    QFETCH(int, h);
    torch::manual_seed(11);
    const std::int64_t m = static_cast<std::int64_t>(tokens) * k;
    const torch::Tensor index = torch::randperm(m, torch::kInt64);  // pair p's row
    const torch::Tensor order = torch::empty_like(index).scatter_(0, index, torch::arange(m));
    const torch::Tensor rows0 = torch::randn({m, h}), w0 = torch::rand({tokens, k}), dy = torch::randn({tokens, h});
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      auto go = [&](bool fused) {
        torch::Tensor rows = rows0.to(dtype).detach().clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        const torch::Tensor y = fused ? combine_rows(rows, index, order, w) : combine_rows_reference(rows, index, w);
        y.backward(dy.to(dtype));
        return std::vector<torch::Tensor>{y.detach(), rows.grad(), w.grad()};
      };
      const auto a = go(true), b = go(false);
      QCOMPARE(a[0].scalar_type(), dtype);
      for (int i = 0; i < 3; ++i)
        QVERIFY2(torch::equal(a[i], b[i]),
                 qPrintable(QString("output %1 differs in %2").arg(i).arg(dtype == torch::kFloat32 ? "fp32" : "bf16")));
    }
    // Frozen weights: no weight gradient, the rows' gradient unchanged.
    torch::Tensor rows = rows0.clone().requires_grad_(true);
    combine_rows(rows, index, order, w0).backward(dy);
    QVERIFY(rows.grad().defined());
    // sum_rows: Σ over the copies of the gathered rows, as index_select then a sum.
    const torch::Tensor s = sum_rows(rows0, index, k), ref = rows0.index_select(0, index).view({tokens, k, h}).sum(1);
    QVERIFY(torch::equal(s, ref));
    QVERIFY(torch::equal(sum_rows(rows0, index, 1), rows0.index_select(0, index)));
  }

  void combineRowsErrors() {
    const torch::Tensor rows = torch::randn({6, 4}), index = torch::arange(6), w = torch::rand({3, 2});
    auto fails = [](const std::function<void()>& f, const char* needle) {
      try {
        f();
      } catch (const c10::Error& e) {
        return std::string(e.what()).find(needle) != std::string::npos;
      }
      return false;
    };
    QVERIFY(fails([&] { combine_rows(rows, index, index, torch::rand({2, 2})); }, "must agree"));
    QVERIFY(fails([&] { combine_rows(rows, index.to(torch::kInt32), index, w); }, "index int64"));
    QVERIFY(fails([&] { combine_rows(rows, index, index.narrow(0, 0, 5), w); }, "inverse permutation"));
    QVERIFY(fails([&] { sum_rows(rows, torch::arange(5), 2); }, "not whole tokens of 2"));
  }

  void badGroups() {
    const torch::Tensor x = torch::randn({6, 8}), w = torch::randn({2, 4, 8});
    for (const auto& ends : {torch::tensor({4, 3}, torch::kInt32), torch::tensor({2, 5}, torch::kInt32)}) {
      bool threw = false;
      try {
        grouped_linear_reference(x, w, ends);
      } catch (const c10::Error& err) {
        threw = true;
        QVERIFY2(std::string(err.what()).find("grouped_linear") != std::string::npos, err.what());
      }
      QVERIFY(threw);
    }
    bool threw = false;
    try {
      grouped_linear(x, torch::randn({2, 4, 7}), torch::tensor({3, 6}, torch::kInt32));
    } catch (const c10::Error&) {
      threw = true;
    }
    QVERIFY(threw);
  }
};

QTEST_APPLESS_MAIN(TstGroupedGemm)
#include "tst_grouped_gemm.moc"
