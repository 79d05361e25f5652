#include "gpipe/snapshot.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <type_traits>

#include "gpipe/errors.h"
#include "gpipe/files.h"

namespace gpipe {
namespace {

namespace fs = std::filesystem;
constexpr const char* kFormat = "gpipe-stage-shard-v1";

// The optimizer's state map is keyed by a string of the TensorImpl address in LibTorch 1.x and
// by the address itself in later versions; derive the key from the map's own key type.
template <typename Map>
typename Map::key_type state_key(const Map&, const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;  // what 1.x's c10::guts::to_string wrote; 2.x removed it
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return reinterpret_cast<Key>(p.unsafeGetTensorImpl());
  }
}

torch::Tensor step_tensor(int64_t step) {
  return torch::full({}, step, torch::kLong);
}

// Optimizer state of one parameter as named tensors ({} when it has none yet).
std::map<std::string, torch::Tensor> state_of(torch::optim::Optimizer& optimizer,
                                              const torch::Tensor& p) {
  auto& states = optimizer.state();
  auto it = states.find(state_key(states, p));
  if (it == states.end()) return {};
  auto* state = it->second.get();
  std::map<std::string, torch::Tensor> out;
  auto put = [&](const char* field, const torch::Tensor& t) {
    if (t.defined()) out[field] = t;
  };
  auto put_adam = [&](auto* s) {  // Adam and AdamW keep the same fields
    out["step"] = step_tensor(s->step());
    put("exp_avg", s->exp_avg());
    put("exp_avg_sq", s->exp_avg_sq());
    put("max_exp_avg_sq", s->max_exp_avg_sq());
  };
  if (auto* s = dynamic_cast<torch::optim::SGDParamState*>(state)) {
    put("momentum_buffer", s->momentum_buffer());
  } else if (auto* s = dynamic_cast<torch::optim::RMSpropParamState*>(state)) {
    out["step"] = step_tensor(s->step());
    put("square_avg", s->square_avg());
    put("momentum_buffer", s->momentum_buffer());
    put("grad_avg", s->grad_avg());
  } else if (auto* s = dynamic_cast<torch::optim::AdamParamState*>(state)) {
    put_adam(s);
  } else if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
    put_adam(s);
  }
  return out;
}

torch::Tensor field(const std::map<std::string, torch::Tensor>& fields, const char* name,
                    const torch::Tensor& like) {
  auto it = fields.find(name);
  if (it == fields.end()) return torch::Tensor();
  return it->second.to(like.device(), it->second.scalar_type());
}

int64_t step_field(const std::map<std::string, torch::Tensor>& fields) {
  auto it = fields.find("step");
  return it == fields.end() ? 0 : it->second.item<int64_t>();
}

// Adam and AdamW keep the same per-parameter fields.
template <typename State>
std::unique_ptr<torch::optim::OptimizerParamState> adam_state(
    const std::map<std::string, torch::Tensor>& f, const torch::Tensor& p) {
  auto s = std::make_unique<State>();
  s->step(step_field(f));
  s->exp_avg(field(f, "exp_avg", p));
  s->exp_avg_sq(field(f, "exp_avg_sq", p));
  s->max_exp_avg_sq(field(f, "max_exp_avg_sq", p));
  return s;
}

void restore_state(torch::optim::Optimizer& optimizer, const torch::Tensor& p,
                   const std::map<std::string, torch::Tensor>& f, const std::string& name) {
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  const std::string kind = optimizer_kind(optimizer);
  auto require = [&](bool ok, const char* expected) {
    GPIPE_CHECK(ok, ConfigError, "the snapshot's optimizer state of '", name,
                "' does not fit this run's ", kind, " optimizer (expected ", expected,
                "); resume with the optimizer it was saved with, or fine-tune from it");
  };
  if (kind == "sgd") {
    require(f.count("momentum_buffer") == f.size(), "momentum_buffer");
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(field(f, "momentum_buffer", p));
    state = std::move(s);
  } else if (kind == "rmsprop") {
    require(f.count("square_avg") == 1, "square_avg");
    auto s = std::make_unique<torch::optim::RMSpropParamState>();
    s->step(step_field(f));
    s->square_avg(field(f, "square_avg", p));
    s->momentum_buffer(field(f, "momentum_buffer", p));
    s->grad_avg(field(f, "grad_avg", p));
    state = std::move(s);
  } else if (kind == "adam" || kind == "adamw") {
    require(f.count("exp_avg") == 1 && f.count("exp_avg_sq") == 1, "exp_avg and exp_avg_sq");
    state = kind == "adam" ? adam_state<torch::optim::AdamParamState>(f, p)
                           : adam_state<torch::optim::AdamWParamState>(f, p);
  } else {
    throw ConfigError(c10::str("cannot restore optimizer state into a '", kind, "' optimizer"));
  }
  auto& states = optimizer.state();
  states[state_key(states, p)] = std::move(state);
}

// Writes `archive` to `path`. LibTorch's own file writer throws from its destructor when a write
// fails (a full disk, a file-size limit), which ends the process; so LibTorch only ever sees a
// sink that accepts every byte, and the first failed write is reported here with errno's reason.
// Returns the file's checksum (files.h), taken from the bytes as they are written.
std::string write_archive(torch::serialize::OutputArchive& archive, const fs::path& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  int error = out.good() ? 0 : (errno != 0 ? errno : EIO);
  Checksum checksum;
  archive.save_to([&](const void* data, size_t size) -> size_t {
    checksum.update(data, size);
    if (error == 0) {
      out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
      if (!out.good()) error = errno != 0 ? errno : EIO;
    }
    return size;
  });
  if (error == 0) {
    out.flush();
    if (!out.good()) error = errno != 0 ? errno : EIO;
  }
  out.close();
  GPIPE_CHECK(error == 0, Error, "cannot write snapshot shard '", path.string(),
              "': ", std::strerror(error));
  return checksum.hex();
}

}  // namespace

std::string optimizer_kind(torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<torch::optim::SGD*>(&optimizer)) return "sgd";
  if (dynamic_cast<torch::optim::RMSprop*>(&optimizer)) return "rmsprop";
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) return "adamw";
  if (dynamic_cast<torch::optim::Adam*>(&optimizer)) return "adam";
  return "unknown";
}

std::map<std::string, std::string> save_stage_shards(Pipeline& pipeline, const std::string& dir) {
  std::map<std::string, std::string> checksums;
  const auto named = pipeline.named_parameters();
  const auto buffers = pipeline.named_buffers();
  for (const int64_t s : pipeline.local_stages()) {
    auto& stage = pipeline.stage(s);
    // Names owned by this stage: parameters and buffers of its layers.
    std::vector<std::string> names;
    std::vector<torch::Tensor> tensors;
    auto owned = [&](const torch::Tensor& t) {
      for (const auto& p : stage.parameters()) {
        if (p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return true;
      }
      return false;
    };
    const bool has_optimizer = pipeline.has_optimizer();
    for (const auto& [name, p] : named) {
      if (!owned(p)) continue;
      names.push_back("param:" + name);
      tensors.push_back(p.detach().cpu());
      if (!has_optimizer) continue;
      for (const auto& [key, value] : state_of(pipeline.optimizer(s), p)) {
        names.push_back("optim:" + name + ":" + key);
        tensors.push_back(value.detach().cpu());
      }
    }
    const int64_t first = stage.first_layer();
    const int64_t last = first + static_cast<int64_t>(stage.layers().size());
    for (const auto& [name, b] : buffers) {
      const int64_t layer = std::stoll(name.substr(0, name.find('.')));
      if (layer < first || layer >= last || !b.defined()) continue;
      names.push_back("buffer:" + name);
      tensors.push_back(b.detach().cpu());
    }
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(std::string(kFormat)));
    archive.write("names", c10::IValue(c10::List<std::string>(names)));
    for (size_t t = 0; t < tensors.size(); ++t)
      archive.write("t" + std::to_string(t), tensors[t]);
    const auto file = "stage-" + std::to_string(s) + ".pt";
    const auto path = fs::path(dir) / file;
    const auto tmp = fs::path(path.string() + ".tmp");
    checksums[file] = write_archive(archive, tmp);
    fs::rename(tmp, path);
  }
  return checksums;
}

namespace {

// Throws InputError unless the shard `path` (named `file` in its folder) has the checksum the
// manifest recorded for it; no check when `checksums` is empty (a snapshot of an older format).
void check_shard_checksum(const fs::path& path, const std::string& file,
                          const std::map<std::string, std::string>& checksums) {
  if (checksums.empty()) return;
  const auto expected = checksums.find(file);
  GPIPE_CHECK(expected != checksums.end(), InputError, "snapshot shard '", path.string(),
              "' is not listed in the snapshot's manifest: it was added after the snapshot was "
              "written");
  const auto actual = file_checksum(path.string());
  GPIPE_CHECK(actual == expected->second, InputError, "snapshot shard '", path.string(),
              "' does not match its checksum (manifest ", expected->second, ", file ", actual,
              "): it was changed or damaged after it was written");
}

// Every tensor of every stage shard in `dir`, by name, each shard checked against `checksums`.
// Throws InputError naming a corrupt, changed or missing shard, ConfigError for a folder without
// shards.
std::map<std::string, torch::Tensor> read_shards(
    const std::string& dir, const std::map<std::string, std::string>& checksums) {
  std::map<std::string, torch::Tensor> saved;
  int shards = 0;
  for (const auto& [file, sum] : checksums) {
    GPIPE_CHECK(fs::exists(fs::path(dir) / file), InputError, "snapshot shard '",
                (fs::path(dir) / file).string(), "' (listed in its manifest) is missing");
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto file = entry.path().filename().string();
    if (file.rfind("stage-", 0) != 0 || entry.path().extension() != ".pt") continue;
    ++shards;
    check_input_file(entry.path().string(), "snapshot shard");
    check_shard_checksum(entry.path(), file, checksums);
    torch::serialize::InputArchive archive;
    c10::IValue format, names;
    try {
      archive.load_from(entry.path().string());
      archive.read("format", format);
      archive.read("names", names);
    } catch (const std::exception& e) {
      throw InputError(
          c10::str("snapshot shard '", entry.path().string(),
                   "' is corrupt or not a gpipe snapshot: ", error_message(e).substr(0, 200)));
    }
    GPIPE_CHECK(format.isString() && format.toStringRef() == kFormat, InputError, "'",
                entry.path().string(), "' is not a gpipe stage shard (format ",
                format.isString() ? format.toStringRef() : "?", ")");
    try {
      const auto list = names.toList();
      for (size_t t = 0; t < list.size(); ++t) {
        torch::Tensor value;
        archive.read("t" + std::to_string(t), value);
        saved[list.get(t).toStringRef()] = value;
      }
    } catch (const std::exception& e) {
      throw InputError(c10::str("snapshot shard '", entry.path().string(),
                                "' is corrupt: ", error_message(e).substr(0, 200)));
    }
  }
  GPIPE_CHECK(shards > 0, ConfigError, "snapshot folder '", dir, "' holds no stage-*.pt shard");

  return saved;
}

// Restores the optimizer state of parameter `p` (named `name`) from the snapshot's fields, into
// the optimizer of the local stage that owns it.
void restore_parameter_state(Pipeline& pipeline, const std::map<std::string, torch::Tensor>& saved,
                             const std::string& name, const torch::Tensor& p) {
  std::map<std::string, torch::Tensor> fields;
  const std::string prefix = "optim:" + name + ":";
  for (auto f = saved.lower_bound(prefix); f != saved.end() && f->first.rfind(prefix, 0) == 0; ++f)
    fields[f->first.substr(prefix.size())] = f->second;
  if (fields.empty()) return;
  for (const int64_t s : pipeline.local_stages()) {
    for (const auto& q : pipeline.stage(s).parameters()) {
      if (q.unsafeGetTensorImpl() == p.unsafeGetTensorImpl())
        restore_state(pipeline.optimizer(s), p, fields, name);
    }
  }
}

// Throws InputError naming `name` when the saved floating-point tensor holds NaN or infinities:
// such a snapshot was saved from a diverged run and cannot be resumed.
void check_finite(const torch::Tensor& value, const char* kind, const std::string& name,
                  const std::string& dir) {
  if (!value.is_floating_point()) return;
  const int64_t bad = value.numel() - torch::isfinite(value).sum().item<int64_t>();
  GPIPE_CHECK(bad == 0, InputError, "the snapshot in '", dir, "' holds non-finite weights: ", bad,
              " of the ", value.numel(), " values of ", kind, " '", name,
              "' are NaN or infinite (saved from a diverged run)");
}

}  // namespace

LoadReport load_stage_shards(Pipeline& pipeline, const std::string& dir,
                             const LoadOptions& options) {
  GPIPE_CHECK(fs::is_directory(dir), ConfigError, "snapshot folder '", dir, "' does not exist");
  const auto saved = read_shards(dir, options.checksums());
  LoadReport report;
  torch::NoGradGuard no_grad;
  // Names are "<layer index>.<name>": is this one in a layer kept as initialised?
  auto fresh = [&](const std::string& name) {
    const int64_t layer = std::stoll(name.substr(0, name.find('.')));
    const auto& layers = options.fresh_layers();
    return std::find(layers.begin(), layers.end(), layer) != layers.end();
  };
  const bool with_optimizer = options.optimizer() && pipeline.has_optimizer();
  const auto named = pipeline.named_parameters();
  for (const auto& [name, p] : named) {
    if (fresh(name)) {
      report.skipped.push_back(name);
      continue;
    }
    auto it = saved.find("param:" + name);
    GPIPE_CHECK(it != saved.end(), ConfigError, "the snapshot in '", dir, "' has no parameter '",
                name, "': it was saved from another model or configuration");
    if (it->second.sizes() != p.sizes()) {
      GPIPE_CHECK(options.skip_mismatched_shapes(), ConfigError, "parameter '", name,
                  "' has shape ", p.sizes(), " but the snapshot in '", dir, "' holds ",
                  it->second.sizes(), ": it was saved from another model or configuration");
      report.skipped.push_back(name);
      continue;
    }
    check_finite(it->second, "parameter", name, dir);
    p.detach().copy_(it->second);
    ++report.loaded;
    if (with_optimizer) restore_parameter_state(pipeline, saved, name, p);
  }
  for (const auto& [name, b] : pipeline.named_buffers()) {
    if (!b.defined()) continue;
    if (fresh(name)) {
      report.skipped.push_back(name);
      continue;
    }
    auto it = saved.find("buffer:" + name);
    GPIPE_CHECK(it != saved.end(), ConfigError, "the snapshot in '", dir, "' has no buffer '", name,
                "': it was saved from another model or configuration");
    if (it->second.sizes() != b.sizes()) {
      GPIPE_CHECK(options.skip_mismatched_shapes(), ConfigError, "buffer '", name, "' has shape ",
                  b.sizes(), " but the snapshot holds ", it->second.sizes());
      report.skipped.push_back(name);
      continue;
    }
    check_finite(it->second, "buffer", name, dir);
    b.detach().copy_(it->second);
    ++report.loaded;
  }
  return report;
}

}  // namespace gpipe
