// Pipelines across processes and hosts, on c10d.
//
// Why this file exists: when a model outgrows one machine its stages run in separate processes,
// and whole pipelines are replicated for data parallelism. Everything here is PyTorch's own
// distributed engine, c10d: a TCPStore for rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, LOCAL_RANK, as torchrun sets them) and ProcessGroups for messages — Gloo on CPU,
// NCCL on CUDA where LibTorch has it. No home-made socket layer.
//
// Layout: world = K stages x R replicas, rank = replica * K + stage. Each replica's K ranks form
// a pipeline group (its rank in it is the stage), each stage's R ranks a data-parallel group.
//
// Faults: every rank beats a heartbeat counter in the store. A rank that sees a peer fail (a
// closed connection, a timeout, a silent heartbeat) names the lost rank in the store's abort
// key; every other rank's watchdog sees the key and aborts with the same message, so all exit
// within the timeout, and none waits forever.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpipe/errors.h"
#include "gpipe/step_collectives.h"
#include "gpipe/transport.h"
#include "gpipe/world.h"

namespace gpipe::distributed {

// A peer rank was lost or a collective failed. `lost_rank` is -1 when unknown.
class DistributedError : public Error {
 public:
  DistributedError(const std::string& what, int lost_rank) : Error(what), lost_rank_(lost_rank) {}
  int lost_rank() const { return lost_rank_; }

 private:
  int lost_rank_;
};

// torchrun's environment.
struct Env {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;

  // Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; ConfigError names what is
  // missing or malformed.
  static Env from_environment();
};

// A TCP port on 127.0.0.1 that nothing listens on now (the kernel's pick for port 0), for a
// MASTER_PORT of ranks started on this host. Throws gpipe::Error when no socket can be had.
int free_local_port();

// Whom a failure blames: the first stale rank (heartbeat stopped) among `suspects` (the ranks
// whose loss explains the failure), else the first stale rank (a peer can fail because a third
// rank died), else the only suspect; -1 when none can be named. A live rank starved of CPU can
// look stale beside the dead one, which is why the suspects come first.
int choose_lost_rank(const std::vector<int>& stale, const std::vector<int>& suspects);

// One Gloo group of `size` ranks that all live in this process (rendezvous in a HashStore,
// messages over loopback): element r is rank r. For timing a collective without starting
// processes (the planner measures the gradient all-reduce with it). The ranks are built on
// threads of their own, as each one's construction waits for the others.
std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> local_gloo_group(
    int size, std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Whether `group` sends through Gloo (CPU tensors; NCCL takes device tensors as they are).
bool is_gloo(const c10d::ProcessGroup& group);

// Starts a sum of `tensors` over `group` and returns its work; the caller waits. LibTorch 2.x
// keeps one c10d flight recorder per process, and a Gloo collective's start looks up and inserts
// its group's record in a std::map outside the recorder's lock, so threads starting collectives
// on different groups at once corrupt that map (core_tests crashed so in a CI's LibTorch 2.11
// run). This serialises the starts of Gloo collectives, which never block; the waits stay
// parallel. Every all-reduce of the library starts here.
c10::intrusive_ptr<c10d::Work> start_all_reduce(c10d::ProcessGroup& group,
                                                std::vector<at::Tensor>& tensors);

struct ContextOptions {
  /* implicit */ ContextOptions(int64_t devices) : devices_(devices) {}
  TORCH_ARG(int64_t, devices);  // K: the devices of one pipeline, one rank each
  // How long a rank waits for a peer (rendezvous, messages, collectives) before naming it lost.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::seconds(60);
  // Heartbeat period; a peer silent for `timeout` is declared lost.
  TORCH_ARG(std::chrono::milliseconds, heartbeat) = std::chrono::milliseconds(250);
  // Use NCCL for the pipeline and data-parallel groups (CUDA builds only).
  TORCH_ARG(bool, nccl) = false;
  // Make the group synchronised BatchNorm sums its statistics over (one more per stage).
  TORCH_ARG(bool, sync_batchnorm) = false;
};

// One per process: the store, the process groups, the watchdog.
class Context : public StepCollectives, public World {
 public:
  Context(const Env& env, ContextOptions options);
  ~Context() override;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const override { return env_.rank; }
  int world_size() const { return env_.world_size; }
  int64_t devices() const { return options_.devices(); }
  int64_t replicas() const override { return env_.world_size / options_.devices(); }
  int64_t device() const override { return env_.rank % options_.devices(); }
  int64_t replica() const override { return env_.rank / options_.devices(); }
  // Global rank of `device` in `replica`'s pipeline (the layout above), and in this replica's.
  int rank_of(int64_t replica, int64_t device) const {
    return static_cast<int>(replica * devices() + device);
  }
  int global_rank(int64_t device) const { return rank_of(replica(), device); }
  std::chrono::milliseconds timeout() const { return options_.timeout(); }
  const Env& env() const { return env_; }
  std::string describe(int rank) const;  // "rank 3 (device 1, replica 1)"

  c10d::ProcessGroup& pipeline_group() { return *pipeline_; }
  c10d::ProcessGroup& data_parallel_group() { return *data_parallel_; }
  c10d::ProcessGroup& world_group() { return *world_; }

  // Before the first step: every rank publishes its `settings` (flag, value) in the store and
  // compares them with every other rank's. Where any differs, every rank throws the same
  // ConfigError naming each such setting with its value on each rank ("--balance: 2,2 on rank
  // 0, 1,3 on rank 1"), within the timeout: ranks started with different flags would otherwise
  // train a model that none of them describes.
  void check_same_settings(const std::vector<std::pair<std::string, std::string>>& settings);

  // Called (once, from the watchdog thread) when another rank declared a failure. The default
  // only records it: blocked transport calls then throw. A driver may log and exit instead.
  void set_abort_handler(std::function<void(const std::string&)> handler);
  // The recorded abort message, if any.
  bool aborted(std::string* why = nullptr) const;

  // Names the lost rank (the store's abort key if another rank already named one; else the
  // first of `suspects` whose heartbeat stopped, or the first rank whose heartbeat stopped; else
  // the only suspect), publishes it, and throws DistributedError. `suspects`: the ranks whose
  // loss can explain `what` (a message's peer, a collective's other members).
  [[noreturn]] void fail(const std::string& what, const std::vector<int>& suspects);
  // The other members of `group` (one of this Context's), as global ranks: whom a failed
  // collective or send over it can blame.
  std::vector<int> peers_in(const c10d::ProcessGroup& group) const;
  // Publishes a local failure so the other ranks stop waiting for this one.
  void announce_failure(const std::string& what);
  // Rank 0 hosts the store: before it exits on a failure it waits a few heartbeats, so that
  // every other rank reads why from the store rather than only seeing it vanish. No-op elsewhere.
  void linger_for_peers() const;

  // StepCollectives: sums over replicas / the world, with failures turned into fail().
  int64_t global_batch(int64_t local) override;
  std::pair<double, bool> reduce_loss(double local_partial, bool local_ok) override;
  void sum_gradient_bucket(torch::Tensor& flat) override;
  void sum_batchnorm_statistics(torch::Tensor& statistics) override;
  double sum_over_stages(double local) override;
  std::string abort_reason() const override;

  // World: sums over every rank, and a barrier (e.g. before the last rank tears the store
  // down); failures as DistributedError naming the lost rank.
  std::vector<double> sum_over_world(const std::vector<double>& values) override;
  void barrier() override;

 private:
  // Connects to the rendezvous store (rank 0 hosts it) and a second client for the watchdog.
  void connect_store();
  // The world, pipeline, data-parallel and (with sync_batchnorm) statistics groups.
  void make_groups();
  // One process group over the store under `prefix`: NCCL where asked for, else Gloo.
  c10::intrusive_ptr<c10d::ProcessGroup> make_group(const std::string& prefix, int64_t rank,
                                                    int64_t size);
  void register_rank();
  void watch();
  torch::Tensor all_reduce(c10d::ProcessGroup& group, torch::Tensor tensor, const char* what);
  // Sums a few numbers over `group` in one collective.
  std::vector<double> sum_scalars(c10d::ProcessGroup& group, const std::vector<double>& values,
                                  const char* what);
  std::vector<int> stale_ranks();
  void record_abort(const std::string& why);

  Env env_;
  ContextOptions options_;
  // sum_scalars' buffers, one per purpose. Declared before the process groups, so that those
  // (joining Gloo's worker threads) are destroyed first.
  std::map<std::string, torch::Tensor> scalar_buffers_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::Store> watch_store_;  // the watchdog's own client connection
  c10::intrusive_ptr<c10d::ProcessGroup> world_, pipeline_, data_parallel_;
  c10::intrusive_ptr<c10d::ProcessGroup> statistics_;  // with sync_batchnorm: a second DP group

  mutable std::mutex mutex_;
  std::string abort_reason_;
  std::function<void(const std::string&)> abort_handler_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

// Transport over the pipeline group: activations forward, gradients backward, each message a
// fixed-size header (count, dtypes, shapes) followed by the tensors. Sends are asynchronous;
// one receiver thread per peer device posts the step's receives ahead of need, in the order that
// peer's lowered list sends them, so communication overlaps with compute and no receive waits
// behind one its peer sends later. A message between two virtual stages of this rank is
// delivered locally.
class ProcessGroupTransport final : public Transport {
 public:
  explicit ProcessGroupTransport(Context& context);
  ~ProcessGroupTransport() override;

  void send(int64_t from, int64_t to, const MessageKey& key, Activations tensors) override;
  Activations recv(int64_t from, int64_t to, const MessageKey& key) override;
  void abort(const std::string& reason) override;
  void reset() override;
  void begin_step(int64_t device, const Schedule& schedule, int64_t step) override;
  void end_step(int64_t device) override;

  // Tag of piece `piece` (0 = header) of the `sequence`-th message one device sends another in
  // step `step`. Throws ConfigError past 16384 messages or 256 pieces.
  static int tag(int64_t step, int64_t sequence, int piece);

 private:
  struct Receiver;
  Activations receive_message(int64_t peer, const MessageKey& key, int64_t sequence);
  void start_receiver(int64_t peer, std::unique_ptr<Receiver>& receiver);  // mutex_ held

  Context& context_;
  Mailbox mailbox_;  // what the receivers (and sends to this device itself) delivered
  std::mutex mutex_;
  std::condition_variable cv_;                   // wakes the receivers
  std::map<MessageKey, int64_t> send_sequence_;  // this step's sends: their sequence numbers
  // This step's forward sends: the shapes the gradients that come back for them must have.
  std::map<MessageKey, std::vector<std::vector<int64_t>>> sent_shapes_;
  std::string error_;  // the first receiver's failure
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::vector<torch::Tensor>>> sends_;
  std::map<int64_t, std::unique_ptr<Receiver>> receivers_;  // by peer device
};

}  // namespace gpipe::distributed
