#include "model/encoder.h"

#include <cmath>
#include <string>

namespace ferry::model {

namespace {

// HF BERT checkpoints come as BertModel ("embeddings.…") or with a task head ("bert.…").
std::string DetectPrefix(const WeightSource& w) {
  if (w.has("bert.embeddings.word_embeddings.weight")) return "bert.";
  return "";
}

// Old TF-converted checkpoints name LayerNorm parameters gamma/beta.
Status LoadLayerNorm(const WeightSource& w, const std::string& base, int64_t H, Tensor& gamma, Tensor& beta) {
  const bool old = !w.has(base + ".weight") && w.has(base + ".gamma");
  FERRY_ASSIGN_OR_RETURN(gamma, GetVectorF32(w, base + (old ? ".gamma" : ".weight"), H));
  FERRY_ASSIGN_OR_RETURN(beta, GetVectorF32(w, base + (old ? ".beta" : ".bias"), H));
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<EncoderModel>> EncoderModel::Load(const io::ModelConfig& config, const WeightSource& w,
                                                         backend::Backend& be) {
  if (config.family != io::ModelFamily::kEncoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not an encoder");
  }
  if (config.hidden_act != "gelu") {
    return Unimplemented("encoder activation '" + config.hidden_act + "' is not supported (only gelu)");
  }
  std::unique_ptr<EncoderModel> m(new EncoderModel(config, be));
  const std::string p = DetectPrefix(w);
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  FERRY_ASSIGN_OR_RETURN(m->word_, GetWeight(w, p + "embeddings.word_embeddings.weight", {config.vocab_size, H}));
  FERRY_ASSIGN_OR_RETURN(m->position_, GetWeight(w, p + "embeddings.position_embeddings.weight",
                                                 {config.max_position_embeddings, H}));
  if (config.type_vocab_size > 0) {
    FERRY_ASSIGN_OR_RETURN(m->token_type_, GetWeight(w, p + "embeddings.token_type_embeddings.weight",
                                                     {config.type_vocab_size, H}));
  }
  FERRY_RETURN_IF_ERROR(LoadLayerNorm(w, p + "embeddings.LayerNorm", H, m->emb_ln_gamma_, m->emb_ln_beta_));

  for (int l = 0; l < config.num_layers; ++l) {
    const std::string lp = p + "encoder.layer." + std::to_string(l) + ".";
    Layer layer;
    std::vector<Tensor> ws, bs;
    for (const char* name : {"query", "key", "value"}) {
      FERRY_ASSIGN_OR_RETURN(Tensor t, GetWeight(w, lp + "attention.self." + name + ".weight", {H, H}));
      FERRY_ASSIGN_OR_RETURN(Tensor b, GetVectorF32(w, lp + "attention.self." + name + ".bias", H));
      ws.push_back(t);
      bs.push_back(b);
    }
    FERRY_ASSIGN_OR_RETURN(layer.qkv.weight, ConcatRows(ws));
    layer.qkv.bias = ConcatVectors(bs);
    FERRY_RETURN_IF_ERROR(be.PrepareLinear(layer.qkv));
    FERRY_ASSIGN_OR_RETURN(layer.attn_out, LoadLinear(w, be, lp + "attention.output.dense.weight",
                                                      lp + "attention.output.dense.bias", H, H));
    FERRY_RETURN_IF_ERROR(
        LoadLayerNorm(w, lp + "attention.output.LayerNorm", H, layer.attn_ln_gamma, layer.attn_ln_beta));
    FERRY_ASSIGN_OR_RETURN(layer.inter, LoadLinear(w, be, lp + "intermediate.dense.weight",
                                                   lp + "intermediate.dense.bias", I, H));
    FERRY_ASSIGN_OR_RETURN(layer.out, LoadLinear(w, be, lp + "output.dense.weight", lp + "output.dense.bias", H, I));
    FERRY_RETURN_IF_ERROR(LoadLayerNorm(w, lp + "output.LayerNorm", H, layer.out_ln_gamma, layer.out_ln_beta));
    m->layers_.push_back(std::move(layer));
  }
  if (w.has(p + "pooler.dense.weight")) {
    FERRY_ASSIGN_OR_RETURN(m->pooler_, LoadLinear(w, be, p + "pooler.dense.weight", p + "pooler.dense.bias", H, H));
  }
  if (config.num_labels > 0 && w.has("classifier.weight")) {
    if (!m->has_pooler()) return InvalidArgument("classification head without a pooler is not supported");
    FERRY_ASSIGN_OR_RETURN(m->classifier_, LoadLinear(w, be, "classifier.weight", "classifier.bias",
                                                      config.num_labels, H));
  }
  return m;
}

Status EncoderModel::Forward(const EncoderBatch& batch, EncoderOutput& out) {
  backend::Backend& be = backend_;
  const io::ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  if (T == 0) return InvalidArgument("empty batch");
  if (batch.type_ids.size() != static_cast<size_t>(T) || batch.positions.size() != static_cast<size_t>(T)) {
    return InvalidArgument("batch type_ids/positions do not match its tokens");
  }
  for (int64_t i = 0; i < T; ++i) {
    if (batch.token_ids[i] < 0 || batch.token_ids[i] >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(batch.token_ids[i]) + " is outside the vocabulary");
    }
    if (batch.positions[i] < 0 || batch.positions[i] >= c.max_position_embeddings) {
      return InvalidArgument("sequence longer than the model's " + std::to_string(c.max_position_embeddings) +
                             " positions");
    }
    const int type_limit = std::max(c.type_vocab_size, 1);
    if (batch.type_ids[i] < 0 || batch.type_ids[i] >= type_limit) {
      return InvalidArgument("token type id " + std::to_string(batch.type_ids[i]) + " out of range");
    }
  }
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const DType act = DType::kF32;
  Tensor x = be.Allocate({T, H}, act);
  Tensor tmp = be.Allocate({T, H}, act);
  Tensor tmp2 = be.Allocate({T, H}, act);
  FERRY_RETURN_IF_ERROR(be.Embedding(word_, batch.token_ids.data(), T, x));
  FERRY_RETURN_IF_ERROR(be.Embedding(position_, batch.positions.data(), T, tmp));
  FERRY_RETURN_IF_ERROR(be.Add(x, tmp));
  if (token_type_.defined()) {
    FERRY_RETURN_IF_ERROR(be.Embedding(token_type_, batch.type_ids.data(), T, tmp));
    FERRY_RETURN_IF_ERROR(be.Add(x, tmp));
  }
  FERRY_RETURN_IF_ERROR(be.LayerNorm(x, Tensor(), emb_ln_gamma_, emb_ln_beta_, c.layer_norm_eps, tmp));
  std::swap(x, tmp);

  Tensor qkv = be.Allocate({T, 3 * H}, act);
  Tensor q = be.Allocate({T, H}, act), k = be.Allocate({T, H}, act), v = be.Allocate({T, H}, act);
  Tensor attn = be.Allocate({T, H}, act);
  Tensor inter = be.Allocate({T, I}, act);
  backend::AttentionParams ap;
  ap.num_heads = c.num_heads;
  ap.num_kv_heads = c.num_heads;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.causal = false;
  for (const Layer& L : layers_) {
    FERRY_RETURN_IF_ERROR(be.Linear(x, L.qkv, qkv));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, 0, q));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, H, k));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, 2 * H, v));
    FERRY_RETURN_IF_ERROR(be.DenseAttention(q, k, v, batch.spans, ap, attn));
    FERRY_RETURN_IF_ERROR(be.Linear(attn, L.attn_out, tmp));
    FERRY_RETURN_IF_ERROR(be.LayerNorm(tmp, x, L.attn_ln_gamma, L.attn_ln_beta, c.layer_norm_eps, tmp2));
    std::swap(x, tmp2);
    FERRY_RETURN_IF_ERROR(be.Linear(x, L.inter, inter));
    FERRY_RETURN_IF_ERROR(be.Gelu(inter));
    FERRY_RETURN_IF_ERROR(be.Linear(inter, L.out, tmp));
    FERRY_RETURN_IF_ERROR(be.LayerNorm(tmp, x, L.out_ln_gamma, L.out_ln_beta, c.layer_norm_eps, tmp2));
    std::swap(x, tmp2);
  }
  out.hidden = x;
  out.pooled = Tensor();
  out.logits = Tensor();
  if (has_pooler()) {
    const int64_t S = static_cast<int64_t>(batch.spans.size());
    std::vector<int32_t> cls_rows(S);
    for (int64_t s = 0; s < S; ++s) cls_rows[s] = batch.spans[s].q_begin;
    Tensor cls = be.Allocate({S, H}, act);
    FERRY_RETURN_IF_ERROR(be.Embedding(x, cls_rows.data(), S, cls));
    out.pooled = be.Allocate({S, H}, act);
    FERRY_RETURN_IF_ERROR(be.Linear(cls, pooler_, out.pooled));
    FERRY_RETURN_IF_ERROR(be.Tanh(out.pooled));
    if (has_classifier()) {
      out.logits = be.Allocate({S, c.num_labels}, act);
      FERRY_RETURN_IF_ERROR(be.Linear(out.pooled, classifier_, out.logits));
    }
  }
  return Status::Ok();
}

}  // namespace ferry::model
