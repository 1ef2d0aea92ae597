// ModernBERT's parts of EncoderModel: loading Hugging Face ModernBert* checkpoints and engine
// files, and the forward pass.
//
// embeddings: tok_embeddings -> norm (no position table: RoPE in every layer)
// layer l:    x += Wo(attention(rope_l(Wqkv(attn_norm(x)))))   (layer 0: no attn_norm)
//             x += mlp.Wo(act(Wi_in) * Wi_gate)  with Wi applied to mlp_norm(x)
// final_norm, then the classifier's input: the first row ("cls") or the mean of the real rows
// ("mean"), the prediction head (dense, classifier_activation, norm) and the classifier.
// Global layers attend over the whole sequence with global_rope_theta; local layers attend to
// the keys within local_attention / 2 positions on either side, with local_rope_theta.
#include <algorithm>
#include <cmath>
#include <string>

#include "model/encoder.h"

namespace ferry::model {

namespace {

// ModernBertModel checkpoints have no prefix; the task models (ForSequenceClassification,
// ForTokenClassification, ForMaskedLM) put the encoder under "model.".
std::string ModernPrefix(const WeightSource& w) {
  return w.has("model.embeddings.tok_embeddings.weight") ? "model." : "";
}

Tensor Zeros(int64_t n) {
  Tensor t = Tensor::Empty({n}, DType::kF32);
  std::fill(t.data<float>(), t.data<float>() + n, 0.0f);
  return t;
}

std::vector<std::string> BiasNames(bool has_bias, const std::string& weight_base) {
  if (!has_bias) return {};
  return {weight_base + ".bias"};
}

}  // namespace

Status EncoderModel::PrepareModernBert() {
  const io::ModelConfig& c = config_;
  const std::string& act = c.hidden_act;
  if (act != "gelu" && act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "silu" && act != "swish") {
    return Unimplemented("ModernBERT hidden_activation '" + act +
                         "' is not supported (gelu, gelu_pytorch_tanh, gelu_new, silu)");
  }
  if (c.classifier_activation != "gelu" && c.classifier_activation != "tanh") {
    return Unimplemented("ModernBERT classifier_activation '" + c.classifier_activation +
                         "' is not supported (gelu, tanh)");
  }
  if (static_cast<int>(c.layer_windows.size()) != c.num_layers ||
      static_cast<int>(c.layer_rope_thetas.size()) != c.num_layers) {
    return InvalidArgument("ModernBERT config lacks its per-layer windows and RoPE thetas");
  }
  ropes_.clear();
  for (int l = 0; l < c.num_layers; ++l) {
    ropes_.push_back(backend::MakeRopeTable(c.head_dim, c.layer_rope_thetas[static_cast<size_t>(l)], {}));
  }
  // LayerNorms without a bias run as LayerNorms with a zero one.
  const int64_t H = c.hidden_size;
  if (!emb_ln_beta_.defined()) emb_ln_beta_ = Zeros(H);
  for (Layer& L : layers_) {
    if (L.attn_ln_gamma.defined() && !L.attn_ln_beta.defined()) L.attn_ln_beta = Zeros(H);
    if (!L.out_ln_beta.defined()) L.out_ln_beta = Zeros(H);
  }
  if (!final_ln_beta_.defined()) final_ln_beta_ = Zeros(H);
  if (head_ln_gamma_.defined() && !head_ln_beta_.defined()) head_ln_beta_ = Zeros(H);
  return Status::Ok();
}

Result<std::unique_ptr<EncoderModel>> EncoderModel::LoadModernBert(const io::ModelConfig& config,
                                                                   const WeightSource& w, backend::Backend& be,
                                                                   const LoadOptions& options) {
  std::unique_ptr<EncoderModel> m(new EncoderModel(config, be));
  const std::string p = ModernPrefix(w);
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  const bool nb = config.norm_bias;
  auto norm = [&](const std::string& base, Tensor& gamma, Tensor& beta) -> Status {
    FERRY_ASSIGN_OR_RETURN(gamma, GetVectorF32(w, base + ".weight", H));
    if (nb) {
      FERRY_ASSIGN_OR_RETURN(beta, GetVectorF32(w, base + ".bias", H));
    }
    return Status::Ok();
  };
  FERRY_ASSIGN_OR_RETURN(m->word_, LoadTable(w, options, p + "embeddings.tok_embeddings.weight",
                                             {config.vocab_size, H}));
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->word_));
  FERRY_RETURN_IF_ERROR(norm(p + "embeddings.norm", m->emb_ln_gamma_, m->emb_ln_beta_));
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string lp = p + "layers." + std::to_string(l) + ".";
    const std::string key = "layers." + std::to_string(l) + ".";
    Layer layer;
    // Layer 0's attn_norm is an Identity (no weight in the checkpoint).
    if (w.has(lp + "attn_norm.weight")) {
      FERRY_RETURN_IF_ERROR(norm(lp + "attn_norm", layer.attn_ln_gamma, layer.attn_ln_beta));
    } else if (l != 0) {
      return NotFound("weight '" + lp + "attn_norm.weight' not found");
    }
    FERRY_ASSIGN_OR_RETURN(layer.qkv, LoadLinear(w, be, options, key + "qkv", {lp + "attn.Wqkv.weight"},
                                                 BiasNames(config.attention_bias, lp + "attn.Wqkv"), {3 * H}, H));
    FERRY_ASSIGN_OR_RETURN(layer.attn_out, LoadLinear(w, be, options, key + "attn_out", {lp + "attn.Wo.weight"},
                                                      BiasNames(config.attention_bias, lp + "attn.Wo"), {H}, H));
    FERRY_RETURN_IF_ERROR(norm(lp + "mlp_norm", layer.out_ln_gamma, layer.out_ln_beta));
    FERRY_ASSIGN_OR_RETURN(layer.inter, LoadLinear(w, be, options, key + "gate_up", {lp + "mlp.Wi.weight"},
                                                   BiasNames(config.mlp_bias, lp + "mlp.Wi"), {2 * I}, H));
    FERRY_ASSIGN_OR_RETURN(layer.out, LoadLinear(w, be, options, key + "down", {lp + "mlp.Wo.weight"},
                                                 BiasNames(config.mlp_bias, lp + "mlp.Wo"), {H}, I));
    m->layers_.push_back(std::move(layer));
  }
  FERRY_RETURN_IF_ERROR(norm(p + "final_norm", m->final_ln_gamma_, m->final_ln_beta_));
  m->token_head_ = config.architecture.ends_with("ForTokenClassification");
  if (config.num_labels > 0 && w.has("classifier.weight")) {
    FERRY_ASSIGN_OR_RETURN(m->head_dense_, LoadLinear(w, be, options, "head", {"head.dense.weight"},
                                                      BiasNames(config.classifier_bias, "head.dense"), {H}, H));
    FERRY_RETURN_IF_ERROR(norm("head.norm", m->head_ln_gamma_, m->head_ln_beta_));
    FERRY_ASSIGN_OR_RETURN(m->classifier_, LoadLinear(w, be, options, "classifier", {"classifier.weight"},
                                                      {"classifier.bias"}, {config.num_labels}, H));
  }
  FERRY_RETURN_IF_ERROR(m->PrepareModernBert());
  return m;
}

Result<std::unique_ptr<EncoderModel>> EncoderModel::LoadPreparedModernBert(const io::ModelConfig& config,
                                                                           const PreparedSource& w,
                                                                           backend::Backend& be) {
  std::unique_ptr<EncoderModel> m(new EncoderModel(config, be));
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  auto linear = [&](const std::string& key, int64_t out, int64_t in) { return w.Linear(key, out, in); };
  auto table = [&](const std::string& key, const Shape& shape) { return w.Table(key, shape); };
  auto norm = [&](const std::string& base, Tensor& gamma, Tensor& beta) -> Status {
    FERRY_ASSIGN_OR_RETURN(gamma, table(base + ".gamma", {H}));
    if (config.norm_bias) {
      FERRY_ASSIGN_OR_RETURN(beta, table(base + ".beta", {H}));
    }
    return Status::Ok();
  };
  FERRY_ASSIGN_OR_RETURN(m->word_, table("word_emb", {config.vocab_size, H}));
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->word_));
  FERRY_RETURN_IF_ERROR(norm("emb_ln", m->emb_ln_gamma_, m->emb_ln_beta_));
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    Layer layer;
    if (l != 0) FERRY_RETURN_IF_ERROR(norm(key + "attn_ln", layer.attn_ln_gamma, layer.attn_ln_beta));
    FERRY_ASSIGN_OR_RETURN(layer.qkv, linear(key + "qkv", 3 * H, H));
    FERRY_ASSIGN_OR_RETURN(layer.attn_out, linear(key + "attn_out", H, H));
    FERRY_RETURN_IF_ERROR(norm(key + "mlp_ln", layer.out_ln_gamma, layer.out_ln_beta));
    FERRY_ASSIGN_OR_RETURN(layer.inter, linear(key + "gate_up", 2 * I, H));
    FERRY_ASSIGN_OR_RETURN(layer.out, linear(key + "down", H, I));
    m->layers_.push_back(std::move(layer));
  }
  FERRY_RETURN_IF_ERROR(norm("final_ln", m->final_ln_gamma_, m->final_ln_beta_));
  m->token_head_ = config.architecture.ends_with("ForTokenClassification");
  auto head = w.linear("head");
  if (head.ok()) {
    FERRY_ASSIGN_OR_RETURN(m->head_dense_, linear("head", H, H));
    FERRY_RETURN_IF_ERROR(norm("head_ln", m->head_ln_gamma_, m->head_ln_beta_));
    FERRY_ASSIGN_OR_RETURN(m->classifier_, linear("classifier", config.num_labels, H));
  }
  FERRY_RETURN_IF_ERROR(m->PrepareModernBert());
  return m;
}

Status EncoderModel::VisitModernBert(const WeightVisitor& v) const {
  const bool nb = config_.norm_bias;
  auto norm = [&](const std::string& base, const Tensor& gamma, const Tensor& beta) -> Status {
    FERRY_RETURN_IF_ERROR(v.tensor(base + ".gamma", gamma));
    if (nb) FERRY_RETURN_IF_ERROR(v.tensor(base + ".beta", beta));
    return Status::Ok();
  };
  FERRY_RETURN_IF_ERROR(v.tensor("word_emb", word_));
  FERRY_RETURN_IF_ERROR(norm("emb_ln", emb_ln_gamma_, emb_ln_beta_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    const Layer& L = layers_[l];
    if (L.attn_ln_gamma.defined()) FERRY_RETURN_IF_ERROR(norm(key + "attn_ln", L.attn_ln_gamma, L.attn_ln_beta));
    FERRY_RETURN_IF_ERROR(v.linear(key + "qkv", L.qkv));
    FERRY_RETURN_IF_ERROR(v.linear(key + "attn_out", L.attn_out));
    FERRY_RETURN_IF_ERROR(norm(key + "mlp_ln", L.out_ln_gamma, L.out_ln_beta));
    FERRY_RETURN_IF_ERROR(v.linear(key + "gate_up", L.inter));
    FERRY_RETURN_IF_ERROR(v.linear(key + "down", L.out));
  }
  FERRY_RETURN_IF_ERROR(norm("final_ln", final_ln_gamma_, final_ln_beta_));
  if (head() != EncoderHead::kNone) {
    FERRY_RETURN_IF_ERROR(v.linear("head", head_dense_));
    FERRY_RETURN_IF_ERROR(norm("head_ln", head_ln_gamma_, head_ln_beta_));
    FERRY_RETURN_IF_ERROR(v.linear("classifier", classifier_));
  }
  return Status::Ok();
}

Status EncoderModel::ForwardModernBert(const EncoderBatch& batch, EncoderOutput& out) {
  backend::Backend& be = backend_;
  const io::ModelConfig& c = config_;
  const int64_t T = static_cast<int64_t>(batch.token_ids.size());
  if (T == 0) return InvalidArgument("empty batch");
  if (batch.positions.size() != static_cast<size_t>(T)) {
    return InvalidArgument("batch positions do not match its tokens");
  }
  for (int64_t i = 0; i < T; ++i) {
    if (batch.token_ids[i] < 0 || batch.token_ids[i] >= c.vocab_size) {
      return InvalidArgument("token id " + std::to_string(batch.token_ids[i]) + " is outside the vocabulary");
    }
    if (batch.positions[i] < 0 || batch.positions[i] >= c.max_position_embeddings) {
      return InvalidArgument("sequence longer than the model's " + std::to_string(c.max_position_embeddings) +
                             " positions");
    }
  }
  // token_type_ids are ignored: ModernBERT has no token type embeddings.
  backend::StepInputs inputs;
  inputs.token_ids = batch.token_ids;
  inputs.positions = batch.positions;
  inputs.spans = batch.spans;
  FERRY_ASSIGN_OR_RETURN(const backend::StepTensors in, be.UploadStep(inputs));

  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const DType act = be.activation_dtype();
  FERRY_ASSIGN_OR_RETURN(Tensor x, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor h, be.Allocate({T, H}, act));
  FERRY_RETURN_IF_ERROR(be.Embedding(word_, in.token_ids, h));
  FERRY_RETURN_IF_ERROR(be.LayerNorm(h, Tensor(), emb_ln_gamma_, emb_ln_beta_, c.layer_norm_eps, x));

  FERRY_ASSIGN_OR_RETURN(Tensor qkv, be.Allocate({T, 3 * H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor q, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor k, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor v, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor attn, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor gate_up, be.Allocate({T, 2 * I}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor inter, be.Allocate({T, I}, act));
  backend::AttentionParams ap;
  ap.num_heads = c.num_heads;
  ap.num_kv_heads = c.num_heads;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.causal = false;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const int li = static_cast<int>(l);
    const Tensor* normed = &x;
    if (L.attn_ln_gamma.defined()) {
      FERRY_RETURN_IF_ERROR(be.LayerNorm(x, Tensor(), L.attn_ln_gamma, L.attn_ln_beta, c.layer_norm_eps, h));
      normed = &h;
    }
    FERRY_RETURN_IF_ERROR(RunLinear(li, "qkv", *normed, L.qkv, qkv));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, 0, q));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, H, k));
    FERRY_RETURN_IF_ERROR(be.CopyColumns(qkv, 2 * H, v));
    FERRY_RETURN_IF_ERROR(be.Rope(q, k, c.num_heads, c.num_heads, in.positions, ropes_[l]));
    ap.window = c.layer_windows[l];
    // As in BERT: W8A8 layers' attention, and bf16 activations', may multiply in bf16 (global
    // layers; local ones keep f32).
    ap.bf16_products = L.qkv.format == backend::WeightFormat::kInt8W8A8 || be.RoundsInputToBf16(L.qkv);
    FERRY_RETURN_IF_ERROR(be.DenseAttention(q, k, v, in.attention, ap, attn));
    FERRY_RETURN_IF_ERROR(RunLinear(li, "attn_out", attn, L.attn_out, h));
    FERRY_RETURN_IF_ERROR(be.Add(x, h));
    FERRY_RETURN_IF_ERROR(be.LayerNorm(x, Tensor(), L.out_ln_gamma, L.out_ln_beta, c.layer_norm_eps, h));
    FERRY_RETURN_IF_ERROR(RunLinear(li, "gate_up", h, L.inter, gate_up));
    if (c.hidden_act == "gelu") {
      FERRY_RETURN_IF_ERROR(be.GeluMul(gate_up, inter));
    } else if (c.hidden_act == "silu" || c.hidden_act == "swish") {
      FERRY_RETURN_IF_ERROR(be.SiluMul(gate_up, inter));
    } else {
      FERRY_RETURN_IF_ERROR(be.GeluTanhMul(gate_up, inter));
    }
    FERRY_RETURN_IF_ERROR(RunLinear(li, "down", inter, L.out, h));
    FERRY_RETURN_IF_ERROR(be.Add(x, h));
  }
  FERRY_RETURN_IF_ERROR(be.LayerNorm(x, Tensor(), final_ln_gamma_, final_ln_beta_, c.layer_norm_eps, h));
  std::swap(x, h);
  out.hidden = x;
  out.pooled = Tensor();
  out.logits = Tensor();
  out.token_logits = Tensor();
  if (head() == EncoderHead::kNone) return Status::Ok();

  // The prediction head and the classifier, on every row or on each sequence's pooled row.
  Tensor rows = x;
  if (!token_head_) {
    const int64_t S = static_cast<int64_t>(batch.spans.size());
    FERRY_ASSIGN_OR_RETURN(rows, be.Allocate({S, H}, act));
    const backend::PoolMode mode = c.classifier_pooling == "mean" ? backend::PoolMode::kMean : backend::PoolMode::kFirst;
    FERRY_RETURN_IF_ERROR(be.PoolRows(x, in.attention, mode, rows));
  }
  const int64_t R = rows.dim(0);
  FERRY_ASSIGN_OR_RETURN(Tensor dense, be.Allocate({R, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor normed, be.Allocate({R, H}, act));
  FERRY_RETURN_IF_ERROR(RunLinear(-1, "head", rows, head_dense_, dense));
  if (c.classifier_activation == "tanh") {
    FERRY_RETURN_IF_ERROR(be.Tanh(dense));
  } else {
    FERRY_RETURN_IF_ERROR(be.Gelu(dense));
  }
  FERRY_RETURN_IF_ERROR(be.LayerNorm(dense, Tensor(), head_ln_gamma_, head_ln_beta_, c.layer_norm_eps, normed));
  FERRY_ASSIGN_OR_RETURN(Tensor logits, be.Allocate({R, c.num_labels}, act));
  FERRY_RETURN_IF_ERROR(RunLinear(-1, "classifier", normed, classifier_, logits));
  (token_head_ ? out.token_logits : out.logits) = logits;
  return Status::Ok();
}

}  // namespace ferry::model
