// GPTQ and AWQ checkpoints: packed integer weights are unpacked at load, so the model computes
// exactly what the same checkpoint with the dequantized weights written out in f32 computes,
// and engines built from it too. The layouts are also pinned by literal words, worked out by
// hand from the quantizers' documented packing, so a writer and a reader here cannot share
// one misreading.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "decoder_test_util.h"
#include "engine/engine.h"
#include "backend/cpu_backend.h"
#include "backend/cuda_backend.h"
#include "engine/engine_builder.h"
#include "kernels/int4_groups.h"
#include "io/safetensors.h"
#include "model/packed_int_weights.h"
#include "model/weights.h"
#include "test_util.h"
#include "tools/checkpoint_maker.h"
#include "tools/quantized_checkpoint_test_util.h"

namespace ferry::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

enum class Layout { kGptqV1, kGptqV2, kAwq };

struct PackSpec {
  Layout layout = Layout::kGptqV1;
  int bits = 4;
  int64_t group_size = 32;  // 0: one group
  bool act_order = false;   // gptq: rows regrouped through g_idx
  bool symmetric = false;
};

model::WeightSource MapSource(const std::map<std::string, Tensor>& tensors) {
  auto shared = std::make_shared<std::map<std::string, Tensor>>(tensors);
  return {[shared](const std::string& n) -> Result<Tensor> {
            auto it = shared->find(n);
            if (it == shared->end()) return NotFound(n);
            return it->second;
          },
          [shared](const std::string& n) { return shared->count(n) > 0; }};
}

Tensor I32(Shape shape, const std::vector<uint32_t>& words) {
  Tensor t = Tensor::Empty(std::move(shape), DType::kI32);
  std::copy(words.begin(), words.end(), reinterpret_cast<uint32_t*>(t.data<int32_t>()));
  return t;
}

// One word per layout, unpacked by hand: GPTQ packs input rows 0..7 into nibbles 0..7; AWQ
// packs output columns in the order 0, 2, 4, 6, 1, 3, 5, 7 (nibble k holds that column).
TEST(PackedIntWeightsTest, LiteralWordsUnpackAsTheQuantizersPackThem) {
  io::QuantizationConfig gptq;
  gptq.method = "gptq";
  gptq.bits = 4;
  gptq.gptq_zeros_minus_one = true;
  // qweight [1 word of 8 input rows, 8 outputs]; zero point 1 in every column, stored as 0.
  std::vector<uint32_t> qw(8, 0);
  qw[0] = 0x76543210u;  // column 0: rows 0..7 = 0..7
  qw[3] = 0x11111111u;  // column 3: every row 1
  std::vector<float> scales(8, 0.5f);
  std::map<std::string, Tensor> g{{"p.qweight", I32({1, 8}, qw)}, {"p.qzeros", I32({1, 1}, {0u})}, {"p.scales", Tensor::FromVector(scales, {1, 8})}};
  auto w = model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->shape(), (Shape{8, 8}));
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w->data<float>()[0 * 8 + i], (i - 1) * 0.5f) << i;
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w->data<float>()[3 * 8 + i], 0.0f) << i;
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ(w->data<float>()[1 * 8 + i], -0.5f) << i;
  // gptq_v2 stores the zero point as it is.
  gptq.gptq_zeros_minus_one = false;
  w = model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32);
  ASSERT_TRUE(w.ok());
  EXPECT_FLOAT_EQ(w->data<float>()[5], 2.5f);

  io::QuantizationConfig awq;
  awq.method = "awq";
  awq.bits = 4;
  // qweight [1 input, 1 word = 8 outputs]: nibbles 0..7 hold 0..7, so outputs 0..7 read
  // 0, 4, 1, 5, 2, 6, 3, 7; zero point 2 in every column.
  std::map<std::string, Tensor> a{{"p.qweight", I32({1, 1}, {0x76543210u})},
                                  {"p.qzeros", I32({1, 1}, {0x22222222u})},
                                  {"p.scales", Tensor::FromVector({1, 1, 1, 1, 1, 1, 1, 2}, {1, 8})}};
  w = model::DequantizePackedLinear(MapSource(a), "p", awq, DType::kF32);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->shape(), (Shape{8, 1}));
  const float want[8] = {-2, 2, -1, 3, 0, 4, 1, 10};
  for (int o = 0; o < 8; ++o) EXPECT_FLOAT_EQ(w->data<float>()[o], want[o]) << o;
}

TEST(PackedIntWeightsTest, InconsistentShapesAndBadGroupIndicesAreErrors) {
  io::QuantizationConfig gptq;
  gptq.method = "gptq";
  gptq.bits = 4;
  gptq.group_size = 8;
  std::map<std::string, Tensor> g{{"p.qweight", I32({2, 8}, std::vector<uint32_t>(16, 0))},
                                  {"p.qzeros", I32({2, 1}, {0u, 0u})},
                                  {"p.scales", Tensor::FromVector(std::vector<float>(8, 1.0f), {1, 8})}};
  auto w = model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("inconsistent shapes"), std::string::npos) << w.status().ToString();
  g["p.scales"] = Tensor::FromVector(std::vector<float>(16, 1.0f), {2, 8});
  ASSERT_TRUE(model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32).ok());
  Tensor gidx = Tensor::Empty({16}, DType::kI32);
  for (int i = 0; i < 16; ++i) gidx.data<int32_t>()[i] = i == 5 ? 7 : i / 8;
  g["p.g_idx"] = gidx;
  w = model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("row 5 names group 7"), std::string::npos) << w.status().ToString();
  g["p.qweight"] = Tensor::FromVector(std::vector<float>(16, 0.0f), {2, 8});
  w = model::DequantizePackedLinear(MapSource(g), "p", gptq, DType::kF32);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("int32"), std::string::npos) << w.status().ToString();
}

class PackedIntCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ferry_int4_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    CheckpointSpec spec;
    spec.preset = "llama-test";
    spec.dtype = DType::kF32;
    spec.seed = 5;
    ASSERT_TRUE(MakeCheckpoint(spec, (dir_ / "src").string()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Quantizes every decoder layer's linear weights as `spec` says, writes them packed into
  // `q` (with `quant` as quantization_config) and dequantized in f32 into `ref`.
  void WritePacked(const PackSpec& spec, const json& quant) {
    auto src = io::Checkpoint::Open((dir_ / "src").string());
    ASSERT_TRUE(src.ok()) << src.status().ToString();
    std::vector<std::pair<std::string, Tensor>> packed, ref;
    std::mt19937 rng(11);
    const int per = 32 / spec.bits;
    const int qmax = (1 << spec.bits) - 1;
    for (const std::string& name : (*src)->Names()) {
      auto t = (*src)->Get(name);
      ASSERT_TRUE(t.ok());
      const bool linear = name.starts_with("model.layers.") && name.ends_with("_proj.weight");
      if (!linear) {
        packed.emplace_back(name, t->Clone());
        ref.emplace_back(name, t->Clone());
        continue;
      }
      const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
      const int64_t out = t->dim(0), in = t->dim(1);
      const float* w = t->data<float>();
      const int64_t gs = spec.group_size > 0 ? spec.group_size : in;
      const int64_t groups = in / gs;
      // Each input row's group: contiguous, or (act order) a shuffled assignment.
      std::vector<int32_t> group(static_cast<size_t>(in));
      std::vector<int64_t> order(static_cast<size_t>(in));
      std::iota(order.begin(), order.end(), 0);
      if (spec.act_order) std::shuffle(order.begin(), order.end(), rng);
      for (int64_t k = 0; k < in; ++k) group[static_cast<size_t>(order[static_cast<size_t>(k)])] = static_cast<int32_t>(k / gs);
      std::vector<float> scale(static_cast<size_t>(groups * out));
      std::vector<int> zero(static_cast<size_t>(groups * out));
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t o = 0; o < out; ++o) {
          float lo = 0, hi = 0;
          for (int64_t i = 0; i < in; ++i) {
            if (group[static_cast<size_t>(i)] != g) continue;
            lo = std::min(lo, w[o * in + i]);
            hi = std::max(hi, w[o * in + i]);
          }
          float s;
          int z;
          if (spec.symmetric) {
            z = 1 << (spec.bits - 1);
            s = std::max(std::fabs(lo), std::fabs(hi)) / static_cast<float>(z - 1);
          } else {
            s = (hi - lo) / static_cast<float>(qmax);
            z = s > 0 ? static_cast<int>(std::lround(-lo / s)) : 0;
          }
          if (s <= 0) s = 1.0f;
          s = F16ToF32(F32ToF16(s));  // the checkpoint stores fp16 scales
          if (spec.layout == Layout::kGptqV1) z = std::max(z, 1);  // v1 stores zero - 1
          scale[static_cast<size_t>(g * out + o)] = s;
          zero[static_cast<size_t>(g * out + o)] = std::clamp(z, 0, qmax);
        }
      }
      Tensor deq = Tensor::Empty({out, in}, DType::kF32);
      std::vector<int> q(static_cast<size_t>(out * in));
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          const size_t gi = static_cast<size_t>(group[static_cast<size_t>(i)] * out + o);
          const int v = std::clamp(static_cast<int>(std::lround(w[o * in + i] / scale[gi])) + zero[gi], 0, qmax);
          q[static_cast<size_t>(o * in + i)] = v;
          deq.data<float>()[o * in + i] = static_cast<float>(v - zero[gi]) * scale[gi];
        }
      }
      ref.emplace_back(name, deq);
      const bool awq = spec.layout == Layout::kAwq;
      const int zero_offset = spec.layout == Layout::kGptqV1 ? 1 : 0;
      std::vector<uint32_t> qweight(static_cast<size_t>(out * in / per), 0), qzeros(static_cast<size_t>(groups * out / per), 0);
      for (int64_t i = 0; i < in; ++i) {
        for (int64_t o = 0; o < out; ++o) {
          const uint32_t v = static_cast<uint32_t>(q[static_cast<size_t>(o * in + i)]);
          if (awq) {
            qweight[static_cast<size_t>(i * (out / per) + o / per)] |= v << (model::kAwqNibble[o % per] * spec.bits);
          } else {
            qweight[static_cast<size_t>((i / per) * out + o)] |= v << ((i % per) * spec.bits);
          }
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        for (int64_t o = 0; o < out; ++o) {
          const uint32_t z = static_cast<uint32_t>(zero[static_cast<size_t>(g * out + o)] - zero_offset);
          const int shift = (awq ? model::kAwqNibble[o % per] : static_cast<int>(o % per)) * spec.bits;
          qzeros[static_cast<size_t>(g * (out / per) + o / per)] |= z << shift;
        }
      }
      Tensor scales = Tensor::Empty({groups, out}, DType::kF16);
      for (size_t k = 0; k < scale.size(); ++k) scales.data<uint16_t>()[k] = F32ToF16(scale[k]);
      packed.emplace_back(prefix + ".qweight",
                          I32(awq ? Shape{in, out / per} : Shape{in / per, out}, qweight));
      packed.emplace_back(prefix + ".qzeros", I32({groups, out / per}, qzeros));
      packed.emplace_back(prefix + ".scales", scales);
      if (!awq) {
        Tensor g_idx = Tensor::Empty({in}, DType::kI32);
        std::copy(group.begin(), group.end(), g_idx.data<int32_t>());
        packed.emplace_back(prefix + ".g_idx", g_idx);
      }
    }
    json config = json::parse(ReadText(dir_ / "src" / "config.json"));
    for (const char* d : {"q", "ref"}) fs::create_directories(dir_ / d);
    ASSERT_TRUE(io::WriteSafetensors((dir_ / "ref" / "model.safetensors").string(), ref).ok());
    ASSERT_TRUE(io::WriteSafetensors((dir_ / "q" / "model.safetensors").string(), packed).ok());
    WriteText(dir_ / "ref" / "config.json", config.dump(2));
    config["quantization_config"] = quant;
    WriteText(dir_ / "q" / "config.json", config.dump(2));
  }


  // The quantized checkpoint plans for exactly the dequantized checkpoint's bytes.
  void ExpectPlannedBytes() {
    auto q = io::Checkpoint::Open((dir_ / "q").string());
    auto r = io::Checkpoint::Open((dir_ / "ref").string());
    auto config = io::LoadModelConfig((dir_ / "q").string());
    ASSERT_TRUE(q.ok() && r.ok() && config.ok());
    int64_t want = 0;
    for (const std::string& n : (*r)->Names()) want += static_cast<int64_t>((*r)->Get(n)->nbytes());
    EXPECT_EQ(model::DequantizedBytes(**q, *config), want);
  }

  fs::path dir_;
};

TEST_F(PackedIntCheckpointTest, GptqSymmetricV1MatchesItsDequantizedWeights) {
  WritePacked({Layout::kGptqV1, 4, 32, false, true},
              json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": false, "sym": true})"));
  ExpectSameLogits(LastLogits((dir_ / "q").string()), LastLogits((dir_ / "ref").string()));
  ExpectPlannedBytes();
}

TEST_F(PackedIntCheckpointTest, GptqActOrderV2AsymmetricMatches) {
  WritePacked({Layout::kGptqV2, 4, 32, true, false},
              json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": true,
                              "sym": false, "checkpoint_format": "gptq_v2"})"));
  ExpectSameLogits(LastLogits((dir_ / "q").string()), LastLogits((dir_ / "ref").string()));
}

TEST_F(PackedIntCheckpointTest, Gptq8BitPerChannelMatches) {
  WritePacked({Layout::kGptqV1, 8, 0, false, true},
              json::parse(R"({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": true})"));
  ExpectSameLogits(LastLogits((dir_ / "q").string()), LastLogits((dir_ / "ref").string()));
}

TEST_F(PackedIntCheckpointTest, AwqMatchesAndAnEngineBuiltFromItToo) {
  WritePacked({Layout::kAwq, 4, 32, false, false},
              json::parse(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true,
                              "version": "gemm", "modules_to_not_convert": null})"));
  const std::vector<float> want = LastLogits((dir_ / "ref").string());
  ExpectSameLogits(LastLogits((dir_ / "q").string()), want);
  ExpectPlannedBytes();
  engine::BuildOptions bo;
  bo.precision = Precision::kFp32;
  bo.tune = false;
  const std::string path = (dir_ / "awq.ferry").string();
  auto built = engine::BuildEngine((dir_ / "q").string(), path, bo);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  ExpectSameLogits(LastLogits(path), want);
}

// The int4-wo path keeps a 4-bit checkpoint's own grid: every quantized layer's groups stand
// for exactly the matrix the dequantizer produces, layers the quantizer left out report
// NotFound, and grids with no such form (act-order, 8 bits) report nullopt.
class PackedInt4GroupsTest : public PackedIntCheckpointTest {
 protected:
  struct Sources {
    model::WeightSource q, ref;
    std::shared_ptr<io::Checkpoint> q_ckpt, ref_ckpt;
  };
  Sources Open() {
    Sources s;
    auto q = io::Checkpoint::Open((dir_ / "q").string());
    auto r = io::Checkpoint::Open((dir_ / "ref").string());
    auto config = io::LoadModelConfig((dir_ / "q").string());
    EXPECT_TRUE(q.ok() && r.ok() && config.ok());
    if (!q.ok() || !r.ok() || !config.ok()) return s;
    s.q_ckpt = std::move(q).value();
    s.ref_ckpt = std::move(r).value();
    io::Checkpoint* qc = s.q_ckpt.get();
    io::Checkpoint* rc = s.ref_ckpt.get();
    s.q = model::DequantizingSource({[qc](const std::string& n) { return qc->Get(n); },
                                     [qc](const std::string& n) { return qc->Has(n); }},
                                    config->quantization, DType::kF32);
    s.ref = {[rc](const std::string& n) { return rc->Get(n); }, [rc](const std::string& n) { return rc->Has(n); }};
    return s;
  }
};

TEST_F(PackedInt4GroupsTest, GptqAndAwqGroupsExpandToTheDequantizedMatrix) {
  for (const bool awq : {false, true}) {
    SCOPED_TRACE(awq ? "awq" : "gptq v1");
    WritePacked({awq ? Layout::kAwq : Layout::kGptqV1, 4, 32, false, false},
                awq ? json::parse(R"({"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": true})")
                    : json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": false})"));
    Sources s = Open();
    ASSERT_TRUE(s.q.int4);
    int layers = 0;
    for (const std::string& name : s.ref_ckpt->Names()) {
      Result<std::optional<kernels::Int4Groups>> g = s.q.int4(name);
      if (!(name.starts_with("model.layers.") && name.ends_with("_proj.weight"))) {
        ASSERT_TRUE(g.ok()) << name << ": " << g.status().ToString();
        EXPECT_FALSE(g->has_value()) << name;  // held unquantized: no groups
        EXPECT_FALSE(s.q.quantized(name)) << name;
        continue;
      }
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      ASSERT_TRUE(g->has_value()) << name;
      const kernels::Int4Groups& groups = **g;
      EXPECT_EQ(groups.group_size, 32);
      auto want = s.ref_ckpt->Get(name);
      ASSERT_TRUE(want.ok());
      ASSERT_EQ(groups.out, want->dim(0));
      ASSERT_EQ(groups.in, want->dim(1));
      std::vector<float> got(static_cast<size_t>(groups.out * groups.in));
      kernels::DequantizeInt4(groups, got.data());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want->data<float>()[i]) << name << " " << i;
      ++layers;
    }
    EXPECT_GT(layers, 0);
    fs::remove_all(dir_ / "q");
    fs::remove_all(dir_ / "ref");
  }
}

TEST_F(PackedInt4GroupsTest, ActOrderAndEightBitHaveNoGroupForm) {
  WritePacked({Layout::kGptqV2, 4, 32, true, false},
              json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": true,
                              "checkpoint_format": "gptq_v2"})"));
  Sources s = Open();
  auto g = s.q.int4("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->has_value());
  fs::remove_all(dir_ / "q");
  fs::remove_all(dir_ / "ref");
  WritePacked({Layout::kGptqV1, 8, 0, false, true},
              json::parse(R"({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": true})"));
  s = Open();
  g = s.q.int4("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->has_value());
}

// LoadLinear in int4-wo takes the groups (fused q/k/v included) and the CPU runs exactly the
// dequantized matrix; a layer the checkpoint holds in floats stays in floats.
TEST_F(PackedInt4GroupsTest, Int4LinearsOnTheCpuComputeTheCheckpointsMatrix) {
  WritePacked({Layout::kGptqV1, 4, 32, false, false},
              json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": false})"));
  Sources s = Open();
  auto be = backend::MakeCpuBackend();
  model::LoadOptions int4;
  int4.linear_format = backend::WeightFormat::kInt4;
  const std::string p = "model.layers.1.self_attn.";
  const std::vector<std::string> names = {p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"};
  std::vector<int64_t> outs;
  for (const std::string& n : names) outs.push_back(s.ref_ckpt->Get(n)->dim(0));
  const int64_t in = s.ref_ckpt->Get(names[0])->dim(1);
  auto got = model::LoadLinear(s.q, *be, int4, "qkv", names, {}, outs, in);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  auto want = model::LoadLinear(s.ref, *be, {}, "qkv", names, {}, outs, in);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  const int64_t n = std::accumulate(outs.begin(), outs.end(), int64_t{0});
  Tensor x = Tensor::Empty({3, in}, DType::kF32);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  Tensor y1 = Tensor::Empty({3, n}, DType::kF32), y2 = Tensor::Empty({3, n}, DType::kF32);
  ASSERT_TRUE(be->Linear(x, *got, y1).ok());
  ASSERT_TRUE(be->Linear(x, *want, y2).ok());
  for (int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(y1.data<float>()[i], y2.data<float>()[i]) << i;
  EXPECT_EQ(got->format, backend::WeightFormat::kF32);  // int4 groups, expanded on the CPU
  // The embedding table, read as a linear, is not quantized in the checkpoint: loaded in the
  // checkpoint's own precision it keeps its floats.
  const int64_t hidden = in;
  int4.keep_unquantized_layers = true;
  auto plain = model::LoadLinear(s.q, *be, int4, "embed_as_linear", {"model.embed_tokens.weight"}, {},
                                 {s.ref_ckpt->Get("model.embed_tokens.weight")->dim(0)}, hidden);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->format, backend::WeightFormat::kNative);
}

// An engine built in int4-wo from a float checkpoint quantizes every linear (round to nearest
// in groups of 128 or the row): its logits move, but stay near the float model's.
TEST_F(PackedIntCheckpointTest, Int4EngineFromFloatsStaysNearTheFloatModel) {
  engine::BuildOptions bo;
  bo.precision = Precision::kInt4WeightOnly;
  bo.tune = false;
  const std::string path = (dir_ / "int4.ferry").string();
  auto built = engine::BuildEngine((dir_ / "src").string(), path, bo);
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  const double err = RelativeMaxError(LastLogits(path), LastLogits((dir_ / "src").string()));
  EXPECT_GT(err, 1e-4);  // quantized
  EXPECT_LT(err, 0.25);  // but still the same model
}

// On a GPU a 4-bit checkpoint loads onto the int4 kernels (no `ferry build`), and agrees with
// the CPU's run of its dequantized weights within bf16's tolerance.
TEST_F(PackedIntCheckpointTest, GptqOnTheGpuRunsTheInt4KernelsAndMatchesTheCpu) {
  if (!backend::CudaAvailable()) GTEST_SKIP() << "no CUDA device present";
  WritePacked({Layout::kGptqV1, 4, 32, false, false},
              json::parse(R"({"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": false})"));
  std::map<std::string, backend::WeightFormat> formats;
  const std::vector<float> got = LastLogits((dir_ / "q").string(), GpuBf16(), &formats);
  ExpectQuantizedExceptHead(formats, backend::WeightFormat::kInt4);
  EXPECT_LE(RelativeMaxError(got, LastLogits((dir_ / "ref").string())), 3e-2);
}

}  // namespace
}  // namespace ferry::tools
