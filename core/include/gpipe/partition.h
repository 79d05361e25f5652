// The auto-partitioner: K contiguous stages that minimise the largest stage's cost.
//
// Why this file exists: a pipeline runs at the pace of its slowest stage, so `balance` should
// make the largest stage as small as possible. Given a cost per layer (parameters, profiled
// forward+backward time, or measured memory), balance_by_cost solves the contiguous min-max
// partition exactly by dynamic programming over prefix sums (O(K n^2)), not by a heuristic. Among
// equally good partitions it deterministically gives later stages as many layers as it can.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gpipe {

// Layers per stage. Throws ConfigError if parts < 1, parts > costs.size(), or a cost is
// negative or not finite.
std::vector<int64_t> balance_by_cost(const std::vector<double>& costs, int64_t parts);

// Cost of each stage under `balance`, and the largest.
std::vector<double> stage_costs(const std::vector<double>& costs,
                                const std::vector<int64_t>& balance);
double max_stage_cost(const std::vector<double>& costs, const std::vector<int64_t>& balance);

// "params" | "time" | "memory".
enum class BalanceBy { kParams, kTime, kMemory };
BalanceBy parse_balance_by(const std::string& name);
std::string to_string(BalanceBy by);

}  // namespace gpipe
