#include "gpipe/backward_split.h"

#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace gpipe {
namespace {

using torch::autograd::Edge;
using torch::autograd::edge_list;
using torch::autograd::Node;
using torch::autograd::variable_list;
using NodeSet = std::unordered_set<const Node*>;

// Every node below the roots, children before parents (a node's topological number exceeds
// its children's), and how many edges lead into each.
struct Graph {
  std::vector<Node*> nodes;
  std::unordered_map<const Node*, int> uses;
};

Graph graph_below(const edge_list& roots) {
  Graph graph;
  for (const auto& edge : roots) {
    if (edge.is_valid() && graph.uses[edge.function.get()]++ == 0)
      graph.nodes.push_back(edge.function.get());
  }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    for (const auto& next : graph.nodes[i]->next_edges()) {
      if (next.is_valid() && graph.uses[next.function.get()]++ == 0)
        graph.nodes.push_back(next.function.get());
    }
  }
  std::stable_sort(graph.nodes.begin(), graph.nodes.end(), [](const Node* a, const Node* b) {
    return a->topological_nr() < b->topological_nr();
  });
  return graph;
}

// Each parameter's gradient accumulator, to the parameter.
using Accumulators = std::unordered_map<std::shared_ptr<Node>, torch::Tensor>;

Accumulators accumulators_of(const std::vector<torch::Tensor>& parameters) {
  Accumulators out;
  for (const auto& p : parameters) {
    if (auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p))
      out.emplace(std::move(accumulator), p);
  }
  return out;
}

// The weight side of the graph: the parameters' accumulators and the nodes that only ever lead
// to them (a transpose of a weight, say). A node with an input that needs no gradient (data)
// is on the activation side, even if its other edges all lead to parameters.
NodeSet weight_side(const Graph& graph, const Accumulators& accumulators) {
  NodeSet side;
  for (const auto& [node, parameter] : accumulators)
    side.insert(node.get());
  for (const Node* node : graph.nodes) {
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

// Batch normalisation's weight gradients are the two sums over the batch that its input
// gradient needs too; split, W would compute them again (measured on AmoebaNet-D: BatchNorm's
// backward 60% slower). Such a node runs whole in B, when its parameters are its own (each
// weight-side edge goes straight to an accumulator nothing else uses).
bool keeps_weights_in_b(const Node& node, const NodeSet& weights, const Graph& graph,
                        const Accumulators& accumulators) {
  if (node.name().find("BatchNorm") == std::string::npos) return false;
  for (const auto& e : node.next_edges()) {
    if (!e.is_valid() || !weights.count(e.function.get())) continue;
    if (!accumulators.count(e.function) || graph.uses.at(e.function.get()) != 1) return false;
  }
  return true;
}

// Frees what a node saved for its backward once B has run it: B keeps the graph for W, but only
// the weight nodes run again.
class ReleaseAfterRun : public torch::autograd::FunctionPostHook {
 public:
  explicit ReleaseAfterRun(Node* node) : node_(node) {}
  variable_list operator()(const variable_list& outputs, const variable_list& /*inputs*/) override {
    node_->release_variables();
    return outputs;
  }

 private:
  Node* node_;  // owns this hook
};

// Adds `grad` to the parameter's .grad, as its accumulator would.
void accumulate(torch::Tensor parameter, const torch::Tensor& grad) {
  if (!grad.defined()) return;
  torch::NoGradGuard no_grad;
  auto& current = parameter.mutable_grad();
  if (current.defined()) {
    current.add_(grad);
  } else {
    current = grad.detach();
  }
}

// The roots B runs from, and the roots on the weight side (an embedding of the data, a term of
// the weights alone), which are W's from the start.
struct SplitRoots {
  edge_list b_roots;
  variable_list b_grads;
  std::vector<WeightGradients::Recorded> w_roots;
};

SplitRoots weight_side_roots(const edge_list& roots, const variable_list& grads,
                             const NodeSet& weights) {
  SplitRoots out;
  for (size_t i = 0; i < roots.size(); ++i) {
    const auto& edge = roots[i];
    if (!weights.count(edge.function.get())) {
      out.b_roots.push_back(edge);
      out.b_grads.push_back(grads[i]);
      continue;
    }
    variable_list received(edge.function->num_inputs());
    received[edge.input_nr] = grads[i];
    out.w_roots.push_back({edge.function, std::move(received)});
  }
  return out;
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
    for (size_t i = 0; i < recorded.grads.size(); ++i) {
      if (!recorded.grads[i].defined()) continue;
      roots.emplace_back(recorded.node, static_cast<uint32_t>(i));
      grads.push_back(recorded.grads[i]);
    }
  }
  edge_list outputs;
  for (auto& accumulator : accumulators_)
    outputs.emplace_back(std::move(accumulator), 0);
  nodes_.clear();
  accumulators_.clear();
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
  const auto graph = graph_below(root_edges);
  const auto accumulators = accumulators_of(parameters);
  const auto weights = weight_side(graph, accumulators);
  // B's outputs, in order: the inputs' gradients, the parameters B accumulates itself, and the
  // gradients each weight node receives.
  edge_list outputs;
  std::vector<size_t> input_index;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    outputs.push_back(torch::autograd::impl::gradient_edge(inputs[i]));
    input_index.push_back(i);
  }
  std::vector<torch::Tensor> kept_in_b;
  std::vector<std::shared_ptr<Node>> weight_nodes;
  for (Node* node : graph.nodes) {
    if (weights.count(node) || !leads_to(*node, weights)) continue;
    if (keeps_weights_in_b(*node, weights, graph, accumulators)) {
      for (const auto& e : node->next_edges()) {
        if (!e.is_valid() || !weights.count(e.function.get())) continue;
        outputs.push_back(e);
        kept_in_b.push_back(accumulators.at(e.function));
      }
      continue;
    }
    weight_nodes.push_back(node->shared_from_this());
  }
  NodeSet runs_again;
  for (const auto& node : weight_nodes) {
    runs_again.insert(node.get());
    for (uint32_t j = 0; j < node->num_inputs(); ++j)
      outputs.emplace_back(node, j);
  }
  for (Node* node : graph.nodes) {
    if (!weights.count(node) && !runs_again.count(node))
      node->add_post_hook(std::make_unique<ReleaseAfterRun>(node));
  }
  auto [b_roots, b_grads, recorded] = weight_side_roots(root_edges, grads, weights);
  // Only the activation side runs: a node computes an output only where it leads to an output.
  const auto received =
      run_engine(b_roots, b_grads, /*keep_graph=*/true, /*accumulate=*/false, outputs);
  InputGradients out;
  out.grads.resize(inputs.size());
  size_t next = 0;
  for (size_t i : input_index)
    out.grads[i] = received[next++];
  for (const auto& parameter : kept_in_b)
    accumulate(parameter, received[next++]);
  for (const auto& node : weight_nodes) {
    recorded.push_back({node, variable_list(received.begin() + next,
                                            received.begin() + next + node->num_inputs())});
    next += node->num_inputs();
    // W must not reach back into the activation side: cut the node loose from it, which also
    // frees what only that side kept.
    for (auto& edge : node->next_edges()) {
      if (edge.is_valid() && !weights.count(edge.function.get())) edge = Edge();
    }
  }
  std::vector<std::shared_ptr<Node>> into;
  for (const auto& [accumulator, parameter] : accumulators)
    into.push_back(accumulator);
  out.weights = WeightGradients(std::move(recorded), std::move(into));
  return out;
}

}  // namespace gpipe
