#include "gpipe/datasets/batch.h"

#include "gpipe/datasets/errors.h"

namespace gpipe::datasets {

Batch collate(const std::vector<Example>& examples) {
  GPIPE_CHECK(!examples.empty(), DataError, "cannot collate an empty list of examples");
  std::vector<torch::Tensor> inputs, targets;
  inputs.reserve(examples.size());
  targets.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    const auto& example = examples[i];
    GPIPE_CHECK(example.input.sizes() == examples[0].input.sizes() &&
                    example.target.sizes() == examples[0].target.sizes(),
                DataError, "example ", i, " has input ", example.input.sizes(), " and target ",
                example.target.sizes(), " but example 0 has ", examples[0].input.sizes(), " and ",
                examples[0].target.sizes());
    inputs.push_back(example.input);
    targets.push_back(example.target);
  }
  return {torch::stack(inputs), torch::stack(targets)};
}

}  // namespace gpipe::datasets
