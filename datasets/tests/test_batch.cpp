// collate stacks examples into the batch layout the trainer takes.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::datasets::testing {
namespace {

TEST(Collate, StacksImagesAndLabels) {
  std::vector<Example> examples;
  for (int64_t i = 0; i < 3; ++i)
    examples.push_back({torch::full({1, 4, 4}, static_cast<float>(i)), torch::tensor(i)});
  const auto batch = collate(examples);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{3, 1, 4, 4}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{3}));
  EXPECT_EQ(batch.target.scalar_type(), torch::kInt64);
  EXPECT_EQ(batch.size(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(batch.target[i].item<int64_t>(), i);
    EXPECT_EQ(batch.input[i].max().item<float>(), static_cast<float>(i));
  }
}

TEST(Collate, StacksTokenSequences) {
  std::vector<Example> examples = {{torch::arange(5), torch::arange(1, 6)},
                                   {torch::arange(5) + 10, torch::arange(11, 16)}};
  const auto batch = collate(examples);
  EXPECT_EQ(batch.input.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(batch.target.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(batch.target[1][4].item<int64_t>(), 15);
}

TEST(Collate, RefusesEmptyAndMismatchedExamples) {
  expect_error<DataError>([] { collate({}); }, {"empty"});
  std::vector<Example> examples = {{torch::zeros({3, 4, 4}), torch::tensor(0)},
                                   {torch::zeros({3, 5, 4}), torch::tensor(1)}};
  expect_error<DataError>([&] { collate(examples); }, {"example 1", "[3, 5, 4]", "[3, 4, 4]"});
}

TEST(Batch, SizeOfAnEmptyBatchIsZero) {
  EXPECT_EQ(Batch{}.size(), 0);
}

}  // namespace
}  // namespace gpipe::datasets::testing
