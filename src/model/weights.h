// Weight lookup shared by the model families: names are Hugging Face's, tensors come from
// a checkpoint or an engine file through one callback, so models do not care which.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace ferry::model {

// Returns the named tensor (zero-copy where possible) or NotFound.
using TensorLookup = std::function<Result<Tensor>(const std::string& name)>;
// True when the named tensor exists.
using TensorExists = std::function<bool(const std::string& name)>;

// A quantized checkpoint's linear weight as 4-bit groups: the groups when the layer has an
// exact 4-bit form, nullopt otherwise (unquantized, 8 bits, act-order).
using Int4Lookup = std::function<Result<std::optional<kernels::Int4Groups>>(const std::string& name)>;

// A file's linear weight as int8 blocks (GGUF Q8_0) when it is stored so, nullopt otherwise.
using Int8BlockLookup = std::function<Result<std::optional<io::Int8Blocks>>(const std::string& name)>;

struct WeightSource {
  TensorLookup get;
  TensorExists has;
  Int4Lookup int4 = nullptr;  // may be empty: no weight has groups
  Int8BlockLookup int8_blocks = nullptr;  // may be empty: no weight has int8 blocks
  // A pre-quantized checkpoint: whether it holds the named weight quantized (e4m3, packed
  // integers). Empty: nothing is.
  TensorExists quantized = nullptr;
};

// How a checkpoint's weights are turned into the kernels' form at load (the engine
// precision variants).
struct LoadOptions {
  backend::WeightFormat linear_format = backend::WeightFormat::kNative;
  // Embedding tables and other non-linear weights: converted to this dtype when set.
  std::optional<DType> table_dtype;
  // SmoothQuant factors per linear key (kInt8W8A8); missing keys mean no smoothing.
  const std::map<std::string, Tensor>* smooth = nullptr;
  // A pre-quantized checkpoint loaded in its own precision: layers it holds unquantized
  // (WeightSource::quantized says no; lm_head, typically) keep their floats (kNative).
  bool keep_unquantized_layers = false;
  // fp8 linears accumulate at the tensor cores' precision (backend::LinearWeight::
  // fast_accumulation): 1.03-1.18x the GEMM rate from 256 rows on an H200, an accumulation
  // error 1/30 to 1/13 of what e4m3 rounding of the operands adds.
  bool fp8_fast_accumulation = true;
};

// A float8 checkpoint's weights as plain tensors (io::QuantizationConfig): an e4m3 tensor
// `name` comes back in `dtype` as q * scale, the scale being `name`_scale or
// `name`_scale_inv (both are multiplied; the second is the block layout's name) with one
// value, one per output row ([N] or [N, 1]), or one per block of q.block_rows x
// q.block_cols (a [ceil(N / rows), ceil(K / cols)] grid; without a configured block, the grid
// decides it when it divides the tensor). Other tensors pass through unchanged. An e4m3
// tensor without a scale, or with a scale of another shape, is an error naming both.
//
// gptq / awq checkpoints hold no `P.weight` for a quantized linear layer P, but P.qweight,
// P.qzeros, P.scales (and for gptq P.g_idx): `P.weight` is then reported present and comes
// back as the [out, in] matrix (q - zero) * scale of its group; `int4` gives a 4-bit layer's
// grid itself (model/packed_int_weights.h: PackedLinearInt4Groups). Layers the quantizer left
// out (lm_head, modules_to_not_convert) keep their plain weights and pass through.
WeightSource DequantizingSource(WeightSource inner, const io::QuantizationConfig& q, DType dtype);
// Bytes of the weights a quantized checkpoint holds once DequantizingSource has unpacked them
// (what a memory check must plan for): e4m3 and packed integer weights at the dequantized
// dtype's size, their scales and zero points dropped, every other tensor as stored.
int64_t DequantizedBytes(const io::Checkpoint& checkpoint, const io::ModelConfig& config);
// The dtype DequantizingSource gives a checkpoint: its torch_dtype (float32, float16), else bf16.
DType DequantizedDType(const io::ModelConfig& config);

// Weights already prepared for a backend, by ferry's own keys (an engine file).
struct PreparedSource {
  std::function<Result<Tensor>(const std::string& key)> tensor;
  std::function<Result<backend::LinearWeight>(const std::string& key)> linear;

  // linear(key), checked against the config's [out, in]; the error names both shapes.
  Result<backend::LinearWeight> Linear(const std::string& key, int64_t out, int64_t in) const;
  // tensor(key), checked against `shape`.
  Result<Tensor> Table(const std::string& key, const Shape& shape) const;
};

// Visits every weight of a loaded model under its key (what the engine builder stores).
struct WeightVisitor {
  std::function<Status(const std::string& key, const Tensor& t)> tensor;
  std::function<Status(const std::string& key, const backend::LinearWeight& w)> linear;
};

// Called with the input of every linear layer during Forward (calibration statistics).
using LinearInputObserver = std::function<void(const std::string& key, const Tensor& input)>;

// Fetches `name` and checks its shape; the error names the tensor and both shapes.
Result<Tensor> GetWeight(const WeightSource& src, const std::string& name, const Shape& shape);
// Fetches a small vector (norm gain, bias) and converts it to f32.
Result<Tensor> GetVectorF32(const WeightSource& src, const std::string& name, int64_t size);
// Concatenates row blocks [n_i, K] of one dtype into a new [sum n_i, K] tensor (fused
// QKV / gate-up layouts: one GEMM reads all of them).
Result<Tensor> ConcatRows(const std::vector<Tensor>& parts);
// Concatenates f32 vectors.
Tensor ConcatVectors(const std::vector<Tensor>& parts);

// Builds a LinearWeight from row blocks [n_i, in] (fused when several; + optional bias
// parts) in options.linear_format, with the key's smoothing factors, and prepares it. For
// kInt4, blocks whose source holds 4-bit groups (GPTQ / AWQ) go to the backend as those
// groups, unchanged, when every block has them; anything else is quantized by the backend,
// unless options.keep_unquantized_layers keeps a layer the checkpoint holds in floats so. For
// kNative, on a backend that takes int8 blocks, blocks whose source stores them as int8 blocks
// of one block size (a GGUF Q8_0 file loaded as it is) become a kInt8 weight with those
// blocks' scales: the file's numbers, at about a byte a weight instead of f32's four.
Result<backend::LinearWeight> LoadLinear(const WeightSource& src, backend::Backend& be, const LoadOptions& options,
                                         const std::string& key, const std::vector<std::string>& weight_names,
                                         const std::vector<std::string>& bias_names,
                                         const std::vector<int64_t>& outs, int64_t in);
// A table (embedding, norm gain) in options.table_dtype when set; small vectors always f32.
Result<Tensor> LoadTable(const WeightSource& src, const LoadOptions& options, const std::string& name,
                         const Shape& shape);

}  // namespace ferry::model
