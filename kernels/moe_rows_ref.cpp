#include "kernels/moe_rows.h"

namespace odyssey::kernels {

// The unfused formula MoeImpl computed before combine_rows: gather, a broadcast product in
// the promoted dtype, a sum over the k choices, differentiated by autograd.
torch::Tensor combine_rows_reference(const torch::Tensor& rows, const torch::Tensor& index,
                                     const torch::Tensor& weights) {
  const std::int64_t n = weights.size(0), k = weights.size(1);
  return (rows.index_select(0, index).view({n, k, rows.size(1)}) * weights.unsqueeze(-1)).sum(1).to(rows.scalar_type());
}

}  // namespace odyssey::kernels
