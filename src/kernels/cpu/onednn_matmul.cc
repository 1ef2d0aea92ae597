#include "kernels/cpu/onednn_matmul.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ferry::kernels::cpu {
namespace {

using dnnl::memory;
using Dims = memory::dims;

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// (n, k, lda, ldy, w_is_kn, has_bias)
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, bool, bool>;

struct CachedMatmul {
  dnnl::matmul primitive;
  memory::desc weights_md;
  memory::desc bias_md;
};

class PrimitiveCache {
 public:
  // Creating a primitive runs oneDNN's dispatcher and JIT; done once per key.
  const CachedMatmul& Get(const Key& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    const auto [n, k, lda, ldy, w_is_kn, has_bias] = key;
    const memory::desc src_md(Dims{DNNL_RUNTIME_DIM_VAL, k}, memory::data_type::f32, Dims{lda, 1});
    const memory::desc dst_md(Dims{DNNL_RUNTIME_DIM_VAL, n}, memory::data_type::f32, Dims{ldy, 1});
    const memory::desc w_md(Dims{k, n}, memory::data_type::f32, w_is_kn ? Dims{n, 1} : Dims{1, k});
    const memory::desc b_md = has_bias ? memory::desc(Dims{1, n}, memory::data_type::f32, Dims{n, 1})
                                       : memory::desc();
    dnnl::matmul::desc desc = has_bias ? dnnl::matmul::desc(src_md, w_md, b_md, dst_md)
                                       : dnnl::matmul::desc(src_md, w_md, dst_md);
    dnnl::matmul::primitive_desc pd(desc, Engine());
    CachedMatmul entry{dnnl::matmul(pd), w_md, b_md};
    return cache_.emplace(key, std::move(entry)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<Key, CachedMatmul> cache_;  // GUARDED_BY(mu_); entries never move or die
};

PrimitiveCache& Cache() {
  static PrimitiveCache* cache = new PrimitiveCache();
  return *cache;
}

dnnl::matmul::primitive_desc Int8MatmulDesc(int64_t m, int64_t n, int64_t k) {
  const memory::desc src_md(Dims{m, k}, memory::data_type::s8, memory::format_tag::ab);
  const memory::desc w_md(Dims{k, n}, memory::data_type::s8, memory::format_tag::any);
  const memory::desc dst_md(Dims{m, n}, memory::data_type::s32, memory::format_tag::ab);
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, w_md, dst_md), Engine());
}

// Int8 primitives per (n, k), M a run-time dimension.
class Int8Cache {
 public:
  const CachedMatmul& Get(int64_t n, int64_t k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find({n, k});
    if (it != cache_.end()) return it->second;
    dnnl::matmul::primitive_desc pd = Int8MatmulDesc(DNNL_RUNTIME_DIM_VAL, n, k);
    CachedMatmul entry{dnnl::matmul(pd), pd.weights_desc(), memory::desc()};
    return cache_.emplace(std::make_pair(n, k), std::move(entry)).first->second;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, CachedMatmul> cache_;  // GUARDED_BY(mu_); entries never move or die
};

Int8Cache& Int8Primitives() {
  static Int8Cache* cache = new Int8Cache();
  return *cache;
}

}  // namespace

Result<std::shared_ptr<OnednnWeight>> PackOnednnWeight(const Tensor& weight) {
  if (weight.rank() != 2 || !weight.is_contiguous()) return InvalidArgument("weight must be contiguous 2-D");
  const DType dtype = weight.dtype();
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return InvalidArgument("weight dtype must be f32, bf16 or f16");
  }
  auto packed = std::make_shared<OnednnWeight>();
  packed->n = weight.dim(0);
  packed->k = weight.dim(1);
  const int64_t n = packed->n, k = packed->k;
  float* mem = nullptr;
  try {
    mem = static_cast<float*>(AlignedAlloc(std::max<size_t>(static_cast<size_t>(n * k) * 4, 64)));
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory packing a weight for oneDNN");
  }
  packed->data = std::shared_ptr<float>(mem, AlignedFree);
  constexpr int64_t kTile = 64;
  ParallelFor((n + kTile - 1) / kTile, 1, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = b; t < e; ++t) {
      for (int64_t r = t * kTile; r < std::min(n, (t + 1) * kTile); ++r) {
        ConvertToF32(dtype, static_cast<const char*>(weight.raw()) + r * k * DTypeSize(dtype), row.data(),
                     static_cast<size_t>(k));
        for (int64_t c = 0; c < k; ++c) mem[c * n + r] = row[c];
      }
    }
  });
  return packed;
}

Status OnednnMatmul(const float* x, int64_t lda, int64_t m, int64_t k, const float* w, bool w_is_kn, int64_t n,
                    const float* bias, float* y, int64_t ldy) {
  try {
    const CachedMatmul& mm = Cache().Get(Key{n, k, lda, ldy, w_is_kn, bias != nullptr});
    const memory::desc src_md(Dims{m, k}, memory::data_type::f32, Dims{lda, 1});
    const memory::desc dst_md(Dims{m, n}, memory::data_type::f32, Dims{ldy, 1});
    memory src(src_md, Engine(), const_cast<float*>(x));
    memory wts(mm.weights_md, Engine(), const_cast<float*>(w));
    memory dst(dst_md, Engine(), y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}};
    if (bias != nullptr) args.emplace(DNNL_ARG_BIAS, memory(mm.bias_md, Engine(), const_cast<float*>(bias)));
    thread_local dnnl::stream stream(Engine());
    mm.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN matmul failed: ") + e.what());
  }
  return Status::Ok();
}

Result<std::shared_ptr<OnednnInt8Weight>> PackOnednnInt8Weight(const int8_t* w, int64_t n, int64_t k) {
  try {
    const CachedMatmul& mm = Int8Primitives().Get(n, k);
    auto packed = std::make_shared<OnednnInt8Weight>();
    packed->n = n;
    packed->k = k;
    packed->data = std::shared_ptr<void>(AlignedAlloc(std::max<size_t>(mm.weights_md.get_size(), 64)), AlignedFree);
    // W[N, K] row-major is the [K, N] matrix with strides (1, K).
    const memory::desc user_md(Dims{k, n}, memory::data_type::s8, Dims{1, k});
    memory user(user_md, Engine(), const_cast<int8_t*>(w));
    memory dst(mm.weights_md, Engine(), packed->data.get());
    dnnl::stream stream(Engine());
    dnnl::reorder(user, dst).execute(stream, user, dst);
    stream.wait();
    return packed;
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN int8 weight reorder failed: ") + e.what());
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory packing an int8 weight for oneDNN");
  }
}

Status OnednnInt8Matmul(const int8_t* xq, int64_t m, const OnednnInt8Weight& w, int32_t* acc) {
  try {
    const CachedMatmul& mm = Int8Primitives().Get(w.n, w.k);
    const memory::desc src_md(Dims{m, w.k}, memory::data_type::s8, memory::format_tag::ab);
    const memory::desc dst_md(Dims{m, w.n}, memory::data_type::s32, memory::format_tag::ab);
    memory src(src_md, Engine(), const_cast<int8_t*>(xq));
    memory wts(mm.weights_md, Engine(), w.data.get());
    memory dst(dst_md, Engine(), acc);
    thread_local dnnl::stream stream(Engine());
    mm.primitive.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}});
    stream.wait();
  } catch (const dnnl::error& e) {
    return Internal(std::string("oneDNN int8 matmul failed: ") + e.what());
  }
  return Status::Ok();
}

std::string OnednnInt8MatmulImpl() {
  try {
    return Int8MatmulDesc(64, 256, 256).impl_info_str();
  } catch (const dnnl::error& e) {
    return std::string("unavailable: ") + e.what();
  }
}

std::string OnednnF32MatmulImpl() {
  try {
    const memory::desc a(Dims{64, 256}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc w(Dims{256, 256}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc c(Dims{64, 256}, memory::data_type::f32, memory::format_tag::ab);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), Engine()).impl_info_str();
  } catch (const dnnl::error& e) {
    return std::string("unavailable: ") + e.what();
  }
}

bool OnednnHasFastBf16Matmul() {
  try {
    const memory::desc a(Dims{64, 256}, memory::data_type::bf16, memory::format_tag::ab);
    const memory::desc w(Dims{256, 256}, memory::data_type::bf16, memory::format_tag::any);
    const memory::desc c(Dims{64, 256}, memory::data_type::f32, memory::format_tag::ab);
    const std::string impl =
        dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, w, c), Engine()).impl_info_str();
    return impl.find("ref") == std::string::npos;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace ferry::kernels::cpu
