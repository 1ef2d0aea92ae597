#include "model/decoder.h"

#include <cmath>
#include <string>

#include "core/logging.h"

namespace ferry::model {

namespace {

backend::RopeScalingParams ToRopeParams(const io::RopeScaling& s) {
  backend::RopeScalingParams p;
  switch (s.type) {
    case io::RopeScaling::Type::kNone: p.type = backend::RopeScalingParams::Type::kNone; break;
    case io::RopeScaling::Type::kLinear: p.type = backend::RopeScalingParams::Type::kLinear; break;
    case io::RopeScaling::Type::kLlama3: p.type = backend::RopeScalingParams::Type::kLlama3; break;
  }
  p.factor = s.factor;
  p.low_freq_factor = s.low_freq_factor;
  p.high_freq_factor = s.high_freq_factor;
  p.original_max_position = s.original_max_position;
  return p;
}

}  // namespace

Result<std::unique_ptr<DecoderModel>> DecoderModel::Load(const io::ModelConfig& config, const WeightSource& w,
                                                         backend::Backend& be) {
  if (config.family != io::ModelFamily::kDecoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not a decoder");
  }
  if (config.hidden_act != "silu") {
    return Unimplemented("decoder activation '" + config.hidden_act + "' is not supported (only silu)");
  }
  if (config.sliding_window.has_value()) {
    FERRY_LOG_WARN("sliding_window={} is ignored: ferry runs full attention (exact up to the window size)",
                   *config.sliding_window);
  }
  std::unique_ptr<DecoderModel> m(new DecoderModel(config, be));
  const int64_t H = config.hidden_size, I = config.intermediate_size, V = config.vocab_size;
  const int64_t hd = config.head_dim, nh = config.num_heads, nkv = config.num_kv_heads;

  FERRY_ASSIGN_OR_RETURN(m->embed_, GetWeight(w, "model.embed_tokens.weight", {V, H}));
  size_t bytes = 0;
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer layer;
    FERRY_ASSIGN_OR_RETURN(layer.attn_norm, GetVectorF32(w, p + "input_layernorm.weight", H));
    FERRY_ASSIGN_OR_RETURN(layer.mlp_norm, GetVectorF32(w, p + "post_attention_layernorm.weight", H));

    FERRY_ASSIGN_OR_RETURN(Tensor wq, GetWeight(w, p + "self_attn.q_proj.weight", {nh * hd, H}));
    FERRY_ASSIGN_OR_RETURN(Tensor wk, GetWeight(w, p + "self_attn.k_proj.weight", {nkv * hd, H}));
    FERRY_ASSIGN_OR_RETURN(Tensor wv, GetWeight(w, p + "self_attn.v_proj.weight", {nkv * hd, H}));
    FERRY_ASSIGN_OR_RETURN(layer.qkv.weight, ConcatRows({wq, wk, wv}));
    if (config.attention_bias) {
      FERRY_ASSIGN_OR_RETURN(Tensor bq, GetVectorF32(w, p + "self_attn.q_proj.bias", nh * hd));
      FERRY_ASSIGN_OR_RETURN(Tensor bk, GetVectorF32(w, p + "self_attn.k_proj.bias", nkv * hd));
      FERRY_ASSIGN_OR_RETURN(Tensor bv, GetVectorF32(w, p + "self_attn.v_proj.bias", nkv * hd));
      layer.qkv.bias = ConcatVectors({bq, bk, bv});
    }
    FERRY_RETURN_IF_ERROR(be.PrepareLinear(layer.qkv));
    FERRY_ASSIGN_OR_RETURN(layer.o, LoadLinear(w, be, p + "self_attn.o_proj.weight",
                                               config.attention_bias && w.has(p + "self_attn.o_proj.bias")
                                                   ? p + "self_attn.o_proj.bias" : "",
                                               H, nh * hd));

    FERRY_ASSIGN_OR_RETURN(Tensor wg, GetWeight(w, p + "mlp.gate_proj.weight", {I, H}));
    FERRY_ASSIGN_OR_RETURN(Tensor wu, GetWeight(w, p + "mlp.up_proj.weight", {I, H}));
    FERRY_ASSIGN_OR_RETURN(layer.gate_up.weight, ConcatRows({wg, wu}));
    if (config.mlp_bias) {
      FERRY_ASSIGN_OR_RETURN(Tensor bg, GetVectorF32(w, p + "mlp.gate_proj.bias", I));
      FERRY_ASSIGN_OR_RETURN(Tensor bu, GetVectorF32(w, p + "mlp.up_proj.bias", I));
      layer.gate_up.bias = ConcatVectors({bg, bu});
    }
    FERRY_RETURN_IF_ERROR(be.PrepareLinear(layer.gate_up));
    FERRY_ASSIGN_OR_RETURN(layer.down, LoadLinear(w, be, p + "mlp.down_proj.weight",
                                                  config.mlp_bias ? p + "mlp.down_proj.bias" : "", H, I));
    bytes += layer.qkv.weight.nbytes() + layer.o.weight.nbytes() + layer.gate_up.weight.nbytes() +
             layer.down.weight.nbytes();
    m->layers_.push_back(std::move(layer));
  }
  FERRY_ASSIGN_OR_RETURN(m->final_norm_, GetVectorF32(w, "model.norm.weight", H));
  if (config.tie_word_embeddings || !w.has("lm_head.weight")) {
    if (!config.tie_word_embeddings) {
      return InvalidArgument("checkpoint has no 'lm_head.weight' and the config does not tie word embeddings");
    }
    m->lm_head_.weight = m->embed_;
    FERRY_RETURN_IF_ERROR(be.PrepareLinear(m->lm_head_));
  } else {
    FERRY_ASSIGN_OR_RETURN(m->lm_head_, LoadLinear(w, be, "lm_head.weight", "", V, H));
  }
  bytes += m->lm_head_.weight.nbytes();
  m->weight_bytes_ = bytes;
  m->rope_ = backend::MakeRopeTable(static_cast<int>(hd), config.rope_theta, ToRopeParams(config.rope_scaling));
  return m;
}

Status DecoderModel::Forward(const DecoderBatch& batch, std::vector<backend::KvLayer>& kv, Tensor& logits) {
  backend::Backend& be = backend_;
  const io::ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  if (T == 0) return InvalidArgument("empty batch");
  if (batch.positions.size() != static_cast<size_t>(T) || batch.slots.size() != static_cast<size_t>(T)) {
    return InvalidArgument("batch positions/slots do not match its tokens");
  }
  if (kv.size() != layers_.size()) return InvalidArgument("KV cache has the wrong number of layers");
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(c.vocab_size) + ")");
    }
  }
  for (int32_t r : batch.logit_rows) {
    if (r < 0 || r >= T) return InvalidArgument("logit row " + std::to_string(r) + " outside the batch");
  }
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  const int64_t q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd;
  const DType act = DType::kF32;

  Tensor x = be.Allocate({T, H}, act);       // residual stream
  Tensor h = be.Allocate({T, H}, act);       // normalised input of a block
  Tensor delta = be.Allocate({T, H}, act);   // block output, added to x by the next fused norm
  Tensor qkv = be.Allocate({T, q_dim + 2 * kv_dim}, act);
  Tensor q = be.Allocate({T, q_dim}, act);
  Tensor k = be.Allocate({T, kv_dim}, act);
  Tensor v = be.Allocate({T, kv_dim}, act);
  Tensor attn = be.Allocate({T, q_dim}, act);
  Tensor gate_up = be.Allocate({T, 2 * I}, act);
  Tensor mlp = be.Allocate({T, I}, act);

  backend::AttentionParams ap;
  ap.num_heads = c.num_heads;
  ap.num_kv_heads = c.num_kv_heads;
  ap.head_dim = static_cast<int>(hd);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ap.causal = true;

  FERRY_RETURN_IF_ERROR(be.Embedding(embed_, batch.token_ids.data(), T, x));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    if (l == 0) {
      FERRY_RETURN_IF_ERROR(be.RmsNorm(x, L.attn_norm, c.rms_norm_eps, h));
    } else {
      FERRY_RETURN_IF_ERROR(be.AddRmsNorm(x, delta, L.attn_norm, c.rms_norm_eps, h));
    }
    FERRY_RETURN_IF_ERROR(be.Linear(h, L.qkv, qkv));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, 0, q));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, q_dim, k));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, q_dim + kv_dim, v));
    FERRY_RETURN_IF_ERROR(be.Rope(q, k, c.num_heads, c.num_kv_heads, batch.positions.data(), rope_));
    FERRY_RETURN_IF_ERROR(be.WriteKv(k, v, batch.slots.data(), kv[l]));
    FERRY_RETURN_IF_ERROR(be.PagedAttention(q, kv[l], batch.spans, ap, attn));
    FERRY_RETURN_IF_ERROR(be.Linear(attn, L.o, delta));
    FERRY_RETURN_IF_ERROR(be.AddRmsNorm(x, delta, L.mlp_norm, c.rms_norm_eps, h));
    FERRY_RETURN_IF_ERROR(be.Linear(h, L.gate_up, gate_up));
    FERRY_RETURN_IF_ERROR(be.SiluMul(gate_up, mlp));
    FERRY_RETURN_IF_ERROR(be.Linear(mlp, L.down, delta));
  }
  // Only the rows whose logits are wanted go through the final norm and the LM head.
  const int64_t n = static_cast<int64_t>(batch.logit_rows.size());
  if (n == 0) return Status::Ok();
  FERRY_RETURN_IF_ERROR(be.Add(x, delta));
  Tensor rows = be.Allocate({n, H}, act);
  FERRY_RETURN_IF_ERROR(be.Embedding(x, batch.logit_rows.data(), n, rows));
  Tensor normed = be.Allocate({n, H}, act);
  FERRY_RETURN_IF_ERROR(be.RmsNorm(rows, final_norm_, c.rms_norm_eps, normed));
  if (!logits.defined() || logits.shape() != Shape{n, c.vocab_size}) logits = be.Allocate({n, c.vocab_size}, act);
  return be.Linear(normed, lm_head_, logits);
}

}  // namespace ferry::model
