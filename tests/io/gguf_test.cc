// The GGUF reader on hand-built files: every metadata type, versions 2 and 3, alignment,
// tensor types, and broken or hostile files, each of which must be a clean error.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gguf_test_writer.h"

namespace ferry {
namespace {

using testing::GgufBuilder;

Result<std::shared_ptr<io::GgufFile>> ParseBytes(const std::string& bytes, const io::GgufLimits& limits = {}) {
  auto owned = std::make_shared<std::string>(bytes);
  return io::GgufFile::Parse(*owned, owned, "test.gguf", limits);
}

std::string F32Bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(GgufReaderTest, ReadsEveryMetadataType) {
  for (uint32_t version : {2u, 3u}) {
    GgufBuilder b(version);
    b.Scalar<uint8_t>("u8", GgufBuilder::kU8, 200);
    b.Scalar<int8_t>("i8", GgufBuilder::kI8, -100);
    b.Scalar<uint16_t>("u16", GgufBuilder::kU16, 60000);
    b.Scalar<int16_t>("i16", GgufBuilder::kI16, -30000);
    b.U32("u32", 4000000000u);
    b.I32("i32", -2000000000);
    b.U64("u64", 1ull << 40);
    b.Scalar<int64_t>("i64", GgufBuilder::kI64, -(1ll << 40));
    b.F32("f32", 0.25f);
    b.Scalar<double>("f64", GgufBuilder::kF64, -1.5);
    b.Bool("yes", true);
    b.Str("s", "h\xc3\xa9llo");
    b.StrArray("strs", {"a", "", "ccc"});
    b.Array<int32_t>("ints", GgufBuilder::kI32, {1, -2, 3});
    b.Array<float>("floats", GgufBuilder::kF32, {0.5f, 1.5f});
    auto f = ParseBytes(b.Build());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const io::GgufFile& g = **f;
    EXPECT_EQ(g.version(), version);
    EXPECT_EQ(*g.Int("u8"), 200);
    EXPECT_EQ(*g.Int("i8"), -100);
    EXPECT_EQ(*g.Int("u16"), 60000);
    EXPECT_EQ(*g.Int("i16"), -30000);
    EXPECT_EQ(*g.Int("u32"), 4000000000ll);
    EXPECT_EQ(*g.Int("i32"), -2000000000);
    EXPECT_EQ(*g.Int("u64"), 1ll << 40);
    EXPECT_EQ(*g.Int("i64"), -(1ll << 40));
    EXPECT_EQ(**g.OptionalFloat("f32"), 0.25);
    EXPECT_EQ(**g.OptionalFloat("f64"), -1.5);
    EXPECT_EQ(**g.OptionalBool("yes"), true);
    EXPECT_EQ(*g.String("s"), "h\xc3\xa9llo");
    const io::GgufValue* strs = g.Find("strs");
    ASSERT_NE(strs, nullptr);
    ASSERT_EQ(strs->array_size(), 3u);
    EXPECT_EQ(strs->strings[2], "ccc");
    EXPECT_EQ(g.Find("ints")->ints[1], -2);
    EXPECT_EQ(g.Find("floats")->floats[1], 1.5);
    EXPECT_FALSE(g.OptionalInt("absent")->has_value());
    // Wrong types are errors naming the key.
    Result<std::string> not_string = g.String("u8");
    ASSERT_FALSE(not_string.ok());
    EXPECT_NE(not_string.status().message().find("'u8'"), std::string::npos);
    EXPECT_FALSE(g.OptionalBool("s").ok());
    EXPECT_EQ(g.Int("absent").status().code(), StatusCode::kNotFound);
  }
}

TEST(GgufReaderTest, ReadsTensorsAtTheirAlignment) {
  for (uint64_t alignment : {32ull, 64ull, 8ull}) {
    GgufBuilder b(3, alignment);
    if (alignment != 32) b.U32("general.alignment", static_cast<uint32_t>(alignment));
    // A [2, 3] matrix (ne = {3, 2}) and a vector of 5 (not a multiple of the alignment).
    b.Tensor("m", {3, 2}, GgufBuilder::kTF32, F32Bytes({1, 2, 3, 4, 5, 6}));
    b.Tensor("v", {5}, GgufBuilder::kTF32, F32Bytes({7, 8, 9, 10, 11}));
    std::string h;
    for (float x : {1.0f, -2.0f}) GgufBuilder::Put<uint16_t>(&h, F32ToF16(x));
    b.Tensor("h", {2}, GgufBuilder::kTF16, h);
    std::string bf;
    for (float x : {0.5f, 3.0f}) GgufBuilder::Put<uint16_t>(&bf, F32ToBf16(x));
    b.Tensor("bf", {2}, GgufBuilder::kTBF16, bf);
    auto f = ParseBytes(b.Build());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ((*f)->alignment(), alignment);
    auto m = (*f)->Get("m");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    EXPECT_EQ(m->shape(), (Shape{2, 3}));
    EXPECT_EQ(m->data<float>()[5], 6.0f);
    auto v = (*f)->Get("v");
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(v->data<float>()[4], 11.0f);
    auto hh = (*f)->Get("h");
    ASSERT_TRUE(hh.ok());
    EXPECT_EQ(hh->dtype(), DType::kF16);
    EXPECT_EQ(hh->ToF32().data<float>()[1], -2.0f);
    auto bb = (*f)->Get("bf");
    ASSERT_TRUE(bb.ok());
    EXPECT_EQ(bb->dtype(), DType::kBF16);
    EXPECT_EQ(bb->ToF32().data<float>()[1], 3.0f);
    EXPECT_EQ((*f)->Get("absent").status().code(), StatusCode::kNotFound);
  }
}

TEST(GgufReaderTest, DequantizesQ8_0) {
  // Two rows of 32: row r holds (j - 16) * 0.5 * (r + 1), scale 0.5 * (r + 1).
  std::string data;
  std::vector<float> expect;
  for (int r = 0; r < 2; ++r) {
    const float scale = 0.5f * static_cast<float>(r + 1);
    GgufBuilder::Put<uint16_t>(&data, F32ToF16(scale));
    for (int j = 0; j < 32; ++j) {
      data.push_back(static_cast<char>(static_cast<int8_t>(j - 16)));
      expect.push_back(scale * static_cast<float>(j - 16));
    }
  }
  GgufBuilder b;
  b.Tensor("q", {32, 2}, GgufBuilder::kTQ8_0, data);
  auto f = ParseBytes(b.Build());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto q = (*f)->Get("q");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_EQ(q->shape(), (Shape{2, 32}));
  EXPECT_EQ(q->dtype(), DType::kF32);
  Tensor x = q->ToF32();
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(x.data<float>()[i], expect[i]) << i;

  // A row that is not whole blocks is refused at open.
  GgufBuilder bad;
  bad.Tensor("q", {16, 2}, GgufBuilder::kTQ8_0, data.substr(0, 34));
  auto r = ParseBytes(bad.Build());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multiple of 32"), std::string::npos) << r.status().ToString();
}

TEST(GgufReaderTest, Q8_0MatricesComeAsTheirBlocks) {
  // Three rows of 64 (two blocks each): block (r, b) holds values j - 16 - b, scale 0.25 * (r + 2b + 1).
  std::string data;
  for (int r = 0; r < 3; ++r) {
    for (int blk = 0; blk < 2; ++blk) {
      GgufBuilder::Put<uint16_t>(&data, F32ToF16(0.25f * static_cast<float>(r + 2 * blk + 1)));
      for (int j = 0; j < 32; ++j) data.push_back(static_cast<char>(static_cast<int8_t>(j - 16 - blk)));
    }
  }
  GgufBuilder b;
  b.Tensor("q", {64, 3}, GgufBuilder::kTQ8_0, data);
  b.Tensor("v", {64}, GgufBuilder::kTQ8_0, data.substr(0, 68));
  b.Tensor("f", {2, 2}, GgufBuilder::kTF32, std::string(16, '\0'));
  auto f = ParseBytes(b.Build());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto blocks = (*f)->GetInt8Blocks("q");
  ASSERT_TRUE(blocks.ok()) << blocks.status().ToString();
  ASSERT_TRUE(blocks->has_value());
  const io::Int8Blocks& q = **blocks;
  EXPECT_EQ(q.block_size, 32);
  EXPECT_EQ(q.q.shape(), (Shape{3, 64}));
  EXPECT_EQ(q.q.dtype(), DType::kI8);
  EXPECT_EQ(q.scales.shape(), (Shape{3, 2}));
  EXPECT_EQ(q.scales.dtype(), DType::kF16);
  const auto* scales = static_cast<const uint16_t*>(q.scales.raw());
  EXPECT_EQ(q.stored_bytes, 3 * 2 * 34);
  // q times its block's scale is what Get dequantizes to, value for value.
  auto dense = (*f)->Get("q");
  ASSERT_TRUE(dense.ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 64; ++c) {
      EXPECT_EQ(q.q.data<int8_t>()[r * 64 + c], c % 32 - 16 - c / 32);
      EXPECT_EQ(static_cast<float>(q.q.data<int8_t>()[r * 64 + c]) * F16ToF32(scales[r * 2 + c / 32]),
                dense->data<float>()[r * 64 + c]);
    }
    EXPECT_EQ(F16ToF32(scales[r * 2 + 1]), 0.25f * static_cast<float>(r + 3));
  }
  // Vectors and other types have no blocks; absent tensors are NotFound.
  auto v = (*f)->GetInt8Blocks("v");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  auto fl = (*f)->GetInt8Blocks("f");
  ASSERT_TRUE(fl.ok());
  EXPECT_FALSE(fl->has_value());
  EXPECT_EQ((*f)->GetInt8Blocks("absent").status().code(), StatusCode::kNotFound);
}

TEST(GgufReaderTest, OtherTensorTypesAreUnimplementedByName) {
  GgufBuilder b;
  b.Tensor("blk.0.ffn_down.weight", {256, 1}, GgufBuilder::kTQ4_K, std::string(144, '\0'));
  b.Tensor("odd", {4}, 77, std::string(16, '\0'));
  auto f = ParseBytes(b.Build());
  ASSERT_TRUE(f.ok()) << f.status().ToString();  // opening is fine; reading is not
  auto t = (*f)->Get("blk.0.ffn_down.weight");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("Q4_K"), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().message().find("blk.0.ffn_down.weight"), std::string::npos);
  auto odd = (*f)->Get("odd");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("type 77"), std::string::npos) << odd.status().ToString();
}

// Every broken file is an error with a message, never a crash (run under ASan in CI).
TEST(GgufReaderTest, HostileFilesAreCleanErrors) {
  GgufBuilder good;
  good.Str("general.architecture", "llama");
  good.StrArray("tokens", {"a", "b"});
  good.Tensor("t", {4}, GgufBuilder::kTF32, F32Bytes({1, 2, 3, 4}));
  const std::string bytes = good.Build();
  ASSERT_TRUE(ParseBytes(bytes).ok());

  // Truncated at every length: never a crash; an error for every cut inside the header and
  // data.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = ParseBytes(bytes.substr(0, n));
    EXPECT_FALSE(r.ok()) << "cut at " << n;
  }

  auto expect_error = [](const std::string& b, const std::string& needle) {
    auto r = ParseBytes(b);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  };
  std::string header = "GGUF";
  GgufBuilder::Put<uint32_t>(&header, 3);
  // Absurd counts.
  {
    std::string b = header;
    GgufBuilder::Put<uint64_t>(&b, 1ull << 60);
    GgufBuilder::Put<uint64_t>(&b, 0);
    expect_error(b, "tensors");
  }
  {
    std::string b = header;
    GgufBuilder::Put<uint64_t>(&b, 0);
    GgufBuilder::Put<uint64_t>(&b, ~0ull);
    expect_error(b, "metadata entries");
  }
  // An absurd string length, and one past the end of the file.
  {
    GgufBuilder g;
    std::string v;
    GgufBuilder::Put<uint64_t>(&v, ~0ull);
    g.Raw("k", GgufBuilder::kString, v);
    expect_error(g.Build(), "allowed");
    GgufBuilder h;
    std::string w;
    GgufBuilder::Put<uint64_t>(&w, 1000);
    w += "short";
    h.Raw("k", GgufBuilder::kString, w);
    expect_error(h.Build(), "ends inside");
  }
  // An array longer than the file could hold, and one past the limit.
  {
    GgufBuilder g;
    std::string v;
    GgufBuilder::Put<uint32_t>(&v, GgufBuilder::kU64);
    GgufBuilder::Put<uint64_t>(&v, 1000000);
    g.Raw("k", GgufBuilder::kArray, v);
    expect_error(g.Build(), "more than the rest of the file");
    io::GgufLimits small;
    small.max_array_length = 1;
    auto r = ParseBytes(bytes, small);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("'tokens'"), std::string::npos) << r.status().ToString();
  }
  // Nested arrays, unknown value types, bad bools.
  {
    GgufBuilder g;
    std::string v;
    GgufBuilder::Put<uint32_t>(&v, GgufBuilder::kArray);
    GgufBuilder::Put<uint64_t>(&v, 1);
    GgufBuilder::Put<uint32_t>(&v, GgufBuilder::kU8);
    GgufBuilder::Put<uint64_t>(&v, 1);
    v.push_back('\1');
    g.Raw("nested", GgufBuilder::kArray, v);
    expect_error(g.Build(), "array of arrays");
    GgufBuilder u;
    u.Raw("k", 13, std::string(8, '\0'));
    expect_error(u.Build(), "unknown value type 13");
    GgufBuilder a;
    std::string e;
    GgufBuilder::Put<uint32_t>(&e, 99);
    GgufBuilder::Put<uint64_t>(&e, 0);
    a.Raw("k", GgufBuilder::kArray, e);
    expect_error(a.Build(), "unknown type 99");
    GgufBuilder bo;
    bo.Scalar<uint8_t>("flag", GgufBuilder::kBool, 7);
    expect_error(bo.Build(), "bool value 7");
  }
  // Tensor offsets and shapes.
  {
    GgufBuilder g;
    g.Tensor("t", {1000}, GgufBuilder::kTF32, F32Bytes({1, 2}));
    expect_error(g.Build(), "past the end of the file");
    GgufBuilder d;
    d.Tensor("t", {1, 1, 1, 1, 1}, GgufBuilder::kTF32, F32Bytes({1}));
    expect_error(d.Build(), "dimensions");
    GgufBuilder z;
    z.Tensor("t", {0}, GgufBuilder::kTF32, "");
    expect_error(z.Build(), "dimension");
    GgufBuilder huge;
    huge.Tensor("t", {1ull << 40, 1ull << 40}, GgufBuilder::kTF32, "");
    expect_error(huge.Build(), "absurd");
    // A misaligned offset, written by hand.
    std::string b = header;
    GgufBuilder::Put<uint64_t>(&b, 1);
    GgufBuilder::Put<uint64_t>(&b, 0);
    GgufBuilder::PutString(&b, "t");
    GgufBuilder::Put<uint32_t>(&b, 1);
    GgufBuilder::Put<uint64_t>(&b, 1);
    GgufBuilder::Put<uint32_t>(&b, 0);
    GgufBuilder::Put<uint64_t>(&b, 3);
    b.resize(256, '\0');
    expect_error(b, "not a multiple of the alignment");
    GgufBuilder dup;
    dup.Tensor("t", {1}, GgufBuilder::kTF32, F32Bytes({1}));
    dup.Tensor("t", {1}, GgufBuilder::kTF32, F32Bytes({1}));
    expect_error(dup.Build(), "repeats the tensor");
  }
  // Alignment that is not a power of two; repeated keys.
  {
    GgufBuilder g;
    g.U32("general.alignment", 24);
    expect_error(g.Build(), "general.alignment");
    GgufBuilder r;
    r.U32("k", 1);
    r.U32("k", 2);
    expect_error(r.Build(), "repeats the metadata key");
  }
}

TEST(GgufReaderTest, RefusesOtherVersionsBigEndianAndNonGguf) {
  std::string be = "GGUF";
  be += std::string("\0\0\0\3", 4);  // version 3, big-endian
  be += std::string(16, '\0');
  auto r = ParseBytes(be);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("big-endian"), std::string::npos) << r.status().ToString();

  GgufBuilder v1(1);
  auto old = ParseBytes(v1.Build());
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("version 1"), std::string::npos) << old.status().ToString();

  auto junk = ParseBytes("not a gguf file at all");
  ASSERT_FALSE(junk.ok());
  EXPECT_NE(junk.status().message().find("magic"), std::string::npos);
}

}  // namespace
}  // namespace ferry
