// SerializeLinear / DeserializeLinear: round trips in every format, zero-copy loading from
// a read-only mapping, and corrupt layouts or blobs turned into errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "core/mapped_file.h"
#include "kernel_test_util.h"
#include "layout_edit.h"
#include "kernels/cpu/packed_weight.h"

namespace ferry {
namespace {

using backend::LinearWeight;
using backend::SerializedLinear;
using backend::WeightFormat;
using testing::ConvertTo;
using testing::Poisoned;
using testing::RandomTensor;

const std::vector<WeightFormat>& AllFormats() {
  static const std::vector<WeightFormat> formats = {WeightFormat::kNative, WeightFormat::kF32,
                                                    WeightFormat::kBF16,   WeightFormat::kF16,
                                                    WeightFormat::kInt8,   WeightFormat::kInt8W8A8};
  return formats;
}

LinearWeight Prepared(backend::Backend& be, WeightFormat format, int64_t n, int64_t k, bool bias, bool smooth,
                      std::mt19937& rng) {
  LinearWeight w;
  w.weight = ConvertTo(RandomTensor({n, k}, rng), DType::kBF16);
  w.format = format;
  if (bias) w.bias = RandomTensor({n}, rng);
  if (smooth) w.smooth = RandomTensor({k}, rng, 0.25f, 4.0f);
  EXPECT_TRUE(be.PrepareLinear(w).ok());
  return w;
}

Tensor RunLinear(backend::Backend& be, const Tensor& x, const LinearWeight& w) {
  Tensor y = Poisoned({x.dim(0), w.out});
  EXPECT_TRUE(be.Linear(x, w, y).ok());
  return y;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// An engine file in miniature: the blobs back to back at 4096-byte boundaries, written to a
// file and mapped read-only, each handed back as a raw byte view into the mapping.
struct MappedBlobs {
  std::shared_ptr<MappedFile> file;
  std::vector<Tensor> blobs;
};

MappedBlobs MapBlobs(const std::vector<Tensor>& blobs, const std::string& name, size_t misalign = 0) {
  std::string image;
  std::vector<std::pair<size_t, size_t>> spans;
  for (const Tensor& b : blobs) {
    image.resize((image.size() + 4095) / 4096 * 4096 + misalign, '\0');
    spans.emplace_back(image.size(), b.nbytes());
    image.append(static_cast<const char*>(b.raw()), b.nbytes());
  }
  // ctest runs the parameterized cases as separate processes at once: one file each.
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string unique = std::string(test->test_suite_name()) + "." + test->name() + "." + name;
  std::replace(unique.begin(), unique.end(), '/', '_');
  const std::string path = ::testing::TempDir() + "/" + std::to_string(::getpid()) + "_" + unique;
  EXPECT_TRUE(WriteStringToFile(path, image).ok());
  MappedBlobs out;
  auto file = MappedFile::Open(path);
  EXPECT_TRUE(file.ok());
  ::unlink(path.c_str());  // the mapping keeps the pages
  if (!file.ok()) return out;
  out.file = *file;
  for (const auto& [offset, bytes] : spans) {
    out.blobs.push_back(Tensor::FromBorrowed(const_cast<uint8_t*>(out.file->data() + offset),
                                             {static_cast<int64_t>(bytes)}, DType::kU8, out.file));
  }
  return out;
}

bool Inside(const void* p, const MappedFile& file) {
  const auto* b = static_cast<const uint8_t*>(p);
  return b >= file.data() && b < file.data() + file.size();
}

// (format, bias, smooth)
class SerializeTest : public ::testing::TestWithParam<std::tuple<WeightFormat, bool, bool>> {};

TEST_P(SerializeTest, RoundTripIsBitIdentical) {
  const auto [format, with_bias, with_smooth] = GetParam();
  std::mt19937 rng(21);
  auto be = backend::MakeCpuBackend();
  const LinearWeight w = Prepared(*be, format, 37, 75, with_bias, with_smooth, rng);
  auto s = be->SerializeLinear(w);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto back = be->DeserializeLinear(*s);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->weight.defined());
  EXPECT_EQ(back->format, format);
  EXPECT_EQ(back->out, 37);
  EXPECT_EQ(back->in, 75);
  EXPECT_EQ(back->bias.defined(), with_bias);
  // In memory the blobs are the packed buffers themselves: nothing was copied.
  const auto* orig = kernels::cpu::AsPackedWeight(w.packed);
  const auto* loaded = kernels::cpu::AsPackedWeight(back->packed);
  ASSERT_NE(loaded, nullptr);
  EXPECT_EQ(loaded->panels.raw(), orig->panels.raw());
  for (int64_t m : {1, 7, 64}) {
    const Tensor x = RandomTensor({m, 75}, rng);
    EXPECT_TRUE(SameBits(RunLinear(*be, x, w), RunLinear(*be, x, *back))) << "m=" << m;
  }
}

TEST_P(SerializeTest, LoadsZeroCopyFromReadOnlyMapping) {
  const auto [format, with_bias, with_smooth] = GetParam();
  std::mt19937 rng(22);
  auto be = backend::MakeCpuBackend();
  const LinearWeight w = Prepared(*be, format, 70, 257, with_bias, with_smooth, rng);
  auto s = be->SerializeLinear(w);
  ASSERT_TRUE(s.ok());
  SerializedLinear mapped;
  mapped.layout_json = s->layout_json;
  MappedBlobs file = MapBlobs(s->blobs, "linear_" + std::string(backend::WeightFormatName(format)) + ".bin");
  ASSERT_NE(file.file, nullptr);
  mapped.blobs = file.blobs;
  auto back = be->DeserializeLinear(mapped);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* loaded = kernels::cpu::AsPackedWeight(back->packed);
  ASSERT_NE(loaded, nullptr);
  EXPECT_TRUE(Inside(loaded->panels.raw(), *file.file)) << "panels were copied";
  if (loaded->scales.defined()) {
    EXPECT_TRUE(Inside(loaded->scales.raw(), *file.file)) << "scales were copied";
  }
  if (loaded->smooth.defined()) {
    EXPECT_TRUE(Inside(loaded->smooth.raw(), *file.file)) << "smooth was copied";
  }
  if (with_bias) {
    EXPECT_TRUE(Inside(back->bias.raw(), *file.file)) << "bias was copied";
  }

  // The loaded weight alone keeps the mapping alive.
  const std::weak_ptr<MappedFile> weak = file.file;
  file = MappedBlobs();
  mapped.blobs.clear();
  EXPECT_FALSE(weak.expired());
  for (int64_t m : {1, 3, 17, 300}) {
    const Tensor x = RandomTensor({m, 257}, rng);
    EXPECT_TRUE(SameBits(RunLinear(*be, x, w), RunLinear(*be, x, *back))) << "m=" << m;
  }
  *back = LinearWeight();
  EXPECT_TRUE(weak.expired());
}

TEST_P(SerializeTest, MisalignedBlobsAreCopied) {
  const auto [format, with_bias, with_smooth] = GetParam();
  std::mt19937 rng(23);
  auto be = backend::MakeCpuBackend();
  const LinearWeight w = Prepared(*be, format, 20, 33, with_bias, with_smooth, rng);
  auto s = be->SerializeLinear(w);
  ASSERT_TRUE(s.ok());
  MappedBlobs file = MapBlobs(s->blobs, "misaligned.bin", /*misalign=*/4);
  SerializedLinear mapped{s->layout_json, file.blobs};
  auto back = be->DeserializeLinear(mapped);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const auto* loaded = kernels::cpu::AsPackedWeight(back->packed);
  EXPECT_FALSE(Inside(loaded->panels.raw(), *file.file));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(loaded->panels.raw()) % 64, 0u);
  const Tensor x = RandomTensor({5, 33}, rng);
  EXPECT_TRUE(SameBits(RunLinear(*be, x, w), RunLinear(*be, x, *back)));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, SerializeTest,
                         ::testing::Combine(::testing::ValuesIn(AllFormats()), ::testing::Bool(), ::testing::Bool()));

// Each corruption of a valid int8 W8A8 layout (the one with the most parts) must be refused.
TEST(DeserializeTest, RejectsCorruptLayouts) {
  std::mt19937 rng(24);
  auto be = backend::MakeCpuBackend();
  const LinearWeight w = Prepared(*be, WeightFormat::kInt8W8A8, 40, 63, true, true, rng);
  auto good = be->SerializeLinear(w);
  ASSERT_TRUE(good.ok());
  ASSERT_TRUE(be->DeserializeLinear(*good).ok());
  const nlohmann::json layout = nlohmann::json::parse(good->layout_json);

  auto edited = [&](const std::string& key, const nlohmann::json& value) {
    return testing::EditedLayout(layout, key, value, good->blobs);
  };
  const std::vector<std::pair<std::string, SerializedLinear>> bad = {
      {"not json", {"{\"version\": 1,", good->blobs}},
      {"json array", {"[1, 2]", good->blobs}},
      {"unknown version", edited("version", 2)},
      {"version as string", edited("version", "1")},
      {"no version", edited("version", nullptr)},
      {"other backend", edited("backend", "cuda")},
      {"unknown format", edited("format", "int4")},
      {"format/dtype mismatch", edited("format", "bf16")},
      {"unknown dtype", edited("dtype", "q4")},
      {"wrong n", edited("n", 41)},
      {"wrong k", edited("k", 64)},
      {"negative n", edited("n", -40)},
      {"huge n", edited("n", int64_t{1} << 40)},
      {"wrong k_stored", edited("k_stored", 63)},
      {"wrong num_panels", edited("num_panels", 2)},
      {"wrong panel_cols", edited("panel_cols", 8)},
      {"wrong panel_layout", edited("panel_layout", "rows")},
      {"missing blob name", edited("blobs", nlohmann::json::array({"panels", "scales", "smooth"}))},
      {"blob names reordered", edited("blobs", nlohmann::json::array({"panels", "smooth", "scales", "bias"}))},
      {"no scales", edited("blobs", nlohmann::json::array({"panels", "smooth", "bias"}))},
  };
  for (const auto& [what, s] : bad) {
    auto r = be->DeserializeLinear(s);
    EXPECT_FALSE(r.ok()) << what;
  }

  // Blobs that do not match a valid layout: DataLoss.
  auto with_blobs = [&](std::vector<Tensor> blobs) { return SerializedLinear{good->layout_json, std::move(blobs)}; };
  std::vector<std::pair<std::string, SerializedLinear>> bad_blobs;
  {
    std::vector<Tensor> b = good->blobs;
    b[0] = b[0].Slice(0, b[0].dim(0) - 1);
    bad_blobs.push_back({"truncated panels", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b.pop_back();
    bad_blobs.push_back({"missing blob", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b.push_back(b.back());
    bad_blobs.push_back({"extra blob", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b[1] = Tensor::Zeros({b[1].numel()}, DType::kI32);
    bad_blobs.push_back({"scales as i32", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b[1] = b[1].Clone();
    b[1].data<float>()[3] = std::nanf("");
    bad_blobs.push_back({"NaN scale", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b[2] = b[2].Clone();
    b[2].data<float>()[5] = -1.0f;
    bad_blobs.push_back({"negative smooth", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b[3] = Tensor();
    bad_blobs.push_back({"undefined bias", with_blobs(b)});
  }
  {
    std::vector<Tensor> b = good->blobs;
    b[0] = Tensor::Zeros({static_cast<int64_t>(b[0].nbytes()) + 1}, DType::kU8);
    bad_blobs.push_back({"long byte blob", with_blobs(b)});
  }
  for (const auto& [what, s] : bad_blobs) {
    auto r = be->DeserializeLinear(s);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << what << ": " << r.status().ToString();
  }
}

TEST(DeserializeTest, SerializeNeedsAPreparedWeight) {
  std::mt19937 rng(25);
  auto be = backend::MakeCpuBackend();
  LinearWeight w;
  w.weight = RandomTensor({4, 4}, rng);
  EXPECT_FALSE(be->SerializeLinear(w).ok());
}

TEST(DeserializeTest, LayoutJsonIsSelfDescribing) {
  std::mt19937 rng(26);
  auto be = backend::MakeCpuBackend();
  const LinearWeight w = Prepared(*be, WeightFormat::kInt8, 40, 63, false, false, rng);
  auto s = be->SerializeLinear(w);
  ASSERT_TRUE(s.ok());
  const nlohmann::json j = nlohmann::json::parse(s->layout_json);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["format"], "int8-wo");
  EXPECT_EQ(j["dtype"], "i8");
  EXPECT_EQ(j["n"], 40);
  EXPECT_EQ(j["k"], 63);
  EXPECT_EQ(j["panel_cols"], 16);
  EXPECT_EQ(j["blobs"], nlohmann::json::array({"panels", "scales"}));
  ASSERT_EQ(s->blobs.size(), 2u);
  EXPECT_EQ(s->blobs[0].nbytes(), size_t{3 * 63 * 16});
  EXPECT_EQ(s->blobs[1].numel(), 48);
}

}  // namespace
}  // namespace ferry
