#include "core/progress.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "core/logging.h"

namespace ferry {

namespace {

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

Progress::Progress(std::string task, bool terminal, std::FILE* out)
    : task_(std::move(task)), terminal_(terminal), out_(out) {}

Progress::~Progress() { EndPhase(); }

bool Progress::StderrIsTerminal() { return ::isatty(STDERR_FILENO) == 1; }

std::string Progress::FormatBytes(double bytes) {
  char buf[32];
  if (bytes >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2f GB", bytes / 1e9);
  } else if (bytes >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1e6);
  } else if (bytes >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.0f kB", bytes / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", bytes);
  }
  return buf;
}

std::string Progress::Render(const std::string& task, const std::string& phase, uint64_t done, uint64_t total,
                             double seconds, int bar_width) {
  std::string line = task + "  " + phase;
  char buf[64];
  if (total > 0) {
    const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(total));
    const int filled = static_cast<int>(fraction * bar_width);
    line += " [" + std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(bar_width - filled), '-') + "]";
    std::snprintf(buf, sizeof(buf), " %3d%%", static_cast<int>(fraction * 100));
    line += buf;
    line += "  " + FormatBytes(static_cast<double>(done)) + " of " + FormatBytes(static_cast<double>(total));
  } else if (done > 0) {
    line += "  " + FormatBytes(static_cast<double>(done));
  }
  if (done > 0 && seconds > 0) line += "  " + FormatBytes(static_cast<double>(done) / seconds) + "/s";
  std::snprintf(buf, sizeof(buf), "  %.1f s", seconds);
  line += buf;
  return line;
}

void Progress::Phase(const std::string& phase, uint64_t total_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  EndLocked();
  phase_ = phase.empty() ? "working" : phase;
  total_ = total_bytes;
  done_ = 0;
  start_ = Clock::now();
  last_draw_ = Clock::time_point();
  DrawLocked(true);
}

void Progress::Add(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (phase_.empty()) return;
  done_ += bytes;
  DrawLocked(false);
}

void Progress::EndPhase() {
  std::lock_guard<std::mutex> lock(mu_);
  EndLocked();
}

void Progress::DrawLocked(bool force) {
  if (!terminal_ || phase_.empty()) return;
  const Clock::time_point now = Clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  // \r and "erase to the end of the line": a shorter line leaves nothing of the longer one.
  std::fprintf(out_, "\r%s\033[K", Render(task_, phase_, done_, total_, Seconds(now - start_)).c_str());
  std::fflush(out_);
}

void Progress::EndLocked() {
  if (phase_.empty()) return;
  const double seconds = Seconds(Clock::now() - start_);
  if (terminal_) {
    std::fprintf(out_, "\r%s\033[K\n", Render(task_, phase_, done_, total_, seconds).c_str());
    std::fflush(out_);
  } else if (done_ > 0) {
    FERRY_LOG_INFO("{}: {} {} in {:.2f} s ({}/s)", task_, phase_, FormatBytes(static_cast<double>(done_)), seconds,
                   FormatBytes(seconds > 0 ? static_cast<double>(done_) / seconds : 0.0));
  } else {
    FERRY_LOG_INFO("{}: {} done in {:.2f} s", task_, phase_, seconds);
  }
  phase_.clear();
}

}  // namespace ferry
