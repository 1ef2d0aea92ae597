// The CUDA kernels of kernels/cuda/kernels.h against the CPU implementation: random inputs
// of several shapes (odd widths, single rows, hidden 4096), every activation dtype, outputs
// poisoned before each call. Both sides see the same inputs: the CPU's f32 inputs are
// rounded to the activation dtype first. Sampling: greedy equals argmax, seeded runs
// repeat, and the sampled distribution matches the CPU sampler's.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <cstdio>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "cuda_test_util.h"
#include "engine/sampler.h"
#include "kernels/cpu/int8_gemm.h"
#include "kernels/cpu/kv_write.h"
#include "kernels/cuda/kernels.h"
#include "kernels/cuda/launch.h"

namespace ferry::cuda {
namespace {

using testing::ActDTypes;
using testing::Decode;
using testing::DeviceBuffer;
using testing::Download;
using testing::DownloadAs;
using testing::Encode;
using testing::ExpectClose;
using testing::PoisonedBuffer;
using testing::RandomFloats;
using testing::RoundTo;
using testing::Tolerance;
using testing::Upload;
using testing::UploadAs;

std::string Label(const char* kernel, DType act, const std::string& detail) {
  return std::string(kernel) + " " + std::string(DTypeName(act)) + ", " + detail;
}

std::string ShapeText(int64_t rows, int64_t cols) { return std::to_string(rows) + "x" + std::to_string(cols); }

Tensor HostTensor(const std::vector<float>& v, Shape shape) { return Tensor::FromVector(v, std::move(shape)); }

std::vector<float> TensorValues(const Tensor& t) {
  const Tensor f = t.ToF32();
  return std::vector<float>(f.data<float>(), f.data<float>() + f.numel());
}

struct RowShape {
  int64_t rows, cols;
};
// Vector and register paths (4096, 1000, 64, 8), scalar widths (333), and rows too wide to
// keep in registers (70000 and 9001 take the generic paths).
const std::vector<RowShape> kNormShapes = {{1, 4096}, {3, 1000}, {5, 333}, {17, 64}, {2, 8}, {4, 70000}, {2, 9001}};

// ---------------------------------------------------------------- norms

// Programmatic dependent launch (kernels/cuda/launch.h): every kernel waits for the one
// before it before touching memory, so a chain where each launch reads what the previous one
// wrote (x += ones over 2^23 elements: more blocks than fit at once, so a launch can start
// during the previous one's last wave) loses no update, launched one by one and replayed as a CUDA graph.
TEST(CudaKernels, DependentLaunchesKeepStreamOrder) {
  FERRY_SKIP_WITHOUT_GPU();
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  const char* env = std::getenv("FERRY_PDL");
  EXPECT_EQ(DependentLaunchEnabled(), major >= 9 && (env == nullptr || std::string(env) != "0"));
  constexpr int64_t kN = int64_t{1} << 23;
  constexpr int kChain = 500;
  const std::vector<float> ones(kN, 1.0f);
  DeviceBuffer x = Upload(std::vector<float>(kN, 0.0f));
  DeviceBuffer y = Upload(ones);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (int i = 0; i < kChain; ++i) FERRY_ASSERT_OK(Add(x.get(), y.get(), kN, DType::kF32, stream));
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<float> got = Download<float>(x, kN);
  EXPECT_EQ(std::count(got.begin(), got.end(), static_cast<float>(kChain)), kN) << "launched one by one";

  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  for (int i = 0; i < kChain; ++i) FERRY_ASSERT_OK(Add(x.get(), y.get(), kN, DType::kF32, stream));
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  got = Download<float>(x, kN);
  EXPECT_EQ(std::count(got.begin(), got.end(), static_cast<float>(4 * kChain)), kN) << "replayed as a graph";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Asynchronous steps: placeholders take the previous step's draws; a failed draw (-1)
// becomes id 0, never an index outside the embedding table.
TEST(CudaKernels, PatchTokensWritesTheDrawsAndNeverANegativeId) {
  FERRY_SKIP_WITHOUT_GPU();
  DeviceBuffer ids = Upload(std::vector<int32_t>{7, 0, 9, 0, 0});
  DeviceBuffer draws = Upload(std::vector<int32_t>{100, -1, 300});
  DeviceBuffer pairs = Upload(std::vector<int32_t>{1, 2, 3, 0, 4, 1});
  FERRY_ASSERT_OK(PatchTokens(static_cast<int32_t*>(ids.get()), static_cast<const int32_t*>(draws.get()),
                              static_cast<const int32_t*>(pairs.get()), 3, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(Download<int32_t>(ids, 5), (std::vector<int32_t>{7, 300, 9, 100, 0}));
  FERRY_ASSERT_OK(PatchTokens(nullptr, nullptr, nullptr, 0, nullptr));  // nothing to patch
  EXPECT_FALSE(PatchTokens(nullptr, nullptr, nullptr, 1, nullptr).ok());
}

TEST(CudaKernels, RmsNormMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  uint64_t seed = 100;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : kNormShapes) {
      for (bool in_place : {false, true}) {
        const std::string what = Label("RmsNorm", act, ShapeText(s.rows, s.cols) + (in_place ? " in place" : ""));
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        const std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
        const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
        Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
        FERRY_ASSERT_OK(cpu->RmsNorm(HostTensor(x, {s.rows, s.cols}), HostTensor(gamma, {s.cols}), 1e-5f, want));

        DeviceBuffer dx = UploadAs(act, x);
        DeviceBuffer dg = Upload(gamma);
        DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
        void* out = in_place ? dx.get() : dout.get();
        FERRY_ASSERT_OK(RmsNorm(dx.get(), dg.as<float>(), 1e-5f, s.rows, s.cols, out, act, nullptr));
        FERRY_ASSERT_SYNC();
        ExpectClose(DownloadAs(act, in_place ? dx : dout, n), TensorValues(want), Tolerance(act), what);
      }
    }
  }
}

TEST(CudaKernels, AddRmsNormMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  uint64_t seed = 200;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : kNormShapes) {
      for (bool out_is_delta : {false, true}) {
        const std::string what =
            Label("AddRmsNorm", act, ShapeText(s.rows, s.cols) + (out_is_delta ? " out=delta" : ""));
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        const std::vector<float> residual = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
        const std::vector<float> delta = RoundTo(act, RandomFloats(n, ++seed, -1.0f, 1.0f));
        const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
        Tensor cpu_residual = HostTensor(residual, {s.rows, s.cols});
        Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
        FERRY_ASSERT_OK(cpu->AddRmsNorm(cpu_residual, HostTensor(delta, {s.rows, s.cols}), HostTensor(gamma, {s.cols}),
                                        1e-6f, want));

        DeviceBuffer dres = UploadAs(act, residual);
        DeviceBuffer ddelta = UploadAs(act, delta);
        DeviceBuffer dg = Upload(gamma);
        DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
        void* out = out_is_delta ? ddelta.get() : dout.get();
        FERRY_ASSERT_OK(
            AddRmsNorm(dres.get(), ddelta.get(), dg.as<float>(), 1e-6f, s.rows, s.cols, out, act, nullptr));
        FERRY_ASSERT_SYNC();
        ExpectClose(DownloadAs(act, out_is_delta ? ddelta : dout, n), TensorValues(want), Tolerance(act), what);
        // The stored residual is the f32 sum rounded once to act.
        ExpectClose(DownloadAs(act, dres, n), RoundTo(act, TensorValues(cpu_residual)), Tolerance(act),
                    Label("AddRmsNorm residual", act, ShapeText(s.rows, s.cols)));
      }
    }
  }
}

// The column multiplier of the passes that form a W8A8 linear's unquantized input (its
// 1 / SmoothQuant factors): the norms multiply gamma by it, the gatings their product, in f32
// before the one rounding to the activation dtype. Wide rows take the vector paths, odd ones
// the scalar paths.
TEST(CudaKernels, ColumnMultiplierOfTheNormsAndGatings) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  uint64_t seed = 260;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : std::vector<RowShape>{{3, 2048}, {2, 13}}) {
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
      const std::vector<float> delta = RoundTo(act, RandomFloats(n, ++seed, -1.0f, 1.0f));
      const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
      const std::vector<float> mul = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.05f, 4.0f);
      std::vector<float> gamma_mul(gamma.size());
      for (size_t c = 0; c < gamma.size(); ++c) gamma_mul[c] = gamma[c] * mul[c];
      DeviceBuffer dg = Upload(gamma);
      DeviceBuffer dm = Upload(mul);

      Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
      FERRY_ASSERT_OK(cpu->RmsNorm(HostTensor(x, {s.rows, s.cols}), HostTensor(gamma_mul, {s.cols}), 1e-5f, want));
      DeviceBuffer dx = UploadAs(act, x);
      DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
      FERRY_ASSERT_OK(RmsNorm(dx.get(), dg.as<float>(), 1e-5f, s.rows, s.cols, dout.get(), act, nullptr,
                              dm.as<float>()));
      FERRY_ASSERT_SYNC();
      ExpectClose(DownloadAs(act, dout, n), TensorValues(want), Tolerance(act),
                  Label("RmsNorm x col_mul", act, ShapeText(s.rows, s.cols)));

      Tensor cpu_residual = HostTensor(x, {s.rows, s.cols});
      FERRY_ASSERT_OK(cpu->AddRmsNorm(cpu_residual, HostTensor(delta, {s.rows, s.cols}),
                                      HostTensor(gamma_mul, {s.cols}), 1e-6f, want));
      DeviceBuffer dres = UploadAs(act, x);
      DeviceBuffer ddelta = UploadAs(act, delta);
      FERRY_ASSERT_OK(AddRmsNorm(dres.get(), ddelta.get(), dg.as<float>(), 1e-6f, s.rows, s.cols, dout.get(), act,
                                 nullptr, dm.as<float>()));
      FERRY_ASSERT_SYNC();
      ExpectClose(DownloadAs(act, dout, n), TensorValues(want), Tolerance(act),
                  Label("AddRmsNorm x col_mul", act, ShapeText(s.rows, s.cols)));

      const std::vector<float> gu = RoundTo(act, RandomFloats(2 * n, ++seed, -6.0f, 6.0f));
      DeviceBuffer dgu = UploadAs(act, gu);
      for (bool tanh : {false, true}) {
        FERRY_ASSERT_OK(tanh ? cpu->GeluTanhMul(HostTensor(gu, {s.rows, 2 * s.cols}), want)
                             : cpu->SiluMul(HostTensor(gu, {s.rows, 2 * s.cols}), want));
        std::vector<float> expected = TensorValues(want);
        for (size_t i = 0; i < n; ++i) expected[i] *= mul[i % static_cast<size_t>(s.cols)];
        FERRY_ASSERT_OK(tanh ? GeluTanhMul(dgu.get(), s.rows, s.cols, dout.get(), act, nullptr, dm.as<float>())
                             : SiluMul(dgu.get(), s.rows, s.cols, dout.get(), act, nullptr, dm.as<float>()));
        FERRY_ASSERT_SYNC();
        ExpectClose(DownloadAs(act, dout, n), expected, Tolerance(act),
                    Label(tanh ? "GeluTanhMul x col_mul" : "SiluMul x col_mul", act, ShapeText(s.rows, s.cols)));
      }
    }
  }
}

TEST(CudaKernels, AddRmsNormRejectsAliasedResidual) {
  FERRY_SKIP_WITHOUT_GPU();
  DeviceBuffer buf(64 * 4), g(64 * 4);
  EXPECT_FALSE(AddRmsNorm(buf.get(), buf.get(), g.as<float>(), 1e-6f, 1, 64, buf.get(), DType::kF32, nullptr).ok());
  EXPECT_FALSE(RmsNorm(buf.get(), g.as<float>(), 1e-6f, 1, 64, buf.get(), DType::kI8, nullptr).ok());
}

TEST(CudaKernels, LayerNormMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  uint64_t seed = 300;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : kNormShapes) {
      for (bool with_delta : {false, true}) {
        const std::string what = Label("LayerNorm", act, ShapeText(s.rows, s.cols) + (with_delta ? " +delta" : ""));
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        // An offset row mean exercises the shifted mean.
        std::vector<float> x = RandomFloats(n, ++seed, -2.0f, 2.0f);
        for (float& v : x) v += 12.0f;
        x = RoundTo(act, x);
        const std::vector<float> delta = RoundTo(act, RandomFloats(n, ++seed, -1.0f, 1.0f));
        const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
        const std::vector<float> beta = RandomFloats(static_cast<size_t>(s.cols), ++seed, -0.5f, 0.5f);
        Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
        FERRY_ASSERT_OK(cpu->LayerNorm(HostTensor(x, {s.rows, s.cols}),
                                       with_delta ? HostTensor(delta, {s.rows, s.cols}) : Tensor(),
                                       HostTensor(gamma, {s.cols}), HostTensor(beta, {s.cols}), 1e-5f, want));

        DeviceBuffer dx = UploadAs(act, x);
        DeviceBuffer ddelta = UploadAs(act, delta);
        DeviceBuffer dg = Upload(gamma);
        DeviceBuffer db = Upload(beta);
        DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
        FERRY_ASSERT_OK(LayerNorm(dx.get(), with_delta ? ddelta.get() : nullptr, dg.as<float>(), db.as<float>(), 1e-5f,
                                  s.rows, s.cols, dout.get(), act, nullptr));
        FERRY_ASSERT_SYNC();
        ExpectClose(DownloadAs(act, dout, n), TensorValues(want), Tolerance(act), what);
      }
    }
  }
}

// ---------------------------------------------------------------- rope

struct RopeCase {
  int64_t tokens;
  int heads, kv_heads, head_dim;
};

TEST(CudaKernels, RopeMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  // head_dim 20: half 10, not a multiple of the vector width (the scalar path).
  const std::vector<RopeCase> cases = {{1, 32, 8, 128}, {7, 4, 4, 64}, {33, 8, 2, 128}, {5, 3, 1, 20}};
  uint64_t seed = 400;
  for (DType act : ActDTypes()) {
    for (const RopeCase& c : cases) {
      for (bool with_k : {true, false}) {
        const std::string what = Label("Rope", act,
                                       std::to_string(c.tokens) + " tokens, " + std::to_string(c.heads) + "/" +
                                           std::to_string(c.kv_heads) + " heads of " + std::to_string(c.head_dim) +
                                           (with_k ? "" : ", no k"));
        const backend::RopeTable table = backend::MakeRopeTable(c.head_dim, 500000.0f, {});
        const int64_t qw = static_cast<int64_t>(c.heads) * c.head_dim, kw = static_cast<int64_t>(c.kv_heads) * c.head_dim;
        const std::vector<float> q = RoundTo(act, RandomFloats(static_cast<size_t>(c.tokens * qw), ++seed));
        const std::vector<float> k = RoundTo(act, RandomFloats(static_cast<size_t>(c.tokens * kw), ++seed));
        // Positions up to and past 128k, where an f32 angle would be off by whole radians' worth of digits.
        std::mt19937 rng(static_cast<uint32_t>(++seed));
        std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
        for (auto& p : positions) p = std::uniform_int_distribution<int32_t>(0, 140000)(rng);
        positions[0] = c.tokens > 1 ? 131071 : 0;
        if (c.tokens > 2) positions[1] = 0;

        Tensor cq = HostTensor(q, {c.tokens, qw});
        Tensor ck = with_k ? HostTensor(k, {c.tokens, kw}) : Tensor();
        FERRY_ASSERT_OK(cpu->Rope(cq, ck, c.heads, c.kv_heads, backend::HostIndices(positions), table));

        DeviceBuffer dq = UploadAs(act, q);
        DeviceBuffer dk = UploadAs(act, k);
        DeviceBuffer dpos = Upload(positions);
        DeviceBuffer dfreq = Upload(table.inv_freq);
        FERRY_ASSERT_OK(Rope(dq.get(), with_k ? dk.get() : nullptr, c.tokens, c.heads, c.kv_heads, c.head_dim,
                             dpos.as<int32_t>(), dfreq.as<float>(), act, nullptr));
        FERRY_ASSERT_SYNC();
        ExpectClose(DownloadAs(act, dq, q.size()), TensorValues(cq), Tolerance(act), what + " q");
        if (with_k) {
          ExpectClose(DownloadAs(act, dk, k.size()), TensorValues(ck), Tolerance(act), what + " k");
        } else {
          EXPECT_EQ(DownloadAs(act, dk, k.size()), k) << what << ": k was touched";
        }
      }
    }
  }
}

// ---------------------------------------------------------------- element-wise

TEST(CudaKernels, SiluMulMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  const std::vector<RowShape> shapes = {{1, 4096}, {5, 7}, {16, 1376}, {3, 11}};
  uint64_t seed = 500;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      const std::string what = Label("SiluMul", act, ShapeText(s.rows, s.cols));
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> gu = RoundTo(act, RandomFloats(2 * n, ++seed, -6.0f, 6.0f));
      Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
      FERRY_ASSERT_OK(cpu->SiluMul(HostTensor(gu, {s.rows, 2 * s.cols}), want));
      DeviceBuffer dgu = UploadAs(act, gu);
      DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
      FERRY_ASSERT_OK(SiluMul(dgu.get(), s.rows, s.cols, dout.get(), act, nullptr));
      FERRY_ASSERT_SYNC();
      ExpectClose(DownloadAs(act, dout, n), TensorValues(want), Tolerance(act), what);
    }
  }
}

TEST(CudaKernels, GeluMulMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  const std::vector<RowShape> shapes = {{1, 4096}, {5, 7}, {16, 1152}, {3, 11}};
  uint64_t seed = 550;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      const std::string what = Label("GeluMul", act, ShapeText(s.rows, s.cols));
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> gu = RoundTo(act, RandomFloats(2 * n, ++seed, -6.0f, 6.0f));
      Tensor want = Tensor::Empty({s.rows, s.cols}, DType::kF32);
      FERRY_ASSERT_OK(cpu->GeluMul(HostTensor(gu, {s.rows, 2 * s.cols}), want));
      DeviceBuffer dgu = UploadAs(act, gu);
      DeviceBuffer dout = PoisonedBuffer(n * DTypeSize(act));
      FERRY_ASSERT_OK(GeluMul(dgu.get(), s.rows, s.cols, dout.get(), act, nullptr));
      FERRY_ASSERT_SYNC();
      ExpectClose(DownloadAs(act, dout, n), TensorValues(want), Tolerance(act), what);
    }
  }
}

// Sizes around the vector width, a large odd one, and a buffer that starts one element
// past an aligned address (the scalar path).
struct FlatCase {
  int64_t n;
  int64_t offset;
};
const std::vector<FlatCase> kFlatCases = {{1, 0}, {7, 0}, {4096, 0}, {100003, 0}, {1029, 1}};

TEST(CudaKernels, GeluTanhAddMatchCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  uint64_t seed = 600;
  for (DType act : ActDTypes()) {
    const size_t elem = DTypeSize(act);
    for (const FlatCase& c : kFlatCases) {
      const std::string detail = "n=" + std::to_string(c.n) + (c.offset ? " unaligned" : "");
      const size_t n = static_cast<size_t>(c.n);
      const std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -6.0f, 6.0f));
      const std::vector<float> y = RoundTo(act, RandomFloats(n, ++seed, -2.0f, 2.0f));
      std::vector<float> padded_x(c.offset, 0.0f), padded_y(c.offset, 0.0f);
      padded_x.insert(padded_x.end(), x.begin(), x.end());
      padded_y.insert(padded_y.end(), y.begin(), y.end());
      for (int op = 0; op < 3; ++op) {
        const char* name = op == 0 ? "Gelu" : op == 1 ? "Tanh" : "Add";
        Tensor want = HostTensor(x, {1, c.n});
        if (op == 0) FERRY_ASSERT_OK(cpu->Gelu(want));
        if (op == 1) FERRY_ASSERT_OK(cpu->Tanh(want));
        if (op == 2) FERRY_ASSERT_OK(cpu->Add(want, HostTensor(y, {1, c.n})));
        DeviceBuffer dx = UploadAs(act, padded_x);
        DeviceBuffer dy = UploadAs(act, padded_y);
        void* px = static_cast<char*>(dx.get()) + c.offset * elem;
        const void* py = static_cast<const char*>(dy.get()) + c.offset * elem;
        if (op == 0) FERRY_ASSERT_OK(Gelu(px, c.n, act, nullptr));
        if (op == 1) FERRY_ASSERT_OK(Tanh(px, c.n, act, nullptr));
        if (op == 2) FERRY_ASSERT_OK(Add(px, py, c.n, act, nullptr));
        FERRY_ASSERT_SYNC();
        std::vector<float> got = DownloadAs(act, dx, padded_x.size());
        got.erase(got.begin(), got.begin() + c.offset);
        ExpectClose(got, TensorValues(want), Tolerance(act), Label(name, act, detail));
      }
    }
  }
}

TEST(CudaKernels, CopyColumnsMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  struct Case {
    int64_t rows, src_cols, col_begin, dst_cols;
  };
  // A fused QKV split (aligned), odd offsets and widths, a single row.
  const std::vector<Case> cases = {{5, 6144, 4096, 1024}, {7, 13, 3, 5}, {1, 384, 128, 256}, {4, 24, 8, 16}};
  uint64_t seed = 700;
  for (DType act : ActDTypes()) {
    for (const Case& c : cases) {
      const std::string what = Label("CopyColumns", act,
                                     ShapeText(c.rows, c.src_cols) + " [" + std::to_string(c.col_begin) + ", +" +
                                         std::to_string(c.dst_cols) + ")");
      const std::vector<float> src = RoundTo(act, RandomFloats(static_cast<size_t>(c.rows * c.src_cols), ++seed));
      Tensor want = Tensor::Empty({c.rows, c.dst_cols}, DType::kF32);
      FERRY_ASSERT_OK(cpu->CopyColumns(HostTensor(src, {c.rows, c.src_cols}), c.col_begin, want));
      DeviceBuffer dsrc = UploadAs(act, src);
      DeviceBuffer ddst = PoisonedBuffer(static_cast<size_t>(c.rows * c.dst_cols) * DTypeSize(act));
      FERRY_ASSERT_OK(CopyColumns(dsrc.get(), c.rows, c.src_cols, c.col_begin, ddst.get(), c.dst_cols, act, nullptr));
      FERRY_ASSERT_SYNC();
      EXPECT_EQ(DownloadAs(act, ddst, static_cast<size_t>(c.rows * c.dst_cols)), TensorValues(want)) << what;
    }
  }
  DeviceBuffer b(64);
  EXPECT_FALSE(CopyColumns(b.get(), 1, 8, 4, b.get(), 8, DType::kF32, nullptr).ok());
}

// ---------------------------------------------------------------- conversion

std::vector<DType> StorageDTypes() { return {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3}; }

// Values that probe every conversion's edges: signed zeros, infinities, NaN, the f16 and
// e4m3 limits, e4m3 subnormals, and points halfway between neighbouring e4m3 values (ties
// round to even), plus random values over many octaves.
std::vector<float> ConversionProbes() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, -448.0f, 464.0f, 465.0f, 500.0f, -1e6f,
                          65504.0f, 65520.0f, 70000.0f, 1e-8f, -1e-8f, 5.96e-8f, 1.0f / 512, 1.0f / 1024, 3.0f / 1024};
  for (int c = 0; c < 0x7e; ++c) {
    const float a = F8E4M3ToF32(static_cast<uint8_t>(c)), b = F8E4M3ToF32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (a + b);
    for (float x : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  std::mt19937_64 rng(800);
  for (int i = 0; i < 4000; ++i) {
    const float m = std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng);
    const int e = std::uniform_int_distribution<int>(-30, 20)(rng);
    v.push_back(std::ldexp(m, e));
  }
  return v;
}

TEST(CudaKernels, ConvertMatchesHostConversions) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::vector<float> probes = ConversionProbes();
  for (DType from : StorageDTypes()) {
    // Source bytes: the probes encoded in `from`; for e4m3 also every one of its 256 codes.
    std::vector<uint8_t> src = Encode(from, probes);
    if (from == DType::kF8E4M3) {
      for (int c = 0; c < 256; ++c) src.push_back(static_cast<uint8_t>(c));
    }
    const size_t n = src.size() / DTypeSize(from);
    for (DType to : StorageDTypes()) {
      for (int64_t offset : {0, 1}) {  // 1: unaligned source and destination (the scalar path)
        const std::string what = std::string("Convert ") + std::string(DTypeName(from)) + " -> " +
                                 std::string(DTypeName(to)) + (offset ? " unaligned" : "");
        const std::vector<uint8_t> want = Encode(to, Decode(from, src));
        const size_t m = n - static_cast<size_t>(offset);
        std::vector<uint8_t> shifted(src.begin() + offset * DTypeSize(from), src.end());
        DeviceBuffer dsrc(DTypeSize(from) * (n + 1)), ddst = PoisonedBuffer(DTypeSize(to) * (n + 1));
        ASSERT_EQ(cudaMemcpy(static_cast<char*>(dsrc.get()) + offset * DTypeSize(from), shifted.data(), shifted.size(),
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
        FERRY_ASSERT_OK(Convert(static_cast<char*>(dsrc.get()) + offset * DTypeSize(from), from,
                                static_cast<char*>(ddst.get()) + offset * DTypeSize(to), to, static_cast<int64_t>(m),
                                nullptr));
        FERRY_ASSERT_SYNC();
        std::vector<uint8_t> got(m * DTypeSize(to));
        Download(static_cast<char*>(ddst.get()) + offset * DTypeSize(to), got.data(), got.size());
        const std::vector<float> got_v = Decode(to, got);
        const std::vector<float> want_v = Decode(to, std::vector<uint8_t>(want.begin() + offset * DTypeSize(to), want.end()));
        int64_t mismatches = 0;
        for (size_t i = 0; i < m; ++i) {
          const bool both_nan = std::isnan(got_v[i]) && std::isnan(want_v[i]);
          const bool same_bits = std::memcmp(&got[i * DTypeSize(to)], &want[(i + offset) * DTypeSize(to)],
                                             DTypeSize(to)) == 0;
          if (!both_nan && !same_bits) {
            if (++mismatches <= 5) {
              ADD_FAILURE() << what << ": element " << i << " (" << Decode(from, src)[i + offset] << ") got "
                            << got_v[i] << " want " << want_v[i];
            }
          }
        }
        EXPECT_EQ(mismatches, 0) << what;
      }
    }
  }
}

// ---------------------------------------------------------------- embedding

TEST(CudaKernels, EmbeddingGatherMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  auto cpu = backend::MakeCpuBackend();
  const int64_t vocab = 300;
  uint64_t seed = 900;
  for (DType table_dtype : StorageDTypes()) {
    for (DType act : ActDTypes()) {
      for (int64_t hidden : {4096, 13, 64}) {
        const std::string what = Label("EmbeddingGather", act,
                                       "table " + std::string(DTypeName(table_dtype)) + ", hidden " +
                                           std::to_string(hidden));
        const std::vector<float> table = RandomFloats(static_cast<size_t>(vocab * hidden), ++seed, -2.0f, 2.0f);
        const std::vector<uint8_t> table_bytes = Encode(table_dtype, table);
        std::mt19937 rng(static_cast<uint32_t>(++seed));
        std::vector<int32_t> ids = {0, static_cast<int32_t>(vocab - 1), 7, 7};
        for (int i = 0; i < 13; ++i) ids.push_back(std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng));
        const int64_t n = static_cast<int64_t>(ids.size());

        std::vector<float> want;
        if (table_dtype == DType::kF8E4M3) {  // the CPU backend has no e4m3 tables: decode by hand
          const std::vector<float> decoded = Decode(table_dtype, table_bytes);
          for (int32_t id : ids) want.insert(want.end(), decoded.begin() + id * hidden, decoded.begin() + (id + 1) * hidden);
        } else {
          Tensor host_table = Tensor::Empty({vocab, hidden}, table_dtype);
          std::memcpy(host_table.raw(), table_bytes.data(), table_bytes.size());
          Tensor out = Tensor::Empty({n, hidden}, DType::kF32);
          FERRY_ASSERT_OK(cpu->Embedding(host_table, backend::HostIndices(ids), out));
          want = TensorValues(out);
        }
        DeviceBuffer dtable = Upload(table_bytes);
        DeviceBuffer dids = Upload(ids);
        DeviceBuffer dout = PoisonedBuffer(static_cast<size_t>(n * hidden) * DTypeSize(act));
        FERRY_ASSERT_OK(EmbeddingGather(dtable.get(), table_dtype, dids.as<int32_t>(), n, hidden, dout.get(), act, nullptr));
        FERRY_ASSERT_SYNC();
        EXPECT_EQ(DownloadAs(act, dout, static_cast<size_t>(n * hidden)), RoundTo(act, want)) << what;
      }
    }
  }
}

// ---------------------------------------------------------------- KV cache

struct KvCase {
  int kv_heads, head_dim, block_tokens, num_blocks;
  int64_t tokens;
};

// Distinct slots in random blocks and offsets, with one padding row (-1).
std::vector<int32_t> RandomSlots(const KvCase& c, uint64_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(c.num_blocks * c.block_tokens));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> slots(all.begin(), all.begin() + c.tokens);
  if (c.tokens > 2) slots[1] = -1;
  return slots;
}

// The CPU's cache bytes after writing (f32/f16/bf16 through kernels/cpu; e4m3 by hand)
// into a cache that starts as 0xFF bytes, like the device's poisoned one.
std::vector<uint8_t> ReferenceCache(const KvCase& c, DType cache_dtype, const std::vector<float>& rows,
                                    const std::vector<int32_t>& slots, bool values) {
  const Shape shape = {c.num_blocks, c.kv_heads, c.block_tokens, c.head_dim};
  const size_t elems = static_cast<size_t>(NumElements(shape));
  std::vector<uint8_t> bytes(elems * DTypeSize(cache_dtype), 0xFF);
  const int64_t width = static_cast<int64_t>(c.kv_heads) * c.head_dim;
  if (cache_dtype == DType::kF8E4M3) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      if (slots[t] < 0) continue;
      const int64_t block = slots[t] / c.block_tokens, offset = slots[t] % c.block_tokens;
      for (int h = 0; h < c.kv_heads; ++h) {
        for (int d = 0; d < c.head_dim; ++d) {
          const int64_t dst = ((block * c.kv_heads + h) * c.block_tokens + offset) * c.head_dim + d;
          bytes[dst] = F32ToF8E4M3(rows[t * width + h * c.head_dim + d]);
        }
      }
    }
    return bytes;
  }
  Tensor kc = Tensor::Empty(shape, cache_dtype), vc = Tensor::Empty(shape, cache_dtype);
  std::memset(kc.raw(), 0xFF, kc.nbytes());
  std::memset(vc.raw(), 0xFF, vc.nbytes());
  const Tensor r = HostTensor(rows, {c.tokens, width});
  EXPECT_TRUE(kernels::cpu::WriteKv(r, r, slots.data(), kc, vc, c.block_tokens).ok());
  std::memcpy(bytes.data(), (values ? vc : kc).raw(), bytes.size());
  return bytes;
}

const std::vector<KvCase> kKvCases = {{8, 128, 16, 6, 20}, {2, 12, 4, 5, 9}, {1, 64, 32, 1, 1}};

TEST(CudaKernels, WriteKvMatchesCpu) {
  FERRY_SKIP_WITHOUT_GPU();
  uint64_t seed = 1000;
  for (DType act : ActDTypes()) {
    for (DType cache_dtype : StorageDTypes()) {
      for (const KvCase& c : kKvCases) {
        const std::string what = Label("WriteKv", act,
                                       "cache " + std::string(DTypeName(cache_dtype)) + ", " +
                                           std::to_string(c.kv_heads) + " heads of " + std::to_string(c.head_dim));
        const int64_t width = static_cast<int64_t>(c.kv_heads) * c.head_dim;
        const std::vector<float> k = RoundTo(act, RandomFloats(static_cast<size_t>(c.tokens * width), ++seed, -4, 4));
        const std::vector<float> v = RoundTo(act, RandomFloats(static_cast<size_t>(c.tokens * width), ++seed, -4, 4));
        const std::vector<int32_t> slots = RandomSlots(c, ++seed);
        const size_t cache_bytes =
            static_cast<size_t>(c.num_blocks) * c.kv_heads * c.block_tokens * c.head_dim * DTypeSize(cache_dtype);
        DeviceBuffer dk = UploadAs(act, k), dv = UploadAs(act, v), dslots = Upload(slots);
        DeviceBuffer kc = PoisonedBuffer(cache_bytes), vc = PoisonedBuffer(cache_bytes);
        FERRY_ASSERT_OK(WriteKv(dk.get(), dv.get(), dslots.as<int32_t>(), c.tokens, c.kv_heads, c.head_dim,
                                c.block_tokens, kc.get(), vc.get(), act, cache_dtype, nullptr));
        FERRY_ASSERT_SYNC();
        EXPECT_TRUE(Download<uint8_t>(kc, cache_bytes) == ReferenceCache(c, cache_dtype, k, slots, false)) << what << " k";
        EXPECT_TRUE(Download<uint8_t>(vc, cache_bytes) == ReferenceCache(c, cache_dtype, v, slots, true)) << what << " v";
      }
    }
  }
}

// The fused kernels (separate q, k, v, or one QKV projection) equal Rope followed by
// WriteKv, bit for bit.
TEST(CudaKernels, RopeWriteKvEqualsRopeThenWriteKv) {
  FERRY_SKIP_WITHOUT_GPU();
  uint64_t seed = 1100;
  const int heads_per_kv = 4;
  for (DType act : ActDTypes()) {
    for (DType cache_dtype : StorageDTypes()) {
      for (const KvCase& c : kKvCases) {
        const std::string what = Label("RopeWriteKv", act,
                                       "cache " + std::string(DTypeName(cache_dtype)) + ", head_dim " +
                                           std::to_string(c.head_dim));
        const int heads = c.kv_heads * heads_per_kv;
        const int64_t qw = static_cast<int64_t>(heads) * c.head_dim, kw = static_cast<int64_t>(c.kv_heads) * c.head_dim;
        const std::vector<float> q = RandomFloats(static_cast<size_t>(c.tokens * qw), ++seed, -2, 2);
        const std::vector<float> k = RandomFloats(static_cast<size_t>(c.tokens * kw), ++seed, -2, 2);
        const std::vector<float> v = RandomFloats(static_cast<size_t>(c.tokens * kw), ++seed, -2, 2);
        const std::vector<int32_t> slots = RandomSlots(c, ++seed);
        std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
        for (int64_t t = 0; t < c.tokens; ++t) positions[t] = static_cast<int32_t>(1000 * t + 3);
        const backend::RopeTable table = backend::MakeRopeTable(c.head_dim, 10000.0f, {});
        const size_t cache_bytes =
            static_cast<size_t>(c.num_blocks) * c.kv_heads * c.block_tokens * c.head_dim * DTypeSize(cache_dtype);
        DeviceBuffer dpos = Upload(positions), dfreq = Upload(table.inv_freq), dslots = Upload(slots);
        DeviceBuffer dv = UploadAs(act, v);

        DeviceBuffer q1 = UploadAs(act, q), k1 = UploadAs(act, k);
        DeviceBuffer kc1 = PoisonedBuffer(cache_bytes), vc1 = PoisonedBuffer(cache_bytes);
        FERRY_ASSERT_OK(Rope(q1.get(), k1.get(), c.tokens, heads, c.kv_heads, c.head_dim, dpos.as<int32_t>(),
                             dfreq.as<float>(), act, nullptr));
        FERRY_ASSERT_OK(WriteKv(k1.get(), dv.get(), dslots.as<int32_t>(), c.tokens, c.kv_heads, c.head_dim,
                                c.block_tokens, kc1.get(), vc1.get(), act, cache_dtype, nullptr));

        DeviceBuffer q2 = UploadAs(act, q), k2 = UploadAs(act, k);
        DeviceBuffer kc2 = PoisonedBuffer(cache_bytes), vc2 = PoisonedBuffer(cache_bytes);
        FERRY_ASSERT_OK(RopeWriteKv(q2.get(), k2.get(), dv.get(), c.tokens, heads, c.kv_heads, c.head_dim,
                                    dpos.as<int32_t>(), dfreq.as<float>(), dslots.as<int32_t>(), c.block_tokens,
                                    kc2.get(), vc2.get(), act, cache_dtype, nullptr));
        FERRY_ASSERT_SYNC();
        const size_t qb = q.size() * DTypeSize(act), kb = k.size() * DTypeSize(act);
        EXPECT_TRUE(Download<uint8_t>(q1, qb) == Download<uint8_t>(q2, qb)) << what << " q";
        EXPECT_TRUE(Download<uint8_t>(k1, kb) == Download<uint8_t>(k2, kb)) << what << " k";
        EXPECT_TRUE(Download<uint8_t>(kc1, cache_bytes) == Download<uint8_t>(kc2, cache_bytes)) << what << " k cache";
        EXPECT_TRUE(Download<uint8_t>(vc1, cache_bytes) == Download<uint8_t>(vc2, cache_bytes)) << what << " v cache";

        // The same from one fused QKV projection: rows of q, then k, then v columns.
        std::vector<float> qkv;
        for (int64_t t = 0; t < c.tokens; ++t) {
          qkv.insert(qkv.end(), q.begin() + t * qw, q.begin() + (t + 1) * qw);
          qkv.insert(qkv.end(), k.begin() + t * kw, k.begin() + (t + 1) * kw);
          qkv.insert(qkv.end(), v.begin() + t * kw, v.begin() + (t + 1) * kw);
        }
        DeviceBuffer dqkv = UploadAs(act, qkv), q3 = PoisonedBuffer(qb);
        DeviceBuffer kc3 = PoisonedBuffer(cache_bytes), vc3 = PoisonedBuffer(cache_bytes);
        FERRY_ASSERT_OK(RopeQkvWriteKv(dqkv.get(), q3.get(), c.tokens, heads, c.kv_heads, c.head_dim,
                                       dpos.as<int32_t>(), dfreq.as<float>(), dslots.as<int32_t>(), c.block_tokens,
                                       kc3.get(), vc3.get(), act, cache_dtype, nullptr));
        FERRY_ASSERT_SYNC();
        EXPECT_TRUE(Download<uint8_t>(q1, qb) == Download<uint8_t>(q3, qb)) << what << " fused q";
        EXPECT_TRUE(Download<uint8_t>(kc1, cache_bytes) == Download<uint8_t>(kc3, cache_bytes)) << what << " fused k cache";
        EXPECT_TRUE(Download<uint8_t>(vc1, cache_bytes) == Download<uint8_t>(vc3, cache_bytes)) << what << " fused v cache";
      }
    }
  }
}

// ---------------------------------------------------------------- quantization

TEST(CudaKernels, QuantizeRowsInt8MatchesCpuBitForBit) {
  FERRY_SKIP_WITHOUT_GPU();
  // A block a row (4,096 columns), the scalar kernel (100, 37), and a warp a row (up to 128
  // 16-byte vectors: 8, 200, 512, 768 and 1,024 columns; 37 rows end in a partial block of
  // eight rows).
  const std::vector<RowShape> shapes = {{1, 4096}, {4, 100}, {9, 37},     {3, 8},
                                        {37, 768}, {11, 1024}, {10, 200}, {17, 512}};
  uint64_t seed = 1200;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      for (bool with_smooth : {false, true}) {
        const std::string what = Label("QuantizeRowsInt8", act, ShapeText(s.rows, s.cols) + (with_smooth ? " smooth" : ""));
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -5.0f, 5.0f));
        if (s.rows > 1) std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 0.0f);  // an all-zero row
        const std::vector<float> smooth = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.25f, 4.0f);
        // CPU (this host's kernel): tiles of one row; row r's quad j is B bytes at
        // r * k_stored * B / 4 + B * j, B = ActivationQuadBytes: q then |q| (AVX2) or q + 128 (VNNI).
        const int64_t k_stored = (s.cols + 3) / 4 * 4;
        const kernels::cpu::Int8Kernel kernel = kernels::cpu::ActiveInt8Kernel();
        const int64_t quad_bytes = kernels::cpu::ActivationQuadBytes(kernel);
        std::vector<int8_t> tiles(static_cast<size_t>(s.rows * k_stored * 2));
        std::vector<float> want_scales(static_cast<size_t>(s.rows));
        kernels::cpu::QuantizeActivations(x.data(), s.cols, s.rows, s.cols, k_stored,
                                          with_smooth ? smooth.data() : nullptr, 1, tiles.data(), want_scales.data(),
                                          kernel);
        std::vector<int8_t> want_q(n);
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t i = 0; i < s.cols; ++i) {
            const int8_t stored = tiles[r * k_stored * quad_bytes / 4 + (i / 4) * quad_bytes + i % 4];
            want_q[r * s.cols + i] = kernel == kernels::cpu::Int8Kernel::kVnni
                                         ? static_cast<int8_t>(static_cast<uint8_t>(stored) ^ 0x80u)
                                         : stored;
          }
        }
        DeviceBuffer dx = UploadAs(act, x), dsmooth = Upload(smooth);
        DeviceBuffer dq = PoisonedBuffer(n), dscales = PoisonedBuffer(static_cast<size_t>(s.rows) * 4);
        FERRY_ASSERT_OK(QuantizeRowsInt8(dx.get(), s.rows, s.cols, with_smooth ? dsmooth.as<float>() : nullptr,
                                         dq.as<int8_t>(), dscales.as<float>(), act, nullptr));
        FERRY_ASSERT_SYNC();
        EXPECT_EQ(Download<int8_t>(dq, n), want_q) << what;
        EXPECT_EQ(Download<float>(dscales, static_cast<size_t>(s.rows)), want_scales) << what;
      }
    }
  }
}

TEST(CudaKernels, QuantizeRowsFp8MatchesHostReference) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::vector<RowShape> shapes = {{1, 4096}, {4, 100}, {9, 37}, {37, 768}, {3, 256}};
  uint64_t seed = 1300;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      const std::string what = Label("QuantizeRowsFp8", act, ShapeText(s.rows, s.cols));
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -30.0f, 30.0f));
      if (s.rows > 1) std::fill(x.begin(), x.begin() + s.cols, 0.0f);
      std::vector<uint8_t> want_q(n);
      std::vector<float> want_scales(static_cast<size_t>(s.rows));
      for (int64_t r = 0; r < s.rows; ++r) {
        float amax = 0.0f;
        for (int64_t i = 0; i < s.cols; ++i) amax = std::max(amax, std::fabs(x[r * s.cols + i]));
        const float inv = amax > 0.0f ? 448.0f / amax : 0.0f;
        want_scales[r] = amax / 448.0f;
        for (int64_t i = 0; i < s.cols; ++i) want_q[r * s.cols + i] = F32ToF8E4M3(x[r * s.cols + i] * inv);
      }
      DeviceBuffer dx = UploadAs(act, x);
      DeviceBuffer dq = PoisonedBuffer(n), dscales = PoisonedBuffer(static_cast<size_t>(s.rows) * 4);
      FERRY_ASSERT_OK(QuantizeRowsFp8(dx.get(), s.rows, s.cols, dq.get(), dscales.as<float>(), act, nullptr));
      FERRY_ASSERT_SYNC();
      EXPECT_EQ(Download<uint8_t>(dq, n), want_q) << what;
      EXPECT_EQ(Download<float>(dscales, static_cast<size_t>(s.rows)), want_scales) << what;
    }
  }
}

// The GELU prologue is the Gelu kernel (in f32) followed by the plain quantization, bit for
// bit: the fused pass never rounds GELU(x) to the activation dtype.
TEST(CudaKernels, QuantizeRowsWithGeluPrologueIsGeluThenQuantize) {
  FERRY_SKIP_WITHOUT_GPU();
  // Rows held in registers (one or several vectors a thread) and rows read twice (20480
  // columns: more than four 16-byte vectors a thread; 100 and 37: the scalar kernel).
  // 768 and 1,024 columns: a warp a row.
  const std::vector<RowShape> shapes = {{1, 3072}, {3, 14336}, {2, 20480}, {5, 100}, {9, 37}, {37, 768}, {9, 1024}};
  uint64_t seed = 1400;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      const std::string what = Label("QuantizeRows+GELU", act, ShapeText(s.rows, s.cols));
      const size_t n = static_cast<size_t>(s.rows * s.cols);
      const std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -6.0f, 6.0f));
      const std::vector<float> smooth = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.25f, 4.0f);
      DeviceBuffer dx = UploadAs(act, x), dsmooth = Upload(smooth);
      DeviceBuffer dref = Upload(x);  // f32 copy, GELU in place
      FERRY_ASSERT_OK(Gelu(dref.get(), static_cast<int64_t>(n), DType::kF32, nullptr));
      const size_t scale_bytes = static_cast<size_t>(s.rows) * 4;
      DeviceBuffer q8 = PoisonedBuffer(n), q8_ref = PoisonedBuffer(n);
      DeviceBuffer s8 = PoisonedBuffer(scale_bytes), s8_ref = PoisonedBuffer(scale_bytes);
      FERRY_ASSERT_OK(QuantizeRowsInt8(dx.get(), s.rows, s.cols, dsmooth.as<float>(), q8.as<int8_t>(), s8.as<float>(),
                                       act, nullptr, QuantPrologue::kGeluErf));
      FERRY_ASSERT_OK(QuantizeRowsInt8(dref.get(), s.rows, s.cols, dsmooth.as<float>(), q8_ref.as<int8_t>(),
                                       s8_ref.as<float>(), DType::kF32, nullptr));
      DeviceBuffer qf = PoisonedBuffer(n), qf_ref = PoisonedBuffer(n);
      DeviceBuffer sf = PoisonedBuffer(scale_bytes), sf_ref = PoisonedBuffer(scale_bytes);
      FERRY_ASSERT_OK(QuantizeRowsFp8(dx.get(), s.rows, s.cols, qf.get(), sf.as<float>(), act, nullptr,
                                      QuantPrologue::kGeluErf));
      FERRY_ASSERT_OK(QuantizeRowsFp8(dref.get(), s.rows, s.cols, qf_ref.get(), sf_ref.as<float>(), DType::kF32, nullptr));
      FERRY_ASSERT_SYNC();
      EXPECT_EQ(Download<int8_t>(q8, n), Download<int8_t>(q8_ref, n)) << what;
      EXPECT_EQ(Download<float>(s8, static_cast<size_t>(s.rows)), Download<float>(s8_ref, static_cast<size_t>(s.rows)))
          << what;
      EXPECT_EQ(Download<uint8_t>(qf, n), Download<uint8_t>(qf_ref, n)) << what;
      EXPECT_EQ(Download<float>(sf, static_cast<size_t>(s.rows)), Download<float>(sf_ref, static_cast<size_t>(s.rows)))
          << what;
    }
  }
}

// The gated prologues are SiluMul (GeluTanhMul) in f32 followed by the plain quantization,
// bit for bit; the rows read are [gate | up], twice the quantized width.
TEST(CudaKernels, QuantizeRowsWithGatedProloguesAreGatingThenQuantize) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::vector<RowShape> shapes = {{1, 2048}, {6, 96}, {3, 40}};
  uint64_t seed = 1500;
  for (DType act : ActDTypes()) {
    for (const RowShape& s : shapes) {
      for (bool gelu_tanh : {false, true}) {
        const std::string what =
            Label(gelu_tanh ? "QuantizeRows+GeluTanhMul" : "QuantizeRows+SiluMul", act, ShapeText(s.rows, s.cols));
        const size_t n = static_cast<size_t>(s.rows * s.cols);
        const std::vector<float> x = RoundTo(act, RandomFloats(2 * n, ++seed, -6.0f, 6.0f));
        DeviceBuffer dx = UploadAs(act, x), dx32 = Upload(x);
        DeviceBuffer dref = PoisonedBuffer(n * 4);
        FERRY_ASSERT_OK(gelu_tanh ? GeluTanhMul(dx32.get(), s.rows, s.cols, dref.get(), DType::kF32, nullptr)
                                  : SiluMul(dx32.get(), s.rows, s.cols, dref.get(), DType::kF32, nullptr));
        const QuantPrologue pro = gelu_tanh ? QuantPrologue::kGeluTanhMul : QuantPrologue::kSiluMul;
        const size_t scale_bytes = static_cast<size_t>(s.rows) * 4;
        DeviceBuffer q8 = PoisonedBuffer(n), q8_ref = PoisonedBuffer(n);
        DeviceBuffer s8 = PoisonedBuffer(scale_bytes), s8_ref = PoisonedBuffer(scale_bytes);
        FERRY_ASSERT_OK(QuantizeRowsInt8(dx.get(), s.rows, s.cols, nullptr, q8.as<int8_t>(), s8.as<float>(), act,
                                         nullptr, pro));
        FERRY_ASSERT_OK(QuantizeRowsInt8(dref.get(), s.rows, s.cols, nullptr, q8_ref.as<int8_t>(), s8_ref.as<float>(),
                                         DType::kF32, nullptr));
        DeviceBuffer qf = PoisonedBuffer(n), qf_ref = PoisonedBuffer(n);
        DeviceBuffer sf = PoisonedBuffer(scale_bytes), sf_ref = PoisonedBuffer(scale_bytes);
        FERRY_ASSERT_OK(QuantizeRowsFp8(dx.get(), s.rows, s.cols, qf.get(), sf.as<float>(), act, nullptr, pro));
        FERRY_ASSERT_OK(
            QuantizeRowsFp8(dref.get(), s.rows, s.cols, qf_ref.get(), sf_ref.as<float>(), DType::kF32, nullptr));
        FERRY_ASSERT_SYNC();
        EXPECT_EQ(Download<int8_t>(q8, n), Download<int8_t>(q8_ref, n)) << what;
        EXPECT_EQ(Download<float>(s8, static_cast<size_t>(s.rows)),
                  Download<float>(s8_ref, static_cast<size_t>(s.rows)))
            << what;
        EXPECT_EQ(Download<uint8_t>(qf, n), Download<uint8_t>(qf_ref, n)) << what;
        EXPECT_EQ(Download<float>(sf, static_cast<size_t>(s.rows)),
                  Download<float>(sf_ref, static_cast<size_t>(s.rows)))
            << what;
      }
    }
  }
}

// LayerNormQuantize is LayerNorm then QuantizeRowsInt8 (over the SmoothQuant factors) or
// QuantizeRowsFp8 of its output, bit for bit: the same out, q and scales; rows too wide for
// registers, or unaligned, are refused.
TEST(CudaKernels, LayerNormQuantizeIsTheNormThenTheQuantization) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::vector<RowShape> shapes = {{37, 768}, {5, 1024}, {3, 4096}, {2, 16384}, {2, 20480}, {3, 37}};
  const float eps = 1e-12f;
  uint64_t seed = 1700;
  for (DType act : ActDTypes()) {
    const size_t es = DTypeSize(act);
    for (const RowShape& s : shapes) {
      for (bool with_delta : {false, true}) {
        for (DType qd : {DType::kI8, DType::kF8E4M3}) {
          const bool int8 = qd == DType::kI8;
          const std::string what = Label("LayerNormQuantize", act,
                                         ShapeText(s.rows, s.cols) + (with_delta ? " +delta" : "") +
                                             (int8 ? " int8+smooth" : " fp8"));
          const size_t n = static_cast<size_t>(s.rows * s.cols);
          std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
          const std::vector<float> d = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
          const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
          std::vector<float> beta = RandomFloats(static_cast<size_t>(s.cols), ++seed, -0.5f, 0.5f);
          if (s.rows > 1) {  // a constant row (without delta): its norm is beta alone
            std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 1.0f);
          }
          const std::vector<float> smooth = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.25f, 4.0f);
          DeviceBuffer dx = UploadAs(act, x), dd = UploadAs(act, d);
          DeviceBuffer dg = Upload(gamma), db = Upload(beta), dsm = Upload(smooth);
          DeviceBuffer dout = PoisonedBuffer(n * es), dout_ref = PoisonedBuffer(n * es);
          DeviceBuffer dq = PoisonedBuffer(n), dq_ref = PoisonedBuffer(n);
          DeviceBuffer dsc = PoisonedBuffer(static_cast<size_t>(s.rows) * 4),
                       dsc_ref = PoisonedBuffer(static_cast<size_t>(s.rows) * 4);
          const void* delta = with_delta ? dd.get() : nullptr;
          const float* sm = int8 ? dsm.as<float>() : nullptr;
          const bool fits = (s.cols * es) % 16 == 0 && s.cols * es <= 32768;
          ASSERT_EQ(LayerNormQuantizeFits(dx.get(), delta, dout.get(), dg.as<float>(), db.as<float>(), sm, s.cols, act),
                    fits)
              << what;
          const Status st = LayerNormQuantize(dx.get(), delta, dg.as<float>(), db.as<float>(), eps, s.rows, s.cols,
                                              dout.get(), sm, dq.get(), qd, dsc.as<float>(), act, nullptr);
          if (!fits) {
            EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << what;
            continue;
          }
          FERRY_ASSERT_OK(st);
          FERRY_ASSERT_OK(LayerNorm(dx.get(), delta, dg.as<float>(), db.as<float>(), eps, s.rows, s.cols,
                                    dout_ref.get(), act, nullptr));
          if (int8) {
            FERRY_ASSERT_OK(QuantizeRowsInt8(dout_ref.get(), s.rows, s.cols, sm, dq_ref.as<int8_t>(),
                                             dsc_ref.as<float>(), act, nullptr));
          } else {
            FERRY_ASSERT_OK(QuantizeRowsFp8(dout_ref.get(), s.rows, s.cols, dq_ref.get(), dsc_ref.as<float>(), act,
                                            nullptr));
          }
          FERRY_ASSERT_SYNC();
          EXPECT_EQ(Download<uint8_t>(dout, n * es), Download<uint8_t>(dout_ref, n * es)) << what;
          EXPECT_EQ(Download<uint8_t>(dq, n), Download<uint8_t>(dq_ref, n)) << what;
          EXPECT_EQ(Download<float>(dsc, static_cast<size_t>(s.rows)), Download<float>(dsc_ref, static_cast<size_t>(s.rows)))
              << what;
        }
      }
    }
  }
}

// The norm in front of a W8A8 / fp8 GEMM fused with its activation quantization: the
// residual is updated exactly as AddRmsNorm updates it, and each quantized value is within
// one rounding step of the host's norm (the f32 sum of squares is reduced in another order
// than the host's, so not bit for bit). Rows that do not fit in registers are refused.
TEST(CudaKernels, RmsNormQuantizeIsTheNormThenTheQuantization) {
  FERRY_SKIP_WITHOUT_GPU();
  const std::vector<RowShape> shapes = {{1, 4096}, {5, 2048}, {3, 64}, {2, 16384}, {2, 20480}, {3, 37}};
  const float eps = 1e-5f;
  uint64_t seed = 1600;
  for (DType act : ActDTypes()) {
    const size_t es = DTypeSize(act);
    for (const RowShape& s : shapes) {
      for (bool with_delta : {false, true}) {
        for (DType qd : {DType::kI8, DType::kF8E4M3}) {
          const bool int8 = qd == DType::kI8;
          const std::string what = Label("RmsNormQuantize", act,
                                         ShapeText(s.rows, s.cols) + (with_delta ? " +delta" : "") +
                                             (int8 ? " int8+smooth" : " fp8"));
          const size_t n = static_cast<size_t>(s.rows * s.cols);
          std::vector<float> x = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
          std::vector<float> d = RoundTo(act, RandomFloats(n, ++seed, -3.0f, 3.0f));
          if (s.rows > 1) {  // an all-zero row: scale 0, q 0
            std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 0.0f);
            std::fill(d.begin() + s.cols, d.begin() + 2 * s.cols, 0.0f);
          }
          const std::vector<float> gamma = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.5f, 1.5f);
          const std::vector<float> inv_smooth = RandomFloats(static_cast<size_t>(s.cols), ++seed, 0.25f, 4.0f);
          DeviceBuffer dres = UploadAs(act, x), dres_ref = UploadAs(act, x), dd = UploadAs(act, d);
          DeviceBuffer dg = Upload(gamma), dsm = Upload(inv_smooth), dh = PoisonedBuffer(n * es);
          DeviceBuffer dq = PoisonedBuffer(n), dsc = PoisonedBuffer(static_cast<size_t>(s.rows) * 4);
          const void* delta = with_delta ? dd.get() : nullptr;
          const float* sm = int8 ? dsm.as<float>() : nullptr;
          const bool fits = (s.cols * es) % 16 == 0 && s.cols * es <= 32768;
          ASSERT_EQ(RmsNormQuantizeFits(dres.get(), delta, dg.as<float>(), sm, s.cols, act), fits) << what;
          const Status st = RmsNormQuantize(dres.get(), delta, dg.as<float>(), eps, s.rows, s.cols, sm, dq.get(), qd,
                                            dsc.as<float>(), act, nullptr);
          if (!fits) {
            EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << what;
            continue;
          }
          FERRY_ASSERT_OK(st);
          if (with_delta) {
            FERRY_ASSERT_OK(
                AddRmsNorm(dres_ref.get(), dd.get(), dg.as<float>(), eps, s.rows, s.cols, dh.get(), act, nullptr));
          }
          FERRY_ASSERT_SYNC();
          EXPECT_EQ(Download<uint8_t>(dres, n * es), Download<uint8_t>(dres_ref, n * es)) << what;
          const std::vector<uint8_t> q = Download<uint8_t>(dq, n);
          const std::vector<float> scales = Download<float>(dsc, static_cast<size_t>(s.rows));
          const double qmax = int8 ? 127.0 : 448.0;
          for (int64_t r = 0; r < s.rows; ++r) {
            std::vector<double> y(static_cast<size_t>(s.cols));
            double ss = 0.0;
            for (int64_t i = 0; i < s.cols; ++i) {
              const size_t at = static_cast<size_t>(r * s.cols + i);
              y[i] = static_cast<double>(static_cast<float>(x[at] + (with_delta ? d[at] : 0.0f)));
              ss += y[i] * y[i];
            }
            const double rs = 1.0 / std::sqrt(ss / static_cast<double>(s.cols) + eps);
            double amax = 0.0;
            for (int64_t i = 0; i < s.cols; ++i) {
              y[i] = y[i] * rs * gamma[i] * (int8 ? inv_smooth[i] : 1.0);
              amax = std::max(amax, std::fabs(y[i]));
            }
            EXPECT_NEAR(scales[r], amax / qmax, 1e-5 * amax / qmax + 1e-30) << what << " row " << r;
            int bad = 0;
            for (int64_t i = 0; i < s.cols && bad < 3; ++i) {
              const uint8_t b = q[static_cast<size_t>(r * s.cols + i)];
              const double got = int8 ? static_cast<double>(static_cast<int8_t>(b)) : F8E4M3ToF32(b);
              const double want = amax > 0.0 ? y[i] * qmax / amax : 0.0;
              const double tol = int8 ? 0.501 : std::max(std::fabs(want) * 0.0635, 0.002);
              if (std::fabs(got - want) > tol) {
                ++bad;
                ADD_FAILURE() << what << " row " << r << " col " << i << ": got " << got << ", want " << want;
              }
            }
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------- sampling

struct SampleBatch {
  std::vector<float> logits;  // [rows, vocab]
  std::vector<SamplingParamsGpu> params;
  std::vector<std::vector<int32_t>> histories;
};

// Runs SampleRows on a batch; histories (if any) as CSR.
std::vector<int32_t> SampleOnGpu(const SampleBatch& b, int vocab) {
  const int rows = static_cast<int>(b.params.size());
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets = {0};
  for (int r = 0; r < rows; ++r) {
    if (r < static_cast<int>(b.histories.size())) tokens.insert(tokens.end(), b.histories[r].begin(), b.histories[r].end());
    offsets.push_back(static_cast<int64_t>(tokens.size()));
  }
  DeviceBuffer dlogits = Upload(b.logits), dtokens = Upload(tokens), doffsets = Upload(offsets);
  DeviceBuffer dout = PoisonedBuffer(static_cast<size_t>(rows) * 4);
  const bool with_history = !b.histories.empty();
  const Status st = SampleRows(dlogits.as<float>(), rows, vocab, b.params.data(),
                               with_history ? dtokens.as<int32_t>() : nullptr,
                               with_history ? doffsets.as<int64_t>() : nullptr, dout.as<int32_t>(), nullptr);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(testing::SyncError(), "");
  return Download<int32_t>(dout, static_cast<size_t>(rows));
}

engine::SamplingParams ToEngine(const SamplingParamsGpu& p) {
  engine::SamplingParams e;
  e.temperature = p.temperature;
  e.top_k = p.top_k;
  e.top_p = p.top_p;
  e.min_p = p.min_p;
  e.repetition_penalty = p.repetition_penalty;
  return e;
}

// The final distribution engine::Sampler draws from (its processors, in double), computed
// independently of either sampler.
std::vector<double> ReferenceDistribution(std::vector<float> logits, const SamplingParamsGpu& p,
                                          const std::vector<int32_t>& history) {
  const int vocab = static_cast<int>(logits.size());
  std::set<int32_t> seen;
  for (int32_t id : history) {
    if (id < 0 || id >= vocab || !seen.insert(id).second) continue;
    float& l = logits[id];
    l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t n = order.size();
  if (p.top_k > 0 && p.top_k < vocab) n = static_cast<size_t>(p.top_k);
  const float inv_t = 1.0f / p.temperature;
  const float max_logit = logits[order[0]] * inv_t;
  std::vector<double> probs(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += probs[i] = std::exp(static_cast<double>(logits[order[i]] * inv_t - max_logit));
  for (double& q : probs) q /= sum;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < n) {
      cum += probs[keep++];
      if (cum >= p.top_p) break;
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && probs[keep] >= probs[0] * p.min_p) ++keep;
    n = keep;
  }
  std::vector<double> dist(static_cast<size_t>(vocab), 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += probs[i];
  for (size_t i = 0; i < n; ++i) dist[order[i]] = probs[i] / total;
  return dist;
}

// Pearson's statistic over the tokens with expected count >= 5 (others pooled); support
// violations (draws of zero-probability tokens) are reported separately.
struct ChiSquare {
  double statistic = 0;
  int dof = 0;
  int64_t outside_support = 0;
};
ChiSquare ChiSquareTest(const std::vector<int64_t>& counts, const std::vector<double>& dist, int64_t draws) {
  ChiSquare c;
  double pooled_expected = 0;
  int64_t pooled_observed = 0;
  int cells = 0;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] == 0.0) {
      c.outside_support += counts[i];
      continue;
    }
    const double e = dist[i] * static_cast<double>(draws);
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += counts[i];
      continue;
    }
    c.statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (pooled_expected > 0) {
    c.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  c.dof = std::max(cells - 1, 1);
  return c;
}

// Loose enough never to fail by chance at these fixed seeds' scale (about 6 sigma), tight
// enough to catch a wrong distribution.
double ChiSquareBound(int dof) { return dof + 6.0 * std::sqrt(2.0 * dof) + 10.0; }

TEST(CudaKernels, SampleGreedyEqualsArgmax) {
  FERRY_SKIP_WITHOUT_GPU();
  for (int vocab : {1, 17, 1000, 151936}) {
    const int rows = 9;
    SampleBatch b;
    b.logits = RandomFloats(static_cast<size_t>(rows) * vocab, 1400 + vocab, -10.0f, 10.0f);
    // Rows 1 and 2: many exact ties (integers); row 2's maximum tied at several ids; row 3
    // all equal (argmax 0); row 4 -inf everywhere but one id, which the kernel reports as a
    // broken row (-1), as the batcher's host path rejects non-finite logits.
    for (int i = 0; i < vocab; ++i) {
      b.logits[1 * vocab + i] = std::round(b.logits[1 * vocab + i]);
      b.logits[2 * vocab + i] = std::min(std::round(b.logits[2 * vocab + i]), 3.0f);
      b.logits[3 * vocab + i] = 0.5f;
      b.logits[4 * vocab + i] = -INFINITY;
    }
    b.logits[4 * vocab + vocab / 2] = -1e30f;
    b.params.resize(rows);
    for (auto& p : b.params) p.temperature = 0.0f;
    // Rows 5..8: a repetition penalty over a history with repeats and invalid ids.
    b.histories.resize(rows);
    std::mt19937 rng(1500 + vocab);
    for (int r = 5; r < rows; ++r) {
      b.params[r].repetition_penalty = r % 2 ? 1.3f : 0.7f;
      for (int j = 0; j < 40; ++j) b.histories[r].push_back(std::uniform_int_distribution<int32_t>(-3, vocab + 3)(rng));
      // The argmax itself, penalized (twice in the history: once counts).
      const int32_t top = engine::Argmax(std::span<const float>(&b.logits[r * vocab], vocab));
      b.histories[r].push_back(top);
      b.histories[r].push_back(top);
    }
    const std::vector<int32_t> got = SampleOnGpu(b, vocab);
    for (int r = 0; r < rows; ++r) {
      engine::Sampler cpu;
      const std::span<const float> row(&b.logits[r * vocab], vocab);
      const bool finite = std::all_of(row.begin(), row.end(), [](float v) { return std::isfinite(v); });
      const int32_t want = finite ? cpu.Sample(row, ToEngine(b.params[r]), b.histories[r], 0, 0) : -1;
      EXPECT_EQ(got[r], want) << "vocab " << vocab << " row " << r;
    }
  }
}

TEST(CudaKernels, SampleTopKOneEqualsGreedyAndSeedsRepeat) {
  FERRY_SKIP_WITHOUT_GPU();
  const int vocab = 32000, rows = 40;
  SampleBatch b;
  b.logits = RandomFloats(static_cast<size_t>(rows) * vocab, 1600, -8.0f, 8.0f);
  b.params.resize(rows);
  for (int r = 0; r < rows; ++r) {
    b.params[r].temperature = 0.9f;
    b.params[r].top_k = 1;
    b.params[r].seed = 77 + r;
  }
  std::vector<int32_t> greedy = SampleOnGpu(b, vocab);
  for (int r = 0; r < rows; ++r) {
    EXPECT_EQ(greedy[r], engine::Argmax(std::span<const float>(&b.logits[r * vocab], vocab))) << "row " << r;
  }

  // Full sampling (top-p and min-p on): the same seeds and counters give the same tokens;
  // another counter gives other tokens for some rows; a row sampled alone gives what it gave
  // in the batch.
  for (int r = 0; r < rows; ++r) {
    b.params[r] = SamplingParamsGpu{};
    b.params[r].temperature = 1.5f;
    b.params[r].top_p = 0.95f;
    b.params[r].min_p = 0.001f;
    b.params[r].seed = 1000 + r;
    b.params[r].counter = 5;
  }
  const std::vector<int32_t> first = SampleOnGpu(b, vocab);
  EXPECT_EQ(SampleOnGpu(b, vocab), first);
  for (auto& p : b.params) p.counter = 6;
  const std::vector<int32_t> next = SampleOnGpu(b, vocab);
  EXPECT_NE(next, first);
  int distinct = static_cast<int>(std::set<int32_t>(first.begin(), first.end()).size());
  EXPECT_GT(distinct, rows / 2) << "rows with different logits and seeds should mostly differ";

  SampleBatch one;
  const int r = 13;
  one.logits.assign(b.logits.begin() + r * vocab, b.logits.begin() + (r + 1) * vocab);
  one.params = {b.params[r]};
  one.params[0].counter = 5;
  EXPECT_EQ(SampleOnGpu(one, vocab)[0], first[r]);
}

struct DistributionCase {
  const char* name;
  SamplingParamsGpu params;
  bool with_history;
};

// 20000 draws per case over a small vocabulary (many rows, each its own counter) against
// the CPU sampler's distribution; engine::Sampler itself is held to the same test so the
// reference cannot drift from it.
TEST(CudaKernels, SampleDistributionMatchesCpuSampler) {
  FERRY_SKIP_WITHOUT_GPU();
  const int vocab = 24;
  std::vector<float> logits = RandomFloats(vocab, 1700, -3.0f, 3.0f);
  logits[5] = logits[6] = logits[7] = 2.5f;  // tied logits
  // top-k that cuts through the tie: the two lower ids of the three survive.
  const int above_tie = static_cast<int>(std::count_if(logits.begin(), logits.end(), [](float l) { return l > 2.5f; }));
  const std::vector<int32_t> history = {5, 5, 1, 2, 30, -1, 9};
  auto make = [](float t, int k, float p, float m, float pen) {
    SamplingParamsGpu s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = m;
    s.repetition_penalty = pen;
    s.seed = 4242;
    return s;
  };
  const std::vector<DistributionCase> cases = {
      {"temperature 0.7", make(0.7f, 0, 1.0f, 0.0f, 1.0f), false},
      {"temperature 1.6", make(1.6f, 0, 1.0f, 0.0f, 1.0f), false},
      {"top-k through a tie", make(1.0f, above_tie + 2, 1.0f, 0.0f, 1.0f), false},
      {"top-p 0.6", make(1.2f, 0, 0.6f, 0.0f, 1.0f), false},
      {"min-p 0.2", make(1.0f, 0, 1.0f, 0.2f, 1.0f), false},
      {"all with penalty", make(0.8f, 10, 0.9f, 0.05f, 1.4f), true},
  };
  const int rows = 2000, launches = 10;
  const int64_t draws = static_cast<int64_t>(rows) * launches;
  for (const DistributionCase& c : cases) {
    const std::vector<double> dist = ReferenceDistribution(logits, c.params, c.with_history ? history : std::vector<int32_t>{});
    std::vector<int64_t> gpu_counts(vocab, 0), cpu_counts(vocab, 0);
    SampleBatch b;
    for (int r = 0; r < rows; ++r) b.logits.insert(b.logits.end(), logits.begin(), logits.end());
    if (c.with_history) b.histories.assign(rows, history);
    for (int l = 0; l < launches; ++l) {
      b.params.assign(rows, c.params);
      for (int r = 0; r < rows; ++r) b.params[r].counter = static_cast<uint64_t>(l) * rows + r;
      for (int32_t t : SampleOnGpu(b, vocab)) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, vocab);
        ++gpu_counts[t];
      }
    }
    engine::Sampler cpu;
    for (int64_t i = 0; i < draws; ++i) {
      ++cpu_counts[cpu.Sample(logits, ToEngine(c.params), c.with_history ? history : std::vector<int32_t>{}, 99,
                              static_cast<uint64_t>(i))];
    }
    const ChiSquare g = ChiSquareTest(gpu_counts, dist, draws);
    const ChiSquare h = ChiSquareTest(cpu_counts, dist, draws);
    EXPECT_EQ(g.outside_support, 0) << c.name << ": GPU drew tokens the processors remove";
    EXPECT_EQ(h.outside_support, 0) << c.name << ": the reference disagrees with engine::Sampler's support";
    EXPECT_LT(g.statistic, ChiSquareBound(g.dof)) << c.name << ": GPU chi-square " << g.statistic << " dof " << g.dof;
    EXPECT_LT(h.statistic, ChiSquareBound(h.dof)) << c.name << ": CPU chi-square " << h.statistic << " dof " << h.dof;
    std::printf("[ sampling ] %-28s GPU chi2 %.1f, CPU chi2 %.1f (dof %d)\n", c.name, g.statistic, h.statistic, g.dof);
  }
}

// A realistic vocabulary: every sampled token survives the CPU's top-k / top-p / min-p.
TEST(CudaKernels, SampleLargeVocabStaysInsideCpuSupport) {
  FERRY_SKIP_WITHOUT_GPU();
  const int vocab = 151936, rows = 64;
  SampleBatch b;
  b.logits = RandomFloats(static_cast<size_t>(rows) * vocab, 1800, -12.0f, 12.0f);
  b.params.resize(rows);
  b.histories.resize(rows);
  std::mt19937 rng(1801);
  for (int r = 0; r < rows; ++r) {
    SamplingParamsGpu& p = b.params[r];
    p.temperature = 0.3f + 0.05f * (r % 20);
    p.top_k = r % 4 == 0 ? 0 : 20 + r;
    p.top_p = r % 3 == 0 ? 1.0f : 0.5f + 0.007f * r;
    p.min_p = r % 5 == 0 ? 0.02f : 0.0f;
    p.repetition_penalty = r % 2 ? 1.2f : 1.0f;
    p.seed = 31 * r;
    p.counter = 3;
    for (int j = 0; j < 300; ++j) b.histories[r].push_back(std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng));
  }
  for (int trial = 0; trial < 3; ++trial) {
    for (auto& p : b.params) p.counter += 1;
    const std::vector<int32_t> got = SampleOnGpu(b, vocab);
    for (int r = 0; r < rows; ++r) {
      const std::vector<float> row(b.logits.begin() + static_cast<int64_t>(r) * vocab,
                                   b.logits.begin() + static_cast<int64_t>(r + 1) * vocab);
      const std::vector<double> dist = ReferenceDistribution(row, b.params[r], b.histories[r]);
      ASSERT_GE(got[r], 0);
      ASSERT_LT(got[r], vocab);
      EXPECT_GT(dist[got[r]], 0.0) << "row " << r << " drew " << got[r] << " outside the survivors";
    }
  }
}

TEST(CudaKernels, SampleRejectsBadParams) {
  FERRY_SKIP_WITHOUT_GPU();
  DeviceBuffer logits(16 * 4), out(4);
  SamplingParamsGpu p;
  p.top_p = 0.0f;
  EXPECT_FALSE(SampleRows(logits.as<float>(), 1, 16, &p, nullptr, nullptr, out.as<int32_t>(), nullptr).ok());
  p = SamplingParamsGpu{};
  p.temperature = -1.0f;
  EXPECT_FALSE(SampleRows(logits.as<float>(), 1, 16, &p, nullptr, nullptr, out.as<int32_t>(), nullptr).ok());
}

// ---------------------------------------------------------------- timing

// Median time of `f` over `reps` runs after a warm-up, with device events.
template <typename F>
double MedianUs(F&& f, int reps = 20) {
  cudaEvent_t start, stop;
  EXPECT_EQ(cudaEventCreate(&start), cudaSuccess);
  EXPECT_EQ(cudaEventCreate(&stop), cudaSuccess);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(f().ok());
  std::vector<double> us;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, nullptr);
    const Status st = f();
    cudaEventRecord(stop, nullptr);
    cudaEventSynchronize(stop);
    EXPECT_TRUE(st.ok()) << st.ToString();
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    us.push_back(ms * 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Not a correctness test: time and effective bandwidth of the memory-bound kernels on
// decode- and prefill-sized inputs (run with --gtest_also_run_disabled_tests).
TEST(CudaKernels, DISABLED_Timing) {
  FERRY_SKIP_WITHOUT_GPU();
  const DType bf16 = DType::kBF16;
  const int64_t tokens = 8192, hidden = 4096, inter = 14336;
  DeviceBuffer x = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * hidden), 1, -2, 2));
  DeviceBuffer y = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * hidden), 2, -2, 2));
  DeviceBuffer out = PoisonedBuffer(static_cast<size_t>(tokens * hidden) * 2);
  DeviceBuffer gamma = Upload(RandomFloats(static_cast<size_t>(hidden), 3, 0.5f, 1.5f));
  DeviceBuffer gate_up = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * 2 * inter), 4, -4, 4));
  DeviceBuffer act_out = PoisonedBuffer(static_cast<size_t>(tokens * inter) * 2);
  std::printf("[ timing ] %-44s %10s %10s\n", "kernel", "us", "GB/s");
  auto row = [](const char* name, double us, double bytes) {
    std::printf("[ timing ] %-44s %10.1f %10.0f\n", name, us, bytes / us * 1e-3);
  };
  const double act_bytes = static_cast<double>(tokens * hidden) * 2;
  row("RmsNorm bf16 8192x4096", MedianUs([&] {
        return RmsNorm(x.get(), gamma.as<float>(), 1e-5f, tokens, hidden, out.get(), bf16, nullptr);
      }), 2 * act_bytes);
  row("AddRmsNorm bf16 8192x4096", MedianUs([&] {
        return AddRmsNorm(y.get(), x.get(), gamma.as<float>(), 1e-5f, tokens, hidden, out.get(), bf16, nullptr);
      }), 4 * act_bytes);
  row("RmsNorm bf16 1x4096 (decode)", MedianUs([&] {
        return RmsNorm(x.get(), gamma.as<float>(), 1e-5f, 1, hidden, out.get(), bf16, nullptr);
      }), 2.0 * hidden * 2);
  row("SiluMul bf16 8192x14336", MedianUs([&] {
        return SiluMul(gate_up.get(), tokens, inter, act_out.get(), bf16, nullptr);
      }), 3.0 * tokens * inter * 2);
  row("Add bf16 8192x4096", MedianUs([&] { return Add(out.get(), x.get(), tokens * hidden, bf16, nullptr); }),
      3 * act_bytes);
  row("Convert f32->bf16 (32M)", MedianUs([&] {
        return Convert(gate_up.get(), DType::kF32, act_out.get(), bf16, tokens * hidden, nullptr);
      }), 6.0 * tokens * hidden);

  const int heads = 32, kv_heads = 8, head_dim = 128, block_tokens = 16;
  const backend::RopeTable table = backend::MakeRopeTable(head_dim, 500000.0f, {});
  std::vector<int32_t> positions(static_cast<size_t>(tokens)), slots(static_cast<size_t>(tokens));
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  DeviceBuffer dpos = Upload(positions), dslots = Upload(slots), dfreq = Upload(table.inv_freq);
  DeviceBuffer q = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * heads * head_dim), 5));
  DeviceBuffer k = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * kv_heads * head_dim), 6));
  DeviceBuffer v = UploadAs(bf16, RandomFloats(static_cast<size_t>(tokens * kv_heads * head_dim), 7));
  const size_t cache_bytes = static_cast<size_t>(tokens) * kv_heads * head_dim * 2;
  DeviceBuffer kc = PoisonedBuffer(cache_bytes), vc = PoisonedBuffer(cache_bytes);
  const double qk_bytes = static_cast<double>(tokens) * (heads + kv_heads) * head_dim * 2;
  row("Rope bf16 8192 tok, 32/8 heads x 128", MedianUs([&] {
        return Rope(q.get(), k.get(), tokens, heads, kv_heads, head_dim, dpos.as<int32_t>(), dfreq.as<float>(), bf16,
                    nullptr);
      }), 2 * qk_bytes);
  row("WriteKv bf16 8192 tok, 8 heads x 128", MedianUs([&] {
        return WriteKv(k.get(), v.get(), dslots.as<int32_t>(), tokens, kv_heads, head_dim, block_tokens, kc.get(),
                       vc.get(), bf16, bf16, nullptr);
      }), 4.0 * cache_bytes);
  row("RopeWriteKv bf16 (same)", MedianUs([&] {
        return RopeWriteKv(q.get(), k.get(), v.get(), tokens, heads, kv_heads, head_dim, dpos.as<int32_t>(),
                           dfreq.as<float>(), dslots.as<int32_t>(), block_tokens, kc.get(), vc.get(), bf16, bf16,
                           nullptr);
      }), 2 * qk_bytes + 3.0 * cache_bytes);
  DeviceBuffer q8 = PoisonedBuffer(static_cast<size_t>(tokens * hidden)), scales = PoisonedBuffer(tokens * 4);
  row("QuantizeRowsInt8 bf16 8192x4096", MedianUs([&] {
        return QuantizeRowsInt8(x.get(), tokens, hidden, nullptr, q8.as<int8_t>(), scales.as<float>(), bf16, nullptr);
      }), 1.5 * act_bytes);

  const int vocab = 151936;
  DeviceBuffer logits = Upload(RandomFloats(static_cast<size_t>(256) * vocab, 8, -15, 15));
  DeviceBuffer tok = PoisonedBuffer(256 * 4);
  for (int rows : {1, 64, 256}) {
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<SamplingParamsGpu> params(static_cast<size_t>(rows));
      for (auto& p : params) {
        p.temperature = mode == 0 ? 0.0f : 0.8f;
        p.top_p = mode == 2 ? 0.9f : 1.0f;
        p.top_k = mode == 2 ? 50 : 0;
      }
      const std::string name = "SampleRows " + std::to_string(rows) + " x 151936 " +
                               (mode == 0 ? "greedy" : mode == 1 ? "temperature" : "top-k 50 top-p 0.9");
      row(name.c_str(), MedianUs([&] {
            return SampleRows(logits.as<float>(), rows, vocab, params.data(), nullptr, nullptr, tok.as<int32_t>(),
                              nullptr);
          }, 10),
          4.0 * rows * vocab);
    }
  }
}

// Printed last: the worst relative error per kernel and dtype, for the record.
TEST(CudaKernels, ZzSummary) {
  FERRY_SKIP_WITHOUT_GPU();
  std::printf("[ summary ] worst errors relative to max |reference|:\n%s", testing::WorstErrors().c_str());
}

}  // namespace
}  // namespace ferry::cuda
