// The QoS keys of the server config: variants, qos, tier rules, and their checks.
#include "serve/qos_config.h"

#include <gtest/gtest.h>

#include <tuple>

namespace ferry::serve {
namespace {

const char* kGroup = R"(
auth: {mode: none}
tiers:
  gold: {priority: 1, min_variant: bf16, slo: {ttft_ms: 300}}
  silver: 2
models:
  - name: llama
    device: cpu
    threads: 4
    batching: {max_num_seqs: 32, max_seq_len: 1024}
    qos:
      window_s: 5
      downgrade_above: 0.9
      upgrade_below: 0.6
      min_dwell_s: 15.5
      tick_ms: 100
      min_samples: 8
      project_upgrade: false
      signals: [ttft, tpot, waiting]
      slo: {ttft_ms: 800, tpot_ms: 60}
      rollback: {error_rate: 0.1, min_errors: 2, canary_prompt: "In the beginning", canary_tokens: 12,
                 canary_min_agreement: 0.8, canary_interval_s: 30}
      tiers:
        silver: {slo: {tpot_ms: 120}}
    variants:
      - name: bf16
        path: /m/llama-bf16.ferry
      - name: int8-wo
        path: /m/llama-int8-wo.ferry
        batching: {max_num_seqs: 64}
      - name: int8
        path: /m/llama-int8.ferry
        threads: 2
        warmup: false
)";

TEST(QosConfigTest, ParsesAGroupWithVariantsAndTierRules) {
  Result<ServerConfig> c = ParseServerConfig(kGroup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 1u);
  const ModelConfig& m = c->models[0];
  EXPECT_TRUE(m.path.empty());
  ASSERT_EQ(m.variants.size(), 3u);
  EXPECT_EQ(m.variants[0].name, "bf16");
  EXPECT_EQ(m.variants[0].model.path, "/m/llama-bf16.ferry");
  // Each variant starts from the model's options and overrides what it sets.
  EXPECT_EQ(m.variants[0].model.name, "llama");
  EXPECT_EQ(m.variants[0].model.threads, 4);
  EXPECT_EQ(m.variants[0].model.batching.max_num_seqs, 32);
  EXPECT_EQ(m.variants[1].model.batching.max_num_seqs, 64);
  EXPECT_EQ(m.variants[1].model.batching.max_seq_len, 1024);  // kept from the model
  EXPECT_EQ(m.variants[2].model.threads, 2);
  EXPECT_FALSE(m.variants[2].model.warmup);
  EXPECT_TRUE(m.variants[2].model.variants.empty());
  const qos::QosOptions& q = m.qos;
  EXPECT_EQ(q.window_s, 5);
  EXPECT_EQ(q.downgrade_above, 0.9);
  EXPECT_EQ(q.upgrade_below, 0.6);
  EXPECT_EQ(q.min_dwell_s, 15.5);
  EXPECT_EQ(q.tick_ms, 100);
  EXPECT_EQ(q.min_samples, 8);
  EXPECT_FALSE(q.project_upgrade);
  EXPECT_EQ(q.signals, (std::vector<qos::Signal>{qos::Signal::kTtft, qos::Signal::kTpot, qos::Signal::kWaiting}));
  EXPECT_EQ(q.slo.ttft_ms, 800);
  EXPECT_EQ(q.slo.tpot_ms, 60);
  EXPECT_EQ(q.rollback.error_rate, 0.1);
  EXPECT_EQ(q.rollback.min_errors, 2);
  EXPECT_EQ(q.rollback.canary_prompt, "In the beginning");
  EXPECT_EQ(q.rollback.canary_tokens, 12);
  EXPECT_EQ(q.rollback.canary_min_agreement, 0.8);
  EXPECT_EQ(q.rollback.canary_interval_s, 30);
  // Tiers: a priority or a mapping with the QoS rule; the group's rule wins field by field.
  EXPECT_EQ(c->tiers.at("gold"), 1);
  EXPECT_EQ(c->tiers.at("silver"), 2);
  const qos::TierRule gold = ResolveTierRule(*c, m, "gold");
  EXPECT_EQ(gold.min_variant, "bf16");
  EXPECT_EQ(gold.slo.ttft_ms, 300);
  const qos::TierRule silver = ResolveTierRule(*c, m, "silver");
  EXPECT_FALSE(silver.min_variant.has_value());
  EXPECT_EQ(silver.slo.tpot_ms, 120);
  const qos::ResolvedSlo s = qos::EffectiveSlo(q.slo, silver.slo);
  EXPECT_EQ(s.ttft_ms, 800);
  EXPECT_EQ(s.tpot_ms, 120);
}

TEST(QosConfigTest, Errors) {
  struct Case {
    std::string yaml;
    std::string message;
  };
  const std::string head = "auth: {mode: none}\ntiers: {gold: 1, silver: 2}\nmodels:\n";
  const std::string two = "    variants:\n      - {name: a, path: /a}\n      - {name: b, path: /b}\n";
  const std::vector<Case> cases = {
      {head + "  - name: m\n    path: /x\n" + two, "models[0]: give either path or variants"},
      {head + "  - name: m\n    variants: []\n", "models[0].variants: list at least one variant"},
      {head + "  - name: m\n    variants:\n      - {name: a}\n", "models[0].variants[0]: missing required key 'path'"},
      {head + "  - name: m\n    variants:\n      - {name: a, path: /a, qos: {}}\n",
       "models[0].variants[0].qos: unknown key"},
      {head + "  - name: m\n    variants:\n      - {name: a b, path: /a}\n", "must match [A-Za-z0-9._-]+"},
      {head + "  - name: m\n    variants:\n      - {name: a, path: /a}\n      - {name: a, path: /b}\n",
       "models[0].variants[1].name: duplicate variant 'a'"},
      {head + "  - name: m\n    path: /x\n    qos: {window_s: 3}\n", "models[0].qos: applies only to a model with variants"},
      {head + "  - name: m\n" + two + "    qos: {upgrade_below: 0.9}\n", "models[0].qos: upgrade_below"},
      {head + "  - name: m\n" + two + "    qos: {window_s: fast}\n", "models[0].qos.window_s: expected a number"},
      {head + "  - name: m\n" + two + "    qos: {signals: [latency]}\n", "unknown signal 'latency'"},
      {head + "  - name: m\n" + two + "    qos: {tiers: {platinum: {min_variant: a}}}\n",
       "models[0].qos.tiers.platinum: unknown tier"},
      {head + "  - name: m\n" + two + "    qos: {tiers: {gold: {min_variant: c}}}\n",
       "models[0].qos.tiers.gold.min_variant: model 'm' has no variant 'c'"},
      {head + "  - name: m\n" + two + "    qos: {rollback: {error_rate: 2}}\n", "rollback.error_rate"},
      {head + "  - name: m\n" + two + "    qos: {slo: {ttft_ms: 0}}\n", "slo.ttft_ms"},
      {head + "  - name: m\n" + two + "    qos: {inactive_step_ms: fast}\n",
       "models[0].qos.inactive_step_ms: expected auto, off or a number of milliseconds, got 'fast'"},
      {head + "  - name: m\n" + two + "    qos: {inactive_step_ms: 0}\n",
       "models[0].qos.inactive_step_ms: must be auto, off, or a number of milliseconds in (0, 10000], got '0'"},
      {head + "  - name: m\n" + two + "    qos: {inactive_step_ms: -5}\n", "models[0].qos.inactive_step_ms: must be"},
      {head + "  - name: m\n" + two + "    qos: {inactive_step_ms: 20000}\n", "models[0].qos.inactive_step_ms: must be"},
      {head + "  - name: m\n" + two + "    qos: {inactive_step_ms: [5]}\n",
       "models[0].qos.inactive_step_ms: expected auto, off or a number"},
      {"auth: {mode: none}\ntiers: {gold: {priority: 1, min_variant: z}}\nmodels:\n  - name: m\n" + two,
       "tiers.gold.min_variant: model 'm' (models[0]) has no variant 'z'"},
      {"auth: {mode: none}\ntiers: {gold: {min_variant: a}}\nmodels:\n  - name: m\n" + two,
       "tiers.gold: missing required key 'priority'"},
      {"auth: {mode: none}\ntiers: {gold: {priority: 1, floor: a}}\nmodels:\n  - name: m\n" + two,
       "tiers.gold.floor: unknown key"},
  };
  for (const Case& c : cases) {
    Result<ServerConfig> r = ParseServerConfig(c.yaml);
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << "want: " << c.message << "\ngot:  " << r.status().message();
  }
}

TEST(QosConfigTest, AGroupsOwnTierRuleOverridesAGlobalFloorItLacks) {
  const std::string yaml =
      "auth: {mode: none}\ntiers: {gold: {priority: 1, min_variant: bf16}}\nmodels:\n"
      "  - name: m\n    variants:\n      - {name: fp32, path: /a}\n      - {name: int8, path: /b}\n"
      "    qos: {tiers: {gold: {min_variant: fp32}}}\n";
  Result<ServerConfig> c = ParseServerConfig(yaml);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(ResolveTierRule(*c, c->models[0], "gold").min_variant, "fp32");
}

TEST(QosConfigTest, InactiveStepMsIsAutoOffOrMilliseconds) {
  using Mode = qos::InactivePacing::Mode;
  Result<ServerConfig> c = ParseServerConfig(kGroup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].qos.inactive_step.mode, Mode::kAuto);  // the default
  const std::string head = "auth: {mode: none}\ntiers: {gold: 1}\nmodels:\n  - name: m\n"
                           "    variants:\n      - {name: a, path: /a}\n      - {name: b, path: /b}\n";
  for (const auto& [text, mode, ms] : {std::tuple{"auto", Mode::kAuto, 0.0}, std::tuple{"off", Mode::kOff, 0.0},
                                       std::tuple{"12.5", Mode::kFixed, 12.5}, std::tuple{"40", Mode::kFixed, 40.0}}) {
    Result<ServerConfig> r = ParseServerConfig(head + "    qos: {inactive_step_ms: " + text + "}\n");
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(r->models[0].qos.inactive_step.mode, mode) << text;
    EXPECT_EQ(r->models[0].qos.inactive_step.ms, ms) << text;
  }
}

TEST(QosConfigTest, StepTurnsIsAutoOnOrOff) {
  using Mode = qos::StepTurnsMode;
  Result<ServerConfig> c = ParseServerConfig(kGroup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].qos.step_turns, Mode::kAuto);  // the default
  const std::string head = "auth: {mode: none}\ntiers: {gold: 1}\nmodels:\n  - name: m\n"
                           "    variants:\n      - {name: a, path: /a}\n      - {name: b, path: /b}\n";
  for (const auto& [text, mode] : {std::pair{"auto", Mode::kAuto}, std::pair{"on", Mode::kOn},
                                   std::pair{"off", Mode::kOff}, std::pair{"true", Mode::kOn},
                                   std::pair{"false", Mode::kOff}}) {
    Result<ServerConfig> r = ParseServerConfig(head + "    qos: {step_turns: " + text + "}\n");
    ASSERT_TRUE(r.ok()) << text << ": " << r.status().ToString();
    EXPECT_EQ(r->models[0].qos.step_turns, mode) << text;
  }
  Result<ServerConfig> bad = ParseServerConfig(head + "    qos: {step_turns: sometimes}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("models[0].qos.step_turns: must be auto, on or off, got 'sometimes'"),
            std::string::npos)
      << bad.status().ToString();
}

TEST(QosConfigTest, ShareCoresIsAutoOnOrOff) {
  Result<ServerConfig> c = ParseServerConfig(kGroup);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models[0].qos.share_cores, qos::AutoSwitch::kAuto);  // the default
  const std::string head = "auth: {mode: none}\nmodels:\n  - name: m\n"
                           "    variants:\n      - {name: a, path: /a}\n      - {name: b, path: /b}\n";
  Result<ServerConfig> off = ParseServerConfig(head + "    qos: {share_cores: off}\n");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->models[0].qos.share_cores, qos::AutoSwitch::kOff);
  Result<ServerConfig> bad = ParseServerConfig(head + "    qos: {share_cores: 3}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("models[0].qos.share_cores: must be auto, on or off, got '3'"),
            std::string::npos)
      << bad.status().ToString();
}

TEST(QosConfigTest, TheExampleConfigParses) {
  Result<ServerConfig> c = LoadServerConfig(std::string(FERRY_SOURCE_DIR) + "/configs/qos.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->models.size(), 1u);
  ASSERT_EQ(c->models[0].variants.size(), 2u);
  EXPECT_EQ(ResolveTierRule(*c, c->models[0], "gold").min_variant, "bf16");
  EXPECT_FALSE(c->models[0].qos.rollback.canary_prompt.empty());
}

TEST(QosConfigTest, ModelFlagRefusesAGroup) {
  ServerConfigOverrides o;
  o.models = {"llama=/other/path"};
  Result<ServerConfig> c = ParseServerConfig(kGroup, o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("is a variant group"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace ferry::serve
