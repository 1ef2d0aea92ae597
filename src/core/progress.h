// Progress of a long operation (loading weights, building an engine): the phase, the bytes
// done of its total and the rate. On a terminal it is one line on stderr, redrawn at most
// ten times a second and ended when the phase ends; anywhere else (a log file, a pipe, a
// service manager) nothing is drawn and each phase logs one line when it ends.
// Thread-safe: Add may be called from any number of threads (a loader's copy threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>

namespace ferry {

class Progress {
 public:
  // `task` names what progresses ("loading /models/llama-8b"). `terminal`: draw the bar;
  // StderrIsTerminal() is what callers pass unless a test decides.
  Progress(std::string task, bool terminal, std::FILE* out = stderr);
  ~Progress();  // ends the current phase
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  static bool StderrIsTerminal();

  // Ends the current phase (if any) and starts `phase` of `total_bytes` (0: unknown).
  void Phase(const std::string& phase, uint64_t total_bytes);
  // `bytes` more of the current phase are done.
  void Add(uint64_t bytes);
  // Ends the current phase: the bar's last state and a newline on a terminal, one log line
  // otherwise ("loading X: weights 16.06 GB in 3.21 s (5.00 GB/s)").
  void EndPhase();

  // The line for a phase at this point (what the terminal shows; pure, for tests):
  // "loading X  weights [########------]  57%  9.15/16.06 GB  4.97 GB/s  1.8 s".
  static std::string Render(const std::string& task, const std::string& phase, uint64_t done, uint64_t total,
                            double seconds, int bar_width = 24);
  // "16.06 GB", "512.0 MB", "12 kB", "100 B" (decimal units, as rates are usually quoted).
  static std::string FormatBytes(double bytes);

 private:
  using Clock = std::chrono::steady_clock;
  void DrawLocked(bool force);  // REQUIRES(mu_)
  void EndLocked();             // REQUIRES(mu_)

  const std::string task_;
  const bool terminal_;
  std::FILE* const out_;
  std::mutex mu_;
  std::string phase_;             // GUARDED_BY(mu_); empty: no phase running
  uint64_t total_ = 0;            // GUARDED_BY(mu_)
  uint64_t done_ = 0;             // GUARDED_BY(mu_)
  Clock::time_point start_;       // GUARDED_BY(mu_)
  Clock::time_point last_draw_;   // GUARDED_BY(mu_)
};

}  // namespace ferry
