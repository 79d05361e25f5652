// The check behind every B/W split test (backward_split.h): B then W on one copy of a layer
// leaves the input and parameter gradients that one whole backward leaves on another copy, and
// B alone computes no parameter gradient but batch normalisation's.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "gpipe/backward_split.h"

namespace gpipe::testing {

// The parameters a split B computes itself: those of batch normalisation, whose weight
// gradients are sums its input gradient needs too (found, as the split finds them, by name).
inline std::unordered_set<const c10::TensorImpl*> parameters_kept_in_b(
    const torch::nn::Module& module) {
  std::unordered_set<const c10::TensorImpl*> kept;
  for (const auto& m : module.modules(/*include_self=*/true)) {
    if (m->name().find("BatchNorm") == std::string::npos) continue;
    for (const auto& p : m->parameters(/*recurse=*/false))
      kept.insert(p.unsafeGetTensorImpl());
  }
  return kept;
}

// `outputs` of the split copy (inputs `inputs`, parameters `parameters`), with output gradients
// `grads`: B, then W. `expected_inputs` and `expected_parameters` are the whole backward's
// gradients (undefined where an input needs none).
inline void expect_split_matches(const std::vector<torch::Tensor>& outputs,
                                 const std::vector<torch::Tensor>& grads,
                                 const std::vector<torch::Tensor>& inputs,
                                 const std::vector<torch::Tensor>& parameters,
                                 const std::unordered_set<const c10::TensorImpl*>& kept_in_b,
                                 const std::vector<torch::Tensor>& expected_inputs,
                                 const std::vector<torch::Tensor>& expected_parameters, double rtol,
                                 double atol) {
  std::vector<torch::Tensor> before;
  for (const auto& p : parameters)
    before.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  auto b = backward_input(outputs, grads, inputs, parameters);
  bool all_kept = true;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const auto& grad = parameters[i].grad();
    const bool changed =
        grad.defined() != before[i].defined() || (grad.defined() && !torch::equal(grad, before[i]));
    const bool kept = kept_in_b.count(parameters[i].unsafeGetTensorImpl()) > 0;
    all_kept = all_kept && kept;
    EXPECT_EQ(changed, kept) << "parameter " << i << (kept ? " not computed" : " computed")
                             << " in B";
  }
  EXPECT_EQ(b.weights.empty(), all_kept) << "W is empty exactly when B computed every parameter";
  b.weights.run();
  EXPECT_TRUE(b.weights.empty()) << "W ran once";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!expected_inputs[i].defined()) continue;
    ASSERT_TRUE(b.grads.at(i).defined()) << "input " << i;
    EXPECT_TRUE(torch::allclose(b.grads[i], expected_inputs[i], rtol, atol))
        << "input " << i << " gradient: max abs diff "
        << (b.grads[i] - expected_inputs[i]).abs().max().item<double>();
  }
  ASSERT_EQ(parameters.size(), expected_parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (!expected_parameters[i].defined()) continue;
    ASSERT_TRUE(parameters[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(torch::allclose(parameters[i].grad(), expected_parameters[i], rtol, atol))
        << "parameter " << i << " gradient: max abs diff "
        << (parameters[i].grad() - expected_parameters[i]).abs().max().item<double>();
  }
}

}  // namespace gpipe::testing
