// ProcessGroupTransport: the pipeline's activations and gradients between ranks over c10d
// point-to-point (declared in distributed.h). Apart from Context because it is the data path,
// Context the control path: a message is a fixed-size header (tensor count, then defined, dtype,
// rank and sizes of each) followed by the tensors, received ahead by one thread per peer.
#include <spdlog/spdlog.h>

#include <optional>
#include <vector>

#include "gpipe/distributed.h"
#include "gpipe/fault_injection.h"

namespace gpipe::distributed {
namespace {

constexpr int64_t kHeaderSize = 256;  // int64 words: count, then (defined, dtype, ndim, dims...)

// One tensor of a message as its header describes it.
struct TensorSpec {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
};

// The tensors a message header announces (nullopt: an undefined tensor). Every field is checked
// before use: a corrupt header ends the step naming `sender`.
std::vector<std::optional<TensorSpec>> parse_header(const int64_t* h, const std::string& sender) {
  auto corrupt = [&](const char* what) {
    return c10::str("corrupt message header from ", sender, ": ", what);
  };
  int64_t at = 0;
  const int64_t count = h[at++];
  GPIPE_CHECK(count >= 0 && count < kHeaderSize, Error, "corrupt message header from ", sender);
  std::vector<std::optional<TensorSpec>> specs;
  for (int64_t i = 0; i < count; ++i) {
    GPIPE_CHECK(at + 3 <= kHeaderSize, Error, corrupt("more tensors than the header holds"));
    if (h[at++] == 0) {
      specs.emplace_back();
      continue;
    }
    const int64_t type = h[at++];
    GPIPE_CHECK(type >= 0 && type < static_cast<int64_t>(c10::ScalarType::NumOptions), Error,
                corrupt("unknown dtype"));
    const int64_t dims = h[at++];
    GPIPE_CHECK(dims >= 0 && at + dims <= kHeaderSize, Error, corrupt("bad dimension count"));
    std::vector<int64_t> sizes(h + at, h + at + dims);
    for (int64_t d : sizes)
      GPIPE_CHECK(d >= 0, Error, corrupt("negative size"));
    at += dims;
    specs.push_back(TensorSpec{static_cast<c10::ScalarType>(type), std::move(sizes)});
  }
  return specs;
}

}  // namespace

struct ProcessGroupTransport::Receiver {
  std::deque<std::pair<MessageKey, int64_t>> queue;  // key, sequence number
  std::thread thread;
  bool stop = false;
  c10::intrusive_ptr<c10d::Work> pending;  // the receive in progress, so closing can abort it
};

ProcessGroupTransport::ProcessGroupTransport(Context& context) : context_(context) {}

ProcessGroupTransport::~ProcessGroupTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [peer, receiver] : receivers_) {
      receiver->stop = true;
      // A receive whose peer is gone would block until the timeout: abort it so that the
      // thread, which refers to this transport, can be joined now.
      if (receiver->pending) receiver->pending->abort();
    }
  }
  cv_.notify_all();
  for (auto& [peer, receiver] : receivers_)
    receiver->thread.join();
}

int ProcessGroupTransport::tag(int64_t step, int64_t sequence, int piece) {
  GPIPE_CHECK(sequence >= 0 && sequence < (1 << 14), ConfigError, "message ", sequence,
              " of one step between two devices: at most 16384 fit the tag space");
  GPIPE_CHECK(piece >= 0 && piece < (1 << 8), ConfigError, "a message of ", piece,
              " pieces: at most 256 fit the tag space");
  return static_cast<int>(((step & 0xFF) << 22) | (sequence << 8) | piece);
}

void ProcessGroupTransport::send(int64_t from, int64_t to, const MessageKey& key,
                                 Activations tensors) {
  if (from == to) {
    mailbox_.put(key, std::move(tensors));
    return;
  }
  int64_t sequence = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = send_sequence_.find(key);
    GPIPE_CHECK(it != send_sequence_.end(), ConfigError, "stage ", key.from_stage,
                " sends micro-batch ", key.microbatch, " to stage ", key.to_stage,
                ", which this step's schedule does not list");
    sequence = it->second;
    if (key.direction == Direction::kForward) {
      auto& shapes = sent_shapes_[key];
      shapes.clear();
      for (const auto& t : tensors)
        shapes.push_back(t.defined() ? t.sizes().vec() : std::vector<int64_t>{});
    }
  }
  // Tests: rank R sends gradients with one row too many (header and data agreeing), or a header
  // no receiver can parse, as a peer with a defect would.
  static const bool wrong_shape = fault_injected("wrong-shape", context_.rank());
  static const bool bad_header = fault_injected("bad-header", context_.rank());
  if (wrong_shape && key.direction == Direction::kBackward && !tensors.empty() &&
      tensors[0].defined() && tensors[0].dim() > 0) {
    tensors[0] = torch::cat({tensors[0], tensors[0].narrow(0, 0, 1)});
  }
  auto header = torch::zeros({kHeaderSize}, torch::kLong);
  auto* h = header.data_ptr<int64_t>();
  int64_t at = 0;
  h[at++] = static_cast<int64_t>(tensors.size());
  std::vector<torch::Tensor> pieces{header};
  // Gloo sends CPU tensors; NCCL sends device tensors as they are.
  const bool gloo = is_gloo(context_.pipeline_group());
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
    pieces.push_back(t.is_cuda() && gloo ? t.cpu().contiguous() : t.contiguous());
  }
  if (bad_header) h[0] = kHeaderSize + 1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::vector<at::Tensor> one{pieces[i]};
    try {
      auto work = context_.pipeline_group().send(one, static_cast<int>(to),
                                                 tag(key.step, sequence, static_cast<int>(i)));
      std::lock_guard<std::mutex> lock(mutex_);
      sends_.emplace_back(std::move(work), std::move(one));
    } catch (const std::exception& e) {
      context_.fail(c10::str("sending to ", context_.describe(context_.global_rank(to)), ": ",
                             error_message(e).substr(0, 300)),
                    {context_.global_rank(to)});
    }
  }
  // Forget completed sends so their tensors can be freed.
  std::lock_guard<std::mutex> lock(mutex_);
  sends_.erase(std::remove_if(sends_.begin(), sends_.end(),
                              [](const auto& s) { return s.first->isCompleted(); }),
               sends_.end());
}

Activations ProcessGroupTransport::receive_message(int64_t peer, const MessageKey& key,
                                                   int64_t sequence) {
  Receiver* r = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    r = receivers_.at(peer).get();
  }
  Receiver& receiver = *r;
  auto& group = context_.pipeline_group();
  const int global = context_.global_rank(peer);
  auto closing = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    receiver.pending.reset();
    return receiver.stop;
  };
  auto wait = [&](std::vector<at::Tensor>& tensors, int piece) {
    bool completed = false;
    try {
      auto work = group.recv(tensors, static_cast<int>(peer), tag(key.step, sequence, piece));
      {
        std::lock_guard<std::mutex> lock(mutex_);
        receiver.pending = work;
        if (receiver.stop) work->abort();
      }
      completed = work->wait(context_.timeout());
    } catch (const DistributedError&) {
      throw;
    } catch (const std::exception& e) {
      if (closing()) throw AbortedError("the transport is closing");
      context_.fail(c10::str("waiting for ",
                             key.direction == Direction::kForward ? "activations" : "gradients",
                             " of micro-batch ", key.microbatch, " of step ", key.step, " from ",
                             context_.describe(global), ": ", error_message(e).substr(0, 300)),
                    {global});
    }
    if (closing() || !completed) throw AbortedError("the transport is closing");
  };
  std::vector<at::Tensor> header{torch::empty({kHeaderSize}, torch::kLong)};
  wait(header, 0);
  const auto specs = parse_header(header[0].data_ptr<int64_t>(), context_.describe(global));
  // Gradients must have the shapes of the activations this rank sent forward for them.
  if (key.direction == Direction::kBackward) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sent_shapes_.find(
        MessageKey{key.step, key.to_stage, key.from_stage, key.microbatch, Direction::kForward});
    for (size_t i = 0; it != sent_shapes_.end() && i < specs.size() && i < it->second.size(); ++i) {
      const auto& expected = it->second[i];
      if (!specs[i] || expected.empty()) continue;
      GPIPE_CHECK(specs[i]->sizes == expected, Error, context_.describe(global), " sent stage ",
                  key.to_stage, " a gradient of shape ", c10::IntArrayRef(specs[i]->sizes),
                  " for output ", i, " of micro-batch ", key.microbatch, " of step ", key.step,
                  ", whose activations had shape ", c10::IntArrayRef(expected));
    }
  }
  Activations out;
  int piece = 1;
  for (const auto& spec : specs) {
    if (!spec) {
      out.emplace_back();
      continue;
    }
    std::vector<at::Tensor> data{
        torch::empty(spec->sizes, torch::TensorOptions().dtype(spec->dtype))};
    wait(data, piece++);
    out.push_back(data[0]);
  }
  return out;
}

void ProcessGroupTransport::begin_step(int64_t device, const Schedule& schedule, int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  send_sequence_.clear();
  sent_shapes_.clear();
  for (int64_t peer = 0; peer < schedule.devices; ++peer) {
    if (peer == device) continue;  // delivered locally, nothing to number
    // Messages between `device` and `peer`, numbered in the sender's list order.
    for (const bool outgoing : {true, false}) {
      const int64_t sender = outgoing ? device : peer;
      const int64_t receiver_device = outgoing ? peer : device;
      int64_t sequence = 0;
      for (const auto& a : schedule.actions[sender]) {
        const bool forward = a.kind == ActionKind::kSendForward;
        if (!forward && a.kind != ActionKind::kSendBackward) continue;
        if (schedule.device_of(a.peer) != receiver_device) continue;
        const MessageKey key{step, a.stage, a.peer, a.microbatch,
                             forward ? Direction::kForward : Direction::kBackward};
        if (outgoing) {
          send_sequence_[key] = sequence++;
          continue;
        }
        auto& receiver = receivers_[peer];
        if (!receiver) start_receiver(peer, receiver);
        receiver->queue.emplace_back(key, sequence++);
      }
    }
  }
  cv_.notify_all();
}

void ProcessGroupTransport::start_receiver(int64_t peer, std::unique_ptr<Receiver>& receiver) {
  receiver = std::make_unique<Receiver>();
  Receiver* r = receiver.get();
  receiver->thread = std::thread([this, r, peer] {
    while (true) {
      std::pair<MessageKey, int64_t> next;
      {
        std::unique_lock<std::mutex> guard(mutex_);
        cv_.wait(guard, [&] { return r->stop || !r->queue.empty(); });
        if (r->stop) return;
        next = r->queue.front();
        r->queue.pop_front();
      }
      try {
        mailbox_.put(next.first, receive_message(peer, next.first, next.second));
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> guard(mutex_);
          if (error_.empty()) error_ = error_message(e);
        }
        mailbox_.notify();  // the waiting receives see the error now, not at their next poll
      }
    }
  });
}

Activations ProcessGroupTransport::recv(int64_t from, int64_t /*to*/, const MessageKey& key) {
  // While waiting: a receiver's failure, or another process's announced by the context.
  return mailbox_.take(key, [&] {
    std::string error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error = error_;
    }
    if (!error.empty()) throw DistributedError(error, context_.global_rank(from));
    std::string why;
    if (context_.aborted(&why)) throw AbortedError(why.empty() ? "the step was aborted" : why);
  });
}

void ProcessGroupTransport::end_step(int64_t device) {
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, std::vector<torch::Tensor>>> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(sends_);
  }
  for (auto& [work, tensors] : pending) {
    try {
      work->wait(context_.timeout());
    } catch (const std::exception& e) {
      context_.fail(c10::str("device ", device, " (", context_.describe(context_.rank()),
                             ") could not finish its sends: ", error_message(e).substr(0, 300)),
                    context_.peers_in(context_.pipeline_group()));
    }
  }
}

void ProcessGroupTransport::abort(const std::string& reason) {
  mailbox_.abort(reason);
  context_.announce_failure(reason);
}

void ProcessGroupTransport::reset() {
  mailbox_.reset();
}

}  // namespace gpipe::distributed
