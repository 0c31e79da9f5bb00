// kernels::decode_attention (kernels/decode_attention.h) on the CPU, where it runs its reference:
// against PyTorch's scaled_dot_product_attention with the key-padding mask, GQA through
// repeated KV heads (float64, 1e-12), on the shapes a decode step gives it (a cache's
// transposed views, a mask shared by every row); bad shapes are refused by name. The CUDA
// kernel is checked against the same reference by `odyssey-train selftest` on a GPU.
#define QT_NO_KEYWORDS
#include <torch/torch.h>

#include <QtTest>

#include <cmath>
#include <functional>
#include <string>

#include "kernels/decode_attention.h"

using namespace odyssey;

class TstDecodeAttention : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void matches_sdpa_data() {
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("q_heads");
    QTest::addColumn<int>("kv_heads");
    QTest::addColumn<int>("length");
    QTest::addColumn<int>("head_dim");
    QTest::addColumn<bool>("shared_mask");
    QTest::newRow("Qwen2.5-7B's heads, 3 rows") << 3 << 28 << 4 << 70 << 128 << false;
    QTest::newRow("no grouping, one row") << 1 << 4 << 4 << 33 << 64 << false;
    QTest::newRow("MQA, odd head_dim, one mask for all rows") << 2 << 6 << 1 << 17 << 24 << true;
  }

  void matches_sdpa() {
    QFETCH(int, batch);
    QFETCH(int, q_heads);
    QFETCH(int, kv_heads);
    QFETCH(int, length);
    QFETCH(int, head_dim);
    QFETCH(bool, shared_mask);
    torch::manual_seed(3);
    const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    const torch::Tensor q = torch::randn({batch, q_heads, head_dim}, f64);
    // The cache as a decode step holds it: [B, L, Hkv, D] storage seen as [B, Hkv, L, D].
    const torch::Tensor k = torch::randn({batch, length, kv_heads, head_dim}, f64).transpose(1, 2);
    const torch::Tensor v = torch::randn({batch, length, kv_heads, head_dim}, f64).transpose(1, 2);
    torch::Tensor keep = torch::rand({shared_mask ? 1 : batch, length}).gt(0.3);
    keep.select(1, length - 1).fill_(true);
    if (!shared_mask) keep[0].narrow(0, 0, length / 2).fill_(false);  // a left-padded row
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    const torch::Tensor got = kernels::decode_attention(q, k, v, keep, scale);
    QCOMPARE(got.sizes(), q.sizes());
    const std::int64_t g = q_heads / kv_heads;
    const torch::Tensor want =
        at::scaled_dot_product_attention(q.unsqueeze(2), k.repeat_interleave(g, 1), v.repeat_interleave(g, 1),
                                         keep.view({keep.size(0), 1, 1, length}), 0.0, false, scale)
            .squeeze(2);
    const double err = (got - want).abs().max().item<double>();
    QVERIFY2(err <= 1e-12, std::to_string(err).c_str());
    // In bf16 the reference computes in fp32 and rounds once.
    const torch::Tensor bf =
        kernels::decode_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16), keep, scale);
    QCOMPARE(bf.scalar_type(), torch::kBFloat16);
    QVERIFY((bf.to(torch::kFloat64) - want).abs().max().item<double>() <= 0.05);
  }

  void refuses_bad_shapes() {
    const torch::Tensor q = torch::randn({2, 6, 8}), k = torch::randn({2, 4, 5, 8}), v = torch::randn({2, 4, 5, 8});
    const torch::Tensor keep = torch::ones({2, 5}, torch::kBool);
    auto message = [](const std::function<void()>& f) {
      try {
        f();
      } catch (const c10::Error& e) {
        return std::string(e.what_without_backtrace());
      }
      return std::string();
    };
    // 6 query heads over 4 KV heads.
    QVERIFY(message([&] { kernels::decode_attention(q, k, v, keep, 1.0); }).find("multiple of KV heads") !=
            std::string::npos);
    const torch::Tensor k3 = torch::randn({2, 3, 5, 8}), v3 = torch::randn({2, 3, 5, 8});
    QVERIFY(message([&] {
              kernels::decode_attention(q, k3, v3, torch::ones({2, 4}, torch::kBool), 1.0);
            }).find("keep must be bool [B or 1, L]") != std::string::npos);
    QVERIFY(message([&] {
              kernels::decode_attention(q, k3, v3, keep.to(torch::kFloat32), 1.0);
            }).find("keep must be bool") != std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TstDecodeAttention)
#include "tst_decode_attention.moc"
