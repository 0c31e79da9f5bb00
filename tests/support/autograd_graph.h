// Test helper: the names of the autograd nodes a tensor's value depends on (its grad_fn and
// everything reachable from it), each node once. For tests that check which ops a forward
// recorded (a fused Function present, a view's bookkeeping absent).
#pragma once

#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

namespace odyssey::test {

inline std::vector<std::string> graph_node_names(const torch::Tensor& t) {
  std::vector<std::string> names;
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()};
  while (!todo.empty()) {
    torch::autograd::Node* f = todo.back();
    todo.pop_back();
    if (f == nullptr || !seen.insert(f).second) continue;
    names.push_back(f->name());
    for (const auto& edge : f->next_edges()) todo.push_back(edge.function.get());
  }
  return names;
}

}  // namespace odyssey::test
