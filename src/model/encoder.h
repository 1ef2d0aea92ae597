// Encoder transformers, written once against backend::Backend: the BERT family (post-LN
// blocks, position tables, pooler) and ModernBERT (pre-LN blocks, RoPE with a theta per layer,
// local layers attending within a window, GeGLU MLP, final norm and a prediction head; its
// parts live in encoder_modernbert.cc), with a sequence-classification
// (ForSequenceClassification) or token-classification (ForTokenClassification) head.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/model_config.h"
#include "model/weights.h"

namespace ferry::model {

// Several sequences packed back to back, no padding: spans[i].q_begin/q_len give rows.
struct EncoderBatch {
  std::vector<int32_t> token_ids;       // [T]
  std::vector<int32_t> type_ids;        // [T] token_type_ids (0 when the model has none)
  std::vector<int32_t> positions;       // [T] position within its sequence
  std::vector<backend::SeqSpan> spans;  // one per sequence
};

struct EncoderOutput {
  Tensor hidden;        // [T, H] last hidden state
  Tensor pooled;        // [S, H] pooler output (tanh(dense(CLS))); undefined when the model has no pooler
  Tensor logits;        // [S, num_labels]; undefined without a sequence-classification head
  Tensor token_logits;  // [T, num_labels]; undefined without a token-classification head
};

// What sits on top of the encoder.
enum class EncoderHead {
  kNone,      // hidden states only (embeddings)
  kSequence,  // pooler + linear over the CLS row (BertForSequenceClassification)
  kToken,     // linear over every row (BertForTokenClassification)
};

// Immutable after Load; Forward is thread-compatible.
class EncoderModel {
 public:
  static Result<std::unique_ptr<EncoderModel>> Load(const io::ModelConfig& config, const WeightSource& weights,
                                                    backend::Backend& backend, const LoadOptions& options = {});
  static Result<std::unique_ptr<EncoderModel>> LoadPrepared(const io::ModelConfig& config,
                                                            const PreparedSource& weights, backend::Backend& backend);
  // Keys: "word_emb", "pos_emb", "type_emb", "emb_ln.{gamma,beta}", "layers.N.{qkv, attn_out,
  // attn_ln.gamma, attn_ln.beta, inter, out, out_ln.gamma, out_ln.beta}", "pooler", "classifier".
  // ModernBERT: "word_emb", "emb_ln.gamma", "layers.N.{attn_ln.gamma (not layer 0), qkv,
  // attn_out, mlp_ln.gamma, gate_up, down}", "final_ln.gamma", "head", "head_ln.gamma",
  // "classifier" (and the norms' ".beta" when the config has norm_bias).
  Status Visit(const WeightVisitor& visitor) const;
  void SetLinearInputObserver(LinearInputObserver observer) { observer_ = std::move(observer); }
  Status Forward(const EncoderBatch& batch, EncoderOutput& out);

  const io::ModelConfig& config() const { return config_; }
  bool has_pooler() const { return pooler_.out_features() > 0 && (pooler_.packed || pooler_.weight.defined()); }
  // A sequence-classification head.
  bool has_classifier() const { return head() == EncoderHead::kSequence; }
  bool has_token_classifier() const { return head() == EncoderHead::kToken; }
  EncoderHead head() const {
    if (classifier_.out_features() <= 0 || (!classifier_.packed && !classifier_.weight.defined())) {
      return EncoderHead::kNone;
    }
    return token_head_ ? EncoderHead::kToken : EncoderHead::kSequence;
  }

 private:
  // BERT: post-LN, attn_ln after attention and out_ln after the MLP. ModernBERT: pre-LN,
  // attn_ln before attention (undefined: identity, its layer 0), out_ln before the MLP, inter
  // is Wi [2I, H] (GeGLU input then gate), out is the MLP's Wo.
  struct Layer {
    backend::LinearWeight qkv;  // [3H, H] + bias
    backend::LinearWeight attn_out;
    Tensor attn_ln_gamma, attn_ln_beta;
    backend::LinearWeight inter;
    backend::LinearWeight out;
    Tensor out_ln_gamma, out_ln_beta;
  };
  EncoderModel(io::ModelConfig config, backend::Backend& backend) : config_(std::move(config)), backend_(backend) {}
  Status RunLinear(int layer, const char* name, const Tensor& x, const backend::LinearWeight& w, Tensor& y);

  // ModernBERT (encoder_modernbert.cc).
  bool modern() const { return config_.model_type == "modernbert"; }
  static Result<std::unique_ptr<EncoderModel>> LoadModernBert(const io::ModelConfig& config, const WeightSource& w,
                                                              backend::Backend& be, const LoadOptions& options);
  static Result<std::unique_ptr<EncoderModel>> LoadPreparedModernBert(const io::ModelConfig& config,
                                                                      const PreparedSource& w, backend::Backend& be);
  Status PrepareModernBert();  // RoPE tables, zero betas, activation checks
  Status VisitModernBert(const WeightVisitor& visitor) const;
  Status ForwardModernBert(const EncoderBatch& batch, EncoderOutput& out);

  io::ModelConfig config_;
  backend::Backend& backend_;
  Tensor word_, position_, token_type_;
  Tensor emb_ln_gamma_, emb_ln_beta_;
  std::vector<Layer> layers_;
  backend::LinearWeight pooler_;
  backend::LinearWeight classifier_;
  bool token_head_ = false;  // the classifier reads every row, not the pooled CLS row
  // ModernBERT only.
  Tensor final_ln_gamma_, final_ln_beta_;
  backend::LinearWeight head_dense_;  // the prediction head: dense, activation, norm
  Tensor head_ln_gamma_, head_ln_beta_;
  std::vector<backend::RopeTable> ropes_;  // per layer (its theta)
  LinearInputObserver observer_;
};

}  // namespace ferry::model
