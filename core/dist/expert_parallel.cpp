#include "dist/expert_parallel.h"

#include <vector>

namespace odyssey::dist {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// all_to_all_v as a differentiable function: the gradient of what arrived goes back to where
// it came from, the split sizes swapped.
struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& rows, Group* group,
                               const std::vector<std::int64_t>& send, const std::vector<std::int64_t>& recv) {
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(group);
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return group->all_to_all_v(rows, send, recv);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
    const std::vector<std::int64_t> send = ctx->saved_data["send"].toIntVector(),
                                    recv = ctx->saved_data["recv"].toIntVector();
    return {group->all_to_all_v(grads[0].contiguous(), recv, send), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class GroupExperts final : public model::ExpertGroup {
 public:
  explicit GroupExperts(Group* group) : group_(group) {}
  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  torch::Tensor exchange_counts(const torch::Tensor& counts) override {
    TORCH_CHECK(counts.dim() == 2 && counts.size(0) == size(), "exchange_counts: [", size(), ", n] expected, got ",
                counts.sizes());
    // On the group's device (NCCL needs GPU tensors), back on the host for the split sizes.
    return group_->all_to_all(counts.to(group_->device())).to(torch::kCPU);
  }
  torch::Tensor exchange_rows(const torch::Tensor& rows, const std::vector<std::int64_t>& send,
                              const std::vector<std::int64_t>& recv) override {
    return ExchangeRows::apply(rows, group_, send, recv);
  }
  torch::Tensor gather(const torch::Tensor& share) override {
    return group_->all_gather(share.to(group_->device())).to(share.device());
  }

 private:
  Group* group_;
};

}  // namespace

std::shared_ptr<model::ExpertGroup> expert_group(Group* group) { return std::make_shared<GroupExperts>(group); }

std::function<void(torch::Tensor&)> row_statistics_sum(Group* group) {
  if (!group || group->size() == 1) return {};
  return [group](torch::Tensor& t) {
    torch::Tensor on = t.to(group->device());
    group->all_reduce(on);
    t = on.to(t.device());
  };
}

}  // namespace odyssey::dist
