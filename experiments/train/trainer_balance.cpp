// Trainer::choose_plan and Trainer::resolve_balance: how many layers each device (and, with
// virtual stages, each virtual stage) holds, from --plan auto, --stage-balance, --balance or the
// exact partitioner (declared in trainer.h).
#include <spdlog/spdlog.h>

#include "common/cli.h"
#include "common/report.h"
#include "gpipe/errors.h"
#include "gpipe/profile.h"
#include "train/train_plan.h"
#include "train/trainer.h"

namespace gpipe::train {

void Trainer::choose_plan() {
  auto& o = options_;
  GPIPE_CHECK(o.plan == "auto", ConfigError, "--plan ", o.plan,
              " is not a plan: use --plan auto (gpipe_plan prints the ranked plans)");
  GPIPE_CHECK(!o.distributed, ConfigError,
              "--plan auto plans this process's devices; for a distributed run take the command "
              "gpipe_plan prints");
  // The plan sets the balance; one given beside it would be dropped without a word.
  GPIPE_CHECK(o.shape.balance.empty() && o.shape.stage_balance.empty(), ConfigError,
              "--plan auto chooses the balance itself, so ",
              o.shape.stage_balance.empty()
                  ? "--balance " + c10::Join(",", o.shape.balance)
                  : "--stage-balance " + c10::Join(",", o.shape.stage_balance),
              " would be ignored: drop it, or drop --plan auto to run that balance");
  auto request = plan_request(o);
  request.max_replicas = 1;
  auto book = cost_book(o, request, "");
  const auto result = plan::search(book, request);
  GPIPE_CHECK(!result.ranked.empty(), ConfigError, nothing_fits(result, request));
  const auto& best = result.ranked.front();
  o.shape = best.shape;
  spdlog::info("--plan auto chose {} (of {} plans; predicted {:.1f} ms a step, {} per device)",
               best.shape.describe(), result.considered, best.step_ms,
               format_bytes(best.max_peak_bytes()));
}

void Trainer::resolve_balance() {
  const auto& asked = options_.shape;
  shape_ = asked;
  const auto kind = asked.schedule;
  const int64_t v = asked.virtual_stages();
  check_virtual_stages(kind, v);
  if (!asked.stage_balance.empty()) {
    const auto& stages = asked.stage_balance;
    const auto S = static_cast<int64_t>(stages.size());
    GPIPE_CHECK(
        S % v == 0 && (asked.K == 0 || asked.K * v == S), ConfigError, "--stage-balance has ", S,
        " entries; it needs K x v = ",
        (asked.K > 0 ? std::to_string(asked.K * v) : "a multiple of v=" + std::to_string(v)));
    shape_.K = S / v;
    shape_.balance = sum_per_device(kind, shape_.K, stages);
    // A plan gives both; given by hand, one of them.
    GPIPE_CHECK(asked.balance.empty() || asked.balance == shape_.balance, ConfigError, "--balance ",
                c10::Join(",", asked.balance), " and --stage-balance ", c10::Join(",", stages),
                " disagree: the stage balance puts ", c10::Join(",", shape_.balance),
                " layers on the devices; give one of them");
    if (v == 1) shape_.stage_balance.clear();
    return;
  }
  if (!asked.balance.empty()) {
    const auto K = static_cast<int64_t>(asked.balance.size());
    GPIPE_CHECK(asked.K == 0 || asked.K == K, ConfigError, "--balance ",
                c10::Join(",", asked.balance), " has ", K, " stages but --partitions is ", asked.K);
    shape_.K = K;
    return;
  }
  shape_.K = asked.K > 0 ? asked.K : 1;
  const auto stages = balance_stages(shape_.K * v);
  shape_.balance = sum_per_device(kind, shape_.K, stages);
  if (v > 1) shape_.stage_balance = stages;
}

std::vector<int64_t> Trainer::balance_stages(int64_t S) {
  const auto& o = options_;
  GPIPE_CHECK(shape_.K <= total_layers_, ConfigError, "--partitions ", shape_.K,
              " is larger than the model's ", total_layers_, " layers");
  const auto by = parse_balance_by(o.balance_by);
  // Profiled costs differ from process to process; every rank must agree on the balance.
  GPIPE_CHECK(!o.distributed || by == BalanceBy::kParams, ConfigError,
              "--distributed needs --balance a,b,.. or --balance-by params (got --balance-by ",
              o.balance_by, ", whose profile would differ between processes)");
  // With v virtual stages per device the exact partitioner cuts K*v stages; each device's
  // balance entry is then the sum of its stages.
  GPIPE_CHECK(S <= total_layers_, ConfigError, "--partitions ", shape_.K, " x ", S / shape_.K,
              " virtual stages is more stages than the model's ", total_layers_, " layers");
  if (S == 1) return {total_layers_};
  if (by == BalanceBy::kParams) {
    // Counted layer by layer: no need to hold the model.
    std::vector<double> costs;
    for (int64_t count : builder_->layer_parameters())
      costs.push_back(static_cast<double>(count));
    return balance_by_cost(costs, S);
  }
  layers_ = builder_->build();
  const auto sample = builder_->sample_batch((o.batch_size + o.shape.M - 1) / o.shape.M, o.seed);
  return auto_balance(layers_, S, by, {sample.input});
}

}  // namespace gpipe::train
