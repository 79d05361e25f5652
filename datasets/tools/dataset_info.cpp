// dataset_info: what a dataset's files hold, and how fast the loader turns them into batches.
//
//   dataset_info --dataset fashion-mnist --json results/dataset_info/fashion-mnist.json
//   dataset_info --generate-jpegs /tmp/jpegs --count 1000
//   dataset_info --dataset imagenet --data-dir /tmp/jpegs --split train --benchmark
//                --workers 2 --image-size 224 --batch-size 32
//
// Why this file exists: a download is only trusted once its counts and pixel statistics are
// seen (60000/10000 Fashion-MNIST images, 6000/1000 per class; mean and std against the
// normalisation constants), and the claim that the loader keeps up with the pipeline is only
// made by a program that measures it. Per split it reports count, class_counts, classes, and
// the per-channel mean and std of the raw pixels scaled to [0, 1]. --benchmark measures, on the
// same images in the same run, the single-thread decode-and-transform rate and the rate of the
// Loader with --workers threads through the full training transform. --generate-jpegs writes
// the benchmark's folder of 500x375 JPEGs so the figure can be reproduced from a clean clone.
#include <ATen/Parallel.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>

#include "gpipe/datasets/datasets.h"
#include "gpipe/errors.h"
#include "gpipe/exit_codes.h"
#include "gpipe/run_parallel.h"
#include "gpipe/timeline.h"
#include "gpipe/timing.h"

namespace {

using gpipe::datasets::BadImageError;
using gpipe::datasets::DatasetOptions;
using gpipe::datasets::HwcImage;
using gpipe::datasets::ImageSource;
using gpipe::datasets::PixelStats;
using gpipe::datasets::Split;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Args {
  std::string dataset;
  std::string data_dir;
  std::string split = "all";
  std::string json_path;
  std::string labels_file;
  bool skip_bad = false;
  int64_t stats_limit = 0;
  int64_t workers = 1;
  // Synthetic data.
  int64_t count = 1024;
  int64_t classes = 10;
  int64_t channels = 3;
  uint64_t seed = 0;
  // Benchmark.
  bool benchmark = false;
  int64_t image_size = 0;
  int64_t batch_size = 32;
  int64_t benchmark_images = 512;
  int64_t repeats = 3;
  // JPEG folder generation.
  std::string generate_dir;
  int64_t val_count = -1;
};

DatasetOptions dataset_options(const Args& args, Split split) {
  return DatasetOptions(args.dataset)
      .data_dir(args.data_dir)
      .split(split)
      .image_size(args.image_size)
      .skip_bad(args.skip_bad)
      .labels_file(args.labels_file)
      .count(args.count)
      .classes(args.classes)
      .channels(args.channels)
      .seed(args.seed);
}

// Everything a pass over (a sample of) a split's images gathers.
struct Scan {
  PixelStats stats;
  std::vector<int64_t> skipped;  // indexes that could not be decoded
  std::vector<std::string> skipped_files;
  int64_t min_height = INT64_MAX, max_height = 0, min_width = INT64_MAX, max_width = 0;

  void merge(const Scan& other) {
    stats.merge(other.stats);
    skipped.insert(skipped.end(), other.skipped.begin(), other.skipped.end());
    skipped_files.insert(skipped_files.end(), other.skipped_files.begin(),
                         other.skipped_files.end());
    min_height = std::min(min_height, other.min_height);
    max_height = std::max(max_height, other.max_height);
    min_width = std::min(min_width, other.min_width);
    max_width = std::max(max_width, other.max_width);
  }
};

// Decodes the images at `indexes` on `workers` threads (image k on thread k % workers).
Scan scan(const ImageSource& source, const std::vector<int64_t>& indexes, int64_t workers,
          bool skip_bad) {
  std::vector<Scan> parts(workers);
  gpipe::run_parallel(workers, [&](int64_t w) {
    for (size_t k = w; k < indexes.size(); k += workers) {
      HwcImage image;
      try {
        image = source.image(indexes[k]);
      } catch (const BadImageError& e) {
        if (!skip_bad) throw;
        spdlog::warn("skipping: {}", e.what());
        parts[w].skipped.push_back(indexes[k]);
        parts[w].skipped_files.push_back(e.path());
        continue;
      }
      parts[w].stats.add(image);
      parts[w].min_height = std::min<int64_t>(parts[w].min_height, image.height());
      parts[w].max_height = std::max<int64_t>(parts[w].max_height, image.height());
      parts[w].min_width = std::min<int64_t>(parts[w].min_width, image.width());
      parts[w].max_width = std::max<int64_t>(parts[w].max_width, image.width());
    }
  });
  Scan all;
  for (const auto& part : parts)
    all.merge(part);
  std::sort(all.skipped_files.begin(), all.skipped_files.end());
  return all;
}

json report_split(const Args& args, Split split) {
  const auto options = dataset_options(args, split);
  const auto source = gpipe::datasets::make_source(options);
  const int64_t n = source->size();
  std::vector<int64_t> indexes;
  const int64_t sample = args.stats_limit > 0 ? std::min(args.stats_limit, n) : n;
  for (int64_t k = 0; k < sample; ++k)
    indexes.push_back(k * n / sample);  // evenly spaced over the split
  const auto start = Clock::now();
  const auto result = scan(*source, indexes, args.workers, args.skip_bad);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  const auto& classes = source->classes();
  std::vector<int64_t> class_counts(classes.size(), 0);
  for (int64_t i = 0; i < n; ++i)
    ++class_counts[source->label(i)];
  for (int64_t i : result.skipped)
    --class_counts[source->label(i)];
  json out;
  out["count"] = n - static_cast<int64_t>(result.skipped.size());
  out["classes"] = classes;
  out["class_counts"] = class_counts;
  out["channels"] = source->channels();
  out["mean"] = result.stats.mean();
  out["std"] = result.stats.std();
  out["images_decoded"] = result.stats.images();
  out["height"] = {{"min", result.max_height > 0 ? result.min_height : 0},
                   {"max", result.max_height}};
  out["width"] = {{"min", result.max_width > 0 ? result.min_width : 0}, {"max", result.max_width}};
  out["skipped"] = result.skipped.size();
  out["skipped_files"] = result.skipped_files;
  // As given (a relative folder stays relative: results record no machine's paths).
  out["data_dir"] = options.data_dir().empty() && args.dataset == "fashion-mnist"
                        ? "default: Debian's dataset-fashion-mnist package"
                        : options.data_dir();
  spdlog::info("{} {}: {} images in {} classes, {} decoded in {:.1f} s, {} skipped", args.dataset,
               to_string(split), out["count"].get<int64_t>(), classes.size(), result.stats.images(),
               seconds, result.skipped.size());
  return out;
}

double process_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// The 1-minute load average: other work on the machine skews the benchmark.
double load_average() {
  std::ifstream file("/proc/loadavg");
  double load = -1;
  file >> load;
  return load;
}

// The runs of the benchmark, each mode's images per second and CPU ms per image.
struct BenchmarkRuns {
  std::vector<double> single_runs, loader_runs, single_cpu, loader_cpu;
};

// The benchmark's JSON, and its summary on stdout.
json benchmark_report(const Args& args, const std::vector<int64_t>& image_shape, int64_t count,
                      const BenchmarkRuns& runs, double load_before) {
  const auto& [single_runs, loader_runs, single_cpu, loader_cpu] = runs;
  const double single = gpipe::median(single_runs);
  const double rate = gpipe::median(loader_runs);
  json out;
  out["split"] = "train";
  out["transform"] = "training (augment)";
  out["workers"] = args.workers;
  out["image_size"] = image_shape[1];
  out["batch_size"] = args.batch_size;
  out["images"] = count;
  out["repeats"] = args.repeats;
  out["single_thread_images_per_second"] = single;
  out["images_per_second"] = rate;
  out["speedup_over_single_thread"] = rate / single;
  out["efficiency_vs_workers_x_single_thread"] = rate / (args.workers * single);
  out["single_thread_runs"] = single_runs;
  out["loader_runs"] = loader_runs;
  // CPU time of the whole process per image: equal in both modes means the loader adds no
  // work, so its wall-time rate is limited only by the cores it gets.
  out["single_thread_cpu_ms_per_image"] = gpipe::median(single_cpu);
  out["loader_cpu_ms_per_image"] = gpipe::median(loader_cpu);
  out["hardware_threads"] = std::thread::hardware_concurrency();
  out["load_average_before"] = load_before;
  out["load_average_after"] = load_average();
  std::cout << "single-thread decode+transform: " << single << " images/s (median of "
            << args.repeats << ")\n"
            << "loader, " << args.workers << " workers:           " << rate
            << " images/s = " << rate / single
            << "x single thread = " << 100.0 * rate / (args.workers * single) << "% of "
            << args.workers << "x single thread\n";
  return out;
}

json benchmark(const Args& args) {
  const auto options = dataset_options(args, Split::kTrain).augment(true);
  const auto dataset = gpipe::datasets::make_dataset(options);
  const int64_t images = std::min(args.benchmark_images, dataset->size());
  const auto loader_options = gpipe::datasets::LoaderOptions(args.batch_size)
                                  .workers(args.workers)
                                  .shuffle(true)
                                  .seed(args.seed);
  gpipe::datasets::Loader loader(dataset, loader_options);
  const int64_t batches = std::min<int64_t>((images + args.batch_size - 1) / args.batch_size,
                                            loader.batches_per_epoch());
  // The single-thread baseline does the same work: the same images, the same random draws.
  std::vector<int64_t> order;
  for (int64_t b = 0; b < batches; ++b) {
    const auto indexes = loader.batch_indexes(0, b);
    order.insert(order.end(), indexes.begin(), indexes.end());
  }
  const auto count = static_cast<int64_t>(order.size());

  at::set_num_threads(1);
  // Each run gives images per second of wall time and CPU seconds (all threads) per image.
  struct Run {
    double rate;
    double cpu_ms_per_image;
  };
  auto single_thread = [&] {
    const auto start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    for (int64_t i : order) {
      auto rng = gpipe::datasets::Rng::for_sample(args.seed, 0, i);
      dataset->get(i, rng);
    }
    return Run{count / std::chrono::duration<double>(Clock::now() - start).count(),
               1e3 * (process_cpu_seconds() - cpu_start) / count};
  };
  auto with_loader = [&] {
    const auto start = Clock::now();
    const double cpu_start = process_cpu_seconds();
    loader.begin_epoch(0);
    int64_t seen = 0;
    for (int64_t b = 0; b < batches; ++b)
      seen += loader.next()->size();
    const Run run{seen / std::chrono::duration<double>(Clock::now() - start).count(),
                  1e3 * (process_cpu_seconds() - cpu_start) / seen};
    loader.end_epoch();  // the rest of the epoch is not wanted: stop the workers
    return run;
  };
  spdlog::info("benchmark: {} images of {} at {}x{}, batches of {}, warming up", count,
               args.dataset, dataset->example_shape()[1], dataset->example_shape()[2],
               args.batch_size);
  const double load_before = load_average();
  single_thread();  // warm-up: file cache, decoder and allocator state
  BenchmarkRuns runs;
  for (int64_t r = 0; r < args.repeats; ++r) {
    const auto one = single_thread();
    const auto many = with_loader();
    runs.single_runs.push_back(one.rate);
    runs.loader_runs.push_back(many.rate);
    runs.single_cpu.push_back(one.cpu_ms_per_image);
    runs.loader_cpu.push_back(many.cpu_ms_per_image);
    spdlog::info(
        "run {}: single thread {:.1f} images/s ({:.2f} CPU ms/image), loader with {} workers "
        "{:.1f} images/s ({:.2f} CPU ms/image)",
        r + 1, one.rate, one.cpu_ms_per_image, args.workers, many.rate, many.cpu_ms_per_image);
  }
  return benchmark_report(args, dataset->example_shape(), count, runs, load_before);
}

int run(const Args& args) {
  json out;
  if (!args.generate_dir.empty()) {
    const int64_t val =
        args.val_count >= 0 ? args.val_count : std::max(args.classes, args.count / 10);
    spdlog::info("writing {} + {} generated 500x375 JPEGs in {} classes to {}", args.count, val,
                 args.classes, args.generate_dir);
    gpipe::datasets::write_jpeg_folder(args.generate_dir,
                                       gpipe::datasets::JpegFolderOptions(args.count)
                                           .val_count(val)
                                           .classes(args.classes)
                                           .seed(args.seed));
    if (args.dataset.empty()) return 0;
  }
  out["dataset"] = args.dataset;
  out["command"] = "dataset_info";
  if (args.split == "all" || args.split == "train") {
    out["splits"]["train"] = report_split(args, Split::kTrain);
  }
  if (args.split == "all" || args.split == "test") {
    out["splits"]["test"] = report_split(args, Split::kTest);
  }
  if (args.dataset != "synthetic") {
    const auto norm = gpipe::datasets::normalization_for(args.dataset, args.channels);
    out["normalization_constants"] = {{"mean", norm.mean}, {"std", norm.std}};
  }
  if (args.benchmark) out["benchmark"] = benchmark(args);
  if (args.json_path.empty()) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::ofstream file(args.json_path);
    file << out.dump(2) << "\n";
    if (!file) throw gpipe::ConfigError("cannot write --json file '" + args.json_path + "'");
    spdlog::info("wrote {}", args.json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Counts, class balance and pixel statistics of a dataset; loader throughput"};
  Args args;
  app.add_option("--dataset", args.dataset,
                 "imagenet | cifar10 | cifar100 | fashion-mnist | mnist | synthetic")
      ->check(CLI::IsMember(
          {"imagenet", "cifar10", "cifar100", "fashion-mnist", "mnist", "synthetic"}));
  app.add_option("--data-dir", args.data_dir,
                 "folder of the files (fashion-mnist default: " +
                     std::string(gpipe::datasets::kDebianFashionMnistDir) + ")")
      ->check(CLI::ExistingDirectory);
  app.add_option("--split", args.split, "train | test | all")
      ->check(CLI::IsMember({"train", "test", "all"}));
  app.add_option("--json", args.json_path, "write the report here (default: stdout)")
      ->check(
          gpipe::parsed_by([](const std::string& path) { gpipe::check_output_file(path, ""); }));
  app.add_option("--labels-file", args.labels_file, "ImageNet flat val/ labels file")
      ->check(CLI::ExistingFile);
  app.add_flag("--skip-bad", args.skip_bad, "report and skip undecodable images");
  app.add_option("--stats-limit", args.stats_limit,
                 "decode only this many evenly spaced images per split for the statistics "
                 "(0: all)")
      ->check(gpipe::int_range(int64_t{0}, int64_t{1} << 24));
  // Bounds (docs/design.md): threads a machine can use, images a run can hold or write.
  app.add_option("--workers", args.workers, "threads for the scan and the benchmark's loader")
      ->check(gpipe::int_range(1, 256));
  app.add_option("--count", args.count, "synthetic images, or JPEGs to generate")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--classes", args.classes, "classes of synthetic images or generated JPEGs")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--channels", args.channels, "channels of synthetic images (1 or 3)")
      ->check(CLI::IsMember({1, 3}));
  app.add_option("--seed", args.seed, "seed of the loader and of generated data");
  app.add_flag("--benchmark", args.benchmark,
               "measure single-thread and loader images/s through the training transform");
  app.add_option("--image-size", args.image_size, "output size of the transform (0: native)")
      ->check(gpipe::int_range(0, 1 << 14));
  app.add_option("--batch-size", args.batch_size, "loader batch size")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--benchmark-images", args.benchmark_images, "images per benchmark run")
      ->check(gpipe::int_range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--repeats", args.repeats, "benchmark runs (medians are reported)")
      ->check(gpipe::int_range(1, 1000));
  app.add_option("--generate-jpegs", args.generate_dir,
                 "write --count generated 500x375 JPEGs as DIR/train/<wnid>/ (and val/)")
      ->check(
          gpipe::parsed_by([](const std::string& path) { gpipe::check_output_folder(path, ""); }));
  app.add_option("--val-count", args.val_count,
                 "generated validation JPEGs (default: max(classes, count / 10))");
  if (const auto code = gpipe::parse_command_line(app, argc, argv)) return *code;
  // Logs go to stderr, as every program's: stdout holds the report only.
  spdlog::set_default_logger(spdlog::stderr_color_mt("dataset_info"));
  if (args.dataset.empty() && args.generate_dir.empty()) {
    std::cerr << "dataset_info: give --dataset (or --generate-jpegs DIR); see --help\n";
    return gpipe::kExitBadInput;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::cerr << "dataset_info: error: " << gpipe::error_message(e) << "\n";
    return gpipe::exit_code_for(e);
  }
}
