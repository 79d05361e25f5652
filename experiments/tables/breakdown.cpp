#include "tables/breakdown.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "common/report.h"
#include "gpipe/errors.h"
#include "gpipe/schedule.h"

namespace gpipe::tables {
namespace {

const std::vector<std::string> kParts{"forward",   "backward",      "recompute", "bubble",
                                      "imbalance", "communication", "optimizer"};

std::vector<double> parts(const StepBreakdown& b) {
  std::vector<double> out;
  for (const double* slot : costs::share_slots(b))
    out.push_back(*slot);
  return out;
}

}  // namespace

StepBreakdown breakdown_of(const PipelineShape& shape, const costs::StepProjection& projection) {
  GPIPE_CHECK(projection.shares.has_value(), ConfigError, "the projection of ", shape.describe(),
              " was made without its breakdown (ProjectionOptions::breakdown)");
  StepBreakdown out;
  static_cast<costs::StepShares&>(out) = *projection.shares;
  out.K = shape.K;
  out.M = shape.M;
  out.source = "simulated";
  out.step_ms = projection.step_ms;
  return out;
}

StepBreakdown measured_breakdown(const std::vector<TimelineEvent>& events, double step_ms,
                                 const StepBreakdown& simulated) {
  const int64_t K = simulated.K;
  StepBreakdown out = simulated;
  out.source = "measured";
  out.step_ms = step_ms;
  out.forward = out.backward = out.recompute = 0;
  std::vector<bool> seen(static_cast<size_t>(K), false);
  for (const auto& e : events) {
    GPIPE_CHECK(e.device >= 0 && e.device < K, ConfigError, "a timeline event of device ", e.device,
                " in a step of ", K, " devices");
    seen[static_cast<size_t>(e.device)] = true;
    if (!e.communication) costs::work_slot(out, e.name) += e.duration_us / 1e3;
  }
  GPIPE_CHECK(std::all_of(seen.begin(), seen.end(), [](bool s) { return s; }), ConfigError,
              "the timeline does not cover all ", K, " devices of the step");
  const double k = static_cast<double>(K);
  const double schedule_ms = span_us(events) / 1e3;
  const double device_time = k * step_ms;
  const double work = out.forward + out.backward + out.recompute;
  // After the schedule every device waits for the update (and the step's fan-out).
  out.optimizer = k * std::max(0.0, step_ms - schedule_ms);
  const double idle = std::max(0.0, k * std::min(schedule_ms, step_ms) - work);
  const double simulated_idle = simulated.bubble + simulated.imbalance + simulated.communication;
  for (auto [slot, share] :
       {std::pair{&out.bubble, simulated.bubble}, std::pair{&out.imbalance, simulated.imbalance},
        std::pair{&out.communication, simulated.communication}}) {
    *slot = simulated_idle > 0 ? idle * share / simulated_idle : 0.0;
  }
  if (simulated_idle <= 0) out.bubble = idle;
  for (double* f : costs::share_slots(out))
    *f /= device_time;
  return out;
}

nlohmann::json to_json(const StepBreakdown& b) {
  nlohmann::json out{{"model", b.model},
                     {"K", b.K},
                     {"M", b.M},
                     {"source", b.source},
                     {"step_ms", b.step_ms},
                     {"largest_overhead", b.largest_overhead()},
                     {"speedup", b.speedup ? nlohmann::json(*b.speedup) : nlohmann::json()}};
  const auto values = parts(b);
  for (size_t i = 0; i < kParts.size(); ++i)
    out[kParts[i]] = values[i];
  return out;
}

nlohmann::json to_json(const BreakdownReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : report.rows)
    rows.push_back(to_json(r));
  return {{"preset", report.preset},
          {"command", report.command},
          {"link", report.link},
          {"checkpoint", report.checkpoint},
          {"machine", report.machine},
          {"seconds", report.seconds},
          {"rows", rows}};
}

namespace {

// The bubble against M for every (model, K, source), and the smallest M under 5%.
std::string bubble_against_m(const std::vector<StepBreakdown>& rows) {
  std::map<std::tuple<std::string, int64_t, std::string>, std::map<int64_t, const StepBreakdown*>>
      series;
  std::set<int64_t> ms;
  for (const auto& r : rows) {
    series[{r.model, r.K, r.source}][r.M] = &r;
    ms.insert(r.M);
  }
  std::ostringstream out;
  out << "## The bubble against M\n\n"
         "Bubble (and speedup over naive-2) for each M; the paper (section 2.3) finds the bubble "
         "negligible once M >= 4K.\n\n";
  std::vector<std::string> header{"model", "K", "source"};
  for (int64_t M : ms)
    header.push_back(c10::str("M=", M));
  header.push_back("smallest M with bubble < 5%");
  header.push_back("bubble at M=4K");
  TextTable table(header);
  for (const auto& [key, by_m] : series) {
    const auto& [model, K, source] = key;
    std::vector<std::string> row{model, std::to_string(K), source};
    std::optional<int64_t> under;
    for (int64_t M : ms) {
      const auto it = by_m.find(M);
      if (it == by_m.end()) {
        row.push_back("-");
        continue;
      }
      const auto& b = *it->second;
      row.push_back(fixed(b.bubble, 3) + (b.speedup ? " (" + fixed(*b.speedup, 2) + "x)" : ""));
      if (!under && b.bubble < 0.05) under = M;
    }
    row.push_back(under ? std::to_string(*under) : c10::str("none up to ", *ms.rbegin()));
    const auto at_4k = by_m.find(4 * K);
    row.push_back(at_4k == by_m.end() ? "-" : fixed(at_4k->second->bubble, 3));
    table.add_row(row);
  }
  out << table.markdown();
  return out.str();
}

}  // namespace

std::string to_csv(const BreakdownReport& report) {
  std::vector<std::string> header{"model", "K", "M", "source", "step_ms"};
  header.insert(header.end(), kParts.begin(), kParts.end());
  TextTable table(header);
  for (const auto& r : report.rows) {
    std::vector<std::string> row{r.model, std::to_string(r.K), std::to_string(r.M), r.source,
                                 fixed(r.step_ms, 3)};
    for (double p : parts(r))
      row.push_back(fixed(p, 4));
    table.add_row(row);
  }
  return table.csv();
}

std::string to_markdown(const BreakdownReport& report) {
  std::ostringstream out;
  out << "# Where a GPipe step's time goes\n\n"
      << "Made by `" << report.command << "` (preset `" << report.preset
      << "`) with the scaling tables; the committed results/step_breakdown.* come from "
         "results/scaling_table.sh. Each row splits K devices x one step of the GPipe schedule "
         "(re-materialisation `"
      << report.checkpoint
      << "`) into the work the devices did (forward; backward with its weight gradients; "
         "recompute; the optimizer update) and the time they waited: communication (what the "
         "link adds to the step), bubble (the idle time of the same schedule with every stage at "
         "the stages' mean cost) and imbalance (the rest). **Simulated** rows come from the "
         "per-layer costs measured on this machine and the `"
      << report.link
      << "` link; **measured** rows (K devices present: CPU virtual devices, no link) take the "
         "work from the executor's timeline of a real step (the optimizer column also holds the "
         "step's fan-out and gradient zeroing) and split the waiting as the simulation of the "
         "same shape does. Fractions sum to 1.\n\n";
  std::vector<std::string> header{"model", "K", "M", "source", "step ms"};
  header.insert(header.end(), kParts.begin(), kParts.end());
  header.push_back("largest overhead");
  std::vector<bool> numeric(header.size(), true);
  numeric[0] = numeric[3] = numeric.back() = false;
  TextTable table(header, numeric);
  std::map<std::string, int> largest;
  for (const auto& r : report.rows) {
    std::vector<std::string> row{r.model, std::to_string(r.K), std::to_string(r.M), r.source,
                                 fixed(r.step_ms, 1)};
    for (double p : parts(r))
      row.push_back(fixed(p, 3));
    row.push_back(r.largest_overhead());
    table.add_row(row);
    ++largest[r.largest_overhead()];
  }
  out << table.markdown() << "\n";
  out << "Largest overhead (of recompute, bubble, imbalance, communication, optimizer) by row:";
  std::string sep = " ";
  for (const auto& [name, count] : largest) {
    out << sep << name << " in " << count << " of " << report.rows.size();
    sep = ", ";
  }
  out << ". ";
  const bool recompute_leads =
      !largest.empty() && std::max_element(largest.begin(), largest.end(), [](auto& a, auto& b) {
                            return a.second < b.second;
                          })->first == "recompute";
  out << (recompute_leads ? "Re-materialisation is the largest overhead in most rows here."
                          : "Re-materialisation is not the largest overhead in most rows here.")
      << "\n\n"
      << bubble_against_m(report.rows);
  return out.str();
}

}  // namespace gpipe::tables
