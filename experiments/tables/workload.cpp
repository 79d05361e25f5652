#include "tables/workload.h"

#include <unistd.h>

#include "common/optimizers.h"
#include "gpipe/errors.h"

namespace gpipe::tables {

std::string default_optimizer(const std::string& model) {
  return models::model_entry(model).default_optimizer;
}

std::string resolve_optimizer(const std::string& name, const std::string& model) {
  if (name == "auto") return default_optimizer(model);
  GPIPE_CHECK(name == "rmsprop" || name == "adam" || name == "sgd", ConfigError,
              "unknown optimizer '", name, "': expected rmsprop, adam, sgd or auto");
  return name;
}

int64_t optimizer_state_slots(const std::string& name) {
  if (name == "rmsprop") return 1;
  if (name == "adam") return 2;
  if (name == "sgd") return 0;
  throw ConfigError(c10::str("unknown optimizer '", name, "': expected rmsprop, adam or sgd"));
}

int64_t bytes_per_parameter(const std::string& optimizer) {
  return 4 * (2 + optimizer_state_slots(optimizer));
}

Pipeline::OptimizerFactory make_optimizer(const std::string& name) {
  optimizer_state_slots(name);  // validates the name
  return cli::make_optimizer_factory(cli::OptimizerSettings(name).lr(name == "sgd" ? 1e-3 : 1e-4));
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace gpipe::tables
