#include "io/model_config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>

#include "core/mapped_file.h"
#include "core/json_limits.h"

namespace ferry::io {

namespace {

using json = nlohmann::json;

constexpr const char* kSupported =
    "llama, mistral, qwen2, qwen3, gemma2, phi3, bert, roberta, xlm-roberta, modernbert";

// Typed, checked access to the fields of one JSON object. Absent and null fields read as
// "not set", as transformers treats them; a field of the wrong type is an error naming
// it, never a silent default.
class Fields {
 public:
  // `prefix` names the enclosing object in messages, e.g. "rope_scaling.".
  Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  std::string Label(const std::string& key) const { return "'" + prefix_ + key + "'"; }

  bool Has(const std::string& key) const { return Find(key) != nullptr; }

  const json* Find(const std::string& key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  Result<std::optional<int64_t>> OptionalInt64(const std::string& key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<int64_t>();
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return InvalidArgument("field " + Label(key) + " is out of range: " + JsonSnippet(*v));
      }
      return std::optional<int64_t>(v->get<int64_t>());
    }
    // Some exporters write integral values as floats (4096.0).
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && std::trunc(d) == d && std::fabs(d) < 9.0e15) {
        return std::optional<int64_t>(static_cast<int64_t>(d));
      }
    }
    return InvalidArgument("field " + Label(key) + " must be an integer, got " + JsonSnippet(*v));
  }

  Result<std::optional<int>> OptionalInt(const std::string& key) const {
    FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> v, OptionalInt64(key));
    if (!v) return std::optional<int>();
    if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
      return InvalidArgument("field " + Label(key) + " is out of range: " + std::to_string(*v));
    }
    return std::optional<int>(static_cast<int>(*v));
  }

  Result<int> RequiredInt(const std::string& key) const {
    FERRY_ASSIGN_OR_RETURN(std::optional<int> v, OptionalInt(key));
    if (!v) return InvalidArgument("missing required field " + Label(key));
    return *v;
  }

  Result<int> Int(const std::string& key, int default_value) const {
    FERRY_ASSIGN_OR_RETURN(std::optional<int> v, OptionalInt(key));
    return v.value_or(default_value);
  }

  Result<std::optional<double>> OptionalFloat(const std::string& key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<double>();
    if (!v->is_number()) return InvalidArgument("field " + Label(key) + " must be a number, got " + JsonSnippet(*v));
    return std::optional<double>(v->get<double>());
  }

  Result<float> RequiredFloat(const std::string& key) const {
    FERRY_ASSIGN_OR_RETURN(std::optional<double> v, OptionalFloat(key));
    if (!v) return InvalidArgument("missing required field " + Label(key));
    return static_cast<float>(*v);
  }

  Result<float> Float(const std::string& key, float default_value) const {
    FERRY_ASSIGN_OR_RETURN(std::optional<double> v, OptionalFloat(key));
    return v ? static_cast<float>(*v) : default_value;
  }

  Result<bool> Bool(const std::string& key, bool default_value) const {
    const json* v = Find(key);
    if (v == nullptr) return default_value;
    if (!v->is_boolean()) {
      return InvalidArgument("field " + Label(key) + " must be true or false, got " + JsonSnippet(*v));
    }
    return v->get<bool>();
  }

  Result<std::optional<std::string>> OptionalString(const std::string& key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<std::string>();
    if (!v->is_string()) return InvalidArgument("field " + Label(key) + " must be a string, got " + JsonSnippet(*v));
    return std::optional<std::string>(v->get<std::string>());
  }

  // bos/eos ids are an int or a list of ints (Llama 3.1 lists several eos ids).
  Result<std::optional<std::vector<int>>> OptionalTokenIds(const std::string& key) const {
    const json* v = Find(key);
    if (v == nullptr) return std::optional<std::vector<int>>();
    std::vector<int> ids;
    const auto add = [&](const json& id) -> Status {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int>::max()) {
        return InvalidArgument("field " + Label(key) + " must hold non-negative token ids, got " + JsonSnippet(*v));
      }
      ids.push_back(static_cast<int>(id.get<int64_t>()));
      return Status::Ok();
    };
    if (v->is_array()) {
      for (const json& id : *v) FERRY_RETURN_IF_ERROR(add(id));
    } else {
      FERRY_RETURN_IF_ERROR(add(*v));
    }
    return std::optional<std::vector<int>>(std::move(ids));
  }

 private:
  const json& obj_;
  std::string prefix_;
};

Status ParseQuantization(const Fields& f, QuantizationConfig* q);

Result<ModelFamily> FamilyOf(const std::string& model_type) {
  if (model_type == "llama" || model_type == "mistral" || model_type == "qwen2" || model_type == "qwen3" ||
      model_type == "gemma2" || model_type == "phi3") {
    return ModelFamily::kDecoder;
  }
  if (model_type == "bert" || model_type == "roberta" || model_type == "xlm-roberta" || model_type == "modernbert") {
    return ModelFamily::kEncoder;
  }
  if (model_type == "gemma" || model_type == "gemma3" || model_type == "gemma3_text") {
    return Unimplemented("model type '" + model_type + "' is not implemented yet (supported: " + kSupported + ")");
  }
  return InvalidArgument("unsupported architecture '" + model_type + "' (supported: " + kSupported + ")");
}

// One RoPE scaling object: "rope_scaling" (transformers 4) or "rope_parameters"
// (transformers 5, which also carries rope_theta there).
Status ParseRopeScaling(const json& obj, const std::string& field, RopeScaling* out) {
  *out = RopeScaling();
  if (obj.is_null()) return Status::Ok();
  if (!obj.is_object()) {
    return InvalidArgument("field '" + field + "' must be an object or null, got " + JsonSnippet(obj));
  }
  const Fields f(obj, field + ".");
  // Older configs spell the key "type"; transformers 5 always writes "rope_type".
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> type, f.OptionalString("rope_type"));
  if (!type) {
    FERRY_ASSIGN_OR_RETURN(type, f.OptionalString("type"));
  }
  if (!type) {
    // rope_parameters may hold only rope_theta; a rope_scaling object without a type
    // would have its factor silently ignored, so that is an error.
    if (field == "rope_parameters") return Status::Ok();
    return InvalidArgument("field '" + field + "' has no 'rope_type' (or 'type')");
  }
  if (*type == "default") return Status::Ok();
  if (*type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    FERRY_ASSIGN_OR_RETURN(out->factor, f.RequiredFloat("factor"));
  } else if (*type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
    FERRY_ASSIGN_OR_RETURN(out->factor, f.RequiredFloat("factor"));
    FERRY_ASSIGN_OR_RETURN(out->low_freq_factor, f.RequiredFloat("low_freq_factor"));
    FERRY_ASSIGN_OR_RETURN(out->high_freq_factor, f.RequiredFloat("high_freq_factor"));
    FERRY_ASSIGN_OR_RETURN(out->original_max_position, f.RequiredInt("original_max_position_embeddings"));
    if (out->low_freq_factor <= 0.0f || out->high_freq_factor <= out->low_freq_factor) {
      return InvalidArgument(field + ": llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got " +
                             std::to_string(out->low_freq_factor) + " and " + std::to_string(out->high_freq_factor));
    }
    if (out->original_max_position <= 0) {
      return InvalidArgument(field + ": 'original_max_position_embeddings' must be positive");
    }
  } else if (*type == "longrope" || *type == "su") {
    // Phi-3: the factors are checked against head_dim by ParseDecoder, which also fills
    // original_max_position from the top level when the object lacks it.
    out->type = RopeScaling::Type::kLongRope;
    auto factors = [&](const char* key, std::vector<float>* v) -> Status {
      const json* a = f.Find(key);
      if (a == nullptr || !a->is_array()) {
        return InvalidArgument(field + ": longrope needs a list '" + key + "'");
      }
      for (const json& x : *a) {
        if (!x.is_number() || !(x.get<double>() > 0.0)) {
          return InvalidArgument(field + ": '" + key + "' must hold positive numbers, got " + JsonSnippet(x));
        }
        v->push_back(static_cast<float>(x.get<double>()));
      }
      return Status::Ok();
    };
    FERRY_RETURN_IF_ERROR(factors("short_factor", &out->short_factor));
    FERRY_RETURN_IF_ERROR(factors("long_factor", &out->long_factor));
    FERRY_ASSIGN_OR_RETURN(out->original_max_position, f.Int("original_max_position_embeddings", 0));
    FERRY_ASSIGN_OR_RETURN(out->factor, f.Float("factor", 0.0f));
    FERRY_ASSIGN_OR_RETURN(out->attention_factor, f.Float("attention_factor", 0.0f));
    return Status::Ok();
  } else {
    return Unimplemented("rope scaling type '" + *type + "' in '" + field +
                         "' is not supported (supported: default, linear, llama3, longrope)");
  }
  if (!(out->factor > 0.0f)) {
    return InvalidArgument(field + ": 'factor' must be positive, got " + std::to_string(out->factor));
  }
  return Status::Ok();
}

Status ParseRope(const Fields& f, ModelConfig* c) {
  FERRY_ASSIGN_OR_RETURN(c->rope_theta, f.Float("rope_theta", 10000.0f));
  // Transformers 5 moves rope_theta and the scaling into rope_parameters and may leave a
  // stale rope_scaling beside it; rope_parameters wins.
  if (const json* params = f.Find("rope_parameters")) {
    FERRY_RETURN_IF_ERROR(ParseRopeScaling(*params, "rope_parameters", &c->rope_scaling));
    if (params->is_object()) {
      FERRY_ASSIGN_OR_RETURN(c->rope_theta, Fields(*params, "rope_parameters.").Float("rope_theta", c->rope_theta));
    }
  } else if (const json* scaling = f.Find("rope_scaling")) {
    FERRY_RETURN_IF_ERROR(ParseRopeScaling(*scaling, "rope_scaling", &c->rope_scaling));
  }
  if (!(c->rope_theta > 0.0f)) {
    return InvalidArgument("'rope_theta' must be positive, got " + std::to_string(c->rope_theta));
  }
  return Status::Ok();
}

Status ParseLabels(const Fields& f, ModelConfig* c) {
  if (const json* labels = f.Find("id2label")) {
    if (!labels->is_object()) return InvalidArgument("field 'id2label' must be an object, got " + JsonSnippet(*labels));
    for (const auto& [key, value] : labels->items()) {
      int id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
        return InvalidArgument("field 'id2label' has key '" + key + "', expected a non-negative integer");
      }
      if (!value.is_string()) {
        return InvalidArgument("field 'id2label' maps " + key + " to " + JsonSnippet(value) + ", expected a string");
      }
      c->id2label[id] = value.get<std::string>();
    }
    // The classifier's outputs are indexed by id, so the ids must be exactly 0..n-1.
    if (!c->id2label.empty() && c->id2label.rbegin()->first != static_cast<int>(c->id2label.size()) - 1) {
      return InvalidArgument("field 'id2label' ids must be 0.." + std::to_string(c->id2label.size() - 1) +
                             ", got up to " + std::to_string(c->id2label.rbegin()->first));
    }
  } else {
    FERRY_ASSIGN_OR_RETURN(std::optional<int> num_labels, f.OptionalInt("num_labels"));
    // Transformers omits id2label from config.json when it equals its default of two
    // labels, so a classifier without either field has two.
    if (!num_labels && c->architecture.ends_with("ForSequenceClassification")) num_labels = 2;
    if (num_labels && *num_labels < 0) return InvalidArgument("field 'num_labels' must not be negative");
    for (int i = 0; num_labels && i < *num_labels; ++i) c->id2label[i] = "LABEL_" + std::to_string(i);
  }
  c->num_labels = static_cast<int>(c->id2label.size());
  return Status::Ok();
}

Status ParseTokenIds(const Fields& f, ModelConfig* c) {
  FERRY_ASSIGN_OR_RETURN(auto bos, f.OptionalTokenIds("bos_token_id"));
  FERRY_ASSIGN_OR_RETURN(auto eos, f.OptionalTokenIds("eos_token_id"));
  if (bos) c->bos_token_ids = std::move(*bos);
  if (eos) c->eos_token_ids = std::move(*eos);
  // Some configs write -1 for "no pad token".
  FERRY_ASSIGN_OR_RETURN(std::optional<int> pad, f.OptionalInt("pad_token_id"));
  if (pad && *pad >= 0) c->pad_token_id = pad;
  return Status::Ok();
}

// Which layers slide: transformers 5's layer_types when the config has it; else Gemma 2
// alternates (even layers slide), Qwen2/Qwen3 slide from max_window_layers on, and every
// other decoder with a window slides everywhere.
Status ParseLayerWindows(const Fields& f, ModelConfig* c) {
  c->layer_windows.assign(static_cast<size_t>(c->num_layers), 0);
  if (!c->sliding_window) return Status::Ok();
  const int window = *c->sliding_window;
  if (const json* types = f.Find("layer_types")) {
    if (!types->is_array() || static_cast<int>(types->size()) != c->num_layers) {
      return InvalidArgument("field 'layer_types' must be a list of " + std::to_string(c->num_layers) +
                             " strings, got " + JsonSnippet(*types));
    }
    for (int l = 0; l < c->num_layers; ++l) {
      const json& t = (*types)[static_cast<size_t>(l)];
      if (!t.is_string()) return InvalidArgument("field 'layer_types' holds " + JsonSnippet(t));
      const std::string name = t.get<std::string>();
      if (name == "sliding_attention") {
        c->layer_windows[static_cast<size_t>(l)] = window;
      } else if (name != "full_attention") {
        return Unimplemented("layer type '" + name + "' is not supported (full_attention, sliding_attention)");
      }
    }
    return Status::Ok();
  }
  int first_sliding = 0;
  if (c->model_type == "qwen2" || c->model_type == "qwen3") {
    FERRY_ASSIGN_OR_RETURN(first_sliding, f.Int("max_window_layers", c->num_layers));
  }
  for (int l = 0; l < c->num_layers; ++l) {
    const bool slides = c->model_type == "gemma2" ? l % 2 == 0 : l >= first_sliding;
    if (slides) c->layer_windows[static_cast<size_t>(l)] = window;
  }
  return Status::Ok();
}

// longrope: factor counts against head_dim, original_max_position (inside rope_scaling or at
// the top level, as Phi-3 writes it), and the attention factor transformers derives.
Status FinishLongRope(const Fields& f, ModelConfig* c) {
  RopeScaling& r = c->rope_scaling;
  if (r.type != RopeScaling::Type::kLongRope) return Status::Ok();
  const size_t pairs = static_cast<size_t>(c->head_dim / 2);
  if (r.short_factor.size() != pairs || r.long_factor.size() != pairs) {
    return InvalidArgument("longrope short_factor and long_factor need head_dim / 2 = " + std::to_string(pairs) +
                           " entries, got " + std::to_string(r.short_factor.size()) + " and " +
                           std::to_string(r.long_factor.size()));
  }
  FERRY_ASSIGN_OR_RETURN(const int top_original, f.Int("original_max_position_embeddings", 0));
  if (r.original_max_position <= 0) r.original_max_position = top_original;
  if (r.original_max_position <= 0) {
    return InvalidArgument("longrope needs 'original_max_position_embeddings'");
  }
  // As transformers: a config with a top-level original_max_position_embeddings (Phi-3) takes
  // the ratio of the context lengths as the factor, whatever rope_scaling says.
  if (top_original > 0) {
    r.factor = static_cast<float>(c->max_position_embeddings) / static_cast<float>(top_original);
  } else if (!(r.factor > 0.0f)) {
    r.factor = static_cast<float>(c->max_position_embeddings) / static_cast<float>(r.original_max_position);
  }
  if (!(r.attention_factor > 0.0f)) {
    r.attention_factor = r.factor <= 1.0f ? 1.0f
                                          : static_cast<float>(std::sqrt(
                                                1.0 + std::log(static_cast<double>(r.factor)) /
                                                          std::log(static_cast<double>(r.original_max_position))));
  }
  return Status::Ok();
}

Status ParseDecoder(const Fields& f, const json& root, ModelConfig* c) {
  const std::string& type = c->model_type;
  // Defaults are those of the transformers config classes, which fill absent fields.
  const int default_max_positions = type == "llama"    ? 2048
                                    : type == "mistral" ? 4096 * 32
                                    : type == "gemma2"  ? 8192
                                    : type == "phi3"    ? 4096
                                                        : 32768;
  FERRY_ASSIGN_OR_RETURN(c->max_position_embeddings, f.Int("max_position_embeddings", default_max_positions));
  FERRY_ASSIGN_OR_RETURN(c->rms_norm_eps, f.Float("rms_norm_eps", 1e-6f));
  FERRY_ASSIGN_OR_RETURN(c->tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> act, f.OptionalString("hidden_act"));
  if (type == "gemma2") {
    // Gemma 2 names it hidden_activation (hidden_act is a leftover of Gemma 1 some configs keep).
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> gemma_act, f.OptionalString("hidden_activation"));
    if (gemma_act) act = gemma_act;
    if (!act) act = "gelu_pytorch_tanh";
  }
  c->hidden_act = act.value_or("silu");
  FERRY_RETURN_IF_ERROR(ParseRope(f, c));

  if (type == "llama") {
    FERRY_ASSIGN_OR_RETURN(c->attention_bias, f.Bool("attention_bias", false));
    FERRY_ASSIGN_OR_RETURN(c->mlp_bias, f.Bool("mlp_bias", false));
  } else if (type == "qwen2") {
    // Qwen2 has q/k/v biases unconditionally; its config has no field for them.
    c->attention_bias = true;
    FERRY_ASSIGN_OR_RETURN(bool use_sliding_window, f.Bool("use_sliding_window", false));
    // Qwen2 configs carry a sliding_window value even when it is switched off.
    if (use_sliding_window) {
      FERRY_ASSIGN_OR_RETURN(c->sliding_window, f.OptionalInt("sliding_window"));
    }
  } else if (type == "qwen3") {
    c->qk_norm = true;
    FERRY_ASSIGN_OR_RETURN(c->attention_bias, f.Bool("attention_bias", false));
    FERRY_ASSIGN_OR_RETURN(bool use_sliding_window, f.Bool("use_sliding_window", false));
    if (use_sliding_window) {
      FERRY_ASSIGN_OR_RETURN(c->sliding_window, f.OptionalInt("sliding_window"));
    }
  } else if (type == "mistral") {
    // Mistral v0.1 uses a 4096 window (the config class default when absent); v0.2+
    // writes null to switch it off.
    const auto it = root.find("sliding_window");
    if (it == root.end()) {
      c->sliding_window = 4096;
    } else {
      FERRY_ASSIGN_OR_RETURN(c->sliding_window, f.OptionalInt("sliding_window"));
    }
  } else if (type == "phi3") {
    c->fused_checkpoint_projections = true;
    FERRY_ASSIGN_OR_RETURN(c->sliding_window, f.OptionalInt("sliding_window"));
  } else if (type == "gemma2") {
    c->gemma_norms = true;
    FERRY_ASSIGN_OR_RETURN(c->tie_word_embeddings, f.Bool("tie_word_embeddings", true));
    FERRY_ASSIGN_OR_RETURN(c->attention_bias, f.Bool("attention_bias", false));
    FERRY_ASSIGN_OR_RETURN(float scalar, f.Float("query_pre_attn_scalar", 256.0f));
    if (!(scalar > 0.0f)) return InvalidArgument("field 'query_pre_attn_scalar' must be positive");
    c->attention_scale = 1.0f / std::sqrt(scalar);
    FERRY_ASSIGN_OR_RETURN(c->attn_logit_softcap, f.Float("attn_logit_softcapping", 0.0f));
    FERRY_ASSIGN_OR_RETURN(c->final_logit_softcap, f.Float("final_logit_softcapping", 0.0f));
    if (c->attn_logit_softcap < 0.0f || c->final_logit_softcap < 0.0f) {
      return InvalidArgument("soft-capping values must not be negative");
    }
    const auto it = root.find("sliding_window");
    if (it == root.end()) {
      c->sliding_window = 4096;
    } else {
      FERRY_ASSIGN_OR_RETURN(c->sliding_window, f.OptionalInt("sliding_window"));
    }
  }
  if (c->sliding_window && *c->sliding_window <= 0) {
    return InvalidArgument("field 'sliding_window' must be positive or null, got " +
                           std::to_string(*c->sliding_window));
  }
  FERRY_RETURN_IF_ERROR(ParseLayerWindows(f, c));
  FERRY_RETURN_IF_ERROR(FinishLongRope(f, c));
  if (!(c->rms_norm_eps > 0.0f)) return InvalidArgument("field 'rms_norm_eps' must be positive");
  if (c->head_dim % 2 != 0) {
    return InvalidArgument("head_dim " + std::to_string(c->head_dim) + " must be even for rotary embeddings");
  }
  return Status::Ok();
}

// One layer type's RoPE theta: transformers 5 nests them in rope_parameters by layer type
// ({"full_attention": {"rope_theta": ...}, "sliding_attention": {...}}); older configs give
// global_rope_theta / local_rope_theta.
Result<float> ModernBertTheta(const Fields& f, const std::string& layer_type, const std::string& flat_key,
                              float default_value) {
  if (const json* params = f.Find("rope_parameters")) {
    if (params->is_object() && params->contains(layer_type)) {
      const json& p = (*params)[layer_type];
      if (!p.is_object()) return InvalidArgument("field 'rope_parameters." + layer_type + "' must be an object");
      const Fields pf(p, "rope_parameters." + layer_type + ".");
      FERRY_ASSIGN_OR_RETURN(std::optional<std::string> type, pf.OptionalString("rope_type"));
      if (type && *type != "default") {
        return Unimplemented("ModernBERT rope_type '" + *type + "' is not supported (default)");
      }
      return pf.Float("rope_theta", default_value);
    }
  }
  return f.Float(flat_key, default_value);
}

// ModernBERT: global attention every global_attn_every_n_layers-th layer (layer 0 first),
// the others attend within local_attention / 2 positions on either side.
Status ParseModernBert(const Fields& f, ModelConfig* c) {
  FERRY_ASSIGN_OR_RETURN(c->max_position_embeddings, f.Int("max_position_embeddings", 8192));
  FERRY_ASSIGN_OR_RETURN(c->layer_norm_eps, f.Float("norm_eps", 1e-5f));
  FERRY_ASSIGN_OR_RETURN(c->norm_bias, f.Bool("norm_bias", false));
  FERRY_ASSIGN_OR_RETURN(c->attention_bias, f.Bool("attention_bias", false));
  FERRY_ASSIGN_OR_RETURN(c->mlp_bias, f.Bool("mlp_bias", false));
  FERRY_ASSIGN_OR_RETURN(c->classifier_bias, f.Bool("classifier_bias", false));
  FERRY_ASSIGN_OR_RETURN(c->tie_word_embeddings, f.Bool("tie_word_embeddings", true));
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> act, f.OptionalString("hidden_activation"));
  c->hidden_act = act.value_or("gelu");
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> head_act, f.OptionalString("classifier_activation"));
  c->classifier_activation = head_act.value_or("gelu");
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> pooling, f.OptionalString("classifier_pooling"));
  c->classifier_pooling = pooling.value_or("cls");
  if (c->classifier_pooling != "cls" && c->classifier_pooling != "mean") {
    return InvalidArgument("field 'classifier_pooling' must be \"cls\" or \"mean\", got \"" + c->classifier_pooling +
                           "\"");
  }
  c->type_vocab_size = 0;  // token_type_ids are ignored
  if (!(c->layer_norm_eps > 0.0f)) return InvalidArgument("field 'norm_eps' must be positive");

  FERRY_ASSIGN_OR_RETURN(const int every, f.Int("global_attn_every_n_layers", 3));
  FERRY_ASSIGN_OR_RETURN(const int local, f.Int("local_attention", 128));
  if (every <= 0) return InvalidArgument("field 'global_attn_every_n_layers' must be positive");
  if (local <= 1) return InvalidArgument("field 'local_attention' must be at least 2, got " + std::to_string(local));
  FERRY_ASSIGN_OR_RETURN(const float global_theta,
                         ModernBertTheta(f, "full_attention", "global_rope_theta", 160000.0f));
  FERRY_ASSIGN_OR_RETURN(const float local_theta,
                         ModernBertTheta(f, "sliding_attention", "local_rope_theta", 10000.0f));
  if (!(global_theta > 0.0f) || !(local_theta > 0.0f)) return InvalidArgument("RoPE thetas must be positive");
  c->rope_theta = global_theta;
  std::vector<bool> global(static_cast<size_t>(c->num_layers));
  for (int l = 0; l < c->num_layers; ++l) global[static_cast<size_t>(l)] = l % every == 0;
  if (const json* types = f.Find("layer_types")) {
    if (!types->is_array() || static_cast<int>(types->size()) != c->num_layers) {
      return InvalidArgument("field 'layer_types' must be a list of " + std::to_string(c->num_layers) +
                             " strings, got " + JsonSnippet(*types));
    }
    for (int l = 0; l < c->num_layers; ++l) {
      const json& t = (*types)[static_cast<size_t>(l)];
      const std::string name = t.is_string() ? t.get<std::string>() : std::string();
      if (name != "full_attention" && name != "sliding_attention") {
        return InvalidArgument("field 'layer_types' holds " + JsonSnippet(t) +
                               " (full_attention or sliding_attention)");
      }
      global[static_cast<size_t>(l)] = name == "full_attention";
    }
  }
  c->layer_windows.assign(static_cast<size_t>(c->num_layers), 0);
  c->layer_rope_thetas.assign(static_cast<size_t>(c->num_layers), global_theta);
  for (size_t l = 0; l < global.size(); ++l) {
    if (global[l]) continue;
    c->layer_windows[l] = local / 2;
    c->layer_rope_thetas[l] = local_theta;
  }
  if (c->head_dim % 2 != 0) {
    return InvalidArgument("head_dim " + std::to_string(c->head_dim) + " must be even for rotary embeddings");
  }
  return Status::Ok();
}

Status ParseEncoder(const Fields& f, ModelConfig* c) {
  if (c->model_type == "modernbert") return ParseModernBert(f, c);
  FERRY_ASSIGN_OR_RETURN(c->max_position_embeddings, f.Int("max_position_embeddings", 512));
  FERRY_ASSIGN_OR_RETURN(c->layer_norm_eps, f.Float("layer_norm_eps", 1e-12f));
  FERRY_ASSIGN_OR_RETURN(c->type_vocab_size, f.Int("type_vocab_size", 2));
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> act, f.OptionalString("hidden_act"));
  c->hidden_act = act.value_or("gelu");
  // BERT's input embeddings are tied to its (unused here) MLM head by default.
  FERRY_ASSIGN_OR_RETURN(c->tie_word_embeddings, f.Bool("tie_word_embeddings", true));
  // BERT has biases on every projection.
  c->attention_bias = true;
  c->mlp_bias = true;
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> position_type, f.OptionalString("position_embedding_type"));
  if (position_type && *position_type != "absolute") {
    return Unimplemented("bert position_embedding_type '" + *position_type +
                         "' is not supported (supported: absolute)");
  }
  if (c->model_type == "roberta" || c->model_type == "xlm-roberta") {
    // fairseq's positions: real tokens count from padding_idx + 1 (create_position_ids_from_input_ids).
    FERRY_ASSIGN_OR_RETURN(int pad, f.Int("pad_token_id", 1));
    if (pad < 0) return InvalidArgument("RoBERTa needs a non-negative 'pad_token_id' (its padding_idx)");
    c->position_offset = pad + 1;
    FERRY_ASSIGN_OR_RETURN(c->type_vocab_size, f.Int("type_vocab_size", 1));
    // max_position_embeddings counts the offset rows (514 for 512 tokens); ferry's field is
    // the usable length and the encoder adds the offset back for the table.
    if (c->max_position_embeddings <= c->position_offset) {
      return InvalidArgument("'max_position_embeddings' (" + std::to_string(c->max_position_embeddings) +
                             ") must exceed padding_idx + 1");
    }
    c->max_position_embeddings -= c->position_offset;
  }
  if (c->type_vocab_size <= 0) return InvalidArgument("field 'type_vocab_size' must be positive");
  if (!(c->layer_norm_eps > 0.0f)) return InvalidArgument("field 'layer_norm_eps' must be positive");
  return Status::Ok();
}

Status ParseSizes(const Fields& f, ModelConfig* c) {
  FERRY_ASSIGN_OR_RETURN(c->vocab_size, f.RequiredInt("vocab_size"));
  FERRY_ASSIGN_OR_RETURN(c->hidden_size, f.RequiredInt("hidden_size"));
  FERRY_ASSIGN_OR_RETURN(c->intermediate_size, f.RequiredInt("intermediate_size"));
  FERRY_ASSIGN_OR_RETURN(c->num_layers, f.RequiredInt("num_hidden_layers"));
  FERRY_ASSIGN_OR_RETURN(c->num_heads, f.RequiredInt("num_attention_heads"));
  const struct {
    const char* name;
    int value;
  } sizes[] = {{"vocab_size", c->vocab_size},
               {"hidden_size", c->hidden_size},
               {"intermediate_size", c->intermediate_size},
               {"num_hidden_layers", c->num_layers},
               {"num_attention_heads", c->num_heads}};
  for (const auto& s : sizes) {
    if (s.value <= 0) {
      return InvalidArgument("field '" + std::string(s.name) + "' must be positive, got " + std::to_string(s.value));
    }
  }

  // BERT has neither field; its attention is plain multi-head.
  if (c->family == ModelFamily::kDecoder) {
    FERRY_ASSIGN_OR_RETURN(c->num_kv_heads, f.Int("num_key_value_heads", c->num_heads));
    FERRY_ASSIGN_OR_RETURN(std::optional<int> head_dim, f.OptionalInt("head_dim"));
    if (head_dim) c->head_dim = *head_dim;
  } else {
    c->num_kv_heads = c->num_heads;
  }
  // An explicit head_dim need not equal hidden/heads (Mistral-Nemo: 5120 / 32 heads, head_dim 128).
  if (c->head_dim == 0) {
    if (c->hidden_size % c->num_heads != 0) {
      return InvalidArgument("'hidden_size' (" + std::to_string(c->hidden_size) +
                             ") must be divisible by 'num_attention_heads' (" + std::to_string(c->num_heads) + ")");
    }
    c->head_dim = c->hidden_size / c->num_heads;
  }
  if (c->head_dim <= 0) return InvalidArgument("field 'head_dim' must be positive, got " + std::to_string(c->head_dim));
  if (c->num_kv_heads <= 0) {
    return InvalidArgument("field 'num_key_value_heads' must be positive, got " + std::to_string(c->num_kv_heads));
  }
  if (c->num_heads % c->num_kv_heads != 0) {
    return InvalidArgument("'num_attention_heads' (" + std::to_string(c->num_heads) +
                           ") must be divisible by 'num_key_value_heads' (" + std::to_string(c->num_kv_heads) + ")");
  }
  return Status::Ok();
}

Result<ModelConfig> ParseRoot(const json& root) {
  const Fields f(root, "");
  ModelConfig c;
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> model_type, f.OptionalString("model_type"));
  if (!model_type) return InvalidArgument("missing required field 'model_type'");
  c.model_type = *model_type;
  FERRY_ASSIGN_OR_RETURN(c.family, FamilyOf(c.model_type));

  if (const json* archs = f.Find("architectures")) {
    if (!archs->is_array() || (!archs->empty() && !(*archs)[0].is_string())) {
      return InvalidArgument("field 'architectures' must be a list of strings, got " + JsonSnippet(*archs));
    }
    if (!archs->empty()) c.architecture = (*archs)[0].get<std::string>();
  }

  FERRY_RETURN_IF_ERROR(ParseSizes(f, &c));
  if (c.family == ModelFamily::kDecoder) {
    FERRY_RETURN_IF_ERROR(ParseDecoder(f, root, &c));
  } else {
    FERRY_RETURN_IF_ERROR(ParseEncoder(f, &c));
  }
  if (c.max_position_embeddings <= 0) return InvalidArgument("field 'max_position_embeddings' must be positive");
  FERRY_RETURN_IF_ERROR(ParseTokenIds(f, &c));
  FERRY_RETURN_IF_ERROR(ParseLabels(f, &c));

  // Transformers 5 renamed torch_dtype to dtype.
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> dtype, f.OptionalString("dtype"));
  if (!dtype) {
    FERRY_ASSIGN_OR_RETURN(dtype, f.OptionalString("torch_dtype"));
  }
  c.torch_dtype = dtype.value_or("");
  FERRY_RETURN_IF_ERROR(ParseQuantization(f, &c.quantization));
  return c;
}

// gptq / awq: the packed layouts ferry can unpack. Anything else (3-bit packing, AWQ's GEMV
// layouts, Marlin repacks, AWQ without zero points) is refused by name rather than misread.
Status ParsePackedIntQuantization(const Fields& qf, const std::string& method, const std::string& supported,
                                  QuantizationConfig* q) {
  FERRY_ASSIGN_OR_RETURN(std::optional<int> bits, qf.OptionalInt(method == "awq" ? "w_bit" : "bits"));
  if (!bits) {
    FERRY_ASSIGN_OR_RETURN(bits, qf.OptionalInt("bits"));
  }
  if (!bits) return InvalidArgument("missing required field " + qf.Label("bits"));
  if (*bits != 4 && !(method == "gptq" && *bits == 8)) {
    return Unimplemented(method + " with " + std::to_string(*bits) + "-bit weights is not supported (" +
                         (method == "gptq" ? "4 or 8 bits" : "4 bits") + "; " + supported + ")");
  }
  FERRY_ASSIGN_OR_RETURN(std::optional<int64_t> group, qf.OptionalInt64("group_size"));
  if (!group) {
    FERRY_ASSIGN_OR_RETURN(group, qf.OptionalInt64("q_group_size"));
  }
  if (!group) return InvalidArgument("missing required field " + qf.Label("group_size"));
  if (*group != -1 && *group <= 0) {
    return InvalidArgument("field " + qf.Label("group_size") + " must be positive or -1, got " +
                           std::to_string(*group));
  }
  if (method == "gptq") {
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> format, qf.OptionalString("checkpoint_format"));
    if (!format) {
      FERRY_ASSIGN_OR_RETURN(format, qf.OptionalString("format"));
    }
    const std::string f = format.value_or("gptq");
    if (f != "gptq" && f != "gptq_v2") {
      return Unimplemented("gptq checkpoint_format '" + f + "' is not supported (gptq, gptq_v2)");
    }
    q->gptq_zeros_minus_one = f == "gptq";
  } else {
    FERRY_ASSIGN_OR_RETURN(const bool zero_point, qf.Bool("zero_point", true));
    if (!zero_point) return Unimplemented("awq without zero points (zero_point: false) is not supported");
    FERRY_ASSIGN_OR_RETURN(std::optional<std::string> version, qf.OptionalString("version"));
    std::string v = version.value_or("gemm");
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
    if (v != "gemm") {
      return Unimplemented("awq version '" + *version + "' is not supported (gemm; the GEMV layouts pack weights " +
                           "differently)");
    }
  }
  q->method = method;
  q->bits = *bits;
  q->group_size = *group == -1 ? 0 : *group;
  return Status::Ok();
}

// quantization_config: the float8 formats are imported; every other method is refused by
// name, since its weights would otherwise be read as plain tensors and give wrong outputs.
Status ParseQuantization(const Fields& f, QuantizationConfig* q) {
  const json* qc = f.Find("quantization_config");
  if (qc == nullptr || qc->is_null()) return Status::Ok();
  if (!qc->is_object()) return InvalidArgument("field 'quantization_config' must be an object");
  const Fields qf(*qc, "quantization_config.");
  FERRY_ASSIGN_OR_RETURN(std::optional<std::string> method, qf.OptionalString("quant_method"));
  if (!method) return InvalidArgument("missing required field 'quantization_config.quant_method'");
  const std::string supported =
      "supported: fp8, fbgemm_fp8, compressed-tensors with 8-bit float weights, gptq and awq (4 or 8 bits)";
  if (*method == "gptq" || *method == "awq") return ParsePackedIntQuantization(qf, *method, supported, q);
  if (*method == "fp8" || *method == "fbgemm_fp8") {
    q->method = *method;
    if (const json* block = qf.Find("weight_block_size"); block != nullptr && !block->is_null()) {
      if (!block->is_array() || block->size() != 2 || !(*block)[0].is_number_integer() ||
          !(*block)[1].is_number_integer() || (*block)[0].get<int64_t>() <= 0 || (*block)[1].get<int64_t>() <= 0) {
        return InvalidArgument("field 'quantization_config.weight_block_size' must be two positive integers, got " +
                               JsonSnippet(*block));
      }
      q->block_rows = (*block)[0].get<int64_t>();
      q->block_cols = (*block)[1].get<int64_t>();
    }
    return Status::Ok();
  }
  if (*method == "compressed-tensors") {
    // Every config group's weights must be 8-bit floats (FP8 and FP8-dynamic checkpoints);
    // integer groups (W4A16, W8A8-int) are other formats.
    const json* groups = qf.Find("config_groups");
    if (groups == nullptr || !groups->is_object() || groups->empty()) {
      return InvalidArgument("field 'quantization_config.config_groups' must be a non-empty object");
    }
    for (const auto& [name, group] : groups->items()) {
      const json* w = group.is_object() && group.contains("weights") ? &group["weights"] : nullptr;
      const auto type = w != nullptr && w->is_object() ? w->find("type") : json::const_iterator();
      const auto bits = w != nullptr && w->is_object() ? w->find("num_bits") : json::const_iterator();
      const bool fp8 = w != nullptr && w->is_object() && type != w->end() && type->is_string() &&
                       type->get<std::string>() == "float" && bits != w->end() && bits->is_number_integer() &&
                       bits->get<int64_t>() == 8;
      if (!fp8) {
        return Unimplemented("quantization_config group '" + name + "': compressed-tensors weights " +
                             (w != nullptr ? JsonSnippet(*w) : std::string("(none)")) + " are not supported (" +
                             supported + ")");
      }
      if (const auto bs = w->find("block_structure"); bs != w->end() && !bs->is_null()) {
        if (!bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() || !(*bs)[1].is_number_integer() ||
            (*bs)[0].get<int64_t>() <= 0 || (*bs)[1].get<int64_t>() <= 0) {
          return InvalidArgument("quantization_config group '" + name +
                                 "': block_structure must be two positive integers, got " + JsonSnippet(*bs));
        }
        q->block_rows = (*bs)[0].get<int64_t>();
        q->block_cols = (*bs)[1].get<int64_t>();
      }
    }
    q->method = *method;
    return Status::Ok();
  }
  return Unimplemented("quantization method '" + *method + "' is not supported (" + supported + ")");
}

Result<json> ParseJsonObject(const std::string& text, const std::string& what) {
  auto parsed = ParseUntrustedJson(text);
  if (!parsed.ok()) return InvalidArgument(what + " is not valid JSON (" + parsed.status().message() + ")");
  json root = std::move(parsed).value();
  if (!root.is_object()) return InvalidArgument(what + " is not a JSON object");
  return root;
}

}  // namespace

Result<ModelConfig> ParseModelConfig(const std::string& json_text) {
  FERRY_ASSIGN_OR_RETURN(json root, ParseJsonObject(json_text, "model config"));
  // Every access above is type-checked first; this only keeps a missed case from
  // escaping as an exception.
  try {
    return ParseRoot(root);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("model config: ") + e.what());
  }
}

Result<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::string config_path = (dir / "config.json").string();
  FERRY_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
  Result<ModelConfig> config = ParseModelConfig(text);
  if (!config.ok()) return config.status().WithContext("'" + config_path + "'");

  // generate() stops on generation_config.json's eos ids (Llama 3 instruct lists more
  // there than in config.json), so they take precedence.
  const std::string gen_path = (dir / "generation_config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(gen_path, ec)) return config;
  FERRY_ASSIGN_OR_RETURN(std::string gen_text, ReadFileToString(gen_path));
  Result<json> gen = ParseJsonObject(gen_text, "'" + gen_path + "'");
  if (!gen.ok()) return gen.status();
  try {
    const Fields f(*gen, "");
    Result<std::optional<std::vector<int>>> eos = f.OptionalTokenIds("eos_token_id");
    Result<std::optional<std::vector<int>>> bos = f.OptionalTokenIds("bos_token_id");
    if (!eos.ok()) return eos.status().WithContext("'" + gen_path + "'");
    if (!bos.ok()) return bos.status().WithContext("'" + gen_path + "'");
    if (*eos) config->eos_token_ids = std::move(**eos);
    if (*bos && config->bos_token_ids.empty()) config->bos_token_ids = std::move(**bos);
  } catch (const json::exception& e) {
    return InvalidArgument("'" + gen_path + "': " + e.what());
  }
  return config;
}

}  // namespace ferry::io
