#include "model/decoder.h"

#include <cmath>
#include <string>

#include "core/dtype.h"
#include "core/logging.h"

namespace ferry::model {

namespace {

backend::RopeScalingParams ToRopeParams(const io::RopeScaling& s) {
  backend::RopeScalingParams p;
  switch (s.type) {
    case io::RopeScaling::Type::kNone: p.type = backend::RopeScalingParams::Type::kNone; break;
    case io::RopeScaling::Type::kLinear: p.type = backend::RopeScalingParams::Type::kLinear; break;
    case io::RopeScaling::Type::kLlama3: p.type = backend::RopeScalingParams::Type::kLlama3; break;
    case io::RopeScaling::Type::kLongRope: p.type = backend::RopeScalingParams::Type::kLongRope; break;
  }
  p.short_factor = s.short_factor;
  p.long_factor = s.long_factor;
  p.attention_factor = s.attention_factor;
  p.factor = s.factor;
  p.low_freq_factor = s.low_freq_factor;
  p.high_freq_factor = s.high_freq_factor;
  p.original_max_position = s.original_max_position;
  return p;
}

}  // namespace

Status DecoderModel::Validate() const {
  if (config_.hidden_act != "silu" && config_.hidden_act != "gelu_pytorch_tanh" &&
      config_.hidden_act != "gelu_tanh") {
    return Unimplemented("decoder activation '" + config_.hidden_act +
                         "' is not supported (silu, gelu_pytorch_tanh)");
  }
  if (!config_.layer_windows.empty() && static_cast<int>(config_.layer_windows.size()) != config_.num_layers) {
    return InvalidArgument("layer_windows has " + std::to_string(config_.layer_windows.size()) + " entries for " +
                           std::to_string(config_.num_layers) + " layers");
  }
  return Status::Ok();
}

Result<Tensor> DecoderModel::LoadNorm(const WeightSource& w, const std::string& name, int64_t n) const {
  FERRY_ASSIGN_OR_RETURN(Tensor t, GetVectorF32(w, name, n));
  if (!config_.gemma_norms) return t;
  // Gemma stores w and scales by (1 + w); the kernels scale by their gamma.
  std::vector<float> v(t.data<float>(), t.data<float>() + n);
  for (float& x : v) x += 1.0f;
  return Tensor::FromVector(v, {n});
}

void DecoderModel::Finish() {
  size_t bytes = 0;
  auto linear_bytes = [](const backend::LinearWeight& w) {
    // Bytes the kernels stream per step: one byte per int8 weight (and an f16 scale a block for
    // int8 blocks), half for int4, else the packed dtype.
    switch (w.format) {
      case backend::WeightFormat::kInt8:
        if (w.block_size > 0) {
          return static_cast<size_t>(w.out_features() * w.in_features() * (w.block_size + 2) / w.block_size);
        }
        return static_cast<size_t>(w.out_features() * w.in_features());
      case backend::WeightFormat::kInt8W8A8:
      case backend::WeightFormat::kFp8: return static_cast<size_t>(w.out_features() * w.in_features());
      case backend::WeightFormat::kF32: return static_cast<size_t>(w.out_features() * w.in_features() * 4);
      case backend::WeightFormat::kBF16:
      case backend::WeightFormat::kF16: return static_cast<size_t>(w.out_features() * w.in_features() * 2);
      case backend::WeightFormat::kInt4: return static_cast<size_t>(w.out_features() * w.in_features() / 2);
      case backend::WeightFormat::kNative: break;
    }
    return w.weight.defined() ? w.weight.nbytes() : static_cast<size_t>(w.out_features() * w.in_features() * 4);
  };
  for (const Layer& l : layers_) {
    bytes += linear_bytes(l.qkv) + linear_bytes(l.o) + linear_bytes(l.gate_up) + linear_bytes(l.down);
  }
  bytes += linear_bytes(lm_head_);
  weight_bytes_ = bytes;
  rope_ = backend::MakeRopeTable(config_.head_dim, config_.rope_theta, ToRopeParams(config_.rope_scaling));
  embed_scale_ = 1.0f;
  if (config_.gemma_norms) {
    // transformers multiplies by sqrt(hidden) cast to the activation dtype.
    float s = std::sqrt(static_cast<float>(config_.hidden_size));
    const DType act = backend_.activation_dtype();
    if (act == DType::kBF16) s = Bf16ToF32(F32ToBf16(s));
    if (act == DType::kF16) s = F16ToF32(F32ToF16(s));
    embed_scale_ = s;
  }
  layer_prefix_.clear();
  for (size_t l = 0; l < layers_.size(); ++l) layer_prefix_.push_back("layers." + std::to_string(l) + ".");
}

Result<std::unique_ptr<DecoderModel>> DecoderModel::Load(const io::ModelConfig& config, const WeightSource& w,
                                                         backend::Backend& be, const LoadOptions& options) {
  if (config.family != io::ModelFamily::kDecoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not a decoder");
  }
  std::unique_ptr<DecoderModel> m(new DecoderModel(config, be));
  FERRY_RETURN_IF_ERROR(m->Validate());
  const int64_t H = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t hd = config.head_dim, nh = config.num_heads, nkv = config.num_kv_heads;

  FERRY_ASSIGN_OR_RETURN(m->embed_, LoadTable(w, options, "model.embed_tokens.weight", {V, H}));
  // A GPU copies the table with the other weights rather than at its first use.
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->embed_));
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string key = "layers." + std::to_string(l) + ".";
    Layer layer;
    FERRY_ASSIGN_OR_RETURN(layer.attn_norm, m->LoadNorm(w, p + "input_layernorm.weight", H));
    if (config.gemma_norms) {
      // Gemma 2's post_attention_layernorm normalizes the attention output; the MLP's input
      // norm is pre_feedforward_layernorm.
      FERRY_ASSIGN_OR_RETURN(layer.post_attn_norm, m->LoadNorm(w, p + "post_attention_layernorm.weight", H));
      FERRY_ASSIGN_OR_RETURN(layer.mlp_norm, m->LoadNorm(w, p + "pre_feedforward_layernorm.weight", H));
      FERRY_ASSIGN_OR_RETURN(layer.post_mlp_norm, m->LoadNorm(w, p + "post_feedforward_layernorm.weight", H));
    } else {
      FERRY_ASSIGN_OR_RETURN(layer.mlp_norm, m->LoadNorm(w, p + "post_attention_layernorm.weight", H));
    }
    if (config.qk_norm) {
      FERRY_ASSIGN_OR_RETURN(layer.q_norm, m->LoadNorm(w, p + "self_attn.q_norm.weight", hd));
      FERRY_ASSIGN_OR_RETURN(layer.k_norm, m->LoadNorm(w, p + "self_attn.k_norm.weight", hd));
    }
    std::vector<std::string> qkv_bias;
    if (config.attention_bias) {
      qkv_bias = {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"};
    }
    if (config.fused_checkpoint_projections) {
      // Phi-3 stores the fused projections ferry uses: qkv_proj [(nh + 2 nkv) hd, H] and
      // gate_up_proj [2 I, H] (gate rows first).
      FERRY_ASSIGN_OR_RETURN(layer.qkv, LoadLinear(w, be, options, key + "qkv", {p + "self_attn.qkv_proj.weight"}, {},
                                                   {(nh + 2 * nkv) * hd}, H));
    } else {
      FERRY_ASSIGN_OR_RETURN(layer.qkv, LoadLinear(w, be, options, key + "qkv",
                                                   {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
                                                    p + "self_attn.v_proj.weight"},
                                                   qkv_bias, {nh * hd, nkv * hd, nkv * hd}, H));
    }
    // Llama's attention_bias also puts a bias on o_proj; Qwen2 has q/k/v biases only.
    std::vector<std::string> o_bias;
    if (config.attention_bias && w.has(p + "self_attn.o_proj.bias")) o_bias = {p + "self_attn.o_proj.bias"};
    FERRY_ASSIGN_OR_RETURN(layer.o, LoadLinear(w, be, options, key + "o", {p + "self_attn.o_proj.weight"}, o_bias,
                                               {H}, nh * hd));
    std::vector<std::string> gu_bias, down_bias;
    if (config.mlp_bias) {
      gu_bias = {p + "mlp.gate_proj.bias", p + "mlp.up_proj.bias"};
      down_bias = {p + "mlp.down_proj.bias"};
    }
    if (config.fused_checkpoint_projections) {
      FERRY_ASSIGN_OR_RETURN(layer.gate_up, LoadLinear(w, be, options, key + "gate_up", {p + "mlp.gate_up_proj.weight"},
                                                       {}, {2 * I}, H));
    } else {
      FERRY_ASSIGN_OR_RETURN(layer.gate_up, LoadLinear(w, be, options, key + "gate_up",
                                                       {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                                                       gu_bias, {I, I}, H));
    }
    FERRY_ASSIGN_OR_RETURN(layer.down, LoadLinear(w, be, options, key + "down", {p + "mlp.down_proj.weight"},
                                                  down_bias, {H}, I));
    m->layers_.push_back(std::move(layer));
  }
  FERRY_ASSIGN_OR_RETURN(m->final_norm_, m->LoadNorm(w, "model.norm.weight", H));
  const bool tied = config.tie_word_embeddings || !w.has("lm_head.weight");
  if (tied && !config.tie_word_embeddings) {
    return InvalidArgument("checkpoint has no 'lm_head.weight' and the config does not tie word embeddings");
  }
  FERRY_ASSIGN_OR_RETURN(m->lm_head_, LoadLinear(w, be, options, "lm_head",
                                                 {tied ? "model.embed_tokens.weight" : "lm_head.weight"}, {}, {V}, H));
  m->Finish();
  return m;
}

Result<std::unique_ptr<DecoderModel>> DecoderModel::LoadPrepared(const io::ModelConfig& config,
                                                                 const PreparedSource& w, backend::Backend& be) {
  if (config.family != io::ModelFamily::kDecoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not a decoder");
  }
  std::unique_ptr<DecoderModel> m(new DecoderModel(config, be));
  FERRY_RETURN_IF_ERROR(m->Validate());
  const int64_t H = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t q_dim = config.num_heads * config.head_dim, kv_dim = config.num_kv_heads * config.head_dim;
  auto linear = [&](const std::string& key, int64_t out, int64_t in) { return w.Linear(key, out, in); };
  auto vec = [&](const std::string& key, int64_t n) -> Result<Tensor> {
    FERRY_ASSIGN_OR_RETURN(Tensor t, w.tensor(key));
    if (t.shape() != Shape{n} || t.dtype() != DType::kF32) {
      return DataLoss("weight '" + key + "' is " + t.DebugString() + ", expected f32[" + std::to_string(n) + "]");
    }
    return t;
  };
  FERRY_ASSIGN_OR_RETURN(m->embed_, w.tensor("embed"));
  if (m->embed_.shape() != Shape{V, H}) return DataLoss("weight 'embed' has shape " + ShapeToString(m->embed_.shape()));
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->embed_));
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    Layer layer;
    FERRY_ASSIGN_OR_RETURN(layer.attn_norm, vec(key + "attn_norm", H));
    FERRY_ASSIGN_OR_RETURN(layer.mlp_norm, vec(key + "mlp_norm", H));
    FERRY_ASSIGN_OR_RETURN(layer.qkv, linear(key + "qkv", q_dim + 2 * kv_dim, H));
    FERRY_ASSIGN_OR_RETURN(layer.o, linear(key + "o", H, q_dim));
    FERRY_ASSIGN_OR_RETURN(layer.gate_up, linear(key + "gate_up", 2 * I, H));
    FERRY_ASSIGN_OR_RETURN(layer.down, linear(key + "down", H, I));
    if (config.qk_norm) {
      FERRY_ASSIGN_OR_RETURN(layer.q_norm, vec(key + "q_norm", config.head_dim));
      FERRY_ASSIGN_OR_RETURN(layer.k_norm, vec(key + "k_norm", config.head_dim));
    }
    if (config.gemma_norms) {
      FERRY_ASSIGN_OR_RETURN(layer.post_attn_norm, vec(key + "post_attn_norm", H));
      FERRY_ASSIGN_OR_RETURN(layer.post_mlp_norm, vec(key + "post_mlp_norm", H));
    }
    m->layers_.push_back(std::move(layer));
  }
  FERRY_ASSIGN_OR_RETURN(m->final_norm_, vec("final_norm", H));
  FERRY_ASSIGN_OR_RETURN(m->lm_head_, linear("lm_head", V, H));
  m->Finish();
  return m;
}

Status DecoderModel::Visit(const WeightVisitor& v) const {
  FERRY_RETURN_IF_ERROR(v.tensor("embed", embed_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    const Layer& L = layers_[l];
    FERRY_RETURN_IF_ERROR(v.tensor(key + "attn_norm", L.attn_norm));
    FERRY_RETURN_IF_ERROR(v.tensor(key + "mlp_norm", L.mlp_norm));
    FERRY_RETURN_IF_ERROR(v.linear(key + "qkv", L.qkv));
    FERRY_RETURN_IF_ERROR(v.linear(key + "o", L.o));
    FERRY_RETURN_IF_ERROR(v.linear(key + "gate_up", L.gate_up));
    FERRY_RETURN_IF_ERROR(v.linear(key + "down", L.down));
    if (config_.qk_norm) {
      FERRY_RETURN_IF_ERROR(v.tensor(key + "q_norm", L.q_norm));
      FERRY_RETURN_IF_ERROR(v.tensor(key + "k_norm", L.k_norm));
    }
    if (config_.gemma_norms) {
      FERRY_RETURN_IF_ERROR(v.tensor(key + "post_attn_norm", L.post_attn_norm));
      FERRY_RETURN_IF_ERROR(v.tensor(key + "post_mlp_norm", L.post_mlp_norm));
    }
  }
  FERRY_RETURN_IF_ERROR(v.tensor("final_norm", final_norm_));
  return v.linear("lm_head", lm_head_);
}

Status DecoderModel::RunLinear(int layer, const char* name, const Tensor& x, const backend::LinearWeight& w,
                               Tensor& y) {
  if (observer_) observer_(layer < 0 ? std::string(name) : layer_prefix_[layer] + name, x);
  return backend_.Linear(x, w, y);
}

Status DecoderModel::NormLinear(int layer, const char* name, Tensor& x, const Tensor* delta, const Tensor& gamma,
                                Tensor& h, const backend::LinearWeight& w, Tensor& y) {
  const float eps = config_.rms_norm_eps;
  if (observer_) {
    // Calibration observes the linear's input, so the norm is written out.
    FERRY_RETURN_IF_ERROR(delta != nullptr ? backend_.AddRmsNorm(x, *delta, gamma, eps, h)
                                           : backend_.RmsNorm(x, gamma, eps, h));
    return RunLinear(layer, name, h, w, y);
  }
  return backend_.NormLinear(x, delta, gamma, eps, h, w, y);
}

backend::StepInputs DecoderBatch::inputs(int block_tokens) const {
  backend::StepInputs in;
  in.token_ids = token_ids;
  in.positions = positions;
  in.slots = slots;
  in.spans = spans;
  in.logit_rows = logit_rows;
  in.block_tokens = block_tokens;
  in.token_patches = token_patches;
  in.patch_source = patch_source;
  return in;
}

Status DecoderModel::CheckBatch(const DecoderBatch& batch, const std::vector<backend::KvLayer>& kv) const {
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  if (T == 0) return InvalidArgument("empty batch");
  if (batch.positions.size() != static_cast<size_t>(T) || batch.slots.size() != static_cast<size_t>(T)) {
    return InvalidArgument("batch positions/slots do not match its tokens");
  }
  if (kv.size() != layers_.size()) return InvalidArgument("KV cache has the wrong number of layers");
#ifndef NDEBUG
  // Token ids are checked once, where a request enters (sched::EngineCore::Validate); this
  // per-step scan only guards debug builds.
  const io::ModelConfig& c = config_;
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
#endif
  for (int32_t r : batch.logit_rows) {
    if (r < 0 || r >= T) return InvalidArgument("logit row " + std::to_string(r) + " outside the batch");
  }
  return Status::Ok();
}

void MarkLongRopePositions(const io::ModelConfig& config, DecoderBatch& batch) {
  if (config.rope_scaling.type != io::RopeScaling::Type::kLongRope) return;
  const int32_t original = config.rope_scaling.original_max_position;
  for (const backend::SeqSpan& s : batch.spans) {
    if (s.context_len <= original) continue;
    for (int32_t i = s.q_begin; i < s.q_begin + s.q_len && i < static_cast<int32_t>(batch.positions.size()); ++i) {
      batch.positions[static_cast<size_t>(i)] |= kernels::kRopeLongPosition;
    }
  }
}

Status DecoderModel::Forward(const DecoderBatch& batch, std::vector<backend::KvLayer>& kv, Tensor& logits) {
  FERRY_RETURN_IF_ERROR(CheckBatch(batch, kv));
  const int block_tokens = kv.empty() ? 0 : kv[0].block_tokens;
  if (config_.rope_scaling.type == io::RopeScaling::Type::kLongRope) {
    DecoderBatch marked = batch;
    MarkLongRopePositions(config_, marked);
    FERRY_ASSIGN_OR_RETURN(const backend::StepTensors in, backend_.UploadStep(marked.inputs(block_tokens)));
    FERRY_ASSIGN_OR_RETURN(logits, Forward(in, kv));
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(const backend::StepTensors in, backend_.UploadStep(batch.inputs(block_tokens)));
  FERRY_ASSIGN_OR_RETURN(logits, Forward(in, kv));
  return Status::Ok();
}

Result<Tensor> DecoderModel::Forward(const backend::StepTensors& in, std::vector<backend::KvLayer>& kv) {
  backend::Backend& be = backend_;
  be.BindComputeThreads();
  const io::ModelConfig& c = config_;
  const int64_t T = in.token_ids.numel();
  if (kv.size() != layers_.size()) return InvalidArgument("KV cache has the wrong number of layers");
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd;
  const DType act = be.activation_dtype();

  FERRY_ASSIGN_OR_RETURN(Tensor x, be.Allocate({T, H}, act));      // residual stream
  FERRY_ASSIGN_OR_RETURN(Tensor h, be.Allocate({T, H}, act));      // normalised input of a block
  FERRY_ASSIGN_OR_RETURN(Tensor delta, be.Allocate({T, H}, act));  // block output, added to x by the next fused norm
  FERRY_ASSIGN_OR_RETURN(Tensor qkv, be.Allocate({T, q_dim + 2 * kv_dim}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor q, be.Allocate({T, q_dim}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor k, be.Allocate({T, kv_dim}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor v, be.Allocate({T, kv_dim}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor attn, be.Allocate({T, q_dim}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor gate_up, be.Allocate({T, 2 * I}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor mlp, be.Allocate({T, I}, act));
  Tensor post;  // the sandwich norms' output (gemma_norms)
  if (c.gemma_norms) {
    FERRY_ASSIGN_OR_RETURN(post, be.Allocate({T, H}, act));
  }
  const bool gelu = c.hidden_act != "silu";

  backend::AttentionParams ap;
  ap.num_heads = c.num_heads;
  ap.num_kv_heads = c.num_kv_heads;
  ap.head_dim = static_cast<int>(hd);
  ap.scale = c.attention_scale > 0.0f ? c.attention_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  ap.causal = true;
  ap.softcap = c.attn_logit_softcap;
  if (c.rope_scaling.type == io::RopeScaling::Type::kLongRope) {
    // longrope multiplies cos and sin by attention_factor, i.e. q and k: the scores by its square.
    ap.scale *= c.rope_scaling.attention_factor * c.rope_scaling.attention_factor;
  }

  FERRY_RETURN_IF_ERROR(be.Embedding(embed_, in.token_ids, x));
  if (embed_scale_ != 1.0f) FERRY_RETURN_IF_ERROR(be.Scale(x, embed_scale_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    FERRY_RETURN_IF_ERROR(NormLinear(static_cast<int>(l), "qkv", x, l == 0 ? nullptr : &delta, L.attn_norm, h, L.qkv, qkv));
    if (c.qk_norm) {
      FERRY_RETURN_IF_ERROR(be.HeadRmsNorm(qkv, 0, c.num_heads, static_cast<int>(hd), L.q_norm, c.rms_norm_eps));
      FERRY_RETURN_IF_ERROR(
          be.HeadRmsNorm(qkv, q_dim, c.num_kv_heads, static_cast<int>(hd), L.k_norm, c.rms_norm_eps));
    }
    FERRY_RETURN_IF_ERROR(
        be.RopeQkvWriteKv(qkv, c.num_heads, c.num_kv_heads, in.positions, rope_, in.slots, kv[l], q, k, v));
    ap.window = c.layer_windows.empty() ? 0 : c.layer_windows[l];
    FERRY_RETURN_IF_ERROR(be.PagedAttention(q, kv[l], in.attention, ap, attn));
    FERRY_RETURN_IF_ERROR(RunLinear(static_cast<int>(l), "o", attn, L.o, delta));
    if (c.gemma_norms) {
      FERRY_RETURN_IF_ERROR(be.RmsNorm(delta, L.post_attn_norm, c.rms_norm_eps, post));
      std::swap(delta, post);
    }
    FERRY_RETURN_IF_ERROR(NormLinear(static_cast<int>(l), "gate_up", x, &delta, L.mlp_norm, h, L.gate_up, gate_up));
    if (observer_) {
      // Calibration observes the down projection's input, act(gate) * up.
      FERRY_RETURN_IF_ERROR(gelu ? be.GeluTanhMul(gate_up, mlp) : be.SiluMul(gate_up, mlp));
      FERRY_RETURN_IF_ERROR(RunLinear(static_cast<int>(l), "down", mlp, L.down, delta));
    } else {
      FERRY_RETURN_IF_ERROR(be.GatedLinear(gate_up, gelu, mlp, L.down, delta));
    }
    if (c.gemma_norms) {
      FERRY_RETURN_IF_ERROR(be.RmsNorm(delta, L.post_mlp_norm, c.rms_norm_eps, post));
      std::swap(delta, post);
    }
  }
  // Only the rows whose logits are wanted go through the final norm and the LM head.
  const int64_t n = in.logit_rows.numel();
  if (n == 0) return Tensor();
  FERRY_RETURN_IF_ERROR(be.Add(x, delta));
  FERRY_ASSIGN_OR_RETURN(Tensor rows, be.Allocate({n, H}, act));
  FERRY_RETURN_IF_ERROR(be.Embedding(x, in.logit_rows, rows));
  FERRY_ASSIGN_OR_RETURN(Tensor normed, be.Allocate({n, H}, act));
  FERRY_RETURN_IF_ERROR(be.RmsNorm(rows, final_norm_, c.rms_norm_eps, normed));
  FERRY_ASSIGN_OR_RETURN(Tensor logits, be.Allocate({n, c.vocab_size}, act));
  FERRY_RETURN_IF_ERROR(RunLinear(-1, "lm_head", normed, lm_head_, logits));
  if (c.final_logit_softcap > 0.0f) FERRY_RETURN_IF_ERROR(be.SoftCap(logits, c.final_logit_softcap));
  return logits;
}

}  // namespace ferry::model
