#include "io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/model_config.h"
#include "io/temp_dir.h"
#include "test_util.h"

namespace ferry::io {
namespace {

using ::ferry::testing::FixturePath;
using ::ferry::testing::ReadAll;
using ::ferry::testing::TempDir;
using ::testing::HasSubstr;

std::string LittleEndian64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// A raw safetensors file: length prefix, header text, data bytes.
std::string RawFile(const std::string& header, const std::string& data) {
  return LittleEndian64(header.size()) + header + data;
}

std::string Header(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t begin,
                   uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Expected decoder/encoder weights derived from the config alone, so the test checks
// the reader against an independent description of each checkpoint.
std::map<std::string, Shape> ExpectedDecoderWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim;
  std::map<std::string, Shape> w;
  w["model.embed_tokens.weight"] = {c.vocab_size, h};
  w["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) w["lm_head.weight"] = {c.vocab_size, h};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    w[p + "input_layernorm.weight"] = {h};
    w[p + "post_attention_layernorm.weight"] = {h};
    w[p + "self_attn.q_proj.weight"] = {q, h};
    w[p + "self_attn.k_proj.weight"] = {kv, h};
    w[p + "self_attn.v_proj.weight"] = {kv, h};
    w[p + "self_attn.o_proj.weight"] = {h, q};
    w[p + "mlp.gate_proj.weight"] = {i, h};
    w[p + "mlp.up_proj.weight"] = {i, h};
    w[p + "mlp.down_proj.weight"] = {h, i};
    if (c.attention_bias) {
      w[p + "self_attn.q_proj.bias"] = {q};
      w[p + "self_attn.k_proj.bias"] = {kv};
      w[p + "self_attn.v_proj.bias"] = {kv};
    }
  }
  return w;
}

std::map<std::string, Shape> ExpectedBertWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  std::map<std::string, Shape> w;
  w["bert.embeddings.word_embeddings.weight"] = {c.vocab_size, h};
  w["bert.embeddings.position_embeddings.weight"] = {c.max_position_embeddings, h};
  w["bert.embeddings.token_type_embeddings.weight"] = {c.type_vocab_size, h};
  w["bert.embeddings.LayerNorm.weight"] = {h};
  w["bert.embeddings.LayerNorm.bias"] = {h};
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    for (const char* proj :
         {"attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense"}) {
      w[p + proj + ".weight"] = {h, h};
      w[p + proj + ".bias"] = {h};
    }
    w[p + "intermediate.dense.weight"] = {i, h};
    w[p + "intermediate.dense.bias"] = {i};
    w[p + "output.dense.weight"] = {h, i};
    w[p + "output.dense.bias"] = {h};
    for (const char* norm : {"attention.output.LayerNorm", "output.LayerNorm"}) {
      w[p + norm + ".weight"] = {h};
      w[p + norm + ".bias"] = {h};
    }
  }
  w["bert.pooler.dense.weight"] = {h, h};
  w["bert.pooler.dense.bias"] = {h};
  w["classifier.weight"] = {c.num_labels, h};
  w["classifier.bias"] = {c.num_labels};
  return w;
}

// Bytes of one tensor read straight from the file, with the header parsed by hand.
std::string RawTensorBytes(const std::string& path, const std::string& name, size_t nbytes) {
  const std::string file = ReadAll(path);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(file[i])) << (8 * i);
  const std::string header = file.substr(8, header_len);
  const size_t at = header.find("\"" + name + "\"");
  const size_t offsets = header.find("data_offsets\":[", at) + std::strlen("data_offsets\":[");
  const uint64_t begin = std::stoull(header.substr(offsets));
  return file.substr(8 + header_len + begin, nbytes);
}

class FixtureModelTest : public ::testing::TestWithParam<std::pair<std::string, DType>> {};

TEST_P(FixtureModelTest, NamesShapesAndDtypesMatchConfig) {
  const auto& [model, dtype] = GetParam();
  const std::string dir = FixturePath("models/" + model);
  Result<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  Result<std::shared_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();

  const std::map<std::string, Shape> expected =
      config->family == ModelFamily::kDecoder ? ExpectedDecoderWeights(*config) : ExpectedBertWeights(*config);
  std::vector<std::string> expected_names;
  for (const auto& [name, shape] : expected) expected_names.push_back(name);
  EXPECT_EQ((*ckpt)->Names(), expected_names);

  for (const auto& [name, shape] : expected) {
    Result<Tensor> t = (*ckpt)->GetChecked(name, shape);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    EXPECT_EQ(t->dtype(), dtype) << name;
    EXPECT_TRUE(t->is_contiguous());
    EXPECT_TRUE(t->device().is_cpu());
  }

  // The view's bytes are the file's bytes at the offsets the header gives.
  const std::string probe = config->family == ModelFamily::kDecoder ? "model.norm.weight" : "classifier.weight";
  Result<Tensor> t = (*ckpt)->Get(probe);
  ASSERT_TRUE(t.ok());
  const std::string raw = RawTensorBytes(dir + "/model.safetensors", probe, t->nbytes());
  ASSERT_EQ(raw.size(), t->nbytes());
  EXPECT_EQ(std::memcmp(raw.data(), t->raw(), raw.size()), 0);
  const Tensor f32 = t->ToF32();
  for (int64_t k = 0; k < f32.numel(); ++k) EXPECT_TRUE(std::isfinite(f32.data<float>()[k]));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureModelTest,
                         ::testing::Values(std::make_pair("llama-tiny", DType::kBF16),
                                           std::make_pair("llama3-tiny", DType::kF16),
                                           std::make_pair("qwen2-tiny", DType::kF32),
                                           std::make_pair("bert-tiny", DType::kF32)),
                         [](const auto& info) {
                           std::string name = info.param.first;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST(SafetensorsFileTest, ReadsMetadataAndOutlivesItsFileObject) {
  Result<std::shared_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(FixturePath("models/qwen2-tiny/model.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_TRUE((*file)->Has("model.norm.weight"));
  EXPECT_FALSE((*file)->Has("lm_head.weight"));
  Result<Tensor> t = (*file)->Get("model.norm.weight");
  ASSERT_TRUE(t.ok());
  const Tensor copy = t->Clone();
  file->reset();  // the view must keep the mapping alive on its own
  EXPECT_EQ(std::memcmp(copy.raw(), t->raw(), t->nbytes()), 0);
}

TEST(SafetensorsFileTest, MissingTensorIsNotFound) {
  auto file = SafetensorsFile::Open(FixturePath("models/qwen2-tiny/model.safetensors"));
  ASSERT_TRUE(file.ok());
  Result<Tensor> t = (*file)->Get("nope");
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("'nope'"));
}

// Rewriting a fixture through ferry's writer gives the reference writer's exact bytes:
// same tensor order, header layout, padding and offsets.
TEST(WriteSafetensorsTest, RewritingFixturesIsByteIdentical) {
  TempDir tmp;
  for (const char* rel : {"models/llama-tiny/model.safetensors", "models/bert-tiny/model.safetensors",
                          "models/qwen2-tiny/reference.safetensors", "models/bert-tiny/reference.safetensors"}) {
    SCOPED_TRACE(rel);
    const std::string src = FixturePath(rel);
    auto file = SafetensorsFile::Open(src);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    std::vector<std::pair<std::string, Tensor>> tensors;
    // Reverse order on input: the writer must impose its own order.
    const std::vector<std::string> names = (*file)->Names();
    for (auto it = names.rbegin(); it != names.rend(); ++it) tensors.emplace_back(*it, *(*file)->Get(*it));
    const std::string out = tmp.File("rewrite.safetensors");
    ASSERT_TRUE(WriteSafetensors(out, tensors, (*file)->metadata()).ok());
    EXPECT_TRUE(ReadAll(out) == ReadAll(src)) << "rewrite of " << rel << " differs";
  }
}

template <typename T>
Tensor MakeTensor(const Shape& shape, DType dtype, const std::vector<T>& values) {
  Tensor t = Tensor::Empty(shape, dtype);
  EXPECT_EQ(values.size() * sizeof(T), t.nbytes());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}

Tensor FromF32(const Shape& shape, DType dtype, const std::vector<float>& values) {
  Tensor t = Tensor::Empty(shape, dtype);
  ConvertFromF32(dtype, values.data(), t.raw(), values.size());
  return t;
}

TEST(WriteSafetensorsTest, RoundTripsEveryDtypeWithValues) {
  TempDir tmp;
  const std::vector<float> floats = {0.5f, -1.25f, 3.0f, 0.0f, -0.0f, 448.0f};
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", MakeTensor<float>({2, 3}, DType::kF32, {1.5f, -2.0f, 3.25f, 1e-30f, -1e30f, 0.0f})},
      {"f16", FromF32({3, 2}, DType::kF16, floats)},
      {"bf16", FromF32({6}, DType::kBF16, floats)},
      {"f8", FromF32({1, 6}, DType::kF8E4M3, floats)},
      {"i8", MakeTensor<int8_t>({3}, DType::kI8, {-128, 0, 127})},
      {"u8", MakeTensor<uint8_t>({5}, DType::kU8, {0, 1, 2, 254, 255})},
      {"i32", MakeTensor<int32_t>({2, 2}, DType::kI32, {INT32_MIN, -1, 7, INT32_MAX})},
      {"i64", MakeTensor<int64_t>({1}, DType::kI64, {-(int64_t{1} << 50)})},
      {"scalar", MakeTensor<float>({}, DType::kF32, {42.0f})},
      {"empty", MakeTensor<float>({0, 4}, DType::kF32, {})},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"producer", "ferry \"test\" ü"}};
  const std::string path = tmp.File("all.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  const std::string bytes = ReadAll(path);
  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.substr(8, 16), "{\"__metadata__\":");
  // Padding is spaces after the closing brace, fewer than 8 of them.
  const std::string header = bytes.substr(8, header_len);
  const size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata(), metadata);
  std::vector<std::string> names;
  for (const auto& [name, t] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ((*file)->Names(), names);

  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    Result<Tensor> got = (*file)->Get(name);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->dtype(), expected.dtype());
    EXPECT_EQ(got->shape(), expected.shape());
    ASSERT_EQ(got->nbytes(), expected.nbytes());
    if (expected.nbytes() > 0) {
      EXPECT_EQ(std::memcmp(got->raw(), expected.raw(), expected.nbytes()), 0);
    }
    // Larger elements come first, so every tensor is aligned to its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got->raw()) % DTypeSize(got->dtype()), 0u);
  }
  const Tensor f16 = (*file)->Get("f16")->ToF32();
  for (size_t k = 0; k < floats.size(); ++k) EXPECT_EQ(f16.data<float>()[k], floats[k]);
  EXPECT_EQ((*file)->Get("scalar")->data<float>()[0], 42.0f);
  EXPECT_EQ((*file)->Get("i64")->data<int64_t>()[0], -(int64_t{1} << 50));
}

TEST(WriteSafetensorsTest, RejectsBadInput) {
  TempDir tmp;
  const std::string path = tmp.File("bad.safetensors");
  const Tensor ok = Tensor::Zeros({2}, DType::kF32);
  EXPECT_EQ(WriteSafetensors(path, {{"a", ok}, {"a", ok}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{"__metadata__", ok}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{"undefined", Tensor()}}).code(), StatusCode::kInvalidArgument);
  float dummy[2] = {};
  const Tensor device = Tensor::FromBorrowed(dummy, {2}, DType::kF32, nullptr, Device::Cuda(0));
  EXPECT_EQ(WriteSafetensors(path, {{"gpu", device}}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteSafetensors(path, {{std::string("bad\xff utf8"), ok}}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(WriteSafetensors("/nonexistent-dir/x.safetensors", {{"a", ok}}).code(), StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, OpensShardsThroughTheIndex) {
  TempDir tmp;
  const Tensor a = FromF32({2, 2}, DType::kF32, {1, 2, 3, 4});
  const Tensor b = FromF32({3}, DType::kBF16, {5, 6, 7});
  const Tensor c = MakeTensor<int32_t>({1}, DType::kI32, {9});
  ASSERT_TRUE(WriteSafetensors(tmp.File("model-00001-of-00002.safetensors"), {{"a", a}, {"b", b}}).ok());
  ASSERT_TRUE(WriteSafetensors(tmp.File("model-00002-of-00002.safetensors"), {{"c", c}}).ok());
  tmp.Write("model.safetensors.index.json",
            R"({"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");

  Result<std::shared_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->Names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE((*ckpt)->Has("c"));
  EXPECT_FALSE((*ckpt)->Has("d"));
  Result<Tensor> got_a = (*ckpt)->GetChecked("a", {2, 2});
  ASSERT_TRUE(got_a.ok());
  EXPECT_EQ(got_a->data<float>()[3], 4.0f);
  Result<Tensor> got_b = (*ckpt)->Get("b");
  ASSERT_TRUE(got_b.ok());
  EXPECT_EQ(got_b->dtype(), DType::kBF16);
  EXPECT_EQ(got_b->ToF32().data<float>()[2], 7.0f);
  Result<Tensor> got_c = (*ckpt)->Get("c");
  ASSERT_TRUE(got_c.ok());
  EXPECT_EQ(got_c->data<int32_t>()[0], 9);
  EXPECT_EQ((*ckpt)->Get("d").status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, GetCheckedNamesExpectedAndActualShape) {
  auto ckpt = Checkpoint::Open(FixturePath("models/llama-tiny"));
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  Result<Tensor> t = (*ckpt)->GetChecked("model.layers.0.self_attn.k_proj.weight", {64, 64});
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "tensor 'model.layers.0.self_attn.k_proj.weight': expected shape [64, 64], got [32, 64]");
  EXPECT_EQ((*ckpt)->GetChecked("missing.weight", {1}).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, DirectoryWithoutWeightsIsNotFound) {
  TempDir tmp;
  Result<std::shared_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr(tmp.path()));
  EXPECT_EQ(Checkpoint::Open(tmp.File("no-such-dir")).status().code(), StatusCode::kNotFound);
}

TEST(CheckpointTest, IndexPointingToMissingShardIsNotFound) {
  TempDir tmp;
  ASSERT_TRUE(
      WriteSafetensors(tmp.File("model-00001-of-00002.safetensors"), {{"a", Tensor::Zeros({1}, DType::kF32)}}).ok());
  tmp.Write("model.safetensors.index.json",
            R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  Result<std::shared_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(ckpt.status().message(), HasSubstr("model.safetensors.index.json"));
}

TEST(CheckpointTest, IndexNamingTensorAbsentFromItsShardIsDataLoss) {
  TempDir tmp;
  ASSERT_TRUE(WriteSafetensors(tmp.File("shard.safetensors"), {{"a", Tensor::Zeros({1}, DType::kF32)}}).ok());
  tmp.Write("model.safetensors.index.json", R"({"weight_map": {"a": "shard.safetensors", "b": "shard.safetensors"}})");
  Result<std::shared_ptr<Checkpoint>> ckpt = Checkpoint::Open(tmp.path());
  EXPECT_EQ(ckpt.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(ckpt.status().message(), HasSubstr("'b'"));
}

TEST(CheckpointTest, BadIndexIsDataLoss) {
  for (const char* index :
       {"{not json", "[]", R"({"metadata": {}})", R"({"weight_map": {}})", R"({"weight_map": {"a": 3}})",
        R"({"weight_map": {"a": "../outside.safetensors"}})", R"({"weight_map": {"a": "/etc/passwd"}})"}) {
    SCOPED_TRACE(index);
    TempDir tmp;
    tmp.Write("model.safetensors.index.json", index);
    EXPECT_EQ(Checkpoint::Open(tmp.path()).status().code(), StatusCode::kDataLoss);
  }
}

// --- Corrupt files: every one fails with a status naming the file (and the tensor). ---

class BadFileTest : public ::testing::Test {
 protected:
  // Opens `contents` as a safetensors file and returns the failure.
  Status OpenBytes(const std::string& contents) {
    path_ = tmp_.Write("bad.safetensors", contents);
    Result<std::shared_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path_);
    EXPECT_FALSE(file.ok()) << "opened a bad file";
    return file.status();
  }
  void ExpectDataLoss(const Status& s, const std::string& tensor = "") {
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(path_));
    if (!tensor.empty()) {
      EXPECT_THAT(s.message(), HasSubstr("'" + tensor + "'"));
    }
  }
  // A valid two-tensor file.
  static std::string Valid() {
    return RawFile("{" + Header("w", "F32", "[2,2]", 0, 16) + "," + Header("b", "F32", "[2]", 16, 24) + "}",
                   std::string(24, '\x01'));
  }

  TempDir tmp_;
  std::string path_;
};

TEST_F(BadFileTest, ValidBaselineOpens) {
  path_ = tmp_.Write("ok.safetensors", Valid());
  EXPECT_TRUE(SafetensorsFile::Open(path_).ok());
}

TEST_F(BadFileTest, MissingFile) {
  Result<std::shared_ptr<SafetensorsFile>> file = SafetensorsFile::Open(tmp_.File("absent.safetensors"));
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("absent.safetensors"));
}

TEST_F(BadFileTest, EmptyFile) { ExpectDataLoss(OpenBytes("")); }

TEST_F(BadFileTest, ShorterThanLengthPrefix) { ExpectDataLoss(OpenBytes(std::string("\x10\0\0", 3))); }

TEST_F(BadFileTest, TruncatedHeader) { ExpectDataLoss(OpenBytes(Valid().substr(0, 30))); }

TEST_F(BadFileTest, TruncatedData) { ExpectDataLoss(OpenBytes(Valid().substr(0, Valid().size() - 4)), "b"); }

TEST_F(BadFileTest, HeaderLengthBeyondFile) {
  std::string bytes = Valid();
  bytes.replace(0, 8, LittleEndian64(bytes.size()));
  ExpectDataLoss(OpenBytes(bytes));
}

TEST_F(BadFileTest, AbsurdHeaderLength) {
  std::string bytes = Valid();
  bytes.replace(0, 8, LittleEndian64(~uint64_t{0}));
  const Status s = OpenBytes(bytes);
  ExpectDataLoss(s);
  EXPECT_THAT(s.message(), HasSubstr("100 MB"));
}

TEST_F(BadFileTest, InvalidJsonHeader) {
  ExpectDataLoss(OpenBytes(RawFile("{\"w\":{\"dtype\":\"F32\",", std::string(16, '\0'))));
  ExpectDataLoss(OpenBytes(RawFile("[1, 2]", "")));
  ExpectDataLoss(OpenBytes(RawFile("{\"w\": 3}", "")), "w");
}

TEST_F(BadFileTest, UnknownDtype) {
  for (const char* dtype : {"F64", "f32", "Q4_0", "BOOL"}) {
    const Status s = OpenBytes(RawFile("{" + Header("w", dtype, "[2]", 0, 8) + "}", std::string(8, '\0')));
    ExpectDataLoss(s, "w");
    EXPECT_THAT(s.message(), HasSubstr(dtype));
  }
}

TEST_F(BadFileTest, MissingFields) {
  ExpectDataLoss(OpenBytes(RawFile(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'))), "w");
  ExpectDataLoss(OpenBytes(RawFile(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", std::string(8, '\0'))), "w");
  ExpectDataLoss(OpenBytes(RawFile(R"({"w":{"dtype":"F32","shape":[2]}})", std::string(8, '\0'))), "w");
  ExpectDataLoss(OpenBytes(RawFile(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", std::string(8, '\0'))),
                 "w");
}

TEST_F(BadFileTest, NegativeOrOverflowingShape) {
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[-2]", 0, 8) + "}", std::string(8, '\0'))), "w");
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[1.5]", 0, 8) + "}", std::string(8, '\0'))), "w");
  // 2^32 * 2^32 elements wraps to 0 in 64 bits: it must not pass as an empty tensor.
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[4294967296,4294967296]", 0, 0) + "}", "")), "w");
  // numel fits in int64 but numel * 4 bytes does not.
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[4611686018427387904]", 0, 0) + "}", "")), "w");
}

TEST_F(BadFileTest, OffsetsOutOfRange) {
  const Status s = OpenBytes(RawFile("{" + Header("w", "F32", "[4]", 8, 24) + "}", std::string(16, '\0')));
  ExpectDataLoss(s, "w");
  EXPECT_THAT(s.message(), HasSubstr("[8, 24]"));
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[2]", 0, 8) +
                                       ",\"x\":{\"dtype\":\"F32\",\"shape\":[2],"
                                       "\"data_offsets\":[-8,0]}}",
                                   std::string(8, '\0'))),
                 "x");
}

TEST_F(BadFileTest, OffsetsOutOfOrder) {
  ExpectDataLoss(OpenBytes(RawFile("{" + Header("w", "F32", "[2]", 8, 0) + "}", std::string(8, '\0'))), "w");
}

TEST_F(BadFileTest, SizeMismatch) {
  const Status s = OpenBytes(RawFile("{" + Header("w", "BF16", "[2,3]", 0, 16) + "}", std::string(16, '\0')));
  ExpectDataLoss(s, "w");
  EXPECT_THAT(s.message(), HasSubstr("12"));
}

TEST_F(BadFileTest, OverlappingTensors) {
  const Status s = OpenBytes(RawFile(
      "{" + Header("w", "F32", "[4]", 0, 16) + "," + Header("v", "F32", "[2]", 8, 16) + "}", std::string(16, '\0')));
  ExpectDataLoss(s, "w");
  EXPECT_THAT(s.message(), HasSubstr("'v'"));
}

TEST_F(BadFileTest, MetadataMustMapStringsToStrings) {
  ExpectDataLoss(OpenBytes(RawFile(R"({"__metadata__":{"n":1}})", "")));
  ExpectDataLoss(OpenBytes(RawFile(R"({"__metadata__":[]})", "")));
}

// A shape nested 100,000 deep used to crash the process: the error message dumped it, and
// nlohmann's dump recurses once per level.
TEST_F(BadFileTest, DeeplyNestedValuesAreRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + "1" + std::string(100000, ']');
  for (const std::string& header : {"{" + Header("w", "F32", deep, 0, 4) + "}",
                                    R"({"__metadata__": {"a": )" + deep + "}}", deep}) {
    const Status s = OpenBytes(RawFile(header, std::string(4, '\0')));
    ExpectDataLoss(s);
    EXPECT_THAT(s.message(), HasSubstr("nested deeper than"));
  }
  // Nesting within the bound parses, and the malformed shape is reported as before.
  const Status s = OpenBytes(RawFile("{" + Header("w", "F32", "[[[[2]]]]", 0, 8) + "}", std::string(8, '\0')));
  ExpectDataLoss(s, "w");
  EXPECT_THAT(s.message(), HasSubstr("[[[[2]]]]"));
}

TEST_F(BadFileTest, ErrorsQuoteOnlyTheHeadOfALargeValue) {
  std::string wide = "[\"x\"";
  for (int i = 0; i < 100000; ++i) wide += ",1";
  wide += "]";
  const Status s = OpenBytes(RawFile("{" + Header("w", "F32", wide, 0, 4) + "}", std::string(4, '\0')));
  ExpectDataLoss(s, "w");
  EXPECT_LT(s.message().size(), 400u) << s.message().substr(0, 400);
}

TEST_F(BadFileTest, EveryTruncationOfAValidFileFails) {
  const std::string valid = Valid();
  for (size_t n = 0; n < valid.size(); ++n) {
    path_ = tmp_.Write("cut.safetensors", valid.substr(0, n));
    Result<std::shared_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path_);
    EXPECT_EQ(file.status().code(), StatusCode::kDataLoss) << "cut at " << n;
  }
}

}  // namespace
}  // namespace ferry::io
