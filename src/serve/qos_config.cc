#include "serve/qos_config.h"

#include <set>

namespace ferry::serve {

namespace {

using namespace config_yaml;  // NOLINT(google-build-using-namespace): the file is its client

bool IsVariantName(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

Status ParseSlo(const YAML::Node& node, const std::string& path, qos::SloTargets& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, path, {"ttft_ms", "tpot_ms", "queue_ms"}));
  FERRY_RETURN_IF_ERROR(m.Number("ttft_ms", out.ttft_ms));
  FERRY_RETURN_IF_ERROR(m.Number("tpot_ms", out.tpot_ms));
  FERRY_RETURN_IF_ERROR(m.Number("queue_ms", out.queue_ms));
  return Status::Ok();
}

// `min_variant` and `slo` of a tier rule, from a reader that may hold other keys too.
Status ParseRuleFields(const MapReader& m, qos::TierRule& out) {
  if (m.Find("min_variant") != nullptr) {
    std::string v;
    FERRY_RETURN_IF_ERROR(m.String("min_variant", v));
    out.min_variant = v;
  }
  if (const YAML::Node* slo = m.Find("slo")) FERRY_RETURN_IF_ERROR(ParseSlo(*slo, m.Path("slo"), out.slo));
  return Status::Ok();
}

// `auto`, `off`, or a number of milliseconds.
Status ParseInactivePacing(const YAML::Node& node, const std::string& path, qos::InactivePacing& out) {
  using Mode = qos::InactivePacing::Mode;
  if (node.IsScalar() && (node.Scalar() == "auto" || node.Scalar() == "off")) {
    out.mode = node.Scalar() == "auto" ? Mode::kAuto : Mode::kOff;
    out.ms = 0;
    return Status::Ok();
  }
  Result<double> ms = ReadNumber(node, path);
  if (!ms.ok()) return ErrorAt(node, path, "expected auto, off or a number of milliseconds, got " + Got(node));
  if (!(*ms > 0 && *ms <= qos::kMaxInactiveStepMs)) {
    return ErrorAt(node, path, "must be auto, off, or a number of milliseconds in (0, 10000], got " + Got(node) +
                                   " (off disables the pacing)");
  }
  out.mode = Mode::kFixed;
  out.ms = *ms;
  return Status::Ok();
}

Status ParseAutoSwitch(const YAML::Node& node, const std::string& path, qos::AutoSwitch& out) {
  FERRY_ASSIGN_OR_RETURN(const std::string mode, ReadString(node, path));
  if (mode == "auto") {
    out = qos::AutoSwitch::kAuto;
  } else if (mode == "on" || mode == "true") {
    out = qos::AutoSwitch::kOn;
  } else if (mode == "off" || mode == "false") {
    out = qos::AutoSwitch::kOff;
  } else {
    return ErrorAt(node, path, "must be auto, on or off, got '" + mode + "'");
  }
  return Status::Ok();
}

Status ParseRollback(const YAML::Node& node, const std::string& path, qos::RollbackOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"error_rate", "min_errors", "canary_prompt", "canary_tokens",
                                          "canary_min_agreement", "canary_min_cosine", "canary_interval_s"}));
  FERRY_RETURN_IF_ERROR(m.Number("error_rate", out.error_rate));
  FERRY_RETURN_IF_ERROR(m.Int("min_errors", out.min_errors));
  FERRY_RETURN_IF_ERROR(m.String("canary_prompt", out.canary_prompt));
  FERRY_RETURN_IF_ERROR(m.Int("canary_tokens", out.canary_tokens));
  FERRY_RETURN_IF_ERROR(m.Number("canary_min_agreement", out.canary_min_agreement));
  FERRY_RETURN_IF_ERROR(m.Number("canary_min_cosine", out.canary_min_cosine));
  FERRY_RETURN_IF_ERROR(m.Number("canary_interval_s", out.canary_interval_s));
  return Status::Ok();
}

std::string TierNames(const ServerConfig& config) {
  std::string known;
  for (const auto& [name, priority] : config.tiers) known += (known.empty() ? "" : ", ") + name;
  return known;
}

}  // namespace

Status ParseVariants(const YAML::Node& node, const std::string& path, const ModelConfig& parent,
                     std::vector<VariantConfig>& out) {
  FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(node, path));
  if (items.empty()) return ErrorAt(node, path, "list at least one variant, the most accurate first");
  std::vector<std::string_view> keys = {"name", "path"};
  keys.insert(keys.end(), ModelOptionKeys().begin(), ModelOptionKeys().end());
  out.clear();
  for (const auto& [item_path, item] : items) {
    FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(item, item_path, keys));
    FERRY_RETURN_IF_ERROR(m.Require("name"));
    FERRY_RETURN_IF_ERROR(m.Require("path"));
    VariantConfig v;
    v.model = parent;
    v.model.variants.clear();
    v.model.qos = qos::QosOptions{};
    FERRY_RETURN_IF_ERROR(m.String("name", v.name));
    FERRY_RETURN_IF_ERROR(m.String("path", v.model.path));
    FERRY_RETURN_IF_ERROR(ParseModelOptions(m, v.model));
    out.push_back(std::move(v));
  }
  return Status::Ok();
}

Status ParseQos(const YAML::Node& node, const std::string& path, qos::QosOptions& out) {
  FERRY_ASSIGN_OR_RETURN(const MapReader m,
                         MapReader::Open(node, path,
                                         {"window_s", "downgrade_above", "upgrade_below", "min_dwell_s", "tick_ms",
                                          "min_samples", "project_upgrade", "signals", "slo", "inactive_step_ms",
                                          "step_turns", "share_cores", "rollback", "tiers"}));
  FERRY_RETURN_IF_ERROR(m.Number("window_s", out.window_s));
  FERRY_RETURN_IF_ERROR(m.Number("downgrade_above", out.downgrade_above));
  FERRY_RETURN_IF_ERROR(m.Number("upgrade_below", out.upgrade_below));
  FERRY_RETURN_IF_ERROR(m.Number("min_dwell_s", out.min_dwell_s));
  FERRY_RETURN_IF_ERROR(m.Int("tick_ms", out.tick_ms));
  FERRY_RETURN_IF_ERROR(m.Int("min_samples", out.min_samples));
  FERRY_RETURN_IF_ERROR(m.Bool("project_upgrade", out.project_upgrade));
  if (const YAML::Node* signals = m.Find("signals")) {
    FERRY_ASSIGN_OR_RETURN(const auto items, ReadItems(*signals, m.Path("signals")));
    out.signals.clear();
    for (const auto& [item_path, item] : items) {
      FERRY_ASSIGN_OR_RETURN(const std::string name, ReadString(item, item_path));
      Result<qos::Signal> signal = qos::ParseSignal(name);
      if (!signal.ok()) return ErrorAt(item, item_path, signal.status().message());
      out.signals.push_back(*signal);
    }
  }
  if (const YAML::Node* slo = m.Find("slo")) FERRY_RETURN_IF_ERROR(ParseSlo(*slo, m.Path("slo"), out.slo));
  if (const YAML::Node* pace = m.Find("inactive_step_ms")) {
    FERRY_RETURN_IF_ERROR(ParseInactivePacing(*pace, m.Path("inactive_step_ms"), out.inactive_step));
  }
  if (const YAML::Node* turns = m.Find("step_turns")) {
    FERRY_RETURN_IF_ERROR(ParseAutoSwitch(*turns, m.Path("step_turns"), out.step_turns));
  }
  if (const YAML::Node* share = m.Find("share_cores")) {
    FERRY_RETURN_IF_ERROR(ParseAutoSwitch(*share, m.Path("share_cores"), out.share_cores));
  }
  if (const YAML::Node* rb = m.Find("rollback")) FERRY_RETURN_IF_ERROR(ParseRollback(*rb, m.Path("rollback"), out.rollback));
  if (const YAML::Node* tiers = m.Find("tiers")) {
    FERRY_ASSIGN_OR_RETURN(const std::vector<Entry> entries, ReadEntries(*tiers, m.Path("tiers")));
    out.tiers.clear();
    for (const Entry& entry : entries) {
      const std::string tier_path = m.Path("tiers") + "." + entry.key;
      FERRY_ASSIGN_OR_RETURN(const MapReader t, MapReader::Open(entry.value, tier_path, {"min_variant", "slo"}));
      qos::TierRule rule;
      FERRY_RETURN_IF_ERROR(ParseRuleFields(t, rule));
      out.tiers[entry.key] = std::move(rule);
    }
  }
  return Status::Ok();
}

Status ParseTier(const YAML::Node& node, const std::string& path, int& priority, std::optional<qos::TierRule>& rule) {
  if (!node.IsMap()) {
    FERRY_ASSIGN_OR_RETURN(priority, ReadInt<int>(node, path));
    return Status::Ok();
  }
  FERRY_ASSIGN_OR_RETURN(const MapReader m, MapReader::Open(node, path, {"priority", "min_variant", "slo"}));
  FERRY_RETURN_IF_ERROR(m.Require("priority"));
  FERRY_RETURN_IF_ERROR(m.Int("priority", priority));
  qos::TierRule r;
  FERRY_RETURN_IF_ERROR(ParseRuleFields(m, r));
  if (r.min_variant || r.slo.ttft_ms || r.slo.tpot_ms || r.slo.queue_ms) rule = std::move(r);
  return Status::Ok();
}

qos::TierRule ResolveTierRule(const ServerConfig& config, const ModelConfig& model, const std::string& tier) {
  qos::TierRule out;
  if (auto it = config.tier_rules.find(tier); it != config.tier_rules.end()) out = it->second;
  if (auto it = model.qos.tiers.find(tier); it != model.qos.tiers.end()) {
    const qos::TierRule& own = it->second;
    if (own.min_variant) out.min_variant = own.min_variant;
    if (own.slo.ttft_ms) out.slo.ttft_ms = own.slo.ttft_ms;
    if (own.slo.tpot_ms) out.slo.tpot_ms = own.slo.tpot_ms;
    if (own.slo.queue_ms) out.slo.queue_ms = own.slo.queue_ms;
  }
  return out;
}

Status ValidateQosGroups(const ServerConfig& config) {
  for (const auto& [tier, rule] : config.tier_rules) {
    for (const auto& [name, v] : {std::pair{"ttft_ms", rule.slo.ttft_ms}, std::pair{"tpot_ms", rule.slo.tpot_ms},
                                  std::pair{"queue_ms", rule.slo.queue_ms}}) {
      if (v && !(*v > 0)) return InvalidArgument("tiers." + tier + ".slo." + name + ": must be > 0");
    }
  }
  for (size_t i = 0; i < config.models.size(); ++i) {
    const ModelConfig& model = config.models[i];
    const std::string path = "models[" + std::to_string(i) + "]";
    if (model.variants.empty()) {
      if (!model.qos.tiers.empty()) {
        return InvalidArgument(path + ".qos: applies only to a model with variants");
      }
      continue;
    }
    std::set<std::string> names;
    for (size_t v = 0; v < model.variants.size(); ++v) {
      const std::string& name = model.variants[v].name;
      const std::string vpath = path + ".variants[" + std::to_string(v) + "].name";
      if (!IsVariantName(name)) return InvalidArgument(vpath + ": must match [A-Za-z0-9._-]+, got '" + name + "'");
      if (!names.insert(name).second) return InvalidArgument(vpath + ": duplicate variant '" + name + "'");
    }
    FERRY_RETURN_IF_ERROR(model.qos.Validate().WithContext(path + ".qos"));
    for (const auto& [tier, rule] : model.qos.tiers) {
      if (config.tiers.count(tier) == 0) {
        return InvalidArgument(path + ".qos.tiers." + tier + ": unknown tier (tiers: " + TierNames(config) + ")");
      }
      if (rule.min_variant && names.count(*rule.min_variant) == 0) {
        return InvalidArgument(path + ".qos.tiers." + tier + ".min_variant: model '" + model.name +
                               "' has no variant '" + *rule.min_variant + "'");
      }
    }
    for (const auto& [tier, priority] : config.tiers) {
      const qos::TierRule rule = ResolveTierRule(config, model, tier);
      if (rule.min_variant && names.count(*rule.min_variant) == 0) {
        return InvalidArgument("tiers." + tier + ".min_variant: model '" + model.name + "' (" + path +
                               ") has no variant '" + *rule.min_variant + "'; name one of its variants in its " +
                               "qos.tiers." + tier + ".min_variant");
      }
    }
  }
  return Status::Ok();
}

}  // namespace ferry::serve
