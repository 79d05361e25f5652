// Table 1 as JSON, CSV and Markdown (declared in max_size.h).
#include <sstream>

#include "common/report.h"
#include "tables/max_size.h"
#include "tables/paper_figures.h"
#include "tables/workload.h"

namespace gpipe::tables {
namespace {

// D of an AmoebaNet row; null for Transformer-L.
nlohmann::json filters_json(const MaxSizeRow& r) {
  return is_amoebanet(r.model) ? nlohmann::json(r.chosen.amoebanet().filters()) : nlohmann::json();
}

// One row: the size found, its measured memory, the search that led to it, the paper's entry.
nlohmann::json row_json(const MaxSizeRow& r) {
  nlohmann::json search = nlohmann::json::array();
  for (const auto& s : r.search) {
    search.push_back({{"size", s.size},
                      {"parameters", s.parameters},
                      {"predicted_bytes", s.predicted_bytes},
                      {"scale", s.scale},
                      {"measured_bytes", s.measured_bytes},
                      {"fits", s.fits}});
  }
  nlohmann::json paper = nullptr;
  if (r.paper) {
    paper = {{"size", r.paper->size},
             {"parameters", r.paper->parameters},
             {"parameter_memory_gb", r.paper->parameter_gb},
             {"peak_activation_memory_gb", r.paper->activation_gb},
             {"hardware", paper_table1_hardware(r.model)}};
  }
  return {{"model", r.model},
          {"config", r.config},
          {"precision", to_string(r.precision)},
          {"partitions", r.partitions},
          {"chunks", r.chunks},
          {"checkpoint", r.checkpoint},
          {"budget_bytes", r.budget_bytes},
          {"size", r.size},
          {"layers", models::int_knob(r.chosen, "layers")},
          {"filters", filters_json(r)},
          {"L", models::int_knob(r.chosen, "layers")},
          {"D", filters_json(r)},
          {"parameters", r.parameters},
          {"parameter_bytes", r.parameter_bytes},
          {"bytes_per_parameter", r.bytes_per_parameter},
          {"parameter_memory_bytes", r.parameters * r.bytes_per_parameter},
          {"state_bytes", r.state_bytes()},
          {"peak_activation_bytes", r.peak_activation_bytes()},
          {"peak_bytes_per_device", r.peak_bytes_per_device},
          {"state_bytes_per_device", r.state_bytes_per_device},
          {"peak_activation_bytes_per_device", r.peak_activation_bytes_per_device},
          {"predicted_bytes_per_device", r.predicted_bytes_per_device},
          {"calibration_scale", r.scale},
          {"balance", r.balance},
          {"search", search},
          {"paper", paper}};
}

// One searched model: its family's knobs and its budget.
nlohmann::json model_json(const MaxSizeModel& m, const MaxSizeOptions& o) {
  nlohmann::json knobs = {{"model", m.base.name()},
                          {"batch", m.batch},
                          {"layers", m.layers},
                          {"budget_bytes", o.budget_for(m)}};
  if (is_amoebanet(m.base.name())) {
    knobs.update({{"filters", m.filters},
                  {"fixed_layers", m.fixed_layers},
                  {"grow_depth_from", m.grow_depth_from},
                  {"image_size", m.base.amoebanet().image_size()},
                  {"channels", m.base.amoebanet().channels()},
                  {"classes", m.base.amoebanet().classes()}});
  } else {
    const auto& t = m.base.transformer();
    knobs.update({{"d_model", t.d_model()},
                  {"ffn", t.ffn()},
                  {"heads", t.heads()},
                  {"vocab", t.vocab()},
                  {"seq_len", t.seq_len()}});
  }
  return knobs;
}

}  // namespace

nlohmann::json to_json(const MaxSizeResult& result) {
  const auto& o = result.options;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : result.rows)
    rows.push_back(row_json(r));
  nlohmann::json models = nlohmann::json::array();
  for (const auto& m : o.models)
    models.push_back(model_json(m, o));
  // By model (fp32, the paper's precision), and by model and precision.
  nlohmann::json ratios = nlohmann::json::object();
  nlohmann::json precision_ratios = nlohmann::json::object();
  std::vector<std::string> precisions;
  for (const auto p : o.precisions) {
    precisions.push_back(to_string(p));
    for (const auto& m : o.models) {
      const auto p1 = parameter_ratio(result, m.base.name(), "pipeline-1", "naive-1", p);
      const auto p8 = parameter_ratio(result, m.base.name(), "pipeline-8", "pipeline-1", p);
      const nlohmann::json entry = {
          {"pipeline-1 / naive-1", p1 ? nlohmann::json(*p1) : nlohmann::json()},
          {"pipeline-8 / pipeline-1", p8 ? nlohmann::json(*p8) : nlohmann::json()}};
      precision_ratios[to_string(p)][m.base.name()] = entry;
      if (p == Precision::kFp32) ratios[m.base.name()] = entry;
    }
  }
  return {{"preset", o.preset},
          {"command", result.command},
          {"budget_bytes", o.budget_bytes},
          {"chunks", o.chunks},
          {"checkpoint", to_string(o.checkpoint)},
          {"optimizer", o.optimizer},
          {"max_measurements", o.max_measurements},
          {"configs", o.configs},
          {"precisions", precisions},
          {"models", models},
          {"machine", result.machine},
          {"seconds", result.seconds},
          {"parameter_ratios", ratios},
          {"parameter_ratios_by_precision", precision_ratios},
          {"rows", rows}};
}

namespace {

void ratio_lines(std::ostringstream& out, const MaxSizeResult& result, const MaxSizeModel& m,
                 Precision precision);

// A model's section: its knobs and budget, the table of its configurations beside the paper's,
// and the parameter ratios.
void model_section(std::ostringstream& out, const MaxSizeResult& result, const MaxSizeModel& m) {
  const auto& o = result.options;
  const bool amoeba = is_amoebanet(m.base.name());
  out << "## " << (amoeba ? "AmoebaNet-D (L, D)" : "Transformer-L") << "\n\n";
  if (amoeba) {
    const auto& a = m.base.amoebanet();
    out << a.image_size() << "x" << a.image_size() << "x" << a.channels() << " images, "
        << a.classes() << " classes, mini-batch " << m.batch;
    if (m.fixed_layers > 0) {
      out << ", L=" << m.fixed_layers << " fixed below pipeline-" << m.grow_depth_from;
    }
  } else {
    const auto& t = m.base.transformer();
    out << "d_model " << t.d_model() << ", ffn " << t.ffn() << ", " << t.heads()
        << " heads, vocabulary " << t.vocab() << ", sequence " << t.seq_len() << ", mini-batch "
        << m.batch;
  }
  out << "; budget **" << format_bytes(static_cast<double>(o.budget_for(m)))
      << " per device**.\n\n";
  const int64_t per_parameter = bytes_per_parameter(resolve_optimizer(o.optimizer, m.base.name()));
  TextTable table(
      {"config", "precision", amoeba ? "(L, D)" : "L", "parameters",
       c10::str("parameter memory (", per_parameter, " B a parameter)"),
       "parameters + gradients + optimizer state", "peak activation memory", "peak per device",
       "balance", "paper size", "paper parameters", "paper parameter memory",
       "paper peak activation"},
      {false, false, false, true, true, true, true, false, false, false, true, true, true});
  for (const auto& r : result.rows) {
    if (r.model != m.base.name()) continue;
    std::vector<std::string> peaks;
    for (int64_t b : r.peak_bytes_per_device)
      peaks.push_back(format_bytes(static_cast<double>(b)));
    table.add_row({r.config, to_string(r.precision), r.size,
                   format_count(static_cast<double>(r.parameters)),
                   format_bytes(static_cast<double>(r.parameters * r.bytes_per_parameter)),
                   format_bytes(static_cast<double>(r.state_bytes())),
                   format_bytes(static_cast<double>(r.peak_activation_bytes())),
                   c10::Join(", ", peaks), c10::Join("+", r.balance), r.paper ? r.paper->size : "-",
                   r.paper ? format_count(r.paper->parameters) : "-",
                   r.paper ? fixed(r.paper->parameter_gb, 2) + " GB" : "-",
                   r.paper ? fixed(r.paper->activation_gb, 2) + " GB" : "-"});
  }
  out << table.markdown() << "\n";
  for (const auto p : o.precisions)
    ratio_lines(out, result, m, p);
  out << "\n";
}

// The parameter ratios of model `m`'s rows in `precision`, beside the paper's.
void ratio_lines(std::ostringstream& out, const MaxSizeResult& result, const MaxSizeModel& m,
                 Precision precision) {
  const auto p1 = parameter_ratio(result, m.base.name(), "pipeline-1", "naive-1", precision);
  const auto p8 = parameter_ratio(result, m.base.name(), "pipeline-8", "pipeline-1", precision);
  const std::string in = result.options.precisions.size() > 1 ? " in " + to_string(precision) : "";
  const auto paper_p1 = paper_table1_entry(m.base.name(), "pipeline-1");
  const auto paper_n1 = paper_table1_entry(m.base.name(), "naive-1");
  const auto paper_p8 = paper_table1_entry(m.base.name(), "pipeline-8");
  if (p1) {
    out << "- pipeline-1 / naive-1 parameters" << in << ": **" << fixed(*p1, 2) << "x**";
    if (paper_p1 && paper_n1) {
      out << " (paper: " << fixed(paper_p1->parameters / paper_n1->parameters, 1) << "x)";
    }
    out << "\n";
  }
  if (p8) {
    out << "- pipeline-8 / pipeline-1 parameters" << in << ": **" << fixed(*p8, 2) << "x**";
    if (paper_p8 && paper_p1) {
      out << " (paper: " << fixed(paper_p8->parameters / paper_p1->parameters, 1) << "x)";
    }
    out << "\n";
  }
}

}  // namespace

std::string to_csv(const MaxSizeResult& result) {
  TextTable table({"model", "config", "precision", "size", "layers", "filters", "parameters",
                   "parameter_bytes", "bytes_per_parameter", "state_bytes", "peak_activation_bytes",
                   "peak_bytes_per_device", "balance", "budget_bytes", "paper_size",
                   "paper_parameters"});
  for (const auto& r : result.rows) {
    std::vector<std::string> peaks;
    for (int64_t b : r.peak_bytes_per_device)
      peaks.push_back(std::to_string(b));
    table.add_row({r.model, r.config, to_string(r.precision), r.size,
                   std::to_string(models::int_knob(r.chosen, "layers")),
                   is_amoebanet(r.model) ? std::to_string(r.chosen.amoebanet().filters()) : "",
                   std::to_string(r.parameters), std::to_string(r.parameter_bytes),
                   std::to_string(r.bytes_per_parameter), std::to_string(r.state_bytes()),
                   std::to_string(r.peak_activation_bytes()), c10::Join(";", peaks),
                   c10::Join("+", r.balance), std::to_string(r.budget_bytes),
                   r.paper ? r.paper->size : "", r.paper ? fixed(r.paper->parameters, 0) : ""});
  }
  return table.csv();
}

std::string to_markdown(const MaxSizeResult& result) {
  const auto& o = result.options;
  std::ostringstream out;
  out << "# GPipe Table 1 with this engine: the largest model that fits\n\n";
  out << "Preset `" << o.preset << "`, made by `" << result.command << "` in "
      << fixed(result.seconds / 60, 1) << " min on a machine with "
      << result.machine.value("hardware_threads", 0) << " hardware threads and "
      << format_bytes(result.machine.value("physical_memory_bytes", 0.0)) << " (load average "
      << format_load(result.machine["load_average_before"]) << " before, "
      << format_load(result.machine["load_average_after"])
      << " after). The committed results/max_model_size.* come from results/max_model_size.sh.\n\n";
  out << "naive-1: one device, the whole mini-batch at once, no re-materialisation. pipeline-K: K "
         "CPU virtual devices, M="
      << o.chunks << " micro-batches, re-materialisation `" << to_string(o.checkpoint)
      << "`, layers partitioned by memory (exact min-max). Optimizer `" << o.optimizer
      << "` for every row (RMSProp keeps 12 bytes a parameter with its gradient and state, the "
         "paper's figure for its parameter memory column; auto would give the Transformer Adam, "
         "16). As the paper, AmoebaNet-D's naive-1, pipeline-1 and pipeline-2 keep a fixed L and "
         "grow D only; depth grows from pipeline-4 on. Every row's figures are from a measured "
         "training step "
         "at that size: the memory meter's per-device peak over the whole step (forward, backward "
         "and optimizer update), the bytes held when it began (parameters, gradients, optimizer "
         "state) and the activation peak above them; the search's memory prediction only chooses "
         "what "
         "to measure. The paper's columns are GPipe's own Table 1 (AmoebaNet-D: "
      << paper_table1_hardware("amoebanet-d")
      << ", image 224, mini-batch 128; Transformer-L: " << paper_table1_hardware("transformer-l")
      << ", pipeline-1/8/32/128 only), not ours.";
  if (o.precisions.size() > 1 || o.precisions.front() != Precision::kFp32) {
    out << " Each configuration is searched in each precision of the `precision` column: fp32 is "
           "the paper's; under bf16 the stages compute and send bf16 while parameters, gradients "
           "and optimizer state stay fp32, so the state column is the same and the activations "
           "shrink.";
  }
  out << "\n\n";
  for (const auto& m : o.models)
    model_section(out, result, m);
  out << "## Search\n\nEach row's measured steps, in order (predicted: costs/memory.h's replay "
         "before "
         "calibration; scale: measured / predicted of the step before).\n\n";
  TextTable search({"model", "config", "precision", "size", "parameters", "predicted x scale",
                    "measured", "fits"},
                   {false, false, false, false, true, true, true, false});
  for (const auto& r : result.rows) {
    for (const auto& s : r.search) {
      search.add_row({r.model, r.config, to_string(r.precision), s.size,
                      format_count(static_cast<double>(s.parameters)),
                      format_bytes(s.predicted_bytes * s.scale), format_bytes(s.measured_bytes),
                      s.fits ? "yes" : "no"});
    }
  }
  out << search.markdown();
  return out.str();
}

}  // namespace gpipe::tables
