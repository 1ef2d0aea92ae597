#include "model/encoder.h"

#include <cmath>
#include <string>

namespace ferry::model {

namespace {

// HF BERT checkpoints come as BertModel ("embeddings.…") or with a task head ("bert.…");
// RoBERTa / XLM-RoBERTa task models use "roberta.…".
std::string DetectPrefix(const WeightSource& w) {
  if (w.has("bert.embeddings.word_embeddings.weight")) return "bert.";
  if (w.has("roberta.embeddings.word_embeddings.weight")) return "roberta.";
  return "";
}

// Old TF-converted checkpoints name LayerNorm parameters gamma/beta.
Status LoadLayerNorm(const WeightSource& w, const std::string& base, int64_t H, Tensor& gamma, Tensor& beta) {
  const bool old = !w.has(base + ".weight") && w.has(base + ".gamma");
  FERRY_ASSIGN_OR_RETURN(gamma, GetVectorF32(w, base + (old ? ".gamma" : ".weight"), H));
  FERRY_ASSIGN_OR_RETURN(beta, GetVectorF32(w, base + (old ? ".beta" : ".bias"), H));
  return Status::Ok();
}

// BertForTokenClassification and its relatives put the classifier on every token.
bool IsTokenClassifier(const io::ModelConfig& config) {
  return config.architecture.ends_with("ForTokenClassification");
}

}  // namespace

Result<std::unique_ptr<EncoderModel>> EncoderModel::Load(const io::ModelConfig& config, const WeightSource& w,
                                                         backend::Backend& be, const LoadOptions& options) {
  if (config.family != io::ModelFamily::kEncoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not an encoder");
  }
  if (config.model_type == "modernbert") return LoadModernBert(config, w, be, options);
  if (config.hidden_act != "gelu") {
    return Unimplemented("encoder activation '" + config.hidden_act + "' is not supported (only gelu)");
  }
  std::unique_ptr<EncoderModel> m(new EncoderModel(config, be));
  const std::string p = DetectPrefix(w);
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  FERRY_ASSIGN_OR_RETURN(m->word_, LoadTable(w, options, p + "embeddings.word_embeddings.weight",
                                             {config.vocab_size, H}));
  // RoBERTa's table also has the padding_idx + 1 rows below its first real position.
  FERRY_ASSIGN_OR_RETURN(m->position_, LoadTable(w, options, p + "embeddings.position_embeddings.weight",
                                                 {config.max_position_embeddings + config.position_offset, H}));
  if (config.type_vocab_size > 0) {
    FERRY_ASSIGN_OR_RETURN(m->token_type_, LoadTable(w, options, p + "embeddings.token_type_embeddings.weight",
                                                     {config.type_vocab_size, H}));
  }
  FERRY_RETURN_IF_ERROR(LoadLayerNorm(w, p + "embeddings.LayerNorm", H, m->emb_ln_gamma_, m->emb_ln_beta_));
  // A GPU copies the word table with the other weights rather than at its first use.
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->word_));

  for (int l = 0; l < config.num_layers; ++l) {
    const std::string lp = p + "encoder.layer." + std::to_string(l) + ".";
    const std::string key = "layers." + std::to_string(l) + ".";
    const std::string s = lp + "attention.self.";
    Layer layer;
    FERRY_ASSIGN_OR_RETURN(layer.qkv, LoadLinear(w, be, options, key + "qkv",
                                                 {s + "query.weight", s + "key.weight", s + "value.weight"},
                                                 {s + "query.bias", s + "key.bias", s + "value.bias"}, {H, H, H}, H));
    FERRY_ASSIGN_OR_RETURN(layer.attn_out, LoadLinear(w, be, options, key + "attn_out",
                                                      {lp + "attention.output.dense.weight"},
                                                      {lp + "attention.output.dense.bias"}, {H}, H));
    FERRY_RETURN_IF_ERROR(
        LoadLayerNorm(w, lp + "attention.output.LayerNorm", H, layer.attn_ln_gamma, layer.attn_ln_beta));
    FERRY_ASSIGN_OR_RETURN(layer.inter, LoadLinear(w, be, options, key + "inter", {lp + "intermediate.dense.weight"},
                                                   {lp + "intermediate.dense.bias"}, {I}, H));
    FERRY_ASSIGN_OR_RETURN(layer.out, LoadLinear(w, be, options, key + "out", {lp + "output.dense.weight"},
                                                 {lp + "output.dense.bias"}, {H}, I));
    FERRY_RETURN_IF_ERROR(LoadLayerNorm(w, lp + "output.LayerNorm", H, layer.out_ln_gamma, layer.out_ln_beta));
    m->layers_.push_back(std::move(layer));
  }
  if (w.has(p + "pooler.dense.weight")) {
    FERRY_ASSIGN_OR_RETURN(m->pooler_, LoadLinear(w, be, options, "pooler", {p + "pooler.dense.weight"},
                                                  {p + "pooler.dense.bias"}, {H}, H));
  }
  m->token_head_ = IsTokenClassifier(config);
  if (config.num_labels > 0 && !m->token_head_ && w.has("classifier.dense.weight") &&
      w.has("classifier.out_proj.weight")) {
    // RobertaClassificationHead: out_proj(tanh(dense(CLS row))), the shape of BERT's pooler
    // and classifier, so it runs as them (a checkpoint's own pooler, if any, is not used).
    FERRY_ASSIGN_OR_RETURN(m->pooler_, LoadLinear(w, be, options, "pooler", {"classifier.dense.weight"},
                                                  {"classifier.dense.bias"}, {H}, H));
    FERRY_ASSIGN_OR_RETURN(m->classifier_, LoadLinear(w, be, options, "classifier", {"classifier.out_proj.weight"},
                                                      {"classifier.out_proj.bias"}, {config.num_labels}, H));
    return m;
  }
  if (config.num_labels > 0 && w.has("classifier.weight")) {
    if (!m->token_head_ && !m->has_pooler()) {
      return InvalidArgument("sequence-classification head without a pooler is not supported");
    }
    FERRY_ASSIGN_OR_RETURN(m->classifier_, LoadLinear(w, be, options, "classifier", {"classifier.weight"},
                                                      {"classifier.bias"}, {config.num_labels}, H));
  }
  return m;
}

Result<std::unique_ptr<EncoderModel>> EncoderModel::LoadPrepared(const io::ModelConfig& config,
                                                                 const PreparedSource& w, backend::Backend& be) {
  if (config.family != io::ModelFamily::kEncoder) {
    return InvalidArgument("model type '" + config.model_type + "' is not an encoder");
  }
  if (config.model_type == "modernbert") return LoadPreparedModernBert(config, w, be);
  std::unique_ptr<EncoderModel> m(new EncoderModel(config, be));
  const int64_t H = config.hidden_size, I = config.intermediate_size;
  auto linear = [&](const std::string& key, int64_t out, int64_t in) { return w.Linear(key, out, in); };
  auto table = [&](const std::string& key, const Shape& shape) { return w.Table(key, shape); };
  FERRY_ASSIGN_OR_RETURN(m->word_, table("word_emb", {config.vocab_size, H}));
  FERRY_RETURN_IF_ERROR(be.PreloadWeight(m->word_));
  FERRY_ASSIGN_OR_RETURN(m->position_,
                         table("pos_emb", {config.max_position_embeddings + config.position_offset, H}));
  if (config.type_vocab_size > 0) {
    FERRY_ASSIGN_OR_RETURN(m->token_type_, table("type_emb", {config.type_vocab_size, H}));
  }
  FERRY_ASSIGN_OR_RETURN(m->emb_ln_gamma_, table("emb_ln.gamma", {H}));
  FERRY_ASSIGN_OR_RETURN(m->emb_ln_beta_, table("emb_ln.beta", {H}));
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    Layer layer;
    FERRY_ASSIGN_OR_RETURN(layer.qkv, linear(key + "qkv", 3 * H, H));
    FERRY_ASSIGN_OR_RETURN(layer.attn_out, linear(key + "attn_out", H, H));
    FERRY_ASSIGN_OR_RETURN(layer.attn_ln_gamma, table(key + "attn_ln.gamma", {H}));
    FERRY_ASSIGN_OR_RETURN(layer.attn_ln_beta, table(key + "attn_ln.beta", {H}));
    FERRY_ASSIGN_OR_RETURN(layer.inter, linear(key + "inter", I, H));
    FERRY_ASSIGN_OR_RETURN(layer.out, linear(key + "out", H, I));
    FERRY_ASSIGN_OR_RETURN(layer.out_ln_gamma, table(key + "out_ln.gamma", {H}));
    FERRY_ASSIGN_OR_RETURN(layer.out_ln_beta, table(key + "out_ln.beta", {H}));
    m->layers_.push_back(std::move(layer));
  }
  m->token_head_ = IsTokenClassifier(config);
  auto pooler = w.linear("pooler");
  if (pooler.ok()) m->pooler_ = std::move(pooler).value();
  if (pooler.ok() || m->token_head_) {
    auto classifier = w.linear("classifier");
    if (classifier.ok()) {
      m->classifier_ = std::move(classifier).value();
      if (m->classifier_.out_features() != config.num_labels || m->classifier_.in_features() != H) {
        return DataLoss("weight 'classifier' does not match the config's shape");
      }
    }
  }
  return m;
}

Status EncoderModel::Visit(const WeightVisitor& v) const {
  if (modern()) return VisitModernBert(v);
  FERRY_RETURN_IF_ERROR(v.tensor("word_emb", word_));
  FERRY_RETURN_IF_ERROR(v.tensor("pos_emb", position_));
  if (token_type_.defined()) FERRY_RETURN_IF_ERROR(v.tensor("type_emb", token_type_));
  FERRY_RETURN_IF_ERROR(v.tensor("emb_ln.gamma", emb_ln_gamma_));
  FERRY_RETURN_IF_ERROR(v.tensor("emb_ln.beta", emb_ln_beta_));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const std::string key = "layers." + std::to_string(l) + ".";
    const Layer& L = layers_[l];
    FERRY_RETURN_IF_ERROR(v.linear(key + "qkv", L.qkv));
    FERRY_RETURN_IF_ERROR(v.linear(key + "attn_out", L.attn_out));
    FERRY_RETURN_IF_ERROR(v.tensor(key + "attn_ln.gamma", L.attn_ln_gamma));
    FERRY_RETURN_IF_ERROR(v.tensor(key + "attn_ln.beta", L.attn_ln_beta));
    FERRY_RETURN_IF_ERROR(v.linear(key + "inter", L.inter));
    FERRY_RETURN_IF_ERROR(v.linear(key + "out", L.out));
    FERRY_RETURN_IF_ERROR(v.tensor(key + "out_ln.gamma", L.out_ln_gamma));
    FERRY_RETURN_IF_ERROR(v.tensor(key + "out_ln.beta", L.out_ln_beta));
  }
  if (has_pooler()) FERRY_RETURN_IF_ERROR(v.linear("pooler", pooler_));
  if (head() != EncoderHead::kNone) FERRY_RETURN_IF_ERROR(v.linear("classifier", classifier_));
  return Status::Ok();
}

Status EncoderModel::RunLinear(int layer, const char* name, const Tensor& x, const backend::LinearWeight& w,
                               Tensor& y) {
  if (observer_) observer_(layer < 0 ? std::string(name) : "layers." + std::to_string(layer) + "." + name, x);
  return backend_.Linear(x, w, y);
}

Status EncoderModel::Forward(const EncoderBatch& batch, EncoderOutput& out) {
  backend_.BindComputeThreads();
  if (modern()) return ForwardModernBert(batch, out);
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
  // The pooler reads each sequence's first row (CLS).
  std::vector<int32_t> cls_rows;
  if (has_pooler()) {
    for (const backend::SeqSpan& s : batch.spans) cls_rows.push_back(s.q_begin);
  }
  backend::StepInputs inputs;
  inputs.token_ids = batch.token_ids;
  inputs.positions = batch.positions;
  std::vector<int32_t> shifted;  // RoBERTa: real tokens count from padding_idx + 1
  if (c.position_offset > 0) {
    shifted.reserve(batch.positions.size());
    for (int32_t p : batch.positions) shifted.push_back(p + c.position_offset);
    inputs.positions = shifted;
  }
  inputs.type_ids = batch.type_ids;
  inputs.spans = batch.spans;
  inputs.logit_rows = cls_rows;
  FERRY_ASSIGN_OR_RETURN(const backend::StepTensors in, be.UploadStep(inputs));

  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const DType act = be.activation_dtype();
  FERRY_ASSIGN_OR_RETURN(Tensor x, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor tmp, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor tmp2, be.Allocate({T, H}, act));
  FERRY_RETURN_IF_ERROR(be.Embedding(word_, in.token_ids, x));
  FERRY_RETURN_IF_ERROR(be.Embedding(position_, in.positions, tmp));
  FERRY_RETURN_IF_ERROR(be.Add(x, tmp));
  if (token_type_.defined()) {
    FERRY_RETURN_IF_ERROR(be.Embedding(token_type_, in.type_ids, tmp));
    FERRY_RETURN_IF_ERROR(be.Add(x, tmp));
  }
  FERRY_RETURN_IF_ERROR(be.LayerNorm(x, Tensor(), emb_ln_gamma_, emb_ln_beta_, c.layer_norm_eps, tmp));
  std::swap(x, tmp);

  FERRY_ASSIGN_OR_RETURN(Tensor qkv, be.Allocate({T, 3 * H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor attn, be.Allocate({T, H}, act));
  FERRY_ASSIGN_OR_RETURN(Tensor inter, be.Allocate({T, I}, act));
  backend::AttentionParams ap;
  ap.num_heads = c.num_heads;
  ap.num_kv_heads = c.num_heads;
  ap.head_dim = c.head_dim;
  ap.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  ap.causal = false;
  // Where the backend fuses a LayerNorm into the linear that reads it (CUDA, 8-bit weights),
  // the norms run that way: the attention's into the FFN's first linear, the FFN's into the
  // next layer's qkv. Calibration observes every linear's input on the unfused path.
  const auto fuses = [&](const backend::LinearWeight& w) { return !observer_ && be.FusesLayerNormLinear(w); };
  bool qkv_ready = false;  // the previous layer's norm computed this layer's qkv
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const int li = static_cast<int>(l);
    if (!qkv_ready) FERRY_RETURN_IF_ERROR(RunLinear(li, "qkv", x, L.qkv, qkv));
    qkv_ready = false;
    // W8A8 layers' activations are int8 already, and a backend asked for bf16 activations rounds
    // the qkv input to bf16: their attention may multiply in bf16.
    ap.bf16_products = L.qkv.format == backend::WeightFormat::kInt8W8A8 || be.RoundsInputToBf16(L.qkv);
    FERRY_RETURN_IF_ERROR(be.DenseAttentionQkv(qkv, in.attention, ap, attn));
    FERRY_RETURN_IF_ERROR(RunLinear(li, "attn_out", attn, L.attn_out, tmp));
    if (fuses(L.inter)) {
      FERRY_RETURN_IF_ERROR(be.LayerNormLinear(tmp, x, L.attn_ln_gamma, L.attn_ln_beta, c.layer_norm_eps, tmp2,
                                               L.inter, inter));
      std::swap(x, tmp2);
      FERRY_RETURN_IF_ERROR(be.GeluLinear(inter, L.out, tmp));
    } else {
      FERRY_RETURN_IF_ERROR(be.LayerNorm(tmp, x, L.attn_ln_gamma, L.attn_ln_beta, c.layer_norm_eps, tmp2));
      std::swap(x, tmp2);
      if (observer_) {
        // Calibration observes both FFN GEMMs' inputs, x and GELU(inter).
        FERRY_RETURN_IF_ERROR(RunLinear(li, "inter", x, L.inter, inter));
        FERRY_RETURN_IF_ERROR(be.Gelu(inter));
        FERRY_RETURN_IF_ERROR(RunLinear(li, "out", inter, L.out, tmp));
      } else {
        FERRY_RETURN_IF_ERROR(be.GeluFeedForward(x, L.inter, inter, L.out, tmp));
      }
    }
    if (l + 1 < layers_.size() && fuses(layers_[l + 1].qkv)) {
      FERRY_RETURN_IF_ERROR(be.LayerNormLinear(tmp, x, L.out_ln_gamma, L.out_ln_beta, c.layer_norm_eps, tmp2,
                                               layers_[l + 1].qkv, qkv));
      qkv_ready = true;
    } else {
      FERRY_RETURN_IF_ERROR(be.LayerNorm(tmp, x, L.out_ln_gamma, L.out_ln_beta, c.layer_norm_eps, tmp2));
    }
    std::swap(x, tmp2);
  }
  out.hidden = x;
  out.pooled = Tensor();
  out.logits = Tensor();
  out.token_logits = Tensor();
  if (has_token_classifier()) {
    FERRY_ASSIGN_OR_RETURN(out.token_logits, be.Allocate({T, c.num_labels}, act));
    FERRY_RETURN_IF_ERROR(RunLinear(-1, "classifier", x, classifier_, out.token_logits));
  }
  if (has_pooler()) {
    const int64_t S = static_cast<int64_t>(batch.spans.size());
    FERRY_ASSIGN_OR_RETURN(Tensor cls, be.Allocate({S, H}, act));
    FERRY_RETURN_IF_ERROR(be.Embedding(x, in.logit_rows, cls));
    FERRY_ASSIGN_OR_RETURN(out.pooled, be.Allocate({S, H}, act));
    FERRY_RETURN_IF_ERROR(RunLinear(-1, "pooler", cls, pooler_, out.pooled));
    FERRY_RETURN_IF_ERROR(be.Tanh(out.pooled));
    if (has_classifier()) {
      FERRY_ASSIGN_OR_RETURN(out.logits, be.Allocate({S, c.num_labels}, act));
      FERRY_RETURN_IF_ERROR(RunLinear(-1, "classifier", out.pooled, classifier_, out.logits));
    }
  }
  return Status::Ok();
}

}  // namespace ferry::model
