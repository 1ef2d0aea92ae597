// One `ferry serve` child process for process-level tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "serve/test_client.h"
#include "test_util.h"

namespace ferry::testing {

// One `ferry serve` child. Its stderr goes to a file (the port is read from it); its stdout
// (the request log) goes to a pipe that the test either drains or closes. max_open_files > 0
// sets the child's RLIMIT_NOFILE (soft and hard) before it starts.
class ServeProcess {
  using Clock = std::chrono::steady_clock;

 public:
  explicit ServeProcess(std::vector<std::string> args, bool close_stdout_reader = false, int max_open_files = 0) {
    char tmpl[] = "/tmp/ferry_serve_proc_XXXXXX";
    const int fd = mkstemp(tmpl);
    err_path_ = tmpl;
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      if (max_open_files > 0) {
        const rlimit limit{static_cast<rlim_t>(max_open_files), static_cast<rlim_t>(max_open_files)};
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(126);
      }
      close(out[0]);
      std::vector<char*> argv;
      static const std::string name = "ferry";
      argv.push_back(const_cast<char*>(name.c_str()));
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(testing::FerryBinary().c_str(), argv.data());
      _exit(127);
    }
    close(fd);
    close(out[1]);
    out_fd_ = out[0];
    if (close_stdout_reader) {
      close(out_fd_);  // whatever the server writes to stdout now meets a pipe with no reader
      out_fd_ = -1;
    } else {
      fcntl(out_fd_, F_SETFL, O_NONBLOCK);
    }
  }
  ~ServeProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    std::remove(err_path_.c_str());
  }

  std::string Stderr() const {
    std::ifstream in(err_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Waits for the listening port and /health/ready; 0 on failure.
  int WaitReady(std::chrono::seconds within = std::chrono::seconds(120)) {
    const auto deadline = Clock::now() + within;
    static const std::regex listening("listening on http://[0-9.]+:([0-9]+)");
    while (Clock::now() < deadline) {
      if (!Alive()) return 0;
      std::smatch m;
      const std::string err = Stderr();
      if (port_ == 0 && std::regex_search(err, m, listening)) port_ = std::stoi(m[1]);
      if (port_ != 0 && ferry::serve::testing::Http(port_, "GET", "/health/ready").status == 200) return port_;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }

  bool Alive() {
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      return false;
    }
    return true;
  }

  // SIGTERM, then waits up to `within`; returns the exit code (-1: killed by a signal or
  // still running) and how long the exit took.
  int Terminate(std::chrono::milliseconds within, double* seconds = nullptr) {
    const auto t0 = Clock::now();
    kill(pid_, SIGTERM);
    while (Clock::now() - t0 < within && Alive()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (seconds != nullptr) *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!exited_) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  // kill -9, and waits for the process to be gone.
  void KillHard() {
    if (pid_ <= 0 || exited_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
    exited_ = true;
  }
  int status() const { return status_; }
  int port() const { return port_; }

  // Whatever the child has written to stdout (the request log) since the last call.
  std::string ReadStdout() {
    std::string out;
    char buf[4096];
    for (ssize_t n; out_fd_ >= 0 && (n = read(out_fd_, buf, sizeof(buf))) > 0;) out.append(buf, n);
    return out;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  bool exited_ = false;
  int status_ = 0;
  std::string err_path_;
};

}  // namespace ferry::testing
