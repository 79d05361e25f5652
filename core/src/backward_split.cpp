#include "gpipe/backward_split.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <unordered_set>

namespace gpipe {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;
using NodeSet = std::unordered_set<const Node*>;

// Every node below the roots, children before parents (a node's topological number exceeds
// its children's).
std::vector<Node*> nodes_below(const edge_list& roots) {
  std::vector<Node*> nodes;
  std::unordered_set<Node*> seen;
  for (const auto& edge : roots) {
    if (edge.is_valid() && seen.insert(edge.function.get()).second)
      nodes.push_back(edge.function.get());
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& next : nodes[i]->next_edges()) {
      if (next.is_valid() && seen.insert(next.function.get()).second)
        nodes.push_back(next.function.get());
    }
  }
  std::stable_sort(nodes.begin(), nodes.end(), [](const Node* a, const Node* b) {
    return a->topological_nr() < b->topological_nr();
  });
  return nodes;
}

// The weight side of the graph: the parameters' accumulators and the nodes that only ever lead
// to them (a transpose of a weight, say). A node with an input that needs no gradient (data)
// is on the activation side, even if its other edges all lead to parameters.
NodeSet weight_side(const std::vector<Node*>& nodes, const std::vector<torch::Tensor>& parameters) {
  NodeSet side;
  for (const auto& p : parameters) {
    if (const auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p))
      side.insert(accumulator.get());
  }
  for (const Node* node : nodes) {
    const auto& edges = node->next_edges();
    if (edges.empty() || side.count(node)) continue;
    const bool only_weights = std::all_of(edges.begin(), edges.end(), [&](const Edge& e) {
      return e.is_valid() && side.count(e.function.get());
    });
    if (only_weights) side.insert(node);
  }
  return side;
}

bool leads_to(const Node& node, const NodeSet& set) {
  const auto& edges = node.next_edges();
  return std::any_of(edges.begin(), edges.end(),
                     [&](const Edge& e) { return e.is_valid() && set.count(e.function.get()); });
}

variable_list run_engine(const edge_list& roots, const variable_list& grads, bool keep_graph,
                         bool accumulate, const edge_list& outputs) {
  if (roots.empty()) return variable_list(outputs.size());
  return torch::autograd::Engine::get_default_engine().execute(
      roots, grads, keep_graph, /*create_graph=*/false, accumulate, outputs);
}

}  // namespace

void WeightGradients::run() {
  edge_list roots;
  variable_list grads;
  for (const auto& recorded : nodes_) {
    for (size_t i = 0; i < recorded.grads->size(); ++i) {
      if (!(*recorded.grads)[i].defined()) continue;
      roots.emplace_back(recorded.node, static_cast<uint32_t>(i));
      grads.push_back((*recorded.grads)[i]);
    }
  }
  edge_list outputs;
  for (const auto& p : parameters_) {
    if (auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p))
      outputs.emplace_back(std::move(accumulator), 0);
  }
  nodes_.clear();
  parameters_.clear();
  run_engine(roots, grads, /*keep_graph=*/false, /*accumulate=*/true, outputs);
}

InputGradients backward_input(const std::vector<torch::Tensor>& roots,
                              const std::vector<torch::Tensor>& root_grads,
                              const std::vector<torch::Tensor>& inputs,
                              const std::vector<torch::Tensor>& parameters) {
  edge_list root_edges;
  variable_list grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    if (!roots[i].defined() || !roots[i].requires_grad()) continue;
    root_edges.push_back(torch::autograd::impl::gradient_edge(roots[i]));
    const bool given = i < root_grads.size() && root_grads[i].defined();
    grads.push_back(given ? root_grads[i] : torch::ones_like(roots[i]));
  }
  // B's outputs: the inputs' gradients, then the gradients each weight node receives.
  edge_list outputs;
  std::vector<size_t> input_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    outputs.push_back(torch::autograd::impl::gradient_edge(inputs[i]));
    input_index.push_back(i);
  }
  const auto nodes = nodes_below(root_edges);
  const auto weights = weight_side(nodes, parameters);
  InputGradients out;
  out.grads.resize(inputs.size());
  // A root on the weight side (an embedding of the data, a term of the weights alone) is W's
  // from the start; B runs from the others.
  std::vector<WeightGradients::Recorded> recorded;
  edge_list b_roots;
  variable_list b_grads;
  for (size_t i = 0; i < root_edges.size(); ++i) {
    const auto& edge = root_edges[i];
    if (!weights.count(edge.function.get())) {
      b_roots.push_back(edge);
      b_grads.push_back(grads[i]);
      continue;
    }
    auto slot = std::make_shared<variable_list>(edge.function->num_inputs());
    (*slot)[edge.input_nr] = grads[i];
    recorded.push_back({edge.function, std::move(slot)});
  }
  std::vector<std::shared_ptr<Node>> weight_nodes;
  for (Node* node : nodes) {
    if (weights.count(node) || !leads_to(*node, weights)) continue;
    weight_nodes.push_back(node->shared_from_this());
    for (uint32_t j = 0; j < node->num_inputs(); ++j)
      outputs.emplace_back(weight_nodes.back(), j);
  }
  // Only the activation side runs: a node computes an output only where it leads to an output.
  const auto received =
      run_engine(b_roots, b_grads, /*keep_graph=*/true, /*accumulate=*/false, outputs);
  for (size_t k = 0; k < input_index.size(); ++k)
    out.grads[input_index[k]] = received[k];
  size_t next = input_index.size();
  for (const auto& node : weight_nodes) {
    auto slot = std::make_shared<variable_list>(received.begin() + next,
                                                received.begin() + next + node->num_inputs());
    next += node->num_inputs();
    // W must not reach back into the activation side: cut the node loose from it, which also
    // frees what only that side kept.
    for (auto& edge : node->next_edges()) {
      if (edge.is_valid() && !weights.count(edge.function.get())) edge = Edge();
    }
    recorded.push_back({node, std::move(slot)});
  }
  out.weights = WeightGradients(std::move(recorded), parameters);
  return out;
}

}  // namespace gpipe
