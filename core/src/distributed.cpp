#include "gpipe/distributed.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <set>

#if defined(GPIPE_WITH_CUDA) && defined(USE_C10D_NCCL)
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace gpipe::distributed {
namespace {

constexpr const char* kAbortKey = "gpipe/abort";
constexpr int64_t kHeaderSize = 256;  // int64 words: count, then (defined, dtype, ndim, dims...)

int env_int(const char* name, int fallback, bool required) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    GPIPE_CHECK(!required, ConfigError, name,
                " is not set; a distributed run needs RANK, WORLD_SIZE, MASTER_ADDR and "
                "MASTER_PORT (scripts/launch.sh sets them, as torchrun does)");
    return fallback;
  }
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  GPIPE_CHECK(end != nullptr && *end == '\0', ConfigError, name, "='", value,
              "' is not an integer");
  return static_cast<int>(parsed);
}

std::string bytes_to_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

std::vector<uint8_t> string_to_bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
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
  return c10::make_intrusive<c10d::ProcessGroupGloo>(
      c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank, size, options);
}

}  // namespace

Env Env::from_environment() {
  Env env;
  env.rank = env_int("RANK", 0, true);
  env.world_size = env_int("WORLD_SIZE", 1, true);
  env.local_rank = env_int("LOCAL_RANK", env.rank, false);
  const char* addr = std::getenv("MASTER_ADDR");
  GPIPE_CHECK(addr != nullptr && *addr != '\0', ConfigError,
              "MASTER_ADDR is not set; give the address of the host that runs rank 0");
  env.master_addr = addr;
  env.master_port = env_int("MASTER_PORT", 0, true);
  GPIPE_CHECK(env.world_size >= 1, ConfigError, "WORLD_SIZE=", env.world_size, " must be >= 1");
  GPIPE_CHECK(env.rank >= 0 && env.rank < env.world_size, ConfigError, "RANK=", env.rank,
              " is outside 0..WORLD_SIZE-1 = 0..", env.world_size - 1);
  GPIPE_CHECK(env.master_port > 0 && env.master_port < 65536, ConfigError,
              "MASTER_PORT=", env.master_port, " is not a TCP port (1..65535)");
  return env;
}

Context::Context(const Env& env, ContextOptions options) : env_(env), options_(options) {
  const int64_t K = options_.stages();
  GPIPE_CHECK(K >= 1, ConfigError, "a distributed pipeline needs K >= 1 stages, got ", K);
  GPIPE_CHECK(env_.world_size % K == 0, ConfigError, "WORLD_SIZE=", env_.world_size,
              " is not a multiple of K=", K,
              " stages: the world must be K stages x R replicas (e.g. WORLD_SIZE=", 2 * K,
              " for R=2)");
  GPIPE_CHECK(options_.timeout().count() > 0, ConfigError, "the communication timeout must be > 0");
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
    const std::string what = e.what();
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
  register_rank();
  watchdog_ = std::thread([this] { watch(); });
  try {
    const auto& m = env_.master_addr;
    world_ = make_gloo(store_, "gpipe/world", env_.rank, env_.world_size, options_.timeout(), m);
    if (options_.nccl()) {
#if defined(GPIPE_WITH_CUDA) && defined(USE_C10D_NCCL)
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options_.timeout();
      pipeline_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>(c10::str("gpipe/pp/", replica()), store_),
          static_cast<int>(stage()), static_cast<int>(K), nccl_options);
      data_parallel_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(
          c10::make_intrusive<c10d::PrefixStore>(c10::str("gpipe/dp/", stage()), store_),
          static_cast<int>(replica()), static_cast<int>(replicas()), nccl_options);
#else
      throw ConfigError("NCCL was asked for, but this build has no CUDA/NCCL LibTorch");
#endif
    } else {
      pipeline_ = make_gloo(store_, c10::str("gpipe/pp/", replica()), static_cast<int>(stage()),
                            static_cast<int>(K), options_.timeout(), m);
      data_parallel_ =
          make_gloo(store_, c10::str("gpipe/dp/", stage()), static_cast<int>(replica()),
                    static_cast<int>(replicas()), options_.timeout(), m);
    }
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
        why.empty()
            ? c10::str("rank ", env_.rank, " could not connect its process groups: ", e.what())
            : why,
        -1);
  }
  spdlog::debug("rank {}: stage {} of {}, replica {} of {}", env_.rank, stage(), K, replica(),
                replicas());
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
  const int64_t K = options_.stages();
  return c10::str("rank ", rank, " (stage ", rank % K, ", replica ", rank / K, ")");
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

void Context::watch() {
  std::vector<int64_t> last(env_.world_size, -1);
  std::vector<std::chrono::steady_clock::time_point> changed(env_.world_size,
                                                             std::chrono::steady_clock::now());
  auto next_check = std::chrono::steady_clock::now();
  while (!stopping_) {
    try {
      watch_store_->add(c10::str("gpipe/heartbeat/", env_.rank), 1);
      if (!aborted_ && watch_store_->check({kAbortKey})) {
        record_abort(bytes_to_string(watch_store_->get(kAbortKey)));
      }
      const auto now = std::chrono::steady_clock::now();
      if (!aborted_ && now >= next_check) {
        next_check = now + std::chrono::seconds(1);
        for (int r = 0; r < env_.world_size; ++r) {
          const int64_t beats = watch_store_->add(c10::str("gpipe/heartbeat/", r), 0);
          if (beats != last[r]) {
            last[r] = beats;
            changed[r] = now;
          } else if (r != env_.rank && now - changed[r] > options_.timeout() &&
                     !watch_store_->check({c10::str("gpipe/done")})) {
            const std::string why =
                c10::str(describe(r), " was lost: its heartbeat stopped ",
                         std::chrono::duration<double>(now - changed[r]).count(),
                         " s ago (detected by ", describe(env_.rank), ")");
            record_abort(
                bytes_to_string(watch_store_->compareSet(kAbortKey, {}, string_to_bytes(why))));
          }
        }
      }
    } catch (const std::exception& e) {
      if (stopping_) return;
      record_abort(c10::str(describe(0),
                            " was lost: the rendezvous store it hosts stopped "
                            "answering (",
                            std::string(e.what()).substr(0, 200), ")"));
    }
    std::this_thread::sleep_for(options_.heartbeat());
  }
}

void Context::record_abort(const std::string& why) {
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (aborted_) return;
    abort_reason_ = why;
    aborted_ = true;
    handler = abort_handler_;
  }
  if (handler) handler(why);
}

void Context::set_abort_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(mutex_);
  abort_handler_ = std::move(handler);
}

bool Context::aborted(std::string* why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (why != nullptr) *why = abort_reason_;
  return aborted_;
}

std::string Context::abort_reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return abort_reason_;
}

std::vector<int> Context::stale_ranks() {
  std::vector<int64_t> before;
  for (int r = 0; r < env_.world_size; ++r) {
    before.push_back(store_->add(c10::str("gpipe/heartbeat/", r), 0));
  }
  std::this_thread::sleep_for(options_.heartbeat() * 4);
  std::vector<int> stale;
  for (int r = 0; r < env_.world_size; ++r) {
    if (r != env_.rank && store_->add(c10::str("gpipe/heartbeat/", r), 0) == before[r]) {
      stale.push_back(r);
    }
  }
  return stale;
}

void Context::fail(const std::string& what, int suspect) {
  std::string reason;
  int lost = suspect;
  try {
    if (store_->check({kAbortKey})) {
      reason = bytes_to_string(store_->get(kAbortKey));
    } else {
      const auto stale = stale_ranks();
      if (!stale.empty()) lost = stale.front();
      const std::string mine =
          lost >= 0 ? c10::str(describe(lost), " was lost (", describe(env_.rank), ": ", what, ")")
                    : c10::str(describe(env_.rank), ": ", what);
      reason = bytes_to_string(store_->compareSet(kAbortKey, {}, string_to_bytes(mine)));
    }
  } catch (const std::exception&) {
    lost = 0;
    reason = c10::str(describe(0), " was lost: the rendezvous store it hosts is gone (",
                      describe(env_.rank), ": ", what, ")");
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_) {
      abort_reason_ = reason;
      aborted_ = true;
    }
  }
  throw DistributedError(reason, lost);
}

void Context::linger_for_peers() const {
  if (env_.rank == 0) std::this_thread::sleep_for(options_.heartbeat() * 6);
}

void Context::announce_failure(const std::string& what) {
  try {
    const std::string why = c10::str(describe(env_.rank), " failed: ", what);
    record_abort(bytes_to_string(store_->compareSet(kAbortKey, {}, string_to_bytes(why))));
  } catch (const std::exception&) {
    // The store is gone too; the peers will notice the silence.
  }
}

torch::Tensor Context::all_reduce(c10d::ProcessGroup& group, torch::Tensor tensor,
                                  const char* what) {
  std::vector<at::Tensor> tensors{std::move(tensor)};
  try {
    auto work = group.allreduce(tensors);
    work->wait(options_.timeout());
  } catch (const DistributedError&) {
    throw;
  } catch (const std::exception& e) {
    fail(c10::str(what, " failed: ", std::string(e.what()).substr(0, 300)), -1);
  }
  return tensors[0];
}

int64_t Context::global_batch(int64_t local) {
  if (replicas() == 1) return local;
  return all_reduce(*data_parallel_, torch::full({1}, local, torch::kLong), "summing batch sizes")
      .item<int64_t>();
}

std::pair<double, bool> Context::reduce_loss(double local_partial, bool local_ok) {
  auto values =
      torch::tensor({local_ok ? local_partial : 0.0, local_ok ? 0.0 : 1.0}, torch::kDouble);
  values = all_reduce(*world_, values, "reducing the loss");
  return {values[0].item<double>(), values[1].item<double>() == 0.0};
}

void Context::reduce_gradients(const std::vector<torch::Tensor>& grads) {
  if (replicas() == 1 || grads.empty()) return;
  // One flat buffer per dtype: one collective instead of one per parameter.
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
  for (const auto& g : grads)
    by_type[g.scalar_type()].push_back(g);
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> flat;
    for (const auto& g : group)
      flat.push_back(g.reshape({-1}));
    auto buffer = all_reduce(*data_parallel_, torch::cat(flat), "summing gradients over replicas");
    int64_t offset = 0;
    for (auto& g : group) {
      g.copy_(buffer.narrow(0, offset, g.numel()).view_as(g));
      offset += g.numel();
    }
  }
}

double Context::sum_over_stages(double local) {
  // Every replica holds the same reduced gradients: sum over the world, divide by R.
  const auto total = all_reduce(*world_, torch::full({1}, local, torch::kDouble), "summing norms");
  return total.item<double>() / static_cast<double>(replicas());
}

void Context::barrier() {
  all_reduce(*world_, torch::zeros({1}), "barrier");
}

// ---------------------------------------------------------------------------------------------

struct ProcessGroupTransport::Receiver {
  std::deque<MessageKey> queue;
  std::thread thread;
  bool stop = false;
};

ProcessGroupTransport::ProcessGroupTransport(Context& context) : context_(context) {}

ProcessGroupTransport::~ProcessGroupTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [peer, receiver] : receivers_)
      receiver->stop = true;
  }
  cv_.notify_all();
  for (auto& [peer, receiver] : receivers_) {
    // A receiver blocked inside a receive whose peer is gone cannot be interrupted; the process
    // is ending with an error in that case, so let it go.
    if (context_.aborted()) {
      receiver->thread.detach();
    } else {
      receiver->thread.join();
    }
  }
}

int ProcessGroupTransport::tag(const MessageKey& key, int piece) {
  const int64_t step = key.step & 0x3F;
  const int64_t m = key.microbatch & 0x3FFF;
  const int64_t dir = key.direction == Direction::kForward ? 0 : 1;
  return static_cast<int>((((step * 16384 + m) * 2 + dir) * 32) + (piece & 31));
}

void ProcessGroupTransport::send(int64_t from, int64_t to, const MessageKey& key,
                                 Activations tensors) {
  auto header = torch::zeros({kHeaderSize}, torch::kLong);
  auto* h = header.data_ptr<int64_t>();
  int64_t at = 0;
  h[at++] = static_cast<int64_t>(tensors.size());
  std::vector<torch::Tensor> pieces{header};
  for (const auto& t : tensors) {
    GPIPE_CHECK(at + 3 + (t.defined() ? t.dim() : 0) < kHeaderSize, ConfigError,
                "a stage boundary carries too many tensors or dimensions for one message (",
                tensors.size(), " tensors)");
    h[at++] = t.defined() ? 1 : 0;
    if (!t.defined()) continue;
    h[at++] = static_cast<int64_t>(t.scalar_type());
    h[at++] = t.dim();
    for (int64_t d : t.sizes())
      h[at++] = d;
    // Gloo sends CPU tensors; NCCL sends device tensors as they are.
    const bool gloo = context_.pipeline_group().getBackendName() == "gloo";
    pieces.push_back(t.is_cuda() && gloo ? t.cpu().contiguous() : t.contiguous());
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::vector<at::Tensor> one{pieces[i]};
    try {
      auto work =
          context_.pipeline_group().send(one, static_cast<int>(to), tag(key, static_cast<int>(i)));
      std::lock_guard<std::mutex> lock(mutex_);
      sends_.emplace_back(std::move(work), std::move(one));
    } catch (const std::exception& e) {
      context_.fail(c10::str("sending to ", context_.describe(context_.global_rank(to)), ": ",
                             std::string(e.what()).substr(0, 300)),
                    context_.global_rank(to));
    }
  }
  // Forget completed sends so their tensors can be freed.
  std::lock_guard<std::mutex> lock(mutex_);
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                              [](const auto& s) { return s.first->isCompleted(); }),
               sends_.end());
}

Activations ProcessGroupTransport::receive_message(int64_t peer, const MessageKey& key) {
  auto& group = context_.pipeline_group();
  const int global = context_.global_rank(peer);
  auto wait = [&](std::vector<at::Tensor>& tensors, int piece) {
    try {
      auto work = group.recv(tensors, static_cast<int>(peer), tag(key, piece));
      work->wait(context_.timeout());
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& e) {
      context_.fail(c10::str("waiting for ",
                             key.direction == Direction::kForward ? "activations" : "gradients",
                             " of micro-batch ", key.microbatch, " of step ", key.step, " from ",
                             context_.describe(global), ": ", std::string(e.what()).substr(0, 300)),
                    global);
    }
  };
  std::vector<at::Tensor> header{torch::empty({kHeaderSize}, torch::kLong)};
  wait(header, 0);
  const auto* h = header[0].data_ptr<int64_t>();
  int64_t at = 0;
  const int64_t count = h[at++];
  GPIPE_CHECK(count >= 0 && count < kHeaderSize, Error, "corrupt message header from ",
              context_.describe(global));
  Activations out;
  int piece = 1;
  for (int64_t i = 0; i < count; ++i) {
    if (h[at++] == 0) {
      out.emplace_back();
      continue;
    }
    const auto dtype = static_cast<c10::ScalarType>(h[at++]);
    const int64_t dims = h[at++];
    std::vector<int64_t> sizes(h + at, h + at + dims);
    at += dims;
    std::vector<at::Tensor> data{torch::empty(sizes, torch::TensorOptions().dtype(dtype))};
    wait(data, piece++);
    out.push_back(data[0]);
  }
  return out;
}

void ProcessGroupTransport::begin_stage(int64_t stage, int64_t stages,
                                        const std::vector<Action>& actions, int64_t step,
                                        bool training) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& a : actions) {
    int64_t peer = -1;
    MessageKey key{step, a.microbatch, Direction::kForward};
    if (a.kind == ActionKind::kForward && stage > 0) {
      peer = stage - 1;
    } else if (a.kind == ActionKind::kBackward && training && stage < stages - 1) {
      peer = stage + 1;
      key.direction = Direction::kBackward;
    }
    if (peer < 0) continue;
    auto& receiver = receivers_[peer];
    if (!receiver) {
      receiver = std::make_unique<Receiver>();
      Receiver* r = receiver.get();
      receiver->thread = std::thread([this, r, peer] {
        while (true) {
          MessageKey next;
          {
            std::unique_lock<std::mutex> guard(mutex_);
            cv_.wait(guard, [&] { return r->stop || !r->queue.empty(); });
            if (r->stop) return;
            next = r->queue.front();
            r->queue.pop_front();
          }
          try {
            auto message = receive_message(peer, next);
            std::lock_guard<std::mutex> guard(mutex_);
            mailbox_[{peer, next.step, next.microbatch, static_cast<int>(next.direction)}] =
                std::move(message);
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> guard(mutex_);
            if (error_.empty()) error_ = e.what();
          }
          cv_.notify_all();
        }
      });
    }
    receiver->queue.push_back(key);
  }
  cv_.notify_all();
}

Activations ProcessGroupTransport::recv(int64_t from, int64_t to, const MessageKey& key) {
  const auto where =
      std::make_tuple(from, key.step, key.microbatch, static_cast<int>(key.direction));
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (auto it = mailbox_.find(where); it != mailbox_.end()) {
      auto message = std::move(it->second);
      mailbox_.erase(it);
      return message;
    }
    if (!error_.empty()) throw DistributedError(error_, context_.global_rank(from));
    std::string why;
    if (aborted_ || context_.aborted(&why)) {
      throw AbortedError(why.empty() ? "the step was aborted" : why);
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

void ProcessGroupTransport::end_stage(int64_t stage) {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::vector<torch::Tensor>>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(sends_);
  }
  for (auto& [work, tensors] : pending) {
    try {
      work->wait(context_.timeout());
    } catch (const std::exception& e) {
      context_.fail(c10::str("stage ", stage,
                             " could not finish its sends: ", std::string(e.what()).substr(0, 300)),
                    -1);
    }
  }
}

void ProcessGroupTransport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_ = true;
  }
  cv_.notify_all();
  context_.announce_failure(reason);
}

void ProcessGroupTransport::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  mailbox_.clear();
  aborted_ = false;
}

}  // namespace gpipe::distributed
