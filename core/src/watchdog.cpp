// The watchdog of a distributed Context: every rank beats a heartbeat counter in the store; a
// rank that sees a peer fail (a closed connection, a timeout, a silent heartbeat) names the lost
// rank under the store's abort key, first writer wins, so every survivor reports the same rank.
#include "gpipe/distributed.h"

#include <algorithm>
#include <thread>

#include "store_keys.h"

namespace gpipe::distributed {

using store_keys::bytes_to_string;
using store_keys::kAbortKey;
using store_keys::string_to_bytes;

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
                            error_message(e).substr(0, 200), ")"));
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
  // A rank whose counter does not move over four heartbeats is stale. A live rank starved of CPU
  // can miss that window too, so while more than one looks stale they are watched a while
  // longer: a dead rank never beats again.
  auto beats = [&](int r) { return store_->add(c10::str("gpipe/heartbeat/", r), 0); };
  std::vector<int64_t> before;
  for (int r = 0; r < env_.world_size; ++r)
    before.push_back(beats(r));
  std::vector<int> stale;
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(options_.heartbeat() * 4);
    stale.clear();
    for (int r = 0; r < env_.world_size; ++r) {
      if (r != env_.rank && beats(r) == before[r]) stale.push_back(r);
    }
    if (stale.size() <= 1) break;
  }
  return stale;
}

int choose_lost_rank(const std::vector<int>& stale, const std::vector<int>& suspects) {
  for (int r : stale) {
    if (std::find(suspects.begin(), suspects.end(), r) != suspects.end()) return r;
  }
  if (!stale.empty()) return stale.front();
  return suspects.size() == 1 ? suspects.front() : -1;
}

std::vector<int> Context::peers_in(const c10d::ProcessGroup& group) const {
  std::vector<int> peers;
  if (&group == pipeline_.get()) {
    for (int64_t d = 0; d < devices(); ++d)
      if (d != device()) peers.push_back(global_rank(d));
  } else if (&group == data_parallel_.get() || &group == statistics_.get()) {
    for (int64_t r = 0; r < replicas(); ++r)
      if (r != replica()) peers.push_back(rank_of(r, device()));
  } else {
    for (int r = 0; r < env_.world_size; ++r)
      if (r != env_.rank) peers.push_back(r);
  }
  return peers;
}

void Context::fail(const std::string& what, const std::vector<int>& suspects) {
  std::string reason;
  int lost = choose_lost_rank({}, suspects);  // the only suspect, until heartbeats are read
  try {
    if (store_->check({kAbortKey})) {
      reason = bytes_to_string(store_->get(kAbortKey));
    } else {
      lost = choose_lost_rank(stale_ranks(), suspects);
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

}  // namespace gpipe::distributed
