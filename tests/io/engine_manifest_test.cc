// The typed engine manifest: JSON round trips, the format the builder has always written
// still reads, every malformed field is DataLoss naming it, and blob extents are checked
// against the data section.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "io/engine_manifest.h"

namespace ferry::io {
namespace {

using json = nlohmann::json;

constexpr uint64_t kDataBegin = 4096;
constexpr uint64_t kDataEnd = 4096 * 5;

BlobRef Ref(uint64_t offset, uint64_t bytes, uint32_t crc) { return BlobRef{offset, bytes, crc}; }

// A small manifest using every section: a tensor, a linear with two blobs, a binary file,
// calibration, activations and tuned choices, all blobs inside [kDataBegin, kDataEnd).
EngineManifest Sample() {
  EngineManifest m;
  m.fingerprint.device = "cpu";
  m.fingerprint.cpu_isa = "avx2";
  m.fingerprint.ferry_version = "0.1.0";
  m.fingerprint.weight_layout_version = 1;
  m.fingerprint.onednn_version = "2.6.3";
  m.model = {ModelFamily::kDecoder, "llama", {2}, {1}};
  m.files = {{"config.json", R"({"model_type": "llama"})"}, {"tokenizer.json", "{}"}};
  m.binary_files = {{"tokenizer.model", Ref(4096 * 4, 100, 7)}};
  m.build.precision = Precision::kInt8;
  m.build.device = DeviceSpec::Cpu();
  m.build.weight_format = "int8";
  m.build.max_seq_len = 512;
  m.build.max_batch_tokens = 256;
  m.build.source = "/models/llama";
  m.build.activations = DType::kBF16;
  m.build.calibration = CalibrationInfo{"/data/calib.jsonl", 43, 16384, 0.5, 14, false};
  m.build.fp8_accumulation = "fast";
  m.tuned = {{"choice", "small_m_max"}, {"threads", 2}, {"linear_shapes", json::array({{{"n", 8}, {"k", 4}}})}};
  m.tensors["embed"] = StoredTensor{DType::kBF16, {4, 8}, Ref(4096, 64, 1)};
  m.linears["layers.0.qkv"] = StoredLinear{{{"format", "int8"}, {"version", 1}},
                                           {StoredTensor{DType::kI8, {2, 16}, Ref(4096 * 2, 32, 2)},
                                            StoredTensor{DType::kF32, {2}, Ref(4096 * 3, 8, 3)}},
                                           4};
  m.blobs_index = {{"embed", Ref(4096, 64, 1)},
                   {"layers.0.qkv#0", Ref(4096 * 2, 32, 2)},
                   {"layers.0.qkv#1", Ref(4096 * 3, 8, 3)},
                   {"file:tokenizer.model", Ref(4096 * 4, 100, 7)}};
  return m;
}

TEST(EngineManifestTest, RoundTripsThroughJsonAndText) {
  const EngineManifest m = Sample();
  auto back = EngineManifest::FromJson(m.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, m);
  auto parsed = EngineManifest::Parse(m.ToJson().dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, m);
  EXPECT_EQ(parsed->ToJson(), m.ToJson());
}

TEST(EngineManifestTest, OptionalSectionsStayAbsent) {
  EngineManifest m = Sample();
  m.tuned = nullptr;
  m.build.calibration.reset();
  m.build.activations.reset();
  m.build.fp8_accumulation.reset();
  m.linears["layers.0.qkv"].small_m_max.reset();
  const json j = m.ToJson();
  EXPECT_FALSE(j.contains("tuned"));
  EXPECT_FALSE(j["build"].contains("calibration"));
  EXPECT_FALSE(j["build"].contains("activations"));
  EXPECT_FALSE(j["build"].contains("fp8_accumulation"));
  EXPECT_FALSE(j["linears"]["layers.0.qkv"].contains("small_m_max"));
  EXPECT_EQ(*EngineManifest::FromJson(j), m);
}

// The JSON ferry's builder wrote before the manifest had a type (format version 1) reads,
// and writes back the same.
TEST(EngineManifestTest, ReadsTheFormatVersionOneJson) {
  const json written = json::parse(R"({
    "format_version": 1,
    "fingerprint": {"cpu_isa": "avx2", "device": "cpu", "ferry_version": "0.1.0",
                    "libraries": {"onednn": "2.6.3"}, "weight_layout_version": 1},
    "model": {"family": "encoder", "model_type": "bert", "eos_token_ids": [], "bos_token_ids": []},
    "files": {"config.json": "{}", "vocab.txt": "[PAD]\n"},
    "binary_files": {},
    "build": {"precision": "bf16", "device": "cpu", "max_seq_len": 128, "max_batch_tokens": 128,
              "source": "/abs/bert", "weight_format": "bf16"},
    "tuned": {"choice": "small_m_max: ...", "threads": 2,
              "linear_shapes": [{"format": "bf16", "n": 8, "k": 4, "m": [1], "small_m_us": [1.5],
                                 "gemm_us": [2.5], "small_m_max": 1}]},
    "tensors": {"word_emb": {"dtype": "bf16", "shape": [4, 8], "blob": {"offset": 4096, "bytes": 64, "crc32c": 9}}},
    "linears": {"pooler": {"layout": {"version": 1, "format": "bf16", "n": 8, "k": 8},
                           "blobs": [{"dtype": "bf16", "shape": [8, 16], "blob": {"offset": 8192, "bytes": 256, "crc32c": 5}}],
                           "small_m_max": 1}},
    "blobs_index": [{"name": "word_emb", "blob": {"offset": 4096, "bytes": 64, "crc32c": 9}},
                    {"name": "pooler#0", "blob": {"offset": 8192, "bytes": 256, "crc32c": 5}}]
  })");
  auto m = EngineManifest::FromJson(written);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->model.family, ModelFamily::kEncoder);
  EXPECT_EQ(m->build.precision, Precision::kBf16);
  EXPECT_EQ(m->tensors.at("word_emb").shape, (Shape{4, 8}));
  EXPECT_EQ(m->linears.at("pooler").small_m_max, 1);
  EXPECT_EQ(m->tuned["threads"], 2);
  EXPECT_EQ(m->ToJson(), written);
  EXPECT_TRUE(m->CheckExtents(kDataBegin, kDataEnd).ok());
}

struct BadCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string message;  // a part of the error
};

TEST(EngineManifestTest, EveryMalformedFieldIsDataLossNamingIt) {
  const std::vector<BadCase> cases = {
      {"not an object", [](json& j) { j = json::array(); }, "must be an object"},
      {"no format version", [](json& j) { j.erase("format_version"); }, "format_version is missing"},
      {"format version 0", [](json& j) { j["format_version"] = 0; }, "format version 0"},
      {"newer format version", [](json& j) { j["format_version"] = 2; }, "format version 2"},
      {"format version text", [](json& j) { j["format_version"] = "1"; }, "format_version must be"},
      {"no fingerprint", [](json& j) { j.erase("fingerprint"); }, "fingerprint is missing"},
      {"fingerprint not object", [](json& j) { j["fingerprint"] = "cpu"; }, "fingerprint must be an object"},
      {"fingerprint field type", [](json& j) { j["fingerprint"]["weight_layout_version"] = "1"; },
       "weight_layout_version must be an integer"},
      {"no model", [](json& j) { j.erase("model"); }, "model is missing"},
      {"unknown family", [](json& j) { j["model"]["family"] = "seq2seq"; }, "model.family must be"},
      {"no model type", [](json& j) { j["model"].erase("model_type"); }, "model.model_type is missing"},
      {"no eos ids", [](json& j) { j["model"].erase("eos_token_ids"); }, "model.eos_token_ids is missing"},
      {"eos not array", [](json& j) { j["model"]["eos_token_ids"] = 2; }, "model.eos_token_ids must be an array"},
      {"eos not ids", [](json& j) { j["model"]["eos_token_ids"] = {"2"}; }, "model.eos_token_ids[0] must be"},
      {"no files", [](json& j) { j.erase("files"); }, "files is missing"},
      {"file not text", [](json& j) { j["files"]["tokenizer.json"] = json::object(); },
       "files['tokenizer.json'] must be text"},
      {"no config.json", [](json& j) { j["files"].erase("config.json"); }, "no embedded config.json"},
      {"no binary files", [](json& j) { j.erase("binary_files"); }, "binary_files is missing"},
      {"binary file ref", [](json& j) { j["binary_files"]["tokenizer.model"].erase("crc32c"); },
       "binary_files['tokenizer.model'].crc32c is missing"},
      {"crc too large", [](json& j) { j["binary_files"]["tokenizer.model"]["crc32c"] = 1ull << 32; },
       "binary_files['tokenizer.model'].crc32c must be a non-negative integer"},
      {"negative offset", [](json& j) { j["binary_files"]["tokenizer.model"]["offset"] = -4096; },
       "binary_files['tokenizer.model'].offset must be a non-negative integer"},
      {"no build", [](json& j) { j.erase("build"); }, "build is missing"},
      {"bad precision", [](json& j) { j["build"]["precision"] = "int4"; }, "build.precision is not a precision"},
      {"bad device", [](json& j) { j["build"]["device"] = "tpu"; }, "build.device is not a device"},
      {"max_seq_len text", [](json& j) { j["build"]["max_seq_len"] = "512"; }, "build.max_seq_len must be"},
      {"no source", [](json& j) { j["build"].erase("source"); }, "build.source is missing"},
      {"no weight format", [](json& j) { j["build"].erase("weight_format"); }, "build.weight_format is missing"},
      {"bad activations", [](json& j) { j["build"]["activations"] = "f12"; }, "build.activations is not a dtype"},
      {"bad fp8 accumulation", [](json& j) { j["build"]["fp8_accumulation"] = "sloppy"; },
       "build.fp8_accumulation is not fast or exact"},
      {"fp8 accumulation not text", [](json& j) { j["build"]["fp8_accumulation"] = true; },
       "build.fp8_accumulation must be"},
      {"calibration not object", [](json& j) { j["build"]["calibration"] = 1; }, "build.calibration must be"},
      {"calibration tokens", [](json& j) { j["build"]["calibration"]["tokens"] = "many"; },
       "build.calibration.tokens must be"},
      {"tuned not object", [](json& j) { j["tuned"] = json::array(); }, "tuned must be an object"},
      {"no tensors", [](json& j) { j.erase("tensors"); }, "tensors is missing"},
      {"tensor not object", [](json& j) { j["tensors"]["embed"] = 1; }, "tensors['embed'] must be an object"},
      {"unknown dtype", [](json& j) { j["tensors"]["embed"]["dtype"] = "f12"; }, "tensors['embed'].dtype is not"},
      {"shape not array", [](json& j) { j["tensors"]["embed"]["shape"] = 32; }, "tensors['embed'].shape must be"},
      {"negative dimension", [](json& j) { j["tensors"]["embed"]["shape"] = {-4, -8}; },
       "tensors['embed'].shape must hold non-negative integers"},
      {"fractional dimension", [](json& j) { j["tensors"]["embed"]["shape"] = {4.5, 8}; },
       "tensors['embed'].shape must hold non-negative integers"},
      {"no blob", [](json& j) { j["tensors"]["embed"].erase("blob"); }, "tensors['embed'].blob is missing"},
      {"wrong byte count", [](json& j) { j["tensors"]["embed"]["shape"] = {4, 9}; }, "needs 72"},
      {"shape overflows", [](json& j) { j["tensors"]["embed"]["shape"] = {1ull << 32, 1ull << 32}; }, "overflows"},
      // 2^63 bf16 elements fit in 64 bits, their 2^64 bytes do not.
      {"bytes overflow", [](json& j) { j["tensors"]["embed"]["shape"] = {1ull << 31, 1ull << 32}; }, "overflows"},
      {"no linears", [](json& j) { j.erase("linears"); }, "linears is missing"},
      {"no layout", [](json& j) { j["linears"]["layers.0.qkv"].erase("layout"); },
       "linears['layers.0.qkv'].layout is missing"},
      {"layout not object", [](json& j) { j["linears"]["layers.0.qkv"]["layout"] = "int8"; },
       "linears['layers.0.qkv'].layout must be an object"},
      {"blobs not array", [](json& j) { j["linears"]["layers.0.qkv"]["blobs"] = json::object(); },
       "linears['layers.0.qkv'].blobs must be an array"},
      {"linear blob dtype", [](json& j) { j["linears"]["layers.0.qkv"]["blobs"][1]["dtype"] = 4; },
       "linears['layers.0.qkv'].blobs[1].dtype must be a string"},
      {"small_m_max text", [](json& j) { j["linears"]["layers.0.qkv"]["small_m_max"] = "4"; },
       "linears['layers.0.qkv'].small_m_max must be an integer"},
      {"no index", [](json& j) { j.erase("blobs_index"); }, "blobs_index is missing"},
      {"index not array", [](json& j) { j["blobs_index"] = json::object(); }, "blobs_index must be an array"},
      {"index entry", [](json& j) { j["blobs_index"][2].erase("name"); }, "blobs_index[2].name is missing"},
      {"index entry blob", [](json& j) { j["blobs_index"][3]["blob"] = "here"; },
       "blobs_index[3].blob must be an object"},
  };
  for (const BadCase& c : cases) {
    json j = Sample().ToJson();
    c.mutate(j);
    auto m = EngineManifest::FromJson(j);
    ASSERT_FALSE(m.ok()) << c.name;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << c.name;
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << c.name << ": " << m.status().message();
    EXPECT_NE(m.status().message().find("engine manifest"), std::string::npos)
        << c.name << ": " << m.status().message();
  }
}

TEST(EngineManifestTest, TextThatIsNotJsonOrTooDeepIsDataLoss) {
  for (const std::string& text : {std::string("{\"format_version\": 1,"), std::string(""),
                                  "{\"tensors\": " + std::string(100000, '[') + std::string(100000, ']') + "}"}) {
    auto m = EngineManifest::Parse(text);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(m.status().message().find("engine manifest is not valid JSON"), std::string::npos)
        << m.status().message();
  }
  auto deep = EngineManifest::Parse("{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_NE(deep.status().message().find("nested deeper than"), std::string::npos) << deep.status().message();
}

// A malformed value deep inside a field is quoted, but only its head.
TEST(EngineManifestTest, ErrorsQuoteOnlyASnippetOfTheValue) {
  json j = Sample().ToJson();
  json big = json::array();
  for (int i = 0; i < 100000; ++i) big.push_back(i);
  j["model"]["family"] = big;
  auto m = EngineManifest::FromJson(j);
  ASSERT_FALSE(m.ok());
  EXPECT_LT(m.status().message().size(), 200u) << m.status().message();
}

TEST(EngineManifestTest, AllBlobsListsEachPlaceOnce) {
  EngineManifest m = Sample();
  const std::vector<NamedBlob> all = m.AllBlobs();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].name, "embed");
  EXPECT_EQ(all[1].name, "layers.0.qkv#0");
  EXPECT_EQ(all[3].name, "file:tokenizer.model");
  // A tensor the index does not list is still checked.
  m.blobs_index.clear();
  EXPECT_EQ(m.AllBlobs().size(), 4u);
}

TEST(EngineManifestTest, ExtentsInsideTheDataSectionPass) {
  EXPECT_TRUE(Sample().CheckExtents(kDataBegin, kDataEnd).ok());
  // A blob may end exactly where the data section does, and may be empty.
  EngineManifest m = Sample();
  m.tensors["embed"].blob = Ref(kDataEnd - 4096, 4096, 1);
  m.tensors["embed"].shape = {2048};
  EXPECT_TRUE(m.CheckExtents(kDataBegin, kDataEnd).ok());
  m.tensors["embed"].blob = Ref(kDataEnd, 0, 1);
  EXPECT_TRUE(m.CheckExtents(kDataBegin, kDataEnd).ok());
}

TEST(EngineManifestTest, EveryBlobOutsideTheDataSectionIsRefused) {
  const std::vector<std::pair<std::string, std::function<void(EngineManifest&)>>> cases = {
      {"embed", [](EngineManifest& m) { m.tensors["embed"].blob.offset = kDataEnd; }},           // past the end
      {"embed", [](EngineManifest& m) { m.tensors["embed"].blob.offset = kDataEnd - 4096 + 4096 * 16; }},
      {"embed", [](EngineManifest& m) { m.tensors["embed"].blob.offset = 0; }},                   // in the header
      {"embed", [](EngineManifest& m) { m.tensors["embed"].blob.bytes = kDataEnd; }},             // runs past
      {"embed", [](EngineManifest& m) {  // offset + bytes wraps around 2^64
         m.tensors["embed"].blob.offset = 8192;
         m.tensors["embed"].blob.bytes = ~uint64_t{0} - 4096;
       }},
      {"layers.0.qkv#1", [](EngineManifest& m) { m.linears["layers.0.qkv"].blobs[1].blob.offset = 1ull << 40; }},
      {"file:tokenizer.model", [](EngineManifest& m) { m.binary_files["tokenizer.model"].bytes = 1ull << 40; }},
      {"extra", [](EngineManifest& m) { m.blobs_index.push_back({"extra", Ref(kDataEnd + 4096, 1, 0)}); }},
  };
  for (const auto& [name, mutate] : cases) {
    EngineManifest m = Sample();
    mutate(m);
    const Status s = m.CheckExtents(kDataBegin, kDataEnd);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("'" + name + "'"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("outside the data section"), std::string::npos) << s.message();
  }
}

TEST(EngineManifestTest, MisalignedBlobsAreRefused) {
  EngineManifest m = Sample();
  m.tensors["embed"].blob.offset = 4096 + 64;
  const Status s = m.CheckExtents(kDataBegin, kDataEnd);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("4096-byte boundary"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ferry::io
