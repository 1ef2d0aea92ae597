// Encoder transformers (BERT family): post-LN blocks, pooler, and a sequence-classification
// (ForSequenceClassification) or token-classification (ForTokenClassification) head, written
// once against backend::Backend.
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

  io::ModelConfig config_;
  backend::Backend& backend_;
  Tensor word_, position_, token_type_;
  Tensor emb_ln_gamma_, emb_ln_beta_;
  std::vector<Layer> layers_;
  backend::LinearWeight pooler_;
  backend::LinearWeight classifier_;
  bool token_head_ = false;  // the classifier reads every row, not the pooled CLS row
  LinearInputObserver observer_;
};

}  // namespace ferry::model
