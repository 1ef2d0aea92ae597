// The QoS part of the server config: a model's `variants:` and `qos:` keys, a tier's
// `min_variant` and `slo`, and the checks that tie them together (serve/qos_config.cc).
// The parsers are internal to config.cc; ResolveTierRule is what the server uses.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/config.h"
#include "serve/config_yaml.h"

namespace ferry::serve {

// A tier's rule for one group: the group's `qos.tiers.TIER` over the global
// `tiers.TIER` rule, field by field (min_variant, and each SLO target).
qos::TierRule ResolveTierRule(const ServerConfig& config, const ModelConfig& model, const std::string& tier);

// ---- Used by config.cc -----------------------------------------------------------------

// The keys of a model's serving options (which a variant may override), and their parser
// (serve/config.cc).
const std::vector<std::string_view>& ModelOptionKeys();
Status ParseModelOptions(const config_yaml::MapReader& m, ModelConfig& out);

// `variants:` — each entry starts from `parent`'s options.
Status ParseVariants(const YAML::Node& node, const std::string& path, const ModelConfig& parent,
                     std::vector<VariantConfig>& out);
// `qos:`.
Status ParseQos(const YAML::Node& node, const std::string& path, qos::QosOptions& out);
// `tiers.NAME`: a priority, or a mapping {priority, min_variant, slo}.
Status ParseTier(const YAML::Node& node, const std::string& path, int& priority, std::optional<qos::TierRule>& rule);
// Variant names, QoS options, tier names and every min_variant against the groups' ladders.
Status ValidateQosGroups(const ServerConfig& config);

}  // namespace ferry::serve
