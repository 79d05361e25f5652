// A fork server for hostile_inputs.py: starts a program once, then runs its main() in a fresh
// forked child for each case.
//
// Why this exists: a program of this project takes about half a second to start (LibTorch's
// shared libraries and their static initialisers), and cli.hostile_inputs runs two thousand
// cases that each end at their first flag. Started once and forked per case, a program pays
// that half second once; each child still runs the real main() with the case's argv, in its own
// process, working folder, limits and output files, and exits through exit() as a program does.
//
// LD_PRELOAD it into a program with GPIPE_HOSTILE_FORK_SERVER=1 in the environment (without it
// the program runs as usual). Both variables are removed before any case runs, so a case sees
// the environment a plain start would give it. The server refuses to run when the program has
// more than one thread at main() (forking a threaded process is unsafe).
//
// Protocol, on the server's stdin and stdout: a request is a count N and then N fields, each
// ended by a NUL byte: timeout in milliseconds, address-space limit in bytes (0: none), working
// folder, stdout file, stderr file, then argv (argv[0] first; fields may be empty). The answer
// is one line: "exit CODE", "signal NUMBER" or "timeout". End of input ends the server.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

using MainFunction = int (*)(int, char**, char**);
MainFunction real_main = nullptr;
constexpr const char* kSwitch = "GPIPE_HOSTILE_FORK_SERVER";

// One NUL-ended field from `in`; false at end of input.
bool read_field(FILE* in, std::string& field) {
  field.clear();
  for (int c = std::fgetc(in); c != EOF; c = std::fgetc(in)) {
    if (c == '\0') return true;
    field.push_back(static_cast<char>(c));
  }
  return false;
}

int thread_count() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  int count = 0;
  while (dirent* entry = readdir(tasks))
    count += entry->d_name[0] != '.';
  closedir(tasks);
  return count;
}

// In the child: the case's limits, folder and files, then the program's main().
[[noreturn]] void run_case(const std::vector<std::string>& fields, rlim_t memory) {
  if (memory > 0) {
    rlimit limit{memory, memory};
    setrlimit(RLIMIT_AS, &limit);
  }
  rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  const int in = open("/dev/null", O_RDONLY);
  const int out = open(fields[3].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int err = open(fields[4].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (in < 0 || out < 0 || err < 0 || chdir(fields[2].c_str()) != 0) _exit(125);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  close(in);
  close(out);
  close(err);
  std::vector<char*> argv;
  for (size_t i = 5; i < fields.size(); ++i)
    argv.push_back(const_cast<char*>(fields[i].c_str()));
  argv.push_back(nullptr);
  std::exit(real_main(static_cast<int>(argv.size()) - 1, argv.data(), environ));
}

// Waits for `child` up to `timeout_ms`; the answer line for it.
std::string wait_for(pid_t child, long timeout_ms) {
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child && WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
    if (done == child && WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
    if (done < 0 && errno != EINTR) return "signal 0";
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long elapsed_ms =
        (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (elapsed_ms > timeout_ms) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      return "timeout";
    }
    const timespec pause{0, 500000};
    nanosleep(&pause, nullptr);
  }
}

// Serves requests until the end of input.
int serve() {
  unsetenv(kSwitch);
  unsetenv("LD_PRELOAD");
  const int threads = thread_count();
  if (threads != 1) {
    std::fprintf(stderr, "hostile_fork_server: %d threads at main(), need 1 to fork safely\n",
                 threads);
    return 1;
  }
  FILE* in = stdin;
  FILE* out = stdout;
  std::string field;
  while (read_field(in, field)) {
    const long count = std::strtol(field.c_str(), nullptr, 10);
    std::vector<std::string> fields;
    for (long i = 0; i < count && read_field(in, field); ++i)
      fields.push_back(field);
    if (count < 6 || static_cast<long>(fields.size()) != count) {
      std::fprintf(stderr, "hostile_fork_server: a request of %ld fields, need 6 or more\n", count);
      return 1;
    }
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) run_case(fields, std::strtoull(fields[1].c_str(), nullptr, 10));
    std::fprintf(out, "%s\n", wait_for(child, std::strtol(fields[0].c_str(), nullptr, 10)).c_str());
    std::fflush(out);
  }
  return 0;
}

int main_hook(int argc, char** argv, char** envp) {
  const char* on = std::getenv(kSwitch);
  if (on == nullptr || std::strcmp(on, "1") != 0) return real_main(argc, argv, envp);
  _exit(serve());
}

}  // namespace

// glibc's start routine, wrapped to find the program's main().
extern "C" int __libc_start_main(MainFunction main, int argc, char** argv, void (*init)(),
                                 void (*fini)(), void (*rtld_fini)(), void* stack_end) {
  using Start = int (*)(MainFunction, int, char**, void (*)(), void (*)(), void (*)(), void*);
  auto next = reinterpret_cast<Start>(dlsym(RTLD_NEXT, "__libc_start_main"));
  real_main = main;
  return next(main_hook, argc, argv, init, fini, rtld_fini, stack_end);
}
