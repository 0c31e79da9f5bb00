#include "kernels/grouped_gemm.h"

#include <vector>

namespace odyssey::kernels {

torch::Tensor grouped_linear_reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 3 && x.size(1) == w.size(2),
              "grouped_linear: x [N, in] and w [E, out, in], got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK(ends.dim() == 1 && ends.size(0) == w.size(0), "grouped_linear: ends [", w.size(0), "], got ",
              ends.sizes());
  const torch::Tensor host = ends.to(torch::kCPU, torch::kInt64);
  const auto* e = host.data_ptr<std::int64_t>();
  // unbind: one stacked gradient for w in backward (select would add E full-size zero tensors).
  const std::vector<torch::Tensor> experts = w.unbind(0);
  std::vector<torch::Tensor> parts;
  std::int64_t start = 0;
  for (std::size_t g = 0; g < experts.size(); ++g) {
    TORCH_CHECK(e[g] >= start && e[g] <= x.size(0), "grouped_linear: ends must be non-decreasing and at most ",
                x.size(0), ", got ", host);
    if (e[g] > start) parts.push_back(at::linear(x.narrow(0, start, e[g] - start), experts[g]));
    start = e[g];
  }
  TORCH_CHECK(start == x.size(0), "grouped_linear: the groups cover ", start, " of ", x.size(0), " rows");
  if (parts.empty()) return at::zeros({0, w.size(1)}, x.options()) + w.sum() * 0;  // keeps w in the graph
  return parts.size() == 1 ? parts.front() : torch::cat(parts);
}

}  // namespace odyssey::kernels
