#include "gpipe/partition.h"

#include <cmath>
#include <limits>

#include "gpipe/errors.h"

namespace gpipe {

std::vector<int64_t> balance_by_cost(const std::vector<double>& costs, int64_t parts) {
  const auto n = static_cast<int64_t>(costs.size());
  GPIPE_CHECK(parts >= 1, ConfigError, "cannot partition into ", parts, " stages; K must be >= 1");
  GPIPE_CHECK(parts <= n, ConfigError, "cannot partition ", n, " layers into K=", parts,
              " non-empty stages; use K <= ", n);
  for (int64_t i = 0; i < n; ++i) {
    GPIPE_CHECK(std::isfinite(costs[i]) && costs[i] >= 0, ConfigError, "layer ", i, " has cost ",
                costs[i], "; costs must be finite and >= 0");
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + costs[i];
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][j]: smallest possible largest stage when the first j layers form k stages.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> cut(parts + 1, std::vector<int64_t>(n + 1, -1));
  best[0][0] = 0;
  for (int64_t k = 1; k <= parts; ++k) {
    for (int64_t j = k; j <= n - (parts - k); ++j) {
      // The last of the k stages holds layers [i, j). Iterating i upwards and keeping only
      // strict improvements makes that last stage as large as ties allow.
      for (int64_t i = k - 1; i < j; ++i) {
        const double value = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (value < best[k][j] * (1 - 1e-12) || cut[k][j] < 0) {
          best[k][j] = value;
          cut[k][j] = i;
        }
      }
    }
  }
  std::vector<int64_t> balance(parts);
  int64_t j = n;
  for (int64_t k = parts; k >= 1; --k) {
    const int64_t i = cut[k][j];
    balance[k - 1] = j - i;
    j = i;
  }
  return balance;
}

std::vector<double> stage_costs(const std::vector<double>& costs,
                                const std::vector<int64_t>& balance) {
  std::vector<double> out;
  size_t i = 0;
  for (int64_t count : balance) {
    double sum = 0;
    for (int64_t c = 0; c < count && i < costs.size(); ++c)
      sum += costs[i++];
    out.push_back(sum);
  }
  return out;
}

double max_stage_cost(const std::vector<double>& costs, const std::vector<int64_t>& balance) {
  double worst = 0;
  for (double c : stage_costs(costs, balance))
    worst = std::max(worst, c);
  return worst;
}

BalanceBy parse_balance_by(const std::string& name) {
  if (name == "params") return BalanceBy::kParams;
  if (name == "time") return BalanceBy::kTime;
  if (name == "memory") return BalanceBy::kMemory;
  throw ConfigError(c10::str("unknown balance-by '", name, "': expected params, time or memory"));
}

std::string to_string(BalanceBy by) {
  switch (by) {
    case BalanceBy::kParams:
      return "params";
    case BalanceBy::kTime:
      return "time";
    case BalanceBy::kMemory:
      return "memory";
  }
  return "?";
}

}  // namespace gpipe
