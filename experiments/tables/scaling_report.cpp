// The scaling tables as JSON, CSV and Markdown (declared in scaling.h).
#include <algorithm>
#include <sstream>

#include "common/report.h"
#include "tables/paper_figures.h"
#include "tables/scaling.h"

namespace gpipe::tables {

namespace {

std::string balance_text(const std::vector<int64_t>& balance) {
  return c10::Join("+", balance);
}

nlohmann::json link_json(const TableLink& link) {
  nlohmann::json out{{"name", link.name},
                     {"latency_s", link.link.latency},
                     {"bandwidth_bytes_per_s", link.link.bandwidth}};
  if (link.scaled()) {
    out.update({{"factor", link.factor},
                {"machine_flops", link.machine_flops},
                {"accelerator", link.accelerator},
                {"accelerator_flops", link.accelerator_flops}});
  }
  return out;
}

// How the report names a table's link: its name, and for a scaled link the compute ratio and
// the speed it leaves (the GEMM rate is the profile's, one thread on the CPU presets).
std::string link_words(const TableLink& link) {
  if (!link.scaled()) return "`" + link.name + "` link";
  return c10::str(
      "`", link.name, "` link: this machine's ", fixed(link.machine_flops / 1e9, 1),
      " GFLOP/s (fp32 GEMM, one thread) is ", fixed(link.factor * 1e3, 3), "/1000 of a ",
      link.accelerator,
      ", so the link runs at that share of its speed: ", fixed(link.link.bandwidth / 1e6, 1),
      " MB/s and ", fixed(link.link.latency * 1e3, 2), " ms a message");
}

// Each table's definition: its models (with their sizes), K and M lists, baseline and link.
nlohmann::json tables_json(const ScalingResult& result) {
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& t : result.options.tables) {
    nlohmann::json models = nlohmann::json::array();
    for (const auto& m : t.models) {
      const auto builder = models::make_model(m.config);
      models.push_back({{"model", m.config.name()},
                        {"label", m.label},
                        {"layers", models::int_knob(m.config, "layers")},
                        {"num_layers", builder->num_layers()},
                        {"parameters", builder->count_parameters()},
                        {"batch", m.batch}});
    }
    tables.push_back({{"id", t.id},
                      {"title", t.title},
                      {"paper_hardware", t.paper_hardware},
                      {"link", t.link},
                      {"link_model", result.links.count(t.id) ? link_json(result.links.at(t.id))
                                                              : nlohmann::json()},
                      {"baseline", {{"K", t.base_K}, {"M", t.base_M}}},
                      {"partitions", t.partitions},
                      {"chunks", t.chunks},
                      {"models", models}});
  }
  return tables;
}

// One row of `rows`, its optional figures null where missing.
nlohmann::json row_json(const ScalingRow& r) {
  return {{"table", r.table},
          {"model", r.model},
          {"label", r.label},
          {"K", r.K},
          {"M", r.M},
          {"batch", r.batch},
          {"source", r.source},
          {"link", r.link},
          {"step_ms", r.step_ms},
          {"samples_per_s", r.samples_per_s},
          {"speedup", r.speedup ? nlohmann::json(*r.speedup) : nlohmann::json()},
          {"paper_speedup", r.paper_speedup ? nlohmann::json(*r.paper_speedup) : nlohmann::json()},
          {"bubble_fraction",
           r.bubble_fraction ? nlohmann::json(*r.bubble_fraction) : nlohmann::json()},
          {"comm_fraction", r.comm_fraction},
          {"balance", r.balance},
          {"other_cores", r.other_cores},
          {"calibration", r.calibration}};
}

// One projection check, with both its errors and every round's.
nlohmann::json check_json(const ProjectionCheck& c) {
  return {{"model", c.model},
          {"label", c.label},
          {"K", c.K},
          {"M", c.M},
          {"link", c.link},
          {"measured_samples_per_s", c.measured_samples_per_s},
          {"projected_samples_per_s", c.projected_samples_per_s},
          {"error", c.error()},
          {"error_of_medians", c.error_of_medians()},
          {"round_errors", c.round_errors},
          {"round_calibrations", c.round_calibrations},
          {"other_cores_measured", c.other_cores_measured},
          {"other_cores_profiled", c.other_cores_profiled}};
}

// The report's opening: how it was made and how to read its rows and columns.
void write_intro(std::ostream& out, const ScalingResult& result) {
  const auto& o = result.options;
  out << "# GPipe Tables 2 and 3 with this engine: throughput against K and M\n\n";
  out << "Preset `" << o.preset << "`, made by `" << result.command << "` in "
      << fixed(result.seconds / 60, 1) << " min on a machine with "
      << result.machine.value("hardware_threads", 0) << " hardware threads (load average "
      << format_load(result.machine["load_average_before"]) << " before, "
      << format_load(result.machine["load_average_after"]) << " after). Re-materialisation `"
      << to_string(o.checkpoint) << "`; precision `" << to_string(o.precision) << "`; optimizer `"
      << o.optimizer
      << "` (auto: RMSProp for AmoebaNet, Adam for the Transformer). The committed "
         "results/scaling_table.* come from results/scaling_table.sh.\n\n";
  out << "Speedup is throughput divided by the naive-2 baseline of the same source: measured rows "
         "by the measured baseline, projected rows by the projected one. A row is **measured** "
         "when K "
      << o.device_type << " devices exist here (K <= " << result.max_measured_k
      << ": one virtual device per core, one intra-op thread each) and **projected** otherwise: "
         "per-layer forward, backward and update times measured on one device at the real "
         "micro-batch N/M (each forward as it runs: checkpointed without autograd, recomputed "
         "without gathering BatchNorm statistics), split by the "
         "exact min-max partitioner, run through the simulator's "
         "GPipe schedule with re-materialisation and the table's link model (compute costs are "
         "this machine's; only the copies follow the link). "
      << (o.calibrate ? "Where the model fits this machine, the compute costs are calibrated "
                        "first: scaled by a real one-device step (K=1, the model's N, its "
                        "largest M unless --calibration-chunks names one, the table's "
                        "re-materialisation) over its projection, which prices what isolated "
                        "layer timings miss. Each model is calibrated once, in rounds "
                        "interleaved with the other models', and every M takes the median "
                        "(column calibration; the rounds are under Calibrations below); the "
                        "check of a K=2 row below then tests what the simulator adds for K "
                        "stages, links and bubbles and, at every M but the calibrated one, "
                        "whether one calibration serves all micro-batch sizes. "
                      : "Uncalibrated (--no-calibrate): the per-layer costs as profiled. ")
      << "The paper's columns are GPipe's own "
         "figures (Table 2: "
      << paper_table2_hardware() << "; Table 3: " << paper_table3_hardware()
      << "), not ours. Other load: the cores that other processes kept busy while a row was "
         "measured or its costs profiled (from /proc/stat); a timing is this machine's own only "
         "when it is near 0. Communication: the share of the step the link adds, 1 - (the "
         "simulated step without the link) / (with it), for the row's K, M and partition (a "
         "measured row shows its projected twin's).\n\n";
}

// The paper's layout for one model of table `t`: M rows, K columns, ours (projected) beside the
// paper's.
void write_grid(std::ostream& out, const ScalingResult& result, const ScalingTableSpec& t,
                const ScalingModel& m) {
  std::vector<std::string> header = {"M"};
  std::vector<bool> numeric = {true};
  for (int64_t K : t.partitions) {
    header.push_back(c10::str("K=", K, " ours, projected"));
    header.push_back(c10::str("K=", K, " paper"));
    numeric.push_back(true);
    numeric.push_back(true);
  }
  TextTable grid(header, numeric);
  for (int64_t M : t.chunks) {
    std::vector<std::string> cells = {std::to_string(M)};
    for (int64_t K : t.partitions) {
      std::optional<double> ours, measured;
      for (const auto& r : result.rows) {
        if (r.table != t.id || r.model != m.config.name() || r.K != K || r.M != M) continue;
        if (r.source == "projected") ours = r.speedup;
        if (r.source == "measured") measured = r.speedup;
      }
      const auto paper = paper_speedup(t.id, m.config.name(), K, M);
      std::string cell = ours ? fixed(*ours, 2) + " *p*" : "-";
      if (measured) cell += " (measured " + fixed(*measured, 2) + ")";
      cells.push_back(cell);
      cells.push_back(fixed_or_dash(paper, 2));
    }
    grid.add_row(cells);
  }
  out << grid.markdown() << "\n";
}

// Every row of one model of table `t`, both sources, with all columns.
void write_rows(std::ostream& out, const ScalingResult& result, const ScalingTableSpec& t,
                const ScalingModel& m) {
  TextTable rows({"K", "M", "source", "link", "step ms", "samples/s", "speedup", "paper speedup",
                  "bubble", "communication", "balance", "other load", "calibration"},
                 {true, true, false, false, true, true, true, true, true, true, false, true, true});
  for (const auto& r : result.rows) {
    if (r.table != t.id || r.model != m.config.name()) continue;
    rows.add_row({std::to_string(r.K), std::to_string(r.M), r.source, r.link, fixed(r.step_ms, 1),
                  fixed(r.samples_per_s, 1), fixed_or_dash(r.speedup, 2),
                  fixed_or_dash(r.paper_speedup, 2),
                  r.bubble_fraction ? fixed(*r.bubble_fraction, 3) : "-", fixed(r.comm_fraction, 3),
                  balance_text(r.balance), fixed(r.other_cores, 2), fixed(r.calibration, 3)});
  }
  out << rows.markdown() << "\n";
}

// One table's section: its normalisation and link, then each model's grid and rows.
void write_table(std::ostream& out, const ScalingResult& result, const ScalingTableSpec& t) {
  out << "## " << t.title << "\n\n";
  out << "Normalised to K=" << t.base_K << ", M=" << t.base_M << "; projected rows use the "
      << (result.links.count(t.id) ? link_words(result.links.at(t.id)) : "`" + t.link + "` link")
      << ". Paper: " << t.paper_hardware
      << ". In the grid every figure of ours is projected (marked *p*); a measured speedup of "
         "the same cell follows it.\n\n";
  for (const auto& m : t.models) {
    out << "### " << m.label << ", mini-batch N=" << m.batch << "\n\n";
    write_grid(out, result, t, m);
    write_rows(out, result, t, m);
  }
}

// How the check compares: one paragraph, longer with several rounds.
void write_check_explanation(std::ostream& out, const ScalingOptions& o) {
  const int rounds = o.check_rounds;
  out << "The same K, M and partition, projected from the per-layer costs on the link the "
         "measured run had (`none`: CPU virtual devices share memory; a scaled link: the "
         "in-process transport delayed every message as the link would), against the "
         "measured step.";
  if (rounds > 1) {
    out << " Each check ran " << rounds << " rounds, each "
        << (o.check_reprofile ? "a fresh profile" : "the row's profile")
        << (o.calibrate ? " calibrated at the row's M (a one-device step; on CPU virtual devices, "
                          "whose K devices share the cores' caches and memory, also K of them at "
                          "once, the projection taking the second for the share of the step all K "
                          "are busy: 1 - 2 x bubble at K=2)"
                        : "")
        << " and then the measured run; the samples/s are the "
           "medians over the rounds and the error is the median of the rounds' own errors "
           "(each round's "
        << (o.calibrate ? "calibration" : "profile")
        << " and measurement share that minute's machine, which drifts "
           "by tens of percent between rounds). The last two columns give the error of the two "
           "medians (the pairing lost) and every round's own error.";
  }
  out << "\n\n";
}

nlohmann::json calibrations_json(const ScalingResult& result) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : result.calibrations) {
    out.push_back({{"model", c.model},
                   {"label", c.label},
                   {"M", c.M},
                   {"name", c.name},
                   {"rounds", c.rounds},
                   {"median", c.median}});
  }
  return out;
}

// Each model's calibration: the step it measured, every round, the median.
void write_calibrations(std::ostream& out, const ScalingResult& result) {
  if (result.calibrations.empty()) return;
  out << "## Calibrations\n\nA one-device step over its projection, per model "
         "(micro-batch x threads x K x M x R, then the re-materialisation), in interleaved "
         "rounds; every projected row of the model is scaled by the median.\n\n";
  TextTable table({"model", "M", "step", "rounds", "median", "spread"},
                  {false, true, false, false, true, true});
  for (const auto& c : result.calibrations) {
    std::vector<std::string> rounds;
    for (const double r : c.rounds)
      rounds.push_back(fixed(r, 3));
    const auto [lo, hi] = std::minmax_element(c.rounds.begin(), c.rounds.end());
    table.add_row({c.label, std::to_string(c.M), c.name, c10::Join(", ", rounds),
                   fixed(c.median, 3), fixed(100 * (*hi / *lo - 1), 1) + "%"});
  }
  out << table.markdown() << "\n";
}

// The projection check's table: one row per measured run.
void write_check_table(std::ostream& out, const ScalingResult& result) {
  const int rounds = result.options.check_rounds;
  std::vector<std::string> header{"model",
                                  "K",
                                  "M",
                                  "link",
                                  "measured samples/s",
                                  "projected samples/s",
                                  "projected / measured - 1",
                                  "other load measured / profiled"};
  std::vector<bool> right{false, true, true, false, true, true, true, true};
  if (rounds > 1) {
    header.insert(header.end(), {"of the medians", "each round"});
    right.insert(right.end(), {true, true});
  }
  TextTable checks(header, right);
  for (const auto& c : result.checks) {
    std::vector<std::string> cells{
        c.label,
        std::to_string(c.K),
        std::to_string(c.M),
        c.link,
        fixed(c.measured_samples_per_s, 1),
        fixed(c.projected_samples_per_s, 1),
        fixed(100 * c.error(), 1) + "%",
        fixed(c.other_cores_measured, 2) + " / " + fixed(c.other_cores_profiled, 2)};
    if (rounds > 1) {
      std::vector<std::string> each;
      for (const double e : c.round_errors)
        each.push_back(fixed(100 * e, 1) + "%");
      cells.push_back(fixed(100 * c.error_of_medians(), 1) + "%");
      cells.push_back(c10::Join(", ", each));
    }
    checks.add_row(cells);
  }
  out << checks.markdown();
}

}  // namespace

nlohmann::json to_json(const ScalingResult& result) {
  const auto& o = result.options;
  const nlohmann::json tables = tables_json(result);
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : result.rows)
    rows.push_back(row_json(r));
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : result.checks)
    checks.push_back(check_json(c));
  return {{"preset", o.preset},
          {"command", result.command},
          {"checkpoint", to_string(o.checkpoint)},
          {"precision", to_string(o.precision)},
          {"optimizer", o.optimizer},
          {"device_type", o.device_type},
          {"max_measured_k", result.max_measured_k},
          {"warmup_steps", o.warmup_steps},
          {"timed_steps", o.timed_steps},
          {"profile",
           {{"warmup", o.profile.warmup()},
            {"iterations", o.profile.iterations()},
            {"threads", o.profile.threads()}}},
          {"check_rounds", o.check_rounds},
          {"check_reprofile", o.check_reprofile},
          {"calibrate", o.calibrate},
          {"calibration_steps", o.calibration_steps},
          {"calibration_rounds", o.calibration_rounds},
          {"calibration_chunks", o.calibration_chunks},
          {"calibrations", calibrations_json(result)},
          {"machine", result.machine},
          {"seconds", result.seconds},
          {"tables", tables},
          {"rows", rows},
          {"checks", checks}};
}

std::string to_csv(const ScalingResult& result) {
  TextTable table({"table", "model", "label", "K", "M", "batch", "source", "link", "step_ms",
                   "samples_per_s", "speedup", "paper_speedup", "bubble_fraction", "comm_fraction",
                   "balance", "other_cores", "calibration"});
  for (const auto& r : result.rows) {
    table.add_row({r.table, r.model, r.label, std::to_string(r.K), std::to_string(r.M),
                   std::to_string(r.batch), r.source, r.link, fixed(r.step_ms, 3),
                   fixed(r.samples_per_s, 3), r.speedup ? fixed(*r.speedup, 4) : "",
                   r.paper_speedup ? fixed(*r.paper_speedup, 2) : "",
                   r.bubble_fraction ? fixed(*r.bubble_fraction, 4) : "", fixed(r.comm_fraction, 4),
                   balance_text(r.balance), fixed(r.other_cores, 3), fixed(r.calibration, 4)});
  }
  return table.csv();
}

std::string to_markdown(const ScalingResult& result) {
  std::ostringstream out;
  write_intro(out, result);
  for (const auto& t : result.options.tables)
    write_table(out, result, t);
  write_calibrations(out, result);
  out << "## Projection check: measured against projected on this machine\n\n";
  if (result.checks.empty()) {
    out << "No row was measured (no K <= " << result.max_measured_k << " fits this machine).\n";
  } else {
    write_check_explanation(out, result.options);
    write_check_table(out, result);
  }
  return out.str();
}

}  // namespace gpipe::tables
