// Snapshots by name: a pipeline saved at one K continues exactly at another K, with its
// optimizer state; a snapshot of another model or a corrupt shard is a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gpipe/files.h"
#include "test_util.h"

namespace gpipe::testing {
namespace {

namespace fs = std::filesystem;

using Factory = Pipeline::OptimizerFactory;

Factory sgd() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
Factory rmsprop() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::RMSprop>(
        p, torch::optim::RMSpropOptions(0.01).momentum(0.5).alpha(0.9));
  };
}
Factory adam() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(0.01));
  };
}

std::string fresh_dir(const std::string& name) {
  const auto dir = fs::path(::testing::TempDir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

struct Data {
  std::vector<torch::Tensor> x, y;
};

Data data() {
  torch::manual_seed(21);
  Data d;
  for (int i = 0; i < 4; ++i) {
    d.x.push_back(torch::randn({8, 6}));
    d.y.push_back(torch::randint(0, 3, {8}));
  }
  return d;
}

const auto kOptions = models::MlpOptions(6, 16, 4, 3).batch_norm(true);  // 5 layers

// Two steps at K=2, save, then two more steps at K=`resume_k` from the snapshot, against four
// straight steps.
void check_resume(const Factory& factory, int64_t resume_k, const std::string& name) {
  const auto d = data();
  Pipeline straight(seeded_mlp(kOptions), PipelineOptions({3, 2}).chunks(2));
  straight.set_optimizer(factory);
  std::vector<double> expected;
  for (int i = 0; i < 4; ++i)
    expected.push_back(straight.train_step(d.x[i], d.y[i]));

  const auto dir = fresh_dir(name);
  {
    Pipeline first(seeded_mlp(kOptions), PipelineOptions({3, 2}).chunks(2));
    first.set_optimizer(factory);
    for (int i = 0; i < 2; ++i)
      EXPECT_DOUBLE_EQ(first.train_step(d.x[i], d.y[i]), expected[i]);
    save_stage_shards(first, dir);
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / "stage-0.pt"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "stage-1.pt"));
  // Different initial weights: everything must come from the snapshot.
  Pipeline second(seeded_mlp(kOptions, /*init_seed=*/99),
                  PipelineOptions(even_balance(5, resume_k)).chunks(2));
  second.set_optimizer(factory);
  const auto report = load_stage_shards(second, dir);
  EXPECT_GT(report.loaded, 0);
  EXPECT_TRUE(report.skipped.empty());
  second.set_step(2);
  for (int i = 2; i < 4; ++i) {
    EXPECT_NEAR(second.train_step(d.x[i], d.y[i]), expected[i], 1e-6) << name << " step " << i;
  }
  EXPECT_NEAR(second.param_checksum(), straight.param_checksum(),
              1e-8 * std::abs(straight.param_checksum()))
      << name;
  const auto a = straight.named_buffers();
  const auto b = second.named_buffers();
  for (size_t i = 0; i < a.size(); ++i) {
    expect_close(b[i].second.to(torch::kDouble), a[i].second.to(torch::kDouble), 1e-6, 1e-6,
                 a[i].first);
  }
}

TEST(Snapshot, SgdMomentumResumesExactlyAtAnotherK) {
  check_resume(sgd(), 1, "sgd_k1");
}
TEST(Snapshot, RmspropResumesExactlyAtAnotherK) {
  check_resume(rmsprop(), 3, "rmsprop_k3");
}
TEST(Snapshot, AdamResumesExactlyAtTheSameK) {
  check_resume(adam(), 2, "adam_k2");
}

TEST(Snapshot, AnotherModelIsAClearError) {
  const auto dir = fresh_dir("other_model");
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  save_stage_shards(saved, dir);
  Pipeline wider(seeded_mlp(models::MlpOptions(6, 32, 4, 3).batch_norm(true)),
                 PipelineOptions({3, 2}));
  try {
    load_stage_shards(wider, dir);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("0.linear.weight"), std::string::npos) << e.what();
  }
  Pipeline deeper(seeded_mlp(models::MlpOptions(6, 16, 6, 3).batch_norm(true)),
                  PipelineOptions({4, 3}));
  EXPECT_THROW(load_stage_shards(deeper, dir), ConfigError);
}

TEST(Snapshot, FineTuningSkipsTheMismatchedClassifier) {
  const auto dir = fresh_dir("finetune");
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  save_stage_shards(saved, dir);
  Pipeline ten_classes(seeded_mlp(models::MlpOptions(6, 16, 4, 10).batch_norm(true), 5),
                       PipelineOptions({2, 3}));
  const auto report = load_stage_shards(
      ten_classes, dir, LoadOptions().optimizer(false).skip_mismatched_shapes(true));
  EXPECT_EQ(report.skipped, (std::vector<std::string>{"4.module.weight", "4.module.bias"}));
  const auto a = saved.named_parameters();
  const auto b = ten_classes.named_parameters();
  EXPECT_TRUE(torch::equal(a[0].second, b[0].second)) << "hidden layers come from the snapshot";
}

TEST(Snapshot, FineTuningKeepsFreshLayersAsInitialised) {
  const auto dir = fresh_dir("fresh_head");
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  save_stage_shards(saved, dir);
  // Same shapes, another seed: only the head (layer 4) keeps its own initialisation.
  Pipeline tuned(seeded_mlp(kOptions, 5), PipelineOptions({2, 3}));
  const auto before = tuned.named_parameters();
  std::vector<torch::Tensor> initial;
  for (const auto& [name, p] : before)
    initial.push_back(p.detach().clone());
  const auto report =
      load_stage_shards(tuned, dir, LoadOptions().optimizer(false).fresh_layers({4}));
  EXPECT_EQ(report.skipped, (std::vector<std::string>{"4.module.weight", "4.module.bias"}));
  const auto a = saved.named_parameters();
  const auto b = tuned.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const bool head = a[i].first.rfind("4.", 0) == 0;
    EXPECT_EQ(torch::equal(b[i].second, head ? initial[i] : a[i].second), true) << a[i].first;
    if (head) {
      EXPECT_FALSE(torch::equal(a[i].second, b[i].second)) << a[i].first;
    }
  }
}

TEST(Snapshot, CorruptShardNamesTheFile) {
  const auto dir = fresh_dir("corrupt");
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  save_stage_shards(saved, dir);
  const auto shard = (fs::path(dir) / "stage-1.pt").string();
  fs::resize_file(shard, fs::file_size(shard) / 2);
  try {
    load_stage_shards(saved, dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stage-1.pt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_stage_shards(saved, fresh_dir("empty")), ConfigError);
  EXPECT_THROW(load_stage_shards(saved, dir + "/missing"), ConfigError);
}

// A shard whose bytes differ from the checksum save_stage_shards returned is refused naming it,
// whatever LibTorch would make of it; so is one the manifest does not list, or one it lists that
// is gone. NaN weights are named as such.
TEST(Snapshot, ChecksumsAndNonFiniteWeightsAreChecked) {
  const auto dir = fresh_dir("checksums");
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  const auto checksums = save_stage_shards(saved, dir);
  ASSERT_EQ(checksums.size(), 2u);
  EXPECT_EQ(checksums.at("stage-0.pt"), file_checksum(dir + "/stage-0.pt"));
  const auto checked = LoadOptions().checksums(checksums);
  EXPECT_NO_THROW(load_stage_shards(saved, dir, checked));
  auto message = [&](const LoadOptions& options) {
    try {
      load_stage_shards(saved, dir, options);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto changed = checksums;
  changed["stage-1.pt"] = "0000000000000000";
  EXPECT_NE(message(LoadOptions().checksums(changed)).find("stage-1.pt' does not match"),
            std::string::npos);
  changed = checksums;
  changed.erase("stage-0.pt");
  EXPECT_NE(message(LoadOptions().checksums(changed)).find("stage-0.pt' is not listed"),
            std::string::npos);
  changed = checksums;
  changed["stage-2.pt"] = "0000000000000000";
  EXPECT_NE(message(LoadOptions().checksums(changed)).find("stage-2.pt' (listed in its manifest)"),
            std::string::npos);
  {
    torch::NoGradGuard no_grad;
    saved.named_parameters().begin()->second.view(-1)[0] = std::nanf("");
  }
  const auto nan_dir = fresh_dir("nan");
  save_stage_shards(saved, nan_dir);
  try {
    load_stage_shards(saved, nan_dir);
    FAIL() << "NaN weights loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite weights: 1 of the"), std::string::npos)
        << e.what();
  }
}

TEST(Snapshot, OptimizerMismatchIsAClearError) {
  const auto dir = fresh_dir("optimizer_mismatch");
  const auto d = data();
  Pipeline saved(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  saved.set_optimizer(sgd());
  saved.train_step(d.x[0], d.y[0]);
  save_stage_shards(saved, dir);
  Pipeline other(seeded_mlp(kOptions), PipelineOptions({3, 2}));
  other.set_optimizer(adam());
  EXPECT_THROW(load_stage_shards(other, dir), ConfigError);
  EXPECT_NO_THROW(load_stage_shards(other, dir, LoadOptions().optimizer(false)));
}

}  // namespace
}  // namespace gpipe::testing
