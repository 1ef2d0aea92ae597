#include "core/progress.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace ferry {
namespace {

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(ProgressTest, RendersPhaseBarBytesAndRate) {
  EXPECT_EQ(Progress::Render("loading m", "weights", 4'000'000'000, 16'000'000'000, 2.0, 8),
            "loading m  weights [##------]  25%  4.00 GB of 16.00 GB  2.00 GB/s  2.0 s");
  EXPECT_EQ(Progress::Render("build", "tune", 0, 0, 1.25), "build  tune  1.2 s");
  EXPECT_EQ(Progress::Render("x", "read", 5'000'000, 0, 0.5), "x  read  5.0 MB  10.0 MB/s  0.5 s");
  // More than the total (a phase that learns its size late) stays at 100%.
  EXPECT_NE(Progress::Render("x", "p", 30, 20, 1.0, 4).find("[####] 100%"), std::string::npos);
}

TEST(ProgressTest, FormatsDecimalUnits) {
  EXPECT_EQ(Progress::FormatBytes(100), "100 B");
  EXPECT_EQ(Progress::FormatBytes(12'000), "12 kB");
  EXPECT_EQ(Progress::FormatBytes(512'000'000), "512.0 MB");
  EXPECT_EQ(Progress::FormatBytes(16'060'000'000.0), "16.06 GB");
}

TEST(ProgressTest, TerminalGetsOneFinalLinePerPhase) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("loading m", /*terminal=*/true, f);
    p.Phase("weights", 1000);
    // Several threads report at once (a loader's fill threads).
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 25; ++i) p.Add(10);
      });
    }
    for (auto& t : threads) t.join();
    p.Phase("finish", 0);
  }  // the destructor ends the last phase
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_NE(out.find("weights [########################] 100%  1 kB of 1 kB"), std::string::npos) << out;
  EXPECT_NE(out.find("loading m  finish"), std::string::npos) << out;
  // Each phase ends its line exactly once.
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
}

TEST(ProgressTest, NothingIsDrawnOffATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("build", /*terminal=*/false, f);
    p.Phase("read", 100);
    p.Add(100);
    p.EndPhase();
    p.EndPhase();  // a second end is nothing
  }
  EXPECT_EQ(ReadAll(f), "");  // a log line went to the logger instead
  std::fclose(f);
}

}  // namespace
}  // namespace ferry
