// The linears of a decoder layer on the GPU, bf16 weights against int4 weight-only (groups of
// 128), at llama-3-8B shapes (qkv 6144 x 4096, o 4096 x 4096, gate_up 28672 x 4096, down
// 4096 x 14336), for M from decode to prefill sizes.
//
//   cuda_gemm_bench [--layers=L] [--ms=1,2,4,...] [--json=FILE] [--model=8b|1b] [--per-shape]
//
// --model=1b takes the llama-3.2-1B shapes instead (qkv 3072 x 2048, o 2048 x 2048, gate_up
// 16384 x 2048, down 2048 x 8192). --per-shape adds, for M <= 8, a table of each bf16 linear
// alone: the dense small-M kernel against cuBLASLt's heuristic, in us and in weight GB/s.
//
// Each format gets L layers of distinct random weights (default 8: 1.7 GB of bf16, 0.45 GB of
// int4, far beyond the 50 MB L2, so every GEMM streams its weight from HBM as decode does).
// Every (shape, M) is first tuned with LtGemm::Tune (bf16: cuBLASLt's top algorithms; int4:
// the small-M kernel, the tensor-core kernel and dequantization + cuBLASLt), then the L
// layers' 4 L GEMMs are captured in one CUDA graph and replayed; the median of 15 replays,
// divided by L, is the time of one layer's linears. The int4 routes are also timed one by one
// (forced choices), so the table shows where each wins; bf16 is also timed with cuBLASLt's
// heuristic and with ferry's dense small-M kernel (M <= 8) on every shape.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda/gemm.h"
#include "kernels/int4_groups.h"

namespace {

using ferry::DType;
using ferry::cuda::GemmArgs;
using ferry::cuda::GemmChoice;
using ferry::cuda::GemmKind;
using ferry::cuda::GemmProblem;
using ferry::cuda::LtGemm;

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// A Status, or a Result's status.
const ferry::Status& StatusOf(const ferry::Status& s) { return s; }
template <typename T>
ferry::Status StatusOf(const ferry::Result<T>& r) {
  return r.status();
}

#define CHECK_OK(expr)                                                                          \
  do {                                                                                          \
    const ferry::Status s_ = StatusOf(expr);                                                    \
    if (!s_.ok()) {                                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

struct Shape {
  const char* name;
  int64_t n, k;
};
constexpr Shape k8BShapes[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
constexpr Shape k1BShapes[] = {{"qkv", 3072, 2048}, {"o", 2048, 2048}, {"gate_up", 16384, 2048}, {"down", 2048, 8192}};
std::vector<Shape> kShapes(std::begin(k8BShapes), std::end(k8BShapes));
constexpr int64_t kGroup = 128;

void* DeviceAlloc(size_t bytes) {
  void* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, bytes));
  return p;
}

// Uniform values in [-scale, scale) from a counter hash.
std::vector<float> Random(int64_t count, uint64_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    uint64_t z = (seed << 40) ^ static_cast<uint64_t>(i);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v[static_cast<size_t>(i)] = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;
  }
  return v;
}

struct Weight {
  void* w = nullptr;  // bf16 [n, k] or packed int4 [n, k / 8]
  float* scale = nullptr;
  uint8_t* zero = nullptr;
};

// One (shape, layer) weight in both formats. The int4 one is the bf16 one quantized, so both
// formats compute the same layer.
void MakeWeights(const Shape& s, uint64_t seed, Weight& bf16, Weight& int4) {
  const std::vector<float> w = Random(s.n * s.k, seed, 0.05f);
  std::vector<uint16_t> b(w.size());
  for (size_t i = 0; i < w.size(); ++i) b[i] = ferry::F32ToBf16(w[i]);
  bf16.w = DeviceAlloc(b.size() * 2);
  CHECK_CUDA(cudaMemcpy(bf16.w, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  auto g = ferry::kernels::QuantizeInt4(w.data(), s.n, s.k, kGroup);
  CHECK_OK(g);
  const std::vector<uint32_t> packed = ferry::kernels::PackInt4Rows(*g);
  int4.w = DeviceAlloc(packed.size() * 4);
  CHECK_CUDA(cudaMemcpy(int4.w, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
  int4.scale = static_cast<float*>(DeviceAlloc(g->scales.size() * 4));
  CHECK_CUDA(cudaMemcpy(int4.scale, g->scales.data(), g->scales.size() * 4, cudaMemcpyHostToDevice));
  int4.zero = static_cast<uint8_t*>(DeviceAlloc(g->zeros.size()));
  CHECK_CUDA(cudaMemcpy(int4.zero, g->zeros.data(), g->zeros.size(), cudaMemcpyHostToDevice));
}

GemmProblem Problem(bool int4, int64_t m, const Shape& s) {
  GemmProblem p;
  p.kind = int4 ? GemmKind::kInt4WeightOnly : GemmKind::kBF16;
  p.out_dtype = DType::kBF16;
  p.m = m;
  p.n = s.n;
  p.k = s.k;
  p.group_size = int4 ? kGroup : 0;
  return p;
}

GemmArgs Args(const Weight& w, const void* x, void* y) {
  GemmArgs a;
  a.x = x;
  a.w = w.w;
  a.y = y;
  a.w_scale = w.scale;
  a.w_zero = w.zero;
  return a;
}

// Median microseconds per layer of replaying all layers' GEMMs with one choice per shape
// (null: the default route); only shape `only` when it is not negative.
double TimeLayers(LtGemm& gemm, cudaStream_t stream, bool int4, int64_t m, const std::vector<std::vector<Weight>>& w,
                  const std::vector<const GemmChoice*>& choices, const void* x, void* y, int only = -1) {
  const int layers = static_cast<int>(w[0].size());
  // Warm up outside capture (plans, scratch).
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    if (only >= 0 && static_cast<int>(si) != only) continue;
    CHECK_OK(gemm.Run(Problem(int4, m, kShapes[si]), Args(w[si][0], x, y), stream, choices[si]));
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int l = 0; l < layers; ++l) {
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      if (only >= 0 && static_cast<int>(si) != only) continue;
      CHECK_OK(gemm.Run(Problem(int4, m, kShapes[si]), Args(w[si][l], x, y), stream, choices[si]));
    }
  }
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  std::vector<double> us;
  for (int i = 0; i < 15; ++i) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    us.push_back(ms * 1000.0 / layers);
  }
  std::sort(us.begin(), us.end());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return us[us.size() / 2];
}

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> v;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    v.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int layers = 8;
  std::vector<int64_t> ms = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 2048};
  std::string json_path;
  bool per_shape = false;
  const char* model = "8B";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--layers=", 0) == 0)
      layers = std::atoi(a.c_str() + 9);
    else if (a.rfind("--ms=", 0) == 0)
      ms = ParseList(a.c_str() + 5);
    else if (a.rfind("--json=", 0) == 0)
      json_path = a.substr(7);
    else if (a == "--model=1b") {
      kShapes.assign(std::begin(k1BShapes), std::end(k1BShapes));
      model = "3.2-1B";
    } else if (a == "--model=8b")
      kShapes.assign(std::begin(k8BShapes), std::end(k8BShapes));
    else if (a == "--per-shape")
      per_shape = true;
    else {
      std::fprintf(stderr,
                   "usage: cuda_gemm_bench [--layers=L] [--ms=1,2,...] [--json=FILE] [--model=8b|1b] [--per-shape]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs; %d layers of llama-%s linears per format\n", prop.name, prop.multiProcessorCount,
              layers, model);
  std::fflush(stdout);

  std::vector<std::vector<Weight>> bf16(std::size(kShapes)), int4(std::size(kShapes));
  for (size_t si = 0; si < std::size(kShapes); ++si) {
    bf16[si].resize(layers);
    int4[si].resize(layers);
    for (int l = 0; l < layers; ++l) MakeWeights(kShapes[si], si * 100 + l + 1, bf16[si][l], int4[si][l]);
  }
  std::printf("weights ready\n");
  std::fflush(stdout);
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  int64_t max_n = 0, max_k = 0;
  for (const Shape& s : kShapes) {
    max_n = std::max(max_n, s.n);
    max_k = std::max(max_k, s.k);
  }
  const std::vector<float> xf = Random(max_m * max_k, 999, 1.0f);
  std::vector<uint16_t> xb(xf.size());
  for (size_t i = 0; i < xf.size(); ++i) xb[i] = ferry::F32ToBf16(xf[i]);
  void* x = DeviceAlloc(xb.size() * 2);
  CHECK_CUDA(cudaMemcpy(x, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  void* y = DeviceAlloc(static_cast<size_t>(max_m * max_n) * 2);

  auto gemm_or = LtGemm::Create();
  CHECK_OK(gemm_or);
  LtGemm& gemm = **gemm_or;
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  if (per_shape) {
    // Each bf16 linear alone (all layers' copies in one graph): the small-M kernel against
    // cuBLASLt's heuristic, with the weight bytes each reads per microsecond.
    std::printf("\n| M | linear (N x K) | bf16 small-M (us) | GB/s | bf16 cuBLASLt heuristic (us) | GB/s |\n"
                "|---|---|---|---|---|---|\n");
    GemmChoice small;
    small.route = GemmChoice::Route::kSmallM;
    const std::vector<const GemmChoice*> smalls(std::size(kShapes), &small), none(std::size(kShapes), nullptr);
    for (int64_t m : ms) {
      if (m > ferry::cuda::kDenseSmallMMaxM) continue;
      for (size_t si = 0; si < std::size(kShapes); ++si) {
        const double gb = static_cast<double>(kShapes[si].n * kShapes[si].k * 2) * 1e-3;  // per us
        const double t_s = TimeLayers(gemm, stream, false, m, bf16, smalls, x, y, static_cast<int>(si));
        const double t_l = TimeLayers(gemm, stream, false, m, bf16, none, x, y, static_cast<int>(si));
        std::printf("| %lld | %s (%lld x %lld) | %.2f | %.0f | %.2f | %.0f |\n", static_cast<long long>(m),
                    kShapes[si].name, static_cast<long long>(kShapes[si].n), static_cast<long long>(kShapes[si].k),
                    t_s, gb / t_s, t_l, gb / t_l);
        std::fflush(stdout);
      }
    }
  }

  std::string json = "[";
  std::printf(
      "\n| M | bf16 tuned (us/layer) | int4 tuned (us/layer) | bf16 / int4 | int4 small-M | int4 mma | int4 "
      "dequant+cuBLASLt | int4 routes chosen (qkv, o, gate_up, down) | bf16 cuBLASLt heuristic | bf16 small-M | "
      "bf16 routes chosen |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int64_t m : ms) {
    std::vector<GemmChoice> tuned_b(std::size(kShapes)), tuned_i(std::size(kShapes));
    std::vector<const GemmChoice*> cb, ci;
    std::string routes, routes_b;
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      ferry::cuda::TuneOptions bf16_options;
      bf16_options.dense_small_m = true;
      auto b = gemm.Tune(Problem(false, m, kShapes[si]), Args(bf16[si][0], x, y), stream, bf16_options);
      CHECK_OK(b);
      tuned_b[si] = *b;
      routes_b += std::string(si ? ", " : "") + (b->route == GemmChoice::Route::kSmallM ? "small_m" : "lt");
      auto q = gemm.Tune(Problem(true, m, kShapes[si]), Args(int4[si][0], x, y), stream);
      CHECK_OK(q);
      tuned_i[si] = *q;
      routes += std::string(si ? ", " : "") + (q->route == GemmChoice::Route::kSmallM    ? "small_m"
                                               : q->route == GemmChoice::Route::kInt4Mma ? "mma"
                                                                                         : "dequant");
    }
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      cb.push_back(&tuned_b[si]);
      ci.push_back(&tuned_i[si]);
    }
    const double t_b = TimeLayers(gemm, stream, false, m, bf16, cb, x, y);
    const double t_i = TimeLayers(gemm, stream, true, m, int4, ci, x, y);
    // Each int4 route forced for every shape.
    GemmChoice small, mma, lt;
    small.route = GemmChoice::Route::kSmallM;
    mma.route = GemmChoice::Route::kInt4Mma;
    lt.route = GemmChoice::Route::kCublasLt;  // with a zero algo: Run checks it, falls back to the heuristic
    double t_small = -1, t_mma = -1;
    if (m <= 64) t_small = TimeLayers(gemm, stream, true, m, int4, {&small, &small, &small, &small}, x, y);
    if (m <= 512) t_mma = TimeLayers(gemm, stream, true, m, int4, {&mma, &mma, &mma, &mma}, x, y);
    std::vector<const GemmChoice*> lt_choices;
    std::vector<GemmChoice> lt_tuned(std::size(kShapes));
    for (size_t si = 0; si < std::size(kShapes); ++si) {
      lt_tuned[si] = tuned_i[si].route == GemmChoice::Route::kCublasLt ? tuned_i[si] : lt;
      lt_choices.push_back(&lt_tuned[si]);
    }
    const double t_lt = TimeLayers(gemm, stream, true, m, int4, lt_choices, x, y);
    // bf16: cuBLASLt's heuristic (no choice) against the dense small-M kernel, every shape.
    const double t_b_lt = TimeLayers(gemm, stream, false, m, bf16, {nullptr, nullptr, nullptr, nullptr}, x, y);
    double t_b_small = -1;
    if (m <= ferry::cuda::kDenseSmallMMaxM) {
      t_b_small = TimeLayers(gemm, stream, false, m, bf16, {&small, &small, &small, &small}, x, y);
    }
    auto cell = [](double v) {
      char buf[32];
      if (v < 0) return std::string("-");
      std::snprintf(buf, sizeof(buf), "%.1f", v);
      return std::string(buf);
    };
    std::printf("| %lld | %.1f | %.1f | %.2fx | %s | %s | %s | %s | %.1f | %s | %s |\n", static_cast<long long>(m), t_b,
                t_i, t_b / t_i, cell(t_small).c_str(), cell(t_mma).c_str(), cell(t_lt).c_str(), routes.c_str(), t_b_lt,
                cell(t_b_small).c_str(), routes_b.c_str());
    std::fflush(stdout);
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"m\": %lld, \"bf16_us\": %.2f, \"int4_us\": %.2f, \"int4_small_m_us\": %.2f, "
                  "\"int4_mma_us\": %.2f, \"int4_dequant_us\": %.2f, \"int4_routes\": \"%s\", "
                  "\"bf16_heuristic_us\": %.2f, \"bf16_small_m_us\": %.2f, \"bf16_routes\": \"%s\"}",
                  json.size() > 1 ? ", " : "", static_cast<long long>(m), t_b, t_i, t_small, t_mma, t_lt,
                  routes.c_str(), t_b_lt, t_b_small, routes_b.c_str());
    json += buf;
  }
  json += "]\n";
  if (!json_path.empty()) std::ofstream(json_path) << json;
  std::printf("\nchoice fallbacks: %lld\n", static_cast<long long>(gemm.choice_fallbacks()));
  return 0;
}
