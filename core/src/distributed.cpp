// Context: rendezvous through a TCPStore, the Gloo/NCCL process groups (world, pipeline,
// data-parallel) and rank registration. The heartbeat watchdog that names a lost rank is
// watchdog.cpp; the collectives a step needs are collectives.cpp; the data path is
// process_group_transport.cpp.
#include "gpipe/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <torch/version.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "gpipe/run_parallel.h"
#include "store_keys.h"

#if defined(GPIPE_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace gpipe::distributed {
namespace {

using store_keys::bytes_to_string;
using store_keys::kAbortKey;
using store_keys::string_to_bytes;

int env_int(const char* name, int fallback, bool required) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    GPIPE_CHECK(!required, ConfigError, name,
                " is not set; a distributed run needs RANK, WORLD_SIZE, MASTER_ADDR and "
                "MASTER_PORT (scripts/launch.sh sets them, as torchrun does)");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(value, &end, 10);
  GPIPE_CHECK(end != nullptr && *end == '\0', ConfigError, name, "='", printable(value),
              "' is not an integer");
  // Read strictly: 4294967296 must not wrap around to rank 0.
  GPIPE_CHECK(errno != ERANGE && parsed >= 0 && parsed <= std::numeric_limits<int>::max(),
              ConfigError, name, "=", value, " is not an integer in [0, ",
              std::numeric_limits<int>::max(), "]");
  return static_cast<int>(parsed);
}

// The local address on the route to `host`: the address Gloo should listen on so that the
// other ranks reach it (a UDP "connect" sends nothing, it only picks the route).
std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  GPIPE_CHECK(getaddrinfo(host.c_str(), "9", &hints, &result) == 0 && result != nullptr,
              ConfigError, "MASTER_ADDR '", host, "' does not resolve to an IPv4 address");
  std::string address = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0) {
    if (connect(fd, result->ai_addr, result->ai_addrlen) == 0) {
      sockaddr_in local{};
      socklen_t length = sizeof(local);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0) {
        char text[INET_ADDRSTRLEN] = {0};
        if (inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)) != nullptr) address = text;
      }
    }
    close(fd);
  }
  freeaddrinfo(result);
  return address;
}

// The one place where LibTorch's two c10d APIs differ: a Gloo or NCCL group as the
// c10d::ProcessGroup the rest of the engine talks to. In LibTorch 1.x ProcessGroupGloo and
// ProcessGroupNCCL are ProcessGroups themselves. From 2.0 on they are c10d::Backends, and a
// ProcessGroup sends each tensor to the backend registered for its device type: Gloo's
// collectives take CPU and CUDA tensors (the transport copies CUDA tensors to the host before a
// Gloo send), NCCL takes CUDA tensors only.
template <typename Backend>
c10::intrusive_ptr<c10d::ProcessGroup> as_process_group(
    c10::intrusive_ptr<Backend> backend, const c10::intrusive_ptr<c10d::Store>& store, int rank,
    int size) {
#if TORCH_VERSION_MAJOR >= 2
  using Type = c10d::ProcessGroup::BackendType;
  constexpr bool nccl = !std::is_same_v<Backend, c10d::ProcessGroupGloo>;
  const Type type = nccl ? Type::NCCL : Type::GLOO;
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  if (!nccl) group->setBackend(c10::DeviceType::CPU, type, backend);
  group->setBackend(c10::DeviceType::CUDA, type, backend);
  group->setDefaultBackend(type);
  return group;
#else
  (void)store, (void)rank, (void)size;
  return backend;
#endif
}

c10::intrusive_ptr<c10d::ProcessGroup> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const std::string& prefix, int rank, int size,
                                                 std::chrono::milliseconds timeout,
                                                 const std::string& master) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
  } else {
    options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(local_address_towards(master)));
  }
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  return as_process_group(
      c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, size, options), prefixed, rank,
      size);
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  GPIPE_CHECK(fd >= 0, Error, "cannot open a socket to find a free port: ", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  GPIPE_CHECK(ok, Error, "cannot find a free port on 127.0.0.1: ", std::strerror(error));
  return ntohs(address.sin_port);
}

std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> local_gloo_group(
    int size, std::chrono::milliseconds timeout) {
  GPIPE_CHECK(size >= 1, ConfigError, "a group needs at least one rank, got ", size);
  const c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> ranks(size);
  run_parallel(size, [&](int64_t r) {
    ranks[r] = make_gloo(store, "gpipe/local", static_cast<int>(r), size, timeout, "127.0.0.1");
  });
  return ranks;
}

Env Env::from_environment() {
  Env env;
  env.rank = env_int("RANK", 0, true);
  env.world_size = env_int("WORLD_SIZE", 1, true);
  env.local_rank = env_int("LOCAL_RANK", env.rank, false);
  const char* addr = std::getenv("MASTER_ADDR");
  GPIPE_CHECK(addr != nullptr && *addr != '\0', ConfigError,
              "MASTER_ADDR is not set; give the address of the host that runs rank 0");
  env.master_addr = addr;
  GPIPE_CHECK(env.master_addr.find(':') == std::string::npos, ConfigError, "MASTER_ADDR='",
              printable(env.master_addr),
              "' holds a ':'; give the host alone (an IPv4 address or a name) and the port in "
              "MASTER_PORT");
  env.master_port = env_int("MASTER_PORT", 0, true);
  GPIPE_CHECK(env.world_size >= 1, ConfigError, "WORLD_SIZE=", env.world_size, " must be >= 1");
  GPIPE_CHECK(env.rank >= 0 && env.rank < env.world_size, ConfigError, "RANK=", env.rank,
              " is outside 0..WORLD_SIZE-1 = 0..", env.world_size - 1);
  GPIPE_CHECK(env.master_port > 0 && env.master_port < 65536, ConfigError,
              "MASTER_PORT=", env.master_port, " is not a TCP port (1..65535)");
  return env;
}

void Context::check_same_settings(
    const std::vector<std::pair<std::string, std::string>>& settings) {
  const std::string prefix = "gpipe/settings/";
  nlohmann::json mine = nlohmann::json::object();
  for (const auto& [flag, value] : settings)
    mine[flag] = value;
  // flag -> value -> the ranks that have it ("" for a rank that lacks the flag)
  std::map<std::string, std::map<std::string, std::vector<int>>> seen;
  try {
    store_->set(prefix + std::to_string(rank()), string_to_bytes(mine.dump()));
    for (int r = 0; r < world_size(); ++r) {
      const auto theirs = nlohmann::json::parse(
          bytes_to_string(store_->get(prefix + std::to_string(r))), nullptr, false);
      GPIPE_CHECK(theirs.is_object(), InternalError, "rank ", r, " published unreadable settings");
      for (const auto& [flag, value] : mine.items())
        seen[flag][theirs.value(flag, std::string())].push_back(r);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(c10::str("comparing the ranks' settings failed: ", error_message(e)), {});
  }
  std::vector<std::string> differences;
  for (const auto& [flag, values] : seen) {
    if (values.size() == 1) continue;
    std::vector<std::string> where;
    for (const auto& [value, ranks] : values) {
      where.push_back(c10::str(value.empty() ? "''" : value, " on rank",
                               ranks.size() > 1 ? "s " : " ", c10::Join(",", ranks)));
    }
    differences.push_back(flag + ": " + c10::Join(", ", where));
  }
  // Nobody leaves before every rank has compared: rank 0 hosts the store the others read.
  barrier();
  if (differences.empty()) return;
  if (rank() == 0) linger_for_peers();
  throw ConfigError(
      c10::str("the ranks were started with different settings: ", c10::Join("; ", differences),
               ". Give every rank the same flags (only where its data and devices "
               "are may differ)"));
}

Context::Context(const Env& env, ContextOptions options) : env_(env), options_(options) {
  const int64_t K = options_.devices();
  GPIPE_CHECK(K >= 1, ConfigError, "a distributed pipeline needs K >= 1 devices, got ", K);
  GPIPE_CHECK(env_.world_size % K == 0, ConfigError, "WORLD_SIZE=", env_.world_size,
              " is not a multiple of K=", K,
              " devices: the world must be K devices x R replicas (e.g. WORLD_SIZE=", 2 * K,
              " for R=2)");
  GPIPE_CHECK(options_.timeout().count() > 0, ConfigError, "the communication timeout must be > 0");
  connect_store();
  register_rank();
  watchdog_ = std::thread([this] { watch(); });
  try {
    make_groups();
  } catch (const Error&) {
    stopping_ = true;
    watchdog_.join();
    throw;
  } catch (const std::exception& e) {
    stopping_ = true;
    watchdog_.join();
    // A peer that stopped on purpose said why in the store; that is the better message.
    std::string why;
    try {
      if (store_->check({kAbortKey})) why = bytes_to_string(store_->get(kAbortKey));
    } catch (const std::exception&) {
    }
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      why = abort_reason_;
    }
    throw DistributedError(
        why.empty() ? c10::str("rank ", env_.rank,
                               " could not connect its process groups: ", error_message(e))
                    : why,
        -1);
  }
  spdlog::debug("rank {}: device {} of {}, replica {} of {}", env_.rank, device(), K, replica(),
                replicas());
}

void Context::connect_store() {
  auto connect = [&](bool server) {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<uint16_t>(env_.master_port);
    store_options.isServer = server;
    store_options.waitWorkers = false;
    store_options.timeout = options_.timeout();
    return c10::make_intrusive<c10d::TCPStore>(env_.master_addr, store_options);
  };
  try {
    store_ = connect(env_.rank == 0);
    watch_store_ = connect(false);
  } catch (const std::exception& e) {
    const std::string what = error_message(e);
    if (env_.rank == 0) {
      throw ConfigError(c10::str("rank 0 cannot host the rendezvous store at ", env_.master_addr,
                                 ":", env_.master_port,
                                 " (is the port in use, perhaps by another "
                                 "process with RANK=0?): ",
                                 what.substr(0, 300)));
    }
    throw DistributedError(
        c10::str("rank ", env_.rank, " cannot reach the master at ", env_.master_addr, ":",
                 env_.master_port, " within ", options_.timeout().count() / 1000.0,
                 " s (is rank 0 running? are MASTER_ADDR and MASTER_PORT right?): ",
                 what.substr(0, 300)),
        0);
  }
}

c10::intrusive_ptr<c10d::ProcessGroup> Context::make_group(const std::string& prefix, int64_t rank,
                                                           int64_t size) {
  if (options_.nccl()) {
#if defined(GPIPE_WITH_CUDA) && defined(USE_C10D_NCCL)
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
    nccl_options->timeout = options_.timeout();
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store_);
    const int r = static_cast<int>(rank), n = static_cast<int>(size);
    return as_process_group(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, r, n, nccl_options), prefixed, r, n);
#else
    throw ConfigError("NCCL was asked for, but this build has no CUDA/NCCL LibTorch");
#endif
  }
  return make_gloo(store_, prefix, static_cast<int>(rank), static_cast<int>(size),
                   options_.timeout(), env_.master_addr);
}

void Context::make_groups() {
  world_ = make_gloo(store_, "gpipe/world", env_.rank, env_.world_size, options_.timeout(),
                     env_.master_addr);
  pipeline_ = make_group(c10::str("gpipe/pp/", replica()), device(), options_.devices());
  data_parallel_ = make_group(c10::str("gpipe/dp/", device()), replica(), replicas());
  if (options_.sync_batchnorm())
    statistics_ = make_group(c10::str("gpipe/bn/", device()), replica(), replicas());
}

Context::~Context() {
  stopping_ = true;
  if (watchdog_.joinable()) watchdog_.join();
  if (aborted_) return;
  // Rank 0 hosts the store: it leaves last, once every rank has stopped using it.
  try {
    store_->add("gpipe/done", 1);
    if (env_.rank == 0) {
      const auto deadline = std::chrono::steady_clock::now() + options_.timeout();
      while (store_->add("gpipe/done", 0) < env_.world_size &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  } catch (const std::exception&) {
    // The store is gone: nothing left to coordinate.
  }
}

std::string Context::describe(int rank) const {
  const int64_t K = options_.devices();
  return c10::str("rank ", rank, " (device ", rank % K, ", replica ", rank / K, ")");
}

void Context::register_rank() {
  // On a bad rank set-up, say why in the store (so every process stops with the same message)
  // and, on rank 0, keep the store up a moment so the others can read it.
  auto refuse = [&](const std::string& why) {
    try {
      store_->compareSet(kAbortKey, {}, string_to_bytes(why));
    } catch (const std::exception&) {
    }
    linger_for_peers();
    throw ConfigError(why);
  };
  const int64_t count = store_->add(c10::str("gpipe/rank/", env_.rank), 1);
  if (count != 1) {
    refuse(c10::str("RANK=", env_.rank,
                    " is claimed by more than one process: give every "
                    "process its own RANK in 0..",
                    env_.world_size - 1));
  }
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout();
  while (true) {
    std::vector<int> missing;
    for (int r = 0; r < env_.world_size; ++r) {
      const int64_t claims = store_->add(c10::str("gpipe/rank/", r), 0);
      if (claims > 1) {
        refuse(c10::str("RANK=", r, " is claimed by ", claims,
                        " processes: give every process its own RANK in 0..", env_.world_size - 1));
      }
      if (claims == 0) missing.push_back(r);
    }
    if (missing.empty()) return;
    if (store_->check({kAbortKey})) throw ConfigError(bytes_to_string(store_->get(kAbortKey)));
    if (std::chrono::steady_clock::now() > deadline) {
      throw DistributedError(
          c10::str("rank ", env_.rank, " waited ", options_.timeout().count() / 1000.0,
                   " s for ranks ", c10::Join(",", missing), " of WORLD_SIZE=", env_.world_size,
                   " to join; they never did"),
          missing.front());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace gpipe::distributed
