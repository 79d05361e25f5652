// A backward split in two: B (input gradients) now, W (weight gradients) later, for any layer.
//
// Why this file exists: zero-bubble schedules run the input-gradient half of a backward (B) on
// the critical path and the weight-gradient half (W) later, in what would have been a bubble.
// The split works on the autograd graph, not on layer types, so every operation LibTorch or a
// custom autograd Function differentiates splits: convolutions, BatchNorm, LayerNorm,
// embeddings, attention, linear layers alike.
//
// How (the generic split of torch.distributed.pipelining, done on the C++ graph):
//   - the weight side of the graph is the parameters' accumulators and the nodes that lead only
//     to them (a transpose of a weight); every other node is on the activation side;
//   - a node of the activation side with an edge into the weight side is a weight node;
//   - B runs the activation side only, asking each node only for the gradients that lead to the
//     stage's inputs or to a weight node (Node::task_should_compute_output), and returns the
//     gradients every weight node received. A weight node whose other inputs need no gradient
//     (the first layer, on data) is not run in B at all;
//   - W runs the weight nodes again from those gradients, now asked only for their weight-side
//     outputs, and accumulates into .grad.
//
//        outputs ─► [relu] ─► [conv2] ─► [relu] ─► [conv1] ─► input      B: this row
//                               │                     │
//                               ▼ W                   ▼ W
//                           conv2.weight          conv1.weight          W: the columns
//
// After B the weight nodes' edges into the activation side are cut: W cannot recompute B's work
// (even for a parameter used twice), and what only the activation side kept is freed at once.
// W keeps alive only what its nodes saved (mostly their inputs). Batch normalisation does not
// split: its weight gradients are two sums its input gradient needs anyway, so B computes them
// with it (split, BatchNorm's backward took 60% longer on AmoebaNet-D). A root on the weight side
// (an embedding of the data, a term of the weights alone) goes to W whole. Under a CUDA device the
// engine runs nodes on its own threads; B's gradients are read after the engine call returns.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace gpipe {

// What a split B leaves for W: the weight nodes, each with the gradients it received in B.
class WeightGradients {
 public:
  struct Recorded {
    std::shared_ptr<torch::autograd::Node> node;
    std::vector<torch::Tensor> grads;  // one per input of the node; undefined where none came
  };
  WeightGradients() = default;
  // `accumulators`: the parameters' gradient accumulators, which W accumulates into.
  WeightGradients(std::vector<Recorded> nodes,
                  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators)
      : nodes_(std::move(nodes)), accumulators_(std::move(accumulators)) {}

  // W: runs the weight nodes from their recorded gradients, accumulating into the parameters'
  // .grad, then forgets them. On an empty value (or a second time) it does nothing.
  void run();
  bool empty() const { return nodes_.empty(); }

 private:
  std::vector<Recorded> nodes_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

struct InputGradients {
  // One per input, in order; undefined where the input needs no gradient or none reaches it.
  std::vector<torch::Tensor> grads;
  WeightGradients weights;
};

// B: the backward from `roots` (outputs, or a scalar loss) with `root_grads` (one per root;
// undefined for a scalar root: a gradient of one) to `inputs`, leaving the weight gradients of
// `parameters` for W. Inputs that do not require grad get none. The graph must not have been run
// backward before; a leaf that requires grad but is not in `parameters` gets no gradient.
InputGradients backward_input(const std::vector<torch::Tensor>& roots,
                              const std::vector<torch::Tensor>& root_grads,
                              const std::vector<torch::Tensor>& inputs,
                              const std::vector<torch::Tensor>& parameters);

}  // namespace gpipe
