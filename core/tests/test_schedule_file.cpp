// Schedules from text (schedule_file.h): every built-in schedule written out and read back is
// the same lowered program; a drawing's rows read as a schedule; a custom schedule trains as the
// plain model; and each broken rule ends in one message naming the line, the action and the rule.
#include <gtest/gtest.h>

#include "test_util.h"

namespace gpipe::testing {
namespace {

using expect_error_parts = std::initializer_list<std::string>;

void expect_file_error(const std::string& text, expect_error_parts parts) {
  expect_error<ConfigError>([&] { read_schedule(text); }, parts);
}

TEST(ScheduleFile, EveryBuiltInScheduleReadsBackAsTheSameLoweredProgram) {
  int cases = 0;
  for (auto kind : all_schedule_kinds()) {
    const int64_t v = default_virtual_stages(kind);
    for (int64_t K : {2, 3, 4}) {
      for (int64_t M : {4, 8, 12}) {
        if (!schedule_shape_error(kind, K, M, v).empty()) continue;
        SCOPED_TRACE(to_string(kind) + " K=" + std::to_string(K) + " M=" + std::to_string(M));
        const auto built = make_schedule(kind, K, M, v);
        const auto read = read_schedule(write_schedule(built));
        EXPECT_EQ(read.kind, ScheduleKind::kCustom);
        EXPECT_EQ(read.devices, K);
        EXPECT_EQ(read.microbatches, M);
        EXPECT_EQ(read.virtual_stages, v);
        EXPECT_EQ(read.stage_device, built.stage_device);
        for (auto mode : {Checkpoint::kAlways, Checkpoint::kExceptLast, Checkpoint::kNever})
          EXPECT_EQ(lower(read, mode).actions, lower(built, mode).actions);
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 60);
}

TEST(ScheduleFile, ADrawingsRowsAreAFile) {
  // schedule.h's zb-h1 drawing, labels left out: "." cells are idle, "F3" is the line's stage.
  const std::string text =
      "# zb-h1, K=3, M=4, as drawn\n"
      "F0 F1 F2 .  .  B0 W0 F3 B1 W1 B2 W2 B3 W3\n"
      ".  F0 F1 .  B0 F2 B1 W0 F3 B2 W1 B3 W2 W3   # device 1\n"
      "\n"
      ".  .  F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3\n";
  const auto read = read_schedule(text);
  EXPECT_EQ(read.actions, make_schedule(ScheduleKind::kZBH1, 3, 4).actions);
}

TEST(ScheduleFile, ACustomScheduleTrainsAsThePlainModel) {
  // Two devices, a V of four stages, zero-bubble split, written by hand: stage 3 (the loss) is
  // on device 0 beside stage 0.
  const std::string text =
      "F0.0 F1.0 F0.3 B0.3 F1.3 B1.3 B0.0 B1.0 W0.3 W1.3 W0.0 W1.0\n"
      "F0.1 F0.2 F1.1 F1.2 B0.2 B0.1 B1.2 B1.1 W0.1 W0.2 W1.1 W1.2\n";
  auto program = std::make_shared<const Schedule>(read_schedule(text));
  EXPECT_EQ(program->stage_device, (std::vector<int64_t>{0, 1, 1, 0}));
  const auto options = models::MlpOptions(12, 16, 7, 5);
  torch::manual_seed(3);
  const auto input = torch::randn({8, 12});
  const auto target = torch::randint(0, 5, {8});
  auto plain = seeded_mlp(options);
  const double plain_loss = plain_microbatched_step(plain, input, target, 2, 17, 0);
  Pipeline pipe(seeded_mlp(options), PipelineOptions({4, 4})
                                         .chunks(2)
                                         .schedule(ScheduleKind::kCustom)
                                         .program(program)
                                         .seed(17)
                                         .threads_per_device(1));
  pipe.set_optimizer([](std::vector<torch::Tensor> params) {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1));
  });
  EXPECT_NEAR(pipe.train_step(input, target), plain_loss, 1e-5 * std::abs(plain_loss) + 1e-6);
  const auto reference = named_tensors(plain);
  for (const auto& [name, p] : pipe.named_parameters())
    expect_close(p.grad(), reference.at(name).grad(), 1e-4, 1e-6, name);
  // Evaluation runs the file's placement too.
  EXPECT_EQ(pipe.forward(input).sizes(), (std::vector<int64_t>{8, 5}));
  // The file's shape is the run's.
  EXPECT_CONFIG_ERROR(
      Pipeline(seeded_mlp(options),
               PipelineOptions({4, 4}).chunks(4).schedule(ScheduleKind::kCustom).program(program)),
      "M=2");
  EXPECT_CONFIG_ERROR(
      Pipeline(seeded_mlp(options), PipelineOptions({8}).chunks(2).schedule(ScheduleKind::kCustom)),
      "without a program");
}

TEST(ScheduleFile, EachBrokenRuleNamesTheLineTheActionAndTheRule) {
  // An F without its B.
  expect_file_error("F0.0 F1.0 B0.0\n", {"line 1, F1.0", "no B1.0", "every F needs its B"});
  // A dependency cycle: device 0 waits for device 1's forward, which waits for device 0's.
  expect_file_error("F0.0 B0.0 F1.0 B1.0\nF1.1 F0.1 B0.1 B1.1\n",
                    {"dependency cycle", "line 1 B0.0 waits for B0.1 on line 2",
                     "line 2 F1.1 waits for F1.0 on line 1"});
  // A stage that does not exist (none runs stage 1).
  expect_file_error("F0.0 B0.0\nF0.2 B0.2\n", {"line 2, F0.2", "no line runs stage 1"});
  // Others: unreadable, a stage on two lines, B before F, W before B, a missing micro-batch,
  // uneven stages, a W for some B's only, nothing at all.
  expect_file_error("F0.0 X1\n", {"line 1, X1", "not an action"});
  expect_file_error("F0.0 f0\n", {"line 1, f0", "not an action"});
  expect_file_error("F99999999999.0\n", {"line 1, F99999999999.0", "not an action"});
  expect_file_error("F0.0 B0.0\nF0.0 B0.0\n", {"line 2, F0.0", "already runs on line 1"});
  expect_file_error("B0.0 F0.0\n", {"line 1, B0.0", "no F0.0 before it"});
  expect_file_error("F0.0 W0.0 B0.0\n", {"line 1, W0.0", "no B0.0 before it"});
  expect_file_error("F0.0 B0.0 F0.0\n", {"line 1, F0.0", "runs twice"});
  expect_file_error("F0.0 B0.0\nF1.1 B1.1\n", {"line 1", "stage 0 never runs micro-batch 1"});
  expect_file_error("F0.0 F0.1 B0.1 B0.0\nF0.2 B0.2\n", {"line 2 runs 1 stages", "line 1 runs 2"});
  expect_file_error("F0.0 B0.0 W0.0 F1.0 B1.0\n", {"line 1, B1.0", "no W1.0", "every B its W"});
  expect_file_error("# nothing\n\n", {"no device lines"});
  // Bytes that do not print are shown escaped, and a long token cut short.
  expect_file_error(std::string("F0.0 \x01\xff\n"), {"line 1, \\x01\\xff: not an action"});
  expect_file_error("F0.0 " + std::string(100, 'F') + "\n", {"line 1, FFFF", "...: not an action"});
}

}  // namespace
}  // namespace gpipe::testing
