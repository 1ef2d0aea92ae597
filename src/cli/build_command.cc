// build and inspect: compile a checkpoint into an engine file, and describe one.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "cli/subcommands.h"
#include "core/json_limits.h"
#include "core/progress.h"
#include "engine/engine_builder.h"
#include "engine/engine_fingerprint.h"
#include "io/engine_file.h"

namespace ferry::cli {

namespace {

struct BuildCliOptions {
  std::string model;
  std::string output;
  std::string precision = "fp32";
  std::string device = "cpu";
  std::string fp8_accumulation = "fast";
  engine::BuildOptions build;  // precision and device: parsed from the two above
};

int RunBuild(const BuildCliOptions& o) {
  engine::BuildOptions build = o.build;
  auto precision = ParsePrecision(o.precision);
  if (!precision.ok()) return Fail(precision.status());
  build.precision = *precision;
  auto device = ParseDevice(o.device);
  if (!device.ok()) return Fail(device.status());
  build.device = *device;
  if (o.fp8_accumulation != "fast" && o.fp8_accumulation != "exact") {
    return Fail(InvalidArgument("--fp8-accumulation must be fast or exact, got '" + o.fp8_accumulation + "'"));
  }
  build.fp8_fast_accumulation = o.fp8_accumulation == "fast";
  // A bar per phase on a terminal; a log line per phase otherwise.
  Progress progress("building " + o.output, Progress::StderrIsTerminal());
  build.progress = &progress;
  auto r = engine::BuildEngine(o.model, o.output, build);
  progress.EndPhase();
  if (!r.ok()) return Fail(r.status());
  nlohmann::json j = {{"engine", o.output},
                      {"precision", std::string(PrecisionName(build.precision))},
                      {"device", build.device.ToString()},
                      {"file_bytes", r->file_bytes},
                      {"weight_bytes", r->weight_bytes},
                      {"blobs", r->blobs},
                      {"seconds", r->seconds}};
  if (r->calibration) j["calibration"] = r->calibration->ToJson();
  if (build.precision == Precision::kFp8) j["fp8_accumulation"] = o.fp8_accumulation;
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
  const io::EngineManifest& m = (*f)->manifest();
  const io::EngineFingerprint& fingerprint = (*f)->fingerprint();
  nlohmann::json out;
  out["path"] = o.path;
  out["file_bytes"] = (*f)->size();
  out["format_version"] = (*f)->format_version();
  out["fingerprint"] = fingerprint.ToJson();
  // Compatibility with this machine, asked of a device of the engine's own kind.
  const DeviceSpec built_for = fingerprint.device == "cuda" ? DeviceSpec::Cuda() : DeviceSpec::Cpu();
  const Status here = engine::CheckFingerprint(fingerprint, built_for);
  out["compatible_here"] = here.ok();
  if (!here.ok()) out["incompatible_because"] = here.message();
  const nlohmann::json manifest_json = m.ToJson();
  out["build"] = manifest_json["build"];
  out["model"] = manifest_json["model"];
  // The embedded config.json is text from the checkpoint: parsed with the nesting bound,
  // and left out when it does not parse.
  auto config = ParseUntrustedJson(m.files.at("config.json"));
  if (config.ok()) out["config"] = std::move(config).value();
  nlohmann::json embedded = nlohmann::json::array();
  for (const auto& [name, text] : m.files) embedded.push_back(name);
  for (const auto& [name, ref] : m.binary_files) embedded.push_back(name);
  out["embedded_files"] = embedded;
  // Bytes per weight format and per kind.
  std::map<std::string, uint64_t> by_format;
  uint64_t linear_bytes = 0, tensor_bytes = 0;
  for (const auto& [key, l] : m.linears) {
    uint64_t bytes = 0;
    for (const io::StoredTensor& b : l.blobs) bytes += b.blob.bytes;
    const auto format = l.layout.find("format");  // the backend's layout: checked, not assumed
    by_format[format != l.layout.end() && format->is_string() ? format->get<std::string>() : "?"] += bytes;
    linear_bytes += bytes;
  }
  for (const auto& [key, t] : m.tensors) tensor_bytes += t.blob.bytes;
  out["sizes"] = {{"linear_bytes", linear_bytes}, {"tensor_bytes", tensor_bytes}, {"linear_bytes_by_format", by_format}};
  out["counts"] = {{"linears", m.linears.size()}, {"tensors", m.tensors.size()}, {"blobs", m.blobs_index.size()}};
  if (!m.tuned.is_null()) out["tuned"] = m.tuned;
  if (o.full) out["manifest"] = manifest_json;
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
  sub->add_option("--model", o->model, "Checkpoint directory or GGUF file")->required();
  sub->add_option("--precision", o->precision, "fp32, bf16, fp16, int8-wo, int8 (W8A8), fp8 (CUDA), int4-wo (groups of 128)");
  sub->add_option("--device", o->device, "cpu, cuda or cuda:N (GPU engines are laid out and tuned on that GPU)");
  sub->add_option("-o,--output", o->output, "Engine file to write")->required();
  sub->add_option("--calibration", o->build.calibration_path, "Calibration text or JSONL (int8)");
  sub->add_option("--calibration-tokens", o->build.calibration_tokens, "Tokens of calibration text to run (int8; default 2048)");
  sub->add_option("--max-seq-len", o->build.max_seq_len, "Longest sequence the engine is prepared for");
  sub->add_option("--max-batch-tokens", o->build.max_batch_tokens, "Tokens per step the engine is prepared for");
  sub->add_option("--threads", o->build.threads, "Compute threads (0 = all cores)");
  sub->add_flag("!--no-tune", o->build.tune, "Skip timing kernel candidates per weight shape");
  sub->add_option("--fp8-accumulation", o->fp8_accumulation,
                  "fp8: fast (the tensor cores' accumulator, the default) or exact (partial sums promoted to f32)");
  sub->callback([o, &exit_code] { exit_code = RunBuild(*o); });

  auto io = std::make_shared<InspectOptions>();
  CLI::App* ins = app.add_subcommand("inspect", "Print an engine file's manifest, fingerprint, sizes and precision");
  ins->add_option("engine", io->path, "Engine file")->required();
  ins->add_flag("--verify", io->verify, "Check every blob's checksum");
  ins->add_flag("--full", io->full, "Include the whole manifest");
  ins->callback([io, &exit_code] { exit_code = RunInspect(*io); });
}

}  // namespace ferry::cli
