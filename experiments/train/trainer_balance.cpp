// Trainer::choose_plan and Trainer::resolve_balance: how many layers each device (and, with
// virtual stages, each virtual stage) holds, from --plan auto, --stage-balance, --balance or the
// exact partitioner (declared in trainer.h).
#include <spdlog/spdlog.h>

#include "common/cli.h"
#include "gpipe/errors.h"
#include "gpipe/profile.h"
#include "tables/report.h"
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
  GPIPE_CHECK(
      o.balance.empty() && o.stage_balance.empty(), ConfigError,
      "--plan auto chooses the balance itself, so ",
      o.stage_balance.empty() ? "--balance " + o.balance : "--stage-balance " + o.stage_balance,
      " would be ignored: drop it, or drop --plan auto to run that balance");
  auto request = plan_request(o);
  request.max_replicas = 1;
  auto book = cost_book(o, request, "");
  const auto result = plan::search(book, request);
  GPIPE_CHECK(!result.ranked.empty(), ConfigError, nothing_fits(result, request));
  const auto& best = result.ranked.front();
  apply_plan(best, request, o);
  spdlog::info("--plan auto chose {} (of {} plans; predicted {:.1f} ms a step, {} per device)",
               best.shape.describe(), result.considered, best.step_ms,
               tables::format_bytes(best.max_peak_bytes()));
}

void Trainer::resolve_balance() {
  const auto& o = options_;
  const auto kind = parse_schedule_kind(o.schedule);
  const int64_t v = o.virtual_stages > 0 ? o.virtual_stages : default_virtual_stages(kind);
  check_virtual_stages(kind, v);
  if (!o.stage_balance.empty()) {
    GPIPE_CHECK(o.balance.empty(), ConfigError,
                "give --balance (per device) or --stage-balance (per virtual stage), not both");
    const auto stages = cli::parse_ints(o.stage_balance, "--stage-balance");
    const auto S = static_cast<int64_t>(stages.size());
    GPIPE_CHECK(S % v == 0 && (o.partitions == 0 || o.partitions * v == S), ConfigError,
                "--stage-balance has ", S, " entries; it needs K x v = ",
                (o.partitions > 0 ? std::to_string(o.partitions * v)
                                  : "a multiple of v=" + std::to_string(v)));
    balance_ = sum_per_device(kind, S / v, stages);
    if (v > 1) stage_balance_ = stages;
    return;
  }
  if (!o.balance.empty()) {
    balance_ = cli::parse_ints(o.balance, "--balance");
    GPIPE_CHECK(o.partitions == 0 || o.partitions == static_cast<int64_t>(balance_.size()),
                ConfigError, "--balance ", o.balance, " has ", balance_.size(),
                " stages but --partitions is ", o.partitions);
    return;
  }
  const int64_t K = o.partitions > 0 ? o.partitions : 1;
  GPIPE_CHECK(K <= total_layers_, ConfigError, "--partitions ", K, " is larger than the model's ",
              total_layers_, " layers");
  const auto by = parse_balance_by(o.balance_by);
  // Profiled costs differ from process to process; every rank must agree on the balance.
  GPIPE_CHECK(!o.distributed || by == BalanceBy::kParams, ConfigError,
              "--distributed needs --balance a,b,.. or --balance-by params (got --balance-by ",
              o.balance_by, ", whose profile would differ between processes)");
  // With v virtual stages per device the exact partitioner cuts K*v stages; each device's
  // balance entry is then the sum of its stages.
  const int64_t S = K * v;
  GPIPE_CHECK(S <= total_layers_, ConfigError, "--partitions ", K, " x ", v,
              " virtual stages is more stages than the model's ", total_layers_, " layers");
  std::vector<int64_t> stages;
  if (S == 1) {
    stages = {total_layers_};
  } else if (by == BalanceBy::kParams) {
    // Counted layer by layer: no need to hold the model.
    std::vector<double> costs;
    for (int64_t count : builder_->layer_parameters())
      costs.push_back(static_cast<double>(count));
    stages = balance_by_cost(costs, S);
  } else {
    layers_ = builder_->build();
    const auto sample = builder_->sample_batch((o.batch_size + o.chunks - 1) / o.chunks, o.seed);
    stages = auto_balance(layers_, S, by, {sample.input});
  }
  balance_ = sum_per_device(kind, K, stages);
  if (v > 1) stage_balance_ = stages;
}

}  // namespace gpipe::train
