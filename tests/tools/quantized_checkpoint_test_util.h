// Shared by the pre-quantized checkpoint tests (float8, GPTQ, AWQ): each writes a quantized
// checkpoint and the same weights dequantized, then compares what the model computes on both.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <limits>
#include <string>
#include <vector>

#include "decoder_test_util.h"
#include "engine/engine.h"
#include "model/decoder.h"

namespace ferry::tools {

inline std::string ReadText(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void WriteText(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

// The last row's logits of one 20-token prompt (ids spread over the vocabulary) on the model
// at `path` (a checkpoint folder or an engine file), on the CPU or as `options` say; with
// `formats`, each linear's weight format by key too.
inline std::vector<float> LastLogits(const std::string& path, const engine::EngineOptions& options = {},
                                     std::map<std::string, backend::WeightFormat>* formats = nullptr) {
  auto e = engine::Engine::Load(path, options);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  if (!e.ok()) return {};
  if (formats != nullptr && (*e)->decoder() != nullptr) {
    model::WeightVisitor visit{[](const std::string&, const Tensor&) { return Status::Ok(); },
                               [formats](const std::string& key, const backend::LinearWeight& w) {
                                 (*formats)[key] = w.format;
                                 return Status::Ok();
                               }};
    EXPECT_TRUE((*e)->decoder()->Visit(visit).ok());
  }
  auto h = testing::DecoderHarness::Create(*e, 1, 64);
  EXPECT_NE(h, nullptr);
  if (h == nullptr) return {};
  std::vector<int32_t> ids;
  for (int i = 0; i < 20; ++i) ids.push_back((i * 37 + 5) % (*e)->config().vocab_size);
  auto out = h->Step({{1, ids, 0, false}});
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (!out.ok()) return {};
  return std::vector<float>(out->data<float>(), out->data<float>() + out->numel());
}

// The largest |got - want| over the largest |want| (infinity when the sizes differ or want is
// empty or all zero).
// Every linear in `format` except lm_head, which the checkpoints here leave unquantized.
inline void ExpectQuantizedExceptHead(const std::map<std::string, backend::WeightFormat>& formats,
                                      backend::WeightFormat format) {
  ASSERT_FALSE(formats.empty());
  for (const auto& [key, f] : formats) EXPECT_EQ(f == format, key != "lm_head") << key;
}

// bf16 activations on the first GPU.
inline engine::EngineOptions GpuBf16() {
  engine::EngineOptions o;
  o.device = DeviceSpec::Cuda();
  o.cuda_activations = DType::kBF16;
  return o;
}

inline double RelativeMaxError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || want.empty()) return std::numeric_limits<double>::infinity();
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  return scale > 0 ? err / scale : std::numeric_limits<double>::infinity();
}

// Equal within 1e-5 of the largest logit: the same weights, computed the same way.
inline void ExpectSameLogits(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_LE(RelativeMaxError(got, want), 1e-5);
}

}  // namespace ferry::tools
