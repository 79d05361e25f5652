// ProcessGroupTransport: the pipeline's activations and gradients between ranks over c10d
// point-to-point (declared in distributed.h). Apart from Context because it is the data path,
// Context the control path: a message is a fixed-size header (tensor count, then defined, dtype,
// rank and sizes of each) followed by the tensors, received ahead by one thread per peer.
#include <spdlog/spdlog.h>

#include "gpipe/distributed.h"

namespace gpipe::distributed {
namespace {

constexpr int64_t kHeaderSize = 256;  // int64 words: count, then (defined, dtype, ndim, dims...)

}  // namespace

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
