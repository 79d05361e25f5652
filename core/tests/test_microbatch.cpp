#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

TEST(Microbatch, SizesDifferByAtMostOne) {
  EXPECT_EQ(microbatch_sizes(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(microbatch_sizes(8, 8), (std::vector<int64_t>(8, 1)));
  EXPECT_EQ(microbatch_sizes(5, 1), (std::vector<int64_t>{5}));
  for (int64_t n = 1; n < 40; ++n) {
    for (int64_t m = 1; m <= n; ++m) {
      const auto sizes = microbatch_sizes(n, m);
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      EXPECT_LE(*hi - *lo, 1);
      EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), n);
    }
  }
}

TEST(Microbatch, SplitThenMergeIsIdentity) {
  const auto x = torch::randn({11, 3});
  const auto y = torch::arange(11);
  const auto parts = split_microbatches(Activations{x, y}, 4);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0][0].size(0), 3);
  EXPECT_EQ(parts[3][1].size(0), 2);
  EXPECT_EQ(parts[0][0].data_ptr(), x.data_ptr()) << "micro-batches are views";
  const auto merged = merge_microbatches(parts);
  EXPECT_TRUE(torch::equal(merged[0], x));
  EXPECT_TRUE(torch::equal(merged[1], y));
}

TEST(Microbatch, Errors) {
  EXPECT_THROW(microbatch_sizes(3, 4), InputError);
  EXPECT_THROW(microbatch_sizes(0, 1), InputError);
  EXPECT_THROW(microbatch_sizes(3, 0), ConfigError);
  EXPECT_THROW(split_microbatches(Activations{torch::randn({4, 2}), torch::randn({5})}, 2),
               InputError);
}

}  // namespace
}  // namespace gpipe::testing
