// `ferry bench coldstart`: process start -> ready, and the first request against the
// steady state, for checkpoint directories and engine files. Each measurement runs in a
// fresh child process (this binary, `bench coldstart-child`), so nothing is warm but what
// the operating system's page cache holds (dropped first with --drop-caches, when allowed).
#include <nlohmann/json.hpp>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "cli/subcommands.h"
#include "core/device_spec.h"
#include "sched/preload.h"
#include "tools/request_latency.h"

extern char** environ;

namespace ferry::cli {

namespace {

struct ColdstartOptions {
  std::vector<std::string> models;
  int requests = 100;
  int prompt_tokens = 32;
  int max_tokens = 8;
  int threads = 0;
  int repeat = 1;
  int max_num_seqs = 1;  // the warm-up's decode buckets: serve's default is 16
  bool drop_caches = false;
  bool compare_no_warmup = false;
  std::vector<std::string> warmups;  // full, minimal, none (default: full)
  std::string warmup = "full";       // child only
  std::string device = "cpu";
  bool no_verify = false;
};

// The child: preload, announce readiness on stdout, measure requests, print the result.
int RunChild(const ColdstartOptions& o) {
  sched::PreloadOptions po;
  po.engine.threads = o.threads;
  po.engine.verify = !o.no_verify;
  po.core.batching.max_num_seqs = o.max_num_seqs;  // requests still run one at a time
  po.warmup = o.warmup != "none";
  po.minimal_warmup = o.warmup == "minimal";
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status().WithContext("--device"));
  po.engine.device = *device;
  auto model = sched::PreloadedModel::Create("coldstart", o.models.at(0), po);
  if (!model.ok()) return Fail(model.status());
  std::printf("ready\n");
  std::fflush(stdout);
  tools::RequestLatencyOptions ro{o.requests, o.prompt_tokens, o.max_tokens};
  auto lat = tools::MeasureRequestLatencies(**model, ro);
  if (!lat.ok()) return Fail(lat.status());
  const sched::PreloadTimings& t = (*model)->timings();
  nlohmann::json j = {{"load_ms", t.load_ms},       {"allocate_ms", t.allocate_ms}, {"warmup_ms", t.warmup_ms},
                      {"warmup_passes", t.warmup_passes}, {"first_ms", lat->first_ms},
                      {"median_ms", lat->median_rest_ms()}, {"requests", lat->rest_ms.size()}};
  nlohmann::json passes = nlohmann::json::array();
  for (const sched::WarmupPass& p : t.passes) passes.push_back({{"what", p.what}, {"ms", p.ms}});
  j["warmup_passes_ms"] = passes;
  // The load's own phases, and its rate: bytes of weights over the whole load.
  j["load_bytes"] = t.load.weight_bytes;
  j["load_verify_ms"] = t.load.verify_ms;
  j["load_weights_ms"] = t.load.weights_ms;
  j["load_finish_ms"] = t.load.finish_ms;
  j["load_gb_per_s"] = t.load_ms > 0 ? static_cast<double>(t.load.weight_bytes) / 1e9 / (t.load_ms / 1e3) : 0.0;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

bool DropCaches() {
  ::sync();
  std::ofstream f("/proc/sys/vm/drop_caches");
  if (!f) return false;
  f << "3\n";
  return static_cast<bool>(f.flush());
}

// Spawns the child for one model; returns its JSON plus the measured start -> ready time.
Result<nlohmann::json> MeasureOne(const std::string& model, const ColdstartOptions& o, const std::string& warmup) {
  std::vector<std::string> args = {"/proc/self/exe", "bench", "coldstart-child", "--model", model,
                                   "--requests", std::to_string(o.requests), "--prompt-tokens",
                                   std::to_string(o.prompt_tokens), "--max-tokens", std::to_string(o.max_tokens),
                                   "--threads", std::to_string(o.threads), "--warmup", warmup, "--device",
                                   o.device, "--max-num-seqs", std::to_string(o.max_num_seqs)};
  if (o.no_verify) args.push_back("--no-verify");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return Internal("pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  const auto t0 = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return Internal("cannot start the measuring process");
  }
  FILE* out = ::fdopen(pipe_fds[0], "r");
  double ready_ms = -1;
  std::string last;
  char line[65536];
  while (std::fgets(line, sizeof(line), out) != nullptr) {
    std::string s(line);
    if (s == "ready\n" && ready_ms < 0) {
      ready_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    } else {
      last = s;
    }
  }
  std::fclose(out);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || ready_ms < 0) {
    return Internal("measuring '" + model + "' failed (see the error above)");
  }
  nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded()) return Internal("measuring process printed no result");
  j["start_to_ready_ms"] = ready_ms;
  j["first_over_median"] = j["median_ms"].get<double>() > 0 ? j["first_ms"].get<double>() / j["median_ms"].get<double>() : 0;
  return j;
}

int RunColdstart(const ColdstartOptions& o) {
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& model : o.models) {
    std::vector<std::string> modes = o.warmups;
    if (modes.empty()) modes = {"full"};
    if (o.compare_no_warmup) modes = {"full", "minimal", "none"};
    for (const std::string& warmup : modes) {
      if (warmup != "full" && warmup != "minimal" && warmup != "none") {
        return Fail(InvalidArgument("--warmup: full, minimal or none, got '" + warmup + "'"));
      }
      for (const bool cold : {false, true}) {
        if (cold && !o.drop_caches) continue;
        bool dropped = false;
        if (cold) {
          dropped = DropCaches();
          if (!dropped) {
            std::fprintf(stderr, "note: cannot drop the page cache here (needs root and a writable "
                                 "/proc/sys/vm/drop_caches); cold-cache runs skipped\n");
            continue;
          }
        }
        // Each configuration --repeat times (a fresh process each); the medians are reported,
        // since a shared machine's noise lands on single runs.
        std::vector<nlohmann::json> runs;
        for (int rep = 0; rep < std::max(1, o.repeat); ++rep) {
          if (cold && rep > 0 && !DropCaches()) break;
          auto r = MeasureOne(model, o, warmup);
          if (!r.ok()) return Fail(r.status());
          runs.push_back(*r);
        }
        auto median = [&](const char* key) {
          std::vector<double> v;
          for (const auto& r : runs) v.push_back(r[key].get<double>());
          std::sort(v.begin(), v.end());
          return v[v.size() / 2];
        };
        nlohmann::json r = runs[runs.size() / 2];
        for (const char* key : {"start_to_ready_ms", "load_ms", "allocate_ms", "warmup_ms", "first_ms", "median_ms",
                                "first_over_median", "load_verify_ms", "load_weights_ms", "load_finish_ms",
                                "load_gb_per_s"}) {
          r[key] = median(key);
        }
        r["runs"] = runs.size();
        r["model"] = model;
        r["page_cache"] = cold ? "dropped" : "warm";
        r["warmup"] = warmup;
        std::fprintf(stderr, "%-40s cache=%-7s warmup=%-7s start->ready %8.1f ms (load %.1f, allocate %.1f, "
                             "warm-up %.1f)  first %.2f ms, median of %d %.2f ms, ratio %.2f  [median of %zu runs]\n",
                     model.c_str(), cold ? "dropped" : "warm", warmup.c_str(), r["start_to_ready_ms"].get<double>(),
                     r["load_ms"].get<double>(), r["allocate_ms"].get<double>(), r["warmup_ms"].get<double>(),
                     r["first_ms"].get<double>(), o.requests, r["median_ms"].get<double>(),
                     r["first_over_median"].get<double>(), runs.size());
        // The load's phases: checksums (GPU engine files), reading and handing over the
        // weights, and the wait for the last asynchronous copies; GB/s over each.
        {
          const double gb = r.value("load_bytes", 0.0) / 1e9;
          auto rate = [gb](double ms) { return ms > 0 ? gb / (ms / 1e3) : 0.0; };
          std::fprintf(stderr,
                       "    load %.2f GB at %.2f GB/s: verify %.1f ms, weights %.1f ms (%.2f GB/s), last copies "
                       "%.1f ms\n",
                       gb, r["load_gb_per_s"].get<double>(), r["load_verify_ms"].get<double>(),
                       r["load_weights_ms"].get<double>(), rate(r["load_weights_ms"].get<double>()),
                       r["load_finish_ms"].get<double>());
        }
        // What each warm-up pass cost (the buckets a full warm-up runs), from the middle run.
        for (const auto& p : r["warmup_passes_ms"]) {
          std::fprintf(stderr, "    warm-up %-44s %8.1f ms\n", p["what"].get<std::string>().c_str(),
                       p["ms"].get<double>());
        }
        results.push_back(r);
      }
    }
  }
  std::printf("%s\n", results.dump(2).c_str());
  return 0;
}

}  // namespace

void RegisterColdstart(CLI::App& bench, int& exit_code) {
  auto o = std::make_shared<ColdstartOptions>();
  CLI::App* sub = bench.add_subcommand("coldstart", "Process start -> ready, and first request vs steady state");
  sub->add_option("--model", o->models, "Checkpoint directory, GGUF file or engine file (repeatable)")->required();
  sub->add_option("--requests", o->requests, "Requests measured after the first");
  sub->add_option("--prompt-tokens", o->prompt_tokens, "Prompt / input length");
  sub->add_option("--max-tokens", o->max_tokens, "Tokens generated per request (decoders)");
  sub->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  sub->add_flag("--drop-caches", o->drop_caches, "Also measure with the page cache dropped (root)");
  sub->add_flag("--compare-no-warmup", o->compare_no_warmup,
                "Measure each model with every warm-up mode: full, minimal and none");
  sub->add_option("--warmup", o->warmups, "Warm-up mode(s) to measure: full (every bucket), minimal, none");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N");
  sub->add_option("--repeat", o->repeat, "Processes per configuration; the medians are reported");
  sub->add_option("--max-num-seqs", o->max_num_seqs,
                  "Decoders: batching.max_num_seqs (sets the decode buckets a full warm-up runs; serve's default 16)");
  sub->add_flag("--no-verify", o->no_verify, "Skip engine blob checksums while loading");
  sub->callback([o, &exit_code] { exit_code = RunColdstart(*o); });

  auto c = std::make_shared<ColdstartOptions>();
  CLI::App* child = bench.add_subcommand("coldstart-child", "(internal) one measured process");
  child->group("");  // hidden from help
  child->add_option("--model", c->models)->required();
  child->add_option("--requests", c->requests);
  child->add_option("--prompt-tokens", c->prompt_tokens);
  child->add_option("--max-tokens", c->max_tokens);
  child->add_option("--threads", c->threads);
  child->add_option("--warmup", c->warmup);
  child->add_option("--device", c->device);
  child->add_option("--max-num-seqs", c->max_num_seqs);
  child->add_flag("--no-verify", c->no_verify);
  child->callback([c, &exit_code] { exit_code = RunChild(*c); });
}

}  // namespace ferry::cli
