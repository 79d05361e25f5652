#include "plan/rank_launcher.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpipe/distributed.h"
#include "gpipe/errors.h"

extern char** environ;

namespace gpipe::plan {
namespace {

// The last `n` lines of a file.
std::string tail(const std::string& path, int n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0; i < lines.size();
       ++i)
    out += "\n  " + lines[i];
  return out;
}

// The ranks being waited for and the files they write, for the signal handler below: a signal
// that ends the planner must not orphan its ranks or leave their folder behind. Filled before
// the handler is installed and read only by it (async-signal-safe calls only: kill, waitpid,
// unlink, rmdir, raise).
struct Launch {
  std::vector<pid_t> pids;
  std::vector<std::string> files;  // removed, then the folder
  std::string folder;
};
Launch* running = nullptr;

extern "C" void end_launch(int signal_number) {
  if (running != nullptr) {
    for (const pid_t pid : running->pids)
      ::kill(pid, SIGKILL);
    for (const pid_t pid : running->pids)
      ::waitpid(pid, nullptr, 0);
    for (const auto& file : running->files)
      ::unlink(file.c_str());
    ::rmdir(running->folder.c_str());
  }
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}

// Installs end_launch for the signals that end a program from outside while `launch` runs, and
// restores the previous handlers when destroyed.
class LaunchGuard {
 public:
  explicit LaunchGuard(Launch& launch) {
    running = &launch;
    struct sigaction action {};
    action.sa_handler = end_launch;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i)
      ::sigaction(kSignals[i], &action, &previous_[i]);
  }
  ~LaunchGuard() {
    for (size_t i = 0; i < kSignals.size(); ++i)
      ::sigaction(kSignals[i], &previous_[i], nullptr);
    running = nullptr;
  }
  LaunchGuard(const LaunchGuard&) = delete;
  LaunchGuard& operator=(const LaunchGuard&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};
  std::array<struct sigaction, 3> previous_{};
};

// The files a signal's clean-up removes: the ranks' logs and whatever they were told to write
// in `log_dir`, with room reserved for the temporary names files.h writes them through.
Launch plan_launch(const std::vector<std::string>& args, int world, const std::string& log_dir) {
  Launch launch;
  launch.folder = log_dir;
  for (int rank = 0; rank < world; ++rank)
    launch.files.push_back(log_dir + "/rank" + std::to_string(rank) + ".log");
  for (const auto& a : args) {
    if (std::filesystem::path(a).parent_path() == std::filesystem::path(log_dir)) {
      launch.files.push_back(a);
    }
  }
  launch.pids.reserve(static_cast<size_t>(world));
  launch.files.reserve(launch.files.size() * (static_cast<size_t>(world) + 1));
  return launch;
}

// This process's environment less the variables each rank gets its own value of.
std::vector<std::string> inherited_environment() {
  std::vector<std::string> inherited;
  static const char* kOwn[] = {
      "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=", "MASTER_PORT="};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool own = false;
    for (const char* prefix : kOwn)
      own = own || entry.rfind(prefix, 0) == 0;
    if (!own) inherited.push_back(entry);
  }
  return inherited;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

void run_ranks(const std::string& program, const std::vector<std::string>& args, int world,
               const std::string& log_dir) {
  GPIPE_CHECK(world >= 1, ConfigError, "a run needs at least one rank, got ", world);
  std::filesystem::create_directories(log_dir);
  const std::string port = std::to_string(distributed::free_local_port());
  // Everything the children need is built before fork: between fork and exec a child of a
  // multi-threaded process may only make async-signal-safe calls.
  const auto inherited = inherited_environment();
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  Launch launch = plan_launch(args, world, log_dir);
  const pid_t parent = ::getpid();
  LaunchGuard guard(launch);
  auto& pids = launch.pids;
  std::vector<std::string> logs;
  for (int rank = 0; rank < world; ++rank) {
    auto env = inherited;
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", port}})
      env.push_back(name + "=" + value);
    std::vector<char*> envp;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    logs.push_back(log_dir + "/rank" + std::to_string(rank) + ".log");
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t started : pids)
        ::kill(started, SIGTERM);
      for (pid_t started : pids)
        ::waitpid(started, nullptr, 0);
      throw Error(std::string("cannot start rank ") + std::to_string(rank) + ": " +
                  std::strerror(errno));
    }
    if (pid == 0) {
      // The rank dies with the planner, however the planner ends (SIGKILL included).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      const int fd = ::open(logs.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, STDOUT_FILENO);
        ::dup2(fd, STDERR_FILENO);
        ::close(fd);
      }
      ::execve(program.c_str(), argv.data(), envp.data());
      ::_exit(127);  // exec failed
    }
    // A signal now stops every rank started so far (pids has room: no allocation here).
    pids.push_back(pid);
  }
  for (const pid_t pid : pids) {  // the temporary names the ranks write through (files.h)
    for (const auto& a : args) {
      if (std::filesystem::path(a).parent_path() == std::filesystem::path(log_dir))
        launch.files.push_back(a + ".tmp." + std::to_string(pid));
    }
  }
  int failed = -1, failed_status = 0;
  for (int rank = 0; rank < world; ++rank) {
    int status = 0;
    while (::waitpid(pids[rank], &status, 0) < 0 && errno == EINTR) {
    }
    if (failed < 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      failed = rank;
      failed_status = status;
    }
  }
  GPIPE_CHECK(failed < 0, Error, "rank ", failed, " of ", world, " (", program, ") ",
              describe_status(failed_status), "; the end of ", logs[failed], ":",
              tail(logs[failed], 5));
}

void verify_in_processes(Plan& plan, const std::string& train_program,
                         const std::vector<std::string>& train_args, int warmup, int steps) {
  GPIPE_CHECK(std::filesystem::exists(train_program), ConfigError, "verifying ",
              plan.shape.describe(), " runs ", train_program,
              ", which is missing: build gpipe_train beside gpipe_plan");
  const auto dir =
      std::filesystem::temp_directory_path() / ("gpipe_plan_verify_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto summary = (dir / "summary.json").string();
  auto args = train_args;
  for (const auto& f : to_flags(plan.shape))
    args.push_back(f);
  args.insert(args.end(), {"--distributed", "--steps", std::to_string(warmup + steps), "--json",
                           summary, "--progress", "off", "--eval-every", "-1"});
  const int world = static_cast<int>(plan.shape.K * plan.shape.R);
  spdlog::info("running {} as {} processes (logs in {})", plan.shape.describe(), world,
               dir.string());
  run_ranks(train_program, args, world, dir.string());
  std::ifstream in(summary);
  GPIPE_CHECK(in.good(), Error, "rank 0 wrote no summary at ", summary);
  const auto json = nlohmann::json::parse(in);
  const auto seconds = json.at("step_seconds").get<std::vector<double>>();
  GPIPE_CHECK(static_cast<int>(seconds.size()) == warmup + steps, Error, "rank 0 reported ",
              seconds.size(), " steps, expected ", warmup + steps);
  std::vector<double> timed;
  for (size_t i = static_cast<size_t>(warmup); i < seconds.size(); ++i)
    timed.push_back(seconds[i] * 1e3);
  add_measurement(plan, timed, json.at("peak_memory_bytes_per_device").get<std::vector<int64_t>>());
  std::filesystem::remove_all(dir);
}

}  // namespace gpipe::plan
