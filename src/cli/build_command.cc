// build and inspect: compile a checkpoint into an engine file, and describe one.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "cli/subcommands.h"
#include "engine/engine_builder.h"
#include "io/engine_file.h"

namespace ferry::cli {

namespace {

struct BuildCliOptions {
  std::string model;
  std::string output;
  engine::BuildOptions build;
};

int RunBuild(const BuildCliOptions& o) {
  auto r = engine::BuildEngine(o.model, o.output, o.build);
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"engine", o.output},         {"precision", o.build.precision},
                      {"device", o.build.device},    {"file_bytes", r->file_bytes},
                      {"weight_bytes", r->weight_bytes}, {"blobs", r->blobs},
                      {"seconds", r->seconds}};
  if (!r->calibration.is_null()) j["calibration"] = r->calibration;
  std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

struct InspectOptions {
  std::string path;
  bool verify = false;
  bool full = false;
};

int RunInspect(const InspectOptions& o) {
  auto f = io::EngineFile::Open(o.path);
  if (!f.ok()) return Fail(f.status());
  const nlohmann::json& m = (*f)->manifest();
  nlohmann::json out;
  out["path"] = o.path;
  out["file_bytes"] = (*f)->size();
  out["format_version"] = (*f)->format_version();
  out["fingerprint"] = (*f)->fingerprint();
  const std::string built_for = (*f)->fingerprint().value("device", "cpu");
  const Status here = engine::CheckFingerprint((*f)->fingerprint(), built_for == "cuda" ? "cuda" : "cpu");
  out["compatible_here"] = here.ok();
  if (!here.ok()) out["incompatible_because"] = here.message();
  out["build"] = m.value("build", nlohmann::json::object());
  out["model"] = m.value("model", nlohmann::json::object());
  if (m.contains("files") && m["files"].contains("config.json") && m["files"]["config.json"].is_string()) {
    out["config"] = nlohmann::json::parse(m["files"]["config.json"].get<std::string>(), nullptr, false);
  }
  nlohmann::json embedded = nlohmann::json::array();
  for (const char* section : {"files", "binary_files"}) {
    if (m.contains(section) && m[section].is_object()) {
      for (auto& [name, v] : m[section].items()) embedded.push_back(name);
    }
  }
  out["embedded_files"] = embedded;
  // Bytes per weight format and per kind.
  std::map<std::string, uint64_t> by_format;
  uint64_t linear_bytes = 0, tensor_bytes = 0;
  if (m.contains("linears")) {
    for (auto& [key, l] : m["linears"].items()) {
      uint64_t bytes = 0;
      for (const auto& b : l["blobs"]) bytes += b["blob"].value("bytes", uint64_t{0});
      by_format[l["layout"].value("format", std::string("?"))] += bytes;
      linear_bytes += bytes;
    }
  }
  if (m.contains("tensors")) {
    for (auto& [key, t] : m["tensors"].items()) tensor_bytes += t["blob"].value("bytes", uint64_t{0});
  }
  out["sizes"] = {{"linear_bytes", linear_bytes}, {"tensor_bytes", tensor_bytes}, {"linear_bytes_by_format", by_format}};
  out["counts"] = {{"linears", m.value("linears", nlohmann::json::object()).size()},
                   {"tensors", m.value("tensors", nlohmann::json::object()).size()},
                   {"blobs", m.value("blobs_index", nlohmann::json::array()).size()}};
  if (m.contains("tuned")) out["tuned"] = m["tuned"];
  if (o.full) out["manifest"] = m;
  if (o.verify) {
    Status st = (*f)->VerifyAll();
    out["verified"] = st.ok();
    if (!st.ok()) {
      std::printf("%s\n", out.dump(2).c_str());
      return Fail(st);
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

void RegisterBuild(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BuildCliOptions>();
  CLI::App* sub = app.add_subcommand("build", "Compile a checkpoint into an engine file");
  sub->add_option("--model", o->model, "Checkpoint directory")->required();
  sub->add_option("--precision", o->build.precision, "fp32, bf16, fp16, int8-wo, int8 (W8A8), fp8 (CUDA)");
  sub->add_option("--device", o->build.device, "cpu, cuda or cuda:N (GPU engines are laid out and tuned on that GPU)");
  sub->add_option("-o,--output", o->output, "Engine file to write")->required();
  sub->add_option("--calibration", o->build.calibration_path, "Calibration text or JSONL (int8)");
  sub->add_option("--calibration-tokens", o->build.calibration_tokens, "Tokens of calibration text to run");
  sub->add_option("--max-seq-len", o->build.max_seq_len, "Longest sequence the engine is prepared for");
  sub->add_option("--max-batch-tokens", o->build.max_batch_tokens, "Tokens per step the engine is prepared for");
  sub->add_option("--threads", o->build.threads, "Compute threads (0 = all cores)");
  sub->add_flag("!--no-tune", o->build.tune, "Skip timing kernel candidates per weight shape");
  sub->callback([o, &exit_code] { exit_code = RunBuild(*o); });

  auto io = std::make_shared<InspectOptions>();
  CLI::App* ins = app.add_subcommand("inspect", "Print an engine file's manifest, fingerprint, sizes and precision");
  ins->add_option("engine", io->path, "Engine file")->required();
  ins->add_flag("--verify", io->verify, "Check every blob's checksum");
  ins->add_flag("--full", io->full, "Include the whole manifest");
  ins->callback([io, &exit_code] { exit_code = RunInspect(*io); });
}

}  // namespace ferry::cli
