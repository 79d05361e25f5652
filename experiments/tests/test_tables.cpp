// Tests of the table drivers' logic: the paper's figures, formatting, normalisation, the table
// links and scaling_table's options and report (the projection itself: test_costs.cpp). The memory
// model, the size search and the short real runs are test_max_size.cpp. Timing figures themselves
// are not asserted (they are the drivers' output); what is asserted is what must hold on any
// machine.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <set>

#include "common/cli.h"
#include "common/report.h"
#include "costs/projection.h"
#include "gpipe/errors.h"
#include "gpipe/simulator.h"
#include "tables/max_size.h"
#include "tables/paper_figures.h"
#include "tables/scaling.h"
#include "tables/size_search.h"
#include "tables/table_link.h"
#include "tables/workload.h"
#include "test_util.h"

namespace gpipe::tables {
namespace {

// EXPECT_CONFIG_ERROR comes from the engine tests' test_util.h.

// ---- the paper's figures --------------------------------------------------------------------

TEST(PaperFigures, Table2And3AsPrinted) {
  EXPECT_DOUBLE_EQ(*paper_table2_speedup("amoebanet-d", 2, 1), 1.0);
  EXPECT_DOUBLE_EQ(*paper_table2_speedup("amoebanet-d", 8, 32), 3.48);
  EXPECT_DOUBLE_EQ(*paper_table2_speedup("amoebanet-d", 4, 4), 1.26);
  EXPECT_DOUBLE_EQ(*paper_table2_speedup("transformer-l", 8, 32), 6.3);
  EXPECT_DOUBLE_EQ(*paper_table2_speedup("transformer-l", 4, 1), 1.07);
  EXPECT_DOUBLE_EQ(*paper_table3_speedup("amoebanet-d", 8), 2.7);
  EXPECT_DOUBLE_EQ(*paper_table3_speedup("transformer-l", 4), 1.8);
  EXPECT_FALSE(paper_table2_speedup("amoebanet-d", 16, 32));
  EXPECT_FALSE(paper_table2_speedup("amoebanet-d", 2, 8));
  EXPECT_FALSE(paper_table2_speedup("mlp", 2, 1));
  EXPECT_FALSE(paper_table3_speedup("transformer-l", 3));
}

TEST(PaperFigures, Table1RatiosMatchThePaperText) {
  // The paper: pipeline-1 fits 318M / 82M = 3.9x naive-1; pipeline-8 1.8B / 318M = 5.7x.
  const auto n1 = paper_table1_entry("amoebanet-d", "naive-1");
  const auto p1 = paper_table1_entry("amoebanet-d", "pipeline-1");
  const auto p8 = paper_table1_entry("amoebanet-d", "pipeline-8");
  ASSERT_TRUE(n1 && p1 && p8);
  EXPECT_NEAR(p1->parameters / n1->parameters, 3.9, 0.05);
  EXPECT_NEAR(p8->parameters / p1->parameters, 5.7, 0.05);
  EXPECT_EQ(p8->size, "(72, 512)");
  EXPECT_EQ(paper_table1_entry("transformer-l", "pipeline-8")->size, "103");
  EXPECT_FALSE(paper_table1_entry("transformer-l", "pipeline-2"));
  EXPECT_EQ(paper_table1_device_bytes("amoebanet-d"), int64_t{8} << 30);
}

// ---- formatting -----------------------------------------------------------------------------

TEST(Report, MarkdownAlignsNumericColumnsAndCsvQuotes) {
  TextTable table({"name", "value"}, {false, true});
  table.add_row({"a, \"b\"", "1.5"});
  EXPECT_EQ(table.markdown(), "| name | value |\n|---|---:|\n| a, \"b\" | 1.5 |\n");
  EXPECT_EQ(table.csv(), "name,value\n\"a, \"\"b\"\"\",1.5\n");
  EXPECT_CONFIG_ERROR(table.add_row({"only one"}), "has 1 cells but the header has 2");
}

TEST(Report, NumbersAndSizes) {
  EXPECT_EQ(fixed(3.14159, 2), "3.14");
  EXPECT_EQ(fixed_or_dash(std::nullopt, 2), "-");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * (1 << 30)), "3.00 GiB");
  EXPECT_EQ(format_count(82e6), "82.0M");
  EXPECT_EQ(format_count(1.8e9), "1.80B");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(parse_bytes("8GiB", "--b"), int64_t{8} << 30);
  EXPECT_EQ(parse_bytes("96MiB", "--b"), int64_t{96} << 20);
  EXPECT_EQ(parse_bytes("1.5k", "--b"), 1536);
  EXPECT_EQ(parse_bytes("4096", "--b"), 4096);
  EXPECT_CONFIG_ERROR(parse_bytes("12XB", "--memory-budget"), "unknown unit 'XB'");
  EXPECT_CONFIG_ERROR(parse_bytes("lots", "--memory-budget"), "'lots' is not a size");
  EXPECT_CONFIG_ERROR(parse_bytes("-1GiB", "--memory-budget"), "must be a positive size");
}

// Every integer flag of the programs checks its range with int_range (gpipe/exit_codes.h): a
// word, a fraction or an exponent is "not an integer"; a number outside the range says the range.
// It reads integers as CLI11 does (a sign, a 0x prefix).
TEST(Report, IntRangeSaysWhatIsWrongWithAnIntegerFlag) {
  const CLI::Validator check = cli::int_range(1, 4096);
  auto verdict = [&](std::string text) { return check(text); };
  for (const char* good : {"1", "64", "4096", "+4", "0x10"})
    EXPECT_EQ(verdict(good), "") << good;
  EXPECT_EQ(verdict("0"), "0 is not an integer in [1, 4096]");
  EXPECT_EQ(verdict("-1"), "-1 is not an integer in [1, 4096]");
  EXPECT_EQ(verdict("4097"), "4097 is not an integer in [1, 4096]");
  EXPECT_EQ(verdict("99999999999999999999"), "99999999999999999999 is not an integer in [1, 4096]");
  for (const char* bad : {"x", "", "1.5", "1e3", "nan", "4 ", "-", "0x"})
    EXPECT_EQ(verdict(bad), "'" + std::string(bad) + "' is not an integer") << bad;
  EXPECT_EQ(verdict("\x1b[31m"), "'\\x1b[31m' is not an integer");
  EXPECT_EQ(check.get_description(), "INT in [1 - 4096]");
}

// ---- normalisation --------------------------------------------------------------------------

ScalingRow row(const std::string& source, int64_t K, int64_t M, double samples) {
  ScalingRow r;
  r.table = "table2";
  r.model = "transformer-l";
  r.source = source;
  r.K = K;
  r.M = M;
  r.samples_per_s = samples;
  return r;
}

TEST(Normalise, EachSourceDividesByItsOwnBaseline) {
  std::vector<ScalingRow> rows = {row("projected", 2, 1, 10), row("projected", 8, 32, 45),
                                  row("measured", 2, 1, 12), row("measured", 2, 32, 18)};
  rows.push_back(row("projected", 2, 1, 99));
  rows.back().table = "table3";  // another table's rows are left alone
  normalise(rows, "table2", 2, 1);
  EXPECT_DOUBLE_EQ(*rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[1].speedup, 4.5);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[3].speedup, 1.5);
  EXPECT_FALSE(rows[4].speedup);
}

TEST(Normalise, ASourceWithoutItsBaselineHasNoSpeedupAndAModelWithoutAnyIsAnError) {
  std::vector<ScalingRow> rows = {row("projected", 2, 1, 10), row("measured", 4, 4, 30)};
  normalise(rows, "table2", 2, 1);
  EXPECT_FALSE(rows[1].speedup);
  std::vector<ScalingRow> none = {row("projected", 4, 1, 10)};
  EXPECT_CONFIG_ERROR(normalise(none, "table2", 2, 1), "no row at the baseline K=2, M=1");
}

// ---- scaling options ------------------------------------------------------------------------

TEST(ScalingOptions, PresetsAreValidAndUnknownOnesNamed) {
  for (const auto& name : scaling_preset_names()) {
    const auto options = scaling_preset(name);
    EXPECT_NO_THROW(validate(options)) << name;
    ASSERT_EQ(options.tables.size(), 2u);
    EXPECT_EQ(options.tables[0].link, "tpu");
    EXPECT_EQ(options.tables[1].link, "pcie-scaled");
    EXPECT_EQ(options.tables[1].chunks, (std::vector<int64_t>{32}));
  }
  EXPECT_CONFIG_ERROR(scaling_preset("huge"), "unknown preset 'huge'");
}

TEST(Projection, ScaledLinksFollowTheComputeRatio) {
  // A machine at 93 GFLOP/s is 1/100 of a P100: PCIe's 12 GB/s and 10 us become 120 MB/s, 1 ms.
  const auto pcie = table_link("pcie-scaled", 93e9);
  EXPECT_TRUE(pcie.scaled());
  EXPECT_DOUBLE_EQ(pcie.factor, 0.01);
  EXPECT_NEAR(pcie.link.bandwidth, 120e6, 1e-3);
  EXPECT_NEAR(pcie.link.latency, 1e-3, 1e-12);
  EXPECT_NEAR(table_link("tpu-scaled", 61.5e9).factor, 1e-3, 1e-15);
  const auto plain = table_link("pcie", 0);
  EXPECT_FALSE(plain.scaled());
  EXPECT_DOUBLE_EQ(plain.link.bandwidth, 12e9);
  EXPECT_CONFIG_ERROR(table_link("pcie-scaled", 0), "compute rate");
  EXPECT_CONFIG_ERROR(table_link("fibre", 1e9), "pcie-scaled or tpu-scaled");
  EXPECT_GT(measure_gemm_flops(DeviceSpec::parse("cpu:0"), 1),
            1e8);  // any CPU does more than 0.1 GFLOP/s
  // The link's share of a projected step grows as it slows.
  costs::LayerCosts costs;
  costs.forward_ms = {1, 1};
  costs.backward_ms = {2, 2};
  costs.update_ms = {0, 0};
  costs.output_bytes = {1e6, 1e6};
  const auto shape = costs::gpipe_shape(2, 4, Checkpoint::kNever);
  const auto none = costs::project(shape, costs, link_preset("none"));
  const auto slow = costs::project(shape, costs, pcie.link);
  EXPECT_GT(slow.step_ms, none.step_ms + 2 * (1e6 / 120e6 * 1e3));  // at least two transfers
}

TEST(ScalingOptions, BadInputIsNamed) {
  auto options = scaling_preset("quick");
  options.tables[0].partitions = {2, 4, 64};
  EXPECT_CONFIG_ERROR(validate(options), "K=64 is larger than the");
  options = scaling_preset("quick");
  options.tables[0].chunks = {1, 3};
  EXPECT_CONFIG_ERROR(validate(options), "M=3 must divide the mini-batch");
  options = scaling_preset("quick");
  options.tables[0].chunks = {4, 32};
  EXPECT_CONFIG_ERROR(validate(options), "normalises to K=2, M=1");
  options = scaling_preset("quick");
  options.tables[1].link = "carrier-pigeon";
  EXPECT_CONFIG_ERROR(validate(options), "unknown link 'carrier-pigeon'");
  options = scaling_preset("quick");
  options.device_type = "tpu";
  EXPECT_CONFIG_ERROR(validate(options), "unknown device type 'tpu'");
  options = scaling_preset("quick");
  options.timed_steps = 0;
  EXPECT_CONFIG_ERROR(validate(options), "--steps >= 1");
  options = scaling_preset("quick");
  options.calibration_steps = 0;
  EXPECT_CONFIG_ERROR(validate(options), "calibration needs at least one timed step");
  options.calibrate = false;
  EXPECT_NO_THROW(validate(options));
  options = scaling_preset("quick");
  options.calibration_rounds = 0;
  EXPECT_CONFIG_ERROR(validate(options), "--calibration-rounds must be >= 1");
  options = scaling_preset("quick");
  options.calibration_chunks = {1, 3};
  EXPECT_CONFIG_ERROR(validate(options), "--calibration-chunks 3 must divide the mini-batch");
}

TEST(ScalingReport, MarkdownCsvAndJsonCarryOursAndThePapers) {
  ScalingResult result;
  result.options = scaling_preset("quick");
  result.options.tables.resize(1);
  result.options.tables[0].models.resize(1);
  const std::string model = result.options.tables[0].models[0].config.name();
  for (const auto& [source, K, M, samples] :
       std::vector<std::tuple<std::string, int64_t, int64_t, double>>{
           {"projected", 2, 1, 10}, {"measured", 2, 1, 11}, {"projected", 8, 32, 40}}) {
    ScalingRow r = row(source, K, M, samples);
    r.model = model;
    r.paper_speedup = paper_table2_speedup(model, K, M);
    r.balance = {1, 2};
    result.rows.push_back(r);
  }
  normalise(result.rows, "table2", 2, 1);
  result.checks.push_back({model, "label", 2, 1, "none", 11, 10, 0, 0, {10.0 / 11.0 - 1.0}, {1.0}});
  result.calibrations.push_back(
      {model, "AmoebaNet-D (6, 64)", 32, "8x1x1x32x1/always", {1.25, 1.0, 1.1}, 1.1});
  result.rows[2].comm_fraction = 0.25;
  result.command = "scaling_table --preset quick";
  result.machine = {
      {"hardware_threads", 2}, {"load_average_before", nullptr}, {"load_average_after", nullptr}};
  const auto json = to_json(result);
  ASSERT_EQ(json["rows"].size(), 3u);
  for (const auto& r : json["rows"]) {
    for (const char* key : {"model", "K", "M", "samples_per_s", "speedup", "source",
                            "paper_speedup", "comm_fraction"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
  }
  EXPECT_DOUBLE_EQ(json["rows"][2]["speedup"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(json["rows"][2]["paper_speedup"].get<double>(), 3.48);
  EXPECT_NEAR(json["checks"][0]["error"].get<double>(), 10.0 / 11.0 - 1.0, 1e-12);
  const auto markdown = to_markdown(result);
  // Every figure of ours in the grid is projected, and says so.
  EXPECT_NE(markdown.find("| 32 | - | 1.21 | - | 1.84 | 4.00 *p* | 3.48 |"), std::string::npos)
      << markdown;
  EXPECT_NE(markdown.find("| 1 | 1.00 *p* (measured 1.00) |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("| 0.250 |"), std::string::npos) << markdown;
  EXPECT_DOUBLE_EQ(json["rows"][2]["comm_fraction"].get<double>(), 0.25);
  EXPECT_NE(markdown.find("-9.1%"), std::string::npos);
  EXPECT_EQ(markdown.find("each round"), std::string::npos) << "one round: no column";
  const auto csv = to_csv(result);
  EXPECT_NE(csv.find("table2,amoebanet-d"), std::string::npos) << csv;
  // Each model's calibration with its rounds, median and spread.
  EXPECT_NE(markdown.find("| AmoebaNet-D (6, 64) | 32 | 8x1x1x32x1/always | 1.250, 1.000, 1.100 | "
                          "1.100 | 25.0% |"),
            std::string::npos)
      << markdown;
  EXPECT_EQ(json["calibrations"][0]["rounds"].size(), 3u);

  // Several check rounds: the check is the median of the rounds' own errors, and the error of
  // the medians and every round's error are listed beside it.
  result.options.check_rounds = 3;
  result.checks[0].round_errors = {-0.2, 0.05, 0.1};
  EXPECT_DOUBLE_EQ(result.checks[0].error(), 0.05);
  EXPECT_NEAR(to_json(result)["checks"][0]["error_of_medians"].get<double>(), 10.0 / 11.0 - 1.0,
              1e-12);
  const auto rounds_markdown = to_markdown(result);
  EXPECT_NE(rounds_markdown.find("Each check ran 3 rounds"), std::string::npos) << rounds_markdown;
  EXPECT_NE(rounds_markdown.find("| 5.0% |"), std::string::npos) << rounds_markdown;
  EXPECT_NE(rounds_markdown.find("| -9.1% | -20.0%, 5.0%, 10.0% |"), std::string::npos)
      << rounds_markdown;
  EXPECT_EQ(to_json(result)["checks"][0]["round_errors"].size(), 3u);
  EXPECT_EQ(to_json(result)["check_rounds"], 3);
  // By default a round pairs a fresh calibration with its measurement; --check-reprofile also
  // profiles afresh, and the paragraph and the JSON say which.
  EXPECT_NE(rounds_markdown.find("each the row's profile calibrated at the row's M"),
            std::string::npos)
      << rounds_markdown;
  EXPECT_EQ(to_json(result)["check_reprofile"], false);
  result.options.check_reprofile = true;
  EXPECT_NE(to_markdown(result).find("each a fresh profile calibrated at the row's M"),
            std::string::npos);
  EXPECT_EQ(to_json(result)["check_reprofile"], true);
}

}  // namespace
}  // namespace gpipe::tables
