#include "serve/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace ferry::serve {
namespace {

using sched::TimeoutAction;

std::string ConfigPath(const std::string& name) { return std::string(FERRY_SOURCE_DIR) + "/configs/" + name; }

// Sets environment variables for one test and removes them after it.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) : vars_(vars) {
    for (const auto& [name, value] : vars_) setenv(name.c_str(), value.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [name, value] : vars_) unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

TEST(ServerConfigTest, DemoConfig) {
  Result<ServerConfig> config = LoadServerConfig(ConfigPath("demo.yaml"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->listener.host, "127.0.0.1");
  EXPECT_EQ(config->listener.port, 8000);
  EXPECT_EQ(config->auth.mode, AuthMode::kNone);
  EXPECT_TRUE(config->tenants.empty());
  ASSERT_EQ(config->tiers.size(), 1u);
  EXPECT_EQ(config->tiers.at("default"), 1);
  ASSERT_EQ(config->models.size(), 2u);
  EXPECT_EQ(config->models[0].name, "kjv-decoder");
  EXPECT_EQ(config->models[0].path, "models/demo/kjv-decoder");
  EXPECT_EQ(config->models[0].batching.max_num_seqs, 16);
  EXPECT_EQ(config->models[0].batching.max_num_batched_tokens, 256);
  EXPECT_EQ(config->models[1].name, "kjv-classifier");
  EXPECT_EQ(config->models[1].path, "models/demo/kjv-classifier");
  EXPECT_EQ(config->models[1].dynamic_batching.max_batch_size, 32);
  EXPECT_EQ(config->models[1].dynamic_batching.max_queue_delay_us, 2000);
  EXPECT_EQ(config->log.level, LogLevel::kInfo);
  EXPECT_TRUE(config->log.request_log);
}

TEST(ServerConfigTest, ExampleConfigResolvesKeysFromTheEnvironment) {
  const ScopedEnv env{{"ACME_API_KEY", "acme-secret"},
                      {"GLOBEX_API_KEY", "globex-secret"},
                      {"FERRY_ADMIN_KEY", "admin-secret"}};
  Result<ServerConfig> config = LoadServerConfig(ConfigPath("example.yaml"));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->listener.host, "0.0.0.0");
  EXPECT_EQ(config->auth.mode, AuthMode::kKeys);
  EXPECT_EQ(config->auth.admin_keys, std::vector<std::string>{"admin-secret"});
  EXPECT_EQ(config->tiers, (std::map<std::string, int>{{"gold", 1}, {"standard", 2}}));
  ASSERT_EQ(config->tenants.size(), 2u);
  EXPECT_EQ(config->tenants[0].name, "acme");
  EXPECT_EQ(config->tenants[0].tier, "gold");
  EXPECT_EQ(config->tenants[0].keys, std::vector<std::string>{"acme-secret"});
  EXPECT_EQ(config->tenants[1].keys, std::vector<std::string>{"globex-secret"});
  EXPECT_EQ(config->tenants[1].max_concurrent_requests, 32);

  ASSERT_EQ(config->models.size(), 2u);
  const sched::DynamicBatchingOptions& dyn = config->models[1].dynamic_batching;
  EXPECT_EQ(dyn.priority_levels, 2);
  EXPECT_EQ(dyn.preferred_batch_sizes, (std::vector<int>{16, 32, 64}));
  ASSERT_EQ(dyn.priority_queue_policy.size(), 2u);
  // Level 1 spells only its timeout; the rest comes from default_queue_policy.
  const sched::QueuePolicy& gold = dyn.PolicyFor(1);
  EXPECT_EQ(gold.timeout_us, 50000);
  EXPECT_EQ(gold.timeout_action, TimeoutAction::kDelay);
  EXPECT_TRUE(gold.allow_timeout_override);
  EXPECT_EQ(gold.max_queue_size, 1024);
  const sched::QueuePolicy& standard = dyn.PolicyFor(2);
  EXPECT_EQ(standard.timeout_action, TimeoutAction::kReject);
  EXPECT_FALSE(standard.allow_timeout_override);
  EXPECT_EQ(standard.max_queue_size, 256);
}

TEST(ServerConfigTest, ExampleConfigNeedsItsEnvironment) {
  const ScopedEnv env{{"GLOBEX_API_KEY", "globex-secret"}, {"FERRY_ADMIN_KEY", "admin-secret"}};
  unsetenv("ACME_API_KEY");
  Result<ServerConfig> config = LoadServerConfig(ConfigPath("example.yaml"));
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("example.yaml: tenants[0].key_env: environment variable ACME_API_KEY "
                                           "is not set"),
            std::string::npos)
      << config.status().ToString();
}

TEST(ServerConfigTest, EveryField) {
  const ScopedEnv env{{"FERRY_TEST_TENANT_KEY", "from-env"}, {"FERRY_TEST_ADMIN_KEY", "admin-from-env"}};
  constexpr const char* kYaml = R"(
listener:
  host: "::"
  port: 9001
  io_threads: 3
  max_body_bytes: 4096
  header_timeout_ms: 1500
  idle_timeout_ms: 2500
  shutdown_timeout_ms: 0
  max_connections: 17
auth:
  mode: keys
  admin_keys: [admin-inline]
  admin_key_env: FERRY_TEST_ADMIN_KEY
tiers:
  gold: 1
  silver: 2
  bronze: 3
tenants:
  - name: a
    tier: silver
    keys: [k1, k2]
    key_env: FERRY_TEST_TENANT_KEY
    max_concurrent_requests: 5
  - name: b.team-2
    tier: bronze
    keys:
      - k3
models:
  - name: org/dec:v1.2
    path: /srv/models/dec
    threads: 6
    warmup: false
    device: cuda:1
    activations: f16
    cpu_activations: bf16
    kv_cache_dtype: fp8
    enforce_eager: true
    batching:
      max_num_seqs: 8
      max_num_batched_tokens: 64
      max_seq_len: 1024
      kv_block_tokens: 32
      max_queue_requests: 10
      max_queue_tokens: 5000
      default_timeout_ms: 9000
      admit_wait_fraction: 0.5
      max_step_factor: 3.5
      async_scheduling: "off"
    dynamic_batching:
      max_batch_size: 16
      max_queue_delay_us: 100
      preferred_batch_sizes: [4, 8]
      priority_levels: 3
      default_priority_level: 2
      default_queue_policy:
        timeout_us: 7
        timeout_action: delay
        allow_timeout_override: false
        max_queue_size: 9
      priority_queue_policy:
        3: {timeout_action: reject, max_queue_size: 4}
log:
  level: debug
  request_log: false
)";
  Result<ServerConfig> parsed = ParseServerConfig(kYaml);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const ServerConfig& c = *parsed;
  EXPECT_EQ(c.listener.host, "::");
  EXPECT_EQ(c.listener.port, 9001);
  EXPECT_EQ(c.listener.io_threads, 3);
  EXPECT_EQ(c.listener.max_body_bytes, 4096);
  EXPECT_EQ(c.listener.header_timeout_ms, 1500);
  EXPECT_EQ(c.listener.idle_timeout_ms, 2500);
  EXPECT_EQ(c.listener.shutdown_timeout_ms, 0);
  EXPECT_EQ(c.listener.max_connections, 17);
  EXPECT_EQ(c.auth.mode, AuthMode::kKeys);
  EXPECT_EQ(c.auth.admin_keys, (std::vector<std::string>{"admin-inline", "admin-from-env"}));
  EXPECT_EQ(c.tiers, (std::map<std::string, int>{{"gold", 1}, {"silver", 2}, {"bronze", 3}}));
  EXPECT_EQ(c.HighestTier(), "gold");
  ASSERT_EQ(c.tenants.size(), 2u);
  EXPECT_EQ(c.tenants[0].name, "a");
  EXPECT_EQ(c.tenants[0].tier, "silver");
  EXPECT_EQ(c.tenants[0].keys, (std::vector<std::string>{"k1", "k2", "from-env"}));
  EXPECT_EQ(c.tenants[0].max_concurrent_requests, 5);
  EXPECT_EQ(c.tenants[1].name, "b.team-2");
  EXPECT_EQ(c.tenants[1].tier, "bronze");
  EXPECT_EQ(c.tenants[1].keys, std::vector<std::string>{"k3"});
  EXPECT_EQ(c.tenants[1].max_concurrent_requests, 0);

  ASSERT_EQ(c.models.size(), 1u);
  const ModelConfig& m = c.models[0];
  EXPECT_EQ(m.name, "org/dec:v1.2");
  EXPECT_EQ(m.path, "/srv/models/dec");
  EXPECT_EQ(m.threads, 6);
  EXPECT_FALSE(m.warmup);
  EXPECT_EQ(m.device, DeviceSpec::Cuda(1));
  EXPECT_EQ(m.activations, DType::kF16);
  EXPECT_EQ(m.cpu_activations, DType::kBF16);
  EXPECT_EQ(m.kv_cache_dtype, DType::kF8E4M3);
  EXPECT_TRUE(m.enforce_eager);
  EXPECT_EQ(m.batching.max_num_seqs, 8);
  EXPECT_EQ(m.batching.max_num_batched_tokens, 64);
  EXPECT_EQ(m.batching.max_seq_len, 1024);
  EXPECT_EQ(m.batching.kv_block_tokens, 32);
  EXPECT_EQ(m.batching.max_queue_requests, 10);
  EXPECT_EQ(m.batching.max_queue_tokens, 5000);
  EXPECT_EQ(m.batching.default_timeout_ms, 9000);
  EXPECT_DOUBLE_EQ(m.batching.admit_wait_fraction, 0.5);
  EXPECT_DOUBLE_EQ(m.batching.max_step_factor, 3.5);
  EXPECT_EQ(m.batching.async_scheduling, sched::AsyncScheduling::kOff);
  const sched::DynamicBatchingOptions& d = m.dynamic_batching;
  EXPECT_EQ(d.max_batch_size, 16);
  EXPECT_EQ(d.max_queue_delay_us, 100);
  EXPECT_EQ(d.preferred_batch_sizes, (std::vector<int>{4, 8}));
  EXPECT_EQ(d.priority_levels, 3);
  EXPECT_EQ(d.default_priority_level, 2);
  EXPECT_EQ(d.default_queue_policy.timeout_us, 7);
  EXPECT_EQ(d.default_queue_policy.timeout_action, TimeoutAction::kDelay);
  EXPECT_FALSE(d.default_queue_policy.allow_timeout_override);
  EXPECT_EQ(d.default_queue_policy.max_queue_size, 9);
  ASSERT_EQ(d.priority_queue_policy.count(3), 1u);
  const sched::QueuePolicy& level3 = d.priority_queue_policy.at(3);
  EXPECT_EQ(level3.timeout_us, 7);  // inherited
  EXPECT_EQ(level3.timeout_action, TimeoutAction::kReject);
  EXPECT_FALSE(level3.allow_timeout_override);  // inherited
  EXPECT_EQ(level3.max_queue_size, 4);
  EXPECT_EQ(c.log.level, LogLevel::kDebug);
  EXPECT_FALSE(c.log.request_log);
}

TEST(ServerConfigTest, DefaultsWhenKeysAreAbsent) {
  Result<ServerConfig> parsed = ParseServerConfig("auth: {mode: none}\nmodels: [{name: m, path: p}]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const ServerConfig& c = *parsed;
  EXPECT_EQ(c.listener.host, "127.0.0.1");
  EXPECT_EQ(c.listener.port, 8000);
  EXPECT_EQ(c.listener.io_threads, 2);
  EXPECT_EQ(c.listener.max_body_bytes, 1 << 20);
  EXPECT_EQ(c.listener.header_timeout_ms, 10000);
  EXPECT_EQ(c.listener.idle_timeout_ms, 60000);
  EXPECT_EQ(c.listener.shutdown_timeout_ms, 30000);
  EXPECT_EQ(c.listener.max_connections, 4096);
  EXPECT_EQ(c.tiers, (std::map<std::string, int>{{"default", 1}}));
  EXPECT_EQ(c.api.max_choices, 64);
  EXPECT_EQ(c.api.max_logprobs, 20);
  EXPECT_EQ(c.api.chat_special_tokens, ChatSpecialTokens::kText);
  EXPECT_EQ(c.models[0].long_inputs.max_inputs, 2048);
  EXPECT_EQ(c.log.level, LogLevel::kInfo);
  EXPECT_TRUE(c.log.request_log);
  ASSERT_EQ(c.models.size(), 1u);
  EXPECT_EQ(c.models[0].threads, 0);
  EXPECT_TRUE(c.models[0].warmup);
  EXPECT_EQ(c.models[0].device, DeviceSpec::Cpu());
  EXPECT_EQ(c.models[0].activations, DType::kBF16);
  EXPECT_EQ(c.models[0].cpu_activations, DType::kF32);
  EXPECT_FALSE(c.models[0].kv_cache_dtype.has_value());
  EXPECT_FALSE(c.models[0].enforce_eager);
  EXPECT_EQ(c.models[0].batching.max_num_seqs, sched::ContinuousBatchingOptions().max_num_seqs);
  EXPECT_EQ(c.models[0].dynamic_batching.max_batch_size, 32);

  // A tenant without a tier joins "default".
  Result<ServerConfig> tenant = ParseServerConfig("tenants: [{name: t, keys: [k]}]\n");
  ASSERT_TRUE(tenant.ok()) << tenant.status().ToString();
  EXPECT_EQ(tenant->tenants[0].tier, "default");
  EXPECT_EQ(tenant->auth.mode, AuthMode::kKeys);
}

struct BadConfig {
  const char* name;
  const char* yaml;
  const char* message;  // a substring of the error
};

// FERRY_TEST_SET_KEY is set and FERRY_TEST_UNSET_KEY unset while these run.
const BadConfig kBadConfigs[] = {
    {"unknown top-level key", "auth: {mode: none}\nlistner: {port: 1}\n", "listner: unknown key (line 2, column 1)"},
    {"unknown nested key",
     "auth: {mode: none}\nmodels:\n  - name: m\n    path: p\n    batching:\n      max_num_seq: 4\n",
     "models[0].batching.max_num_seq: unknown key (line 6, column 7)"},
    {"unknown queue policy key",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {priority_queue_policy: {1: {timeout: 5}}}}]\n",
     "models[0].dynamic_batching.priority_queue_policy.1.timeout: unknown key"},
    {"unknown tenant key", "tenants: [{name: t, keys: [k], tier_name: x}]\n", "tenants[0].tier_name: unknown key"},
    {"duplicate YAML key", "auth: {mode: none}\nlistener:\n  port: 1\n  port: 2\n", "listener.port: duplicate key"},
    {"string for an integer", "auth: {mode: none}\nlistener: {port: eighty}\n",
     "listener.port: expected an integer, got 'eighty'"},
    {"float for an integer", "auth: {mode: none}\nlistener: {io_threads: 1.5}\n",
     "listener.io_threads: expected an integer, got '1.5'"},
    {"integer out of range", "auth: {mode: none}\nlistener: {port: 99999999999}\n",
     "listener.port: integer out of range"},
    {"scalar for a mapping", "auth: {mode: none}\nlistener: 8000\n", "listener: expected a mapping, got a scalar"},
    {"mapping for a sequence", "auth: {mode: none}\nmodels: {name: m}\n", "models: expected a sequence, got a mapping"},
    {"sequence for a string", "auth: {mode: none}\nmodels: [{name: [m], path: p}]\n",
     "models[0].name: expected a string, got a sequence"},
    {"null for an integer", "auth: {mode: none}\nlistener: {port: }\n", "listener.port: expected an integer, got null"},
    {"yes for a boolean", "auth: {mode: none}\nlog: {request_log: yes}\n",
     "log.request_log: expected true or false, got 'yes'"},
    {"bad log level", "auth: {mode: none}\nlog: {level: verbose}\n",
     "log.level: expected one of trace, debug, info, warn, error; got 'verbose'"},
    {"bad auth mode", "auth: {mode: open}\n", "auth.mode: expected one of keys, none; got 'open'"},
    {"bad kv cache dtype", "auth: {mode: none}\nmodels: [{name: m, path: p, kv_cache_dtype: int4}]\n",
     "models[0].kv_cache_dtype: expected one of auto, bf16, f16, f32, fp8; got 'int4'"},
    {"bad cpu activations", "auth: {mode: none}\nmodels: [{name: m, path: p, cpu_activations: f16}]\n",
     "models[0].cpu_activations: expected one of f32, bf16; got 'f16'"},
    {"bad activations", "auth: {mode: none}\nmodels: [{name: m, path: p, activations: fp8}]\n",
     "models[0].activations: expected one of bf16, f16, f32; got 'fp8'"},
    {"bad async_scheduling", "auth: {mode: none}\nmodels: [{name: m, path: p, batching: {async_scheduling: yes}}]\n",
     "models[0].batching.async_scheduling: expected one of auto, on, off; got 'yes'"},
    {"bad timeout_action",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {default_queue_policy: "
     "{timeout_action: drop}}}]\n",
     "models[0].dynamic_batching.default_queue_policy.timeout_action: expected one of reject, delay; got 'drop'"},
    {"top level is a sequence", "- a\n- b\n", "(top level): expected a mapping, got a sequence"},
    {"bad YAML syntax", "auth: {mode: none\nlistener: [\n", "invalid YAML at line"},
    {"bad indentation", "auth:\n  mode: none\n port: 1\n", "invalid YAML at line 3"},
    {"none auth on 0.0.0.0", "listener: {host: 0.0.0.0}\nauth: {mode: none}\n",
     "auth.mode: 'none' is only allowed when listener.host is a loopback address"},
    {"none auth on a public name", "listener: {host: example.com}\nauth: {mode: none}\n",
     "got 'example.com'"},
    {"keys auth without tenants", "auth: {mode: keys, admin_keys: [a]}\n",
     "auth mode 'keys' needs at least one tenant key; set auth.mode: none for a loopback-only server"},
    {"keys auth with keyless tenants", "tenants: [{name: t}]\n", "auth mode 'keys' needs at least one tenant key"},
    {"duplicate key across tenants", "tenants:\n  - {name: a, keys: [k1]}\n  - {name: b, keys: [k2, k1]}\n",
     "tenants[1].keys[1]: duplicate key (also at tenants[0].keys[0])"},
    {"tenant key reused as admin key", "auth: {admin_keys: [k1]}\ntenants: [{name: a, keys: [k1]}]\n",
     "auth.admin_keys[0]: duplicate key (also at tenants[0].keys[0])"},
    {"key from env duplicates an inline key",
     "tenants: [{name: a, keys: [set-value], key_env: FERRY_TEST_SET_KEY}]\n",
     "tenants[0].keys[1]: duplicate key (also at tenants[0].keys[0])"},
    {"key with a space", "tenants: [{name: a, keys: [\"two words\"]}]\n",
     "tenants[0].keys[0]: a key must be non-empty visible ASCII without spaces"},
    {"empty key", "tenants: [{name: a, keys: [\"\"]}]\n", "tenants[0].keys[0]: a key must be non-empty"},
    {"unset key_env", "tenants: [{name: a, key_env: FERRY_TEST_UNSET_KEY}]\n",
     "tenants[0].key_env: environment variable FERRY_TEST_UNSET_KEY is not set"},
    {"unset admin_key_env", "auth: {admin_key_env: FERRY_TEST_UNSET_KEY}\ntenants: [{name: a, keys: [k]}]\n",
     "auth.admin_key_env: environment variable FERRY_TEST_UNSET_KEY is not set"},
    {"unknown tier", "tiers: {gold: 1}\ntenants: [{name: a, tier: platinum, keys: [k]}]\n",
     "tenants[0].tier: unknown tier 'platinum' (tiers: gold)"},
    {"missing tier", "tiers: {gold: 1}\ntenants: [{name: a, keys: [k]}]\n", "tenants[0].tier: unknown tier 'default'"},
    {"tier priority zero", "auth: {mode: none}\ntiers: {gold: 0}\n", "tiers.gold: must be >= 1, got 0"},
    {"no tiers", "auth: {mode: none}\ntiers: {}\n", "tiers: define at least one tier"},
    {"duplicate tenant", "tenants: [{name: a, keys: [k1]}, {name: a, keys: [k2]}]\n",
     "tenants[1].name: duplicate tenant 'a'"},
    {"reserved tenant name", "tenants: [{name: admin, keys: [k1]}]\n", "tenants[0].name: 'admin' is reserved"},
    {"tenant without a name", "tenants: [{keys: [k1]}]\n", "tenants[0]: missing required key 'name'"},
    {"duplicate model name", "auth: {mode: none}\nmodels: [{name: m, path: a}, {name: m, path: b}]\n",
     "models[1].name: duplicate model name 'm'"},
    {"bad model name", "auth: {mode: none}\nmodels: [{name: \"my model\", path: a}]\n",
     "models[0].name: must match [A-Za-z0-9._:/-]+, got 'my model'"},
    {"model without a path", "auth: {mode: none}\nmodels: [{name: m}]\n", "models[0]: missing required key 'path'"},
    {"empty model path", "auth: {mode: none}\nmodels: [{name: m, path: \"\"}]\n", "models[0].path: must not be empty"},
    {"negative port", "auth: {mode: none}\nlistener: {port: -1}\n", "listener.port: must be in [0, 65535], got -1"},
    {"negative body limit", "auth: {mode: none}\nlistener: {max_body_bytes: -5}\n",
     "listener.max_body_bytes: must be >= 1, got -5"},
    {"zero header timeout", "auth: {mode: none}\nlistener: {header_timeout_ms: 0}\n",
     "listener.header_timeout_ms: must be >= 1, got 0"},
    {"negative concurrency limit", "tenants: [{name: a, keys: [k], max_concurrent_requests: -1}]\n",
     "tenants[0].max_concurrent_requests: must be >= 0, got -1"},
    {"negative threads", "auth: {mode: none}\nmodels: [{name: m, path: p, threads: -2}]\n",
     "models[0].threads: must be in [0, 4096], got -2"},
    {"unknown device", "auth: {mode: none}\nmodels: [{name: m, path: p, device: tpu}]\n",
     "models[0].device: must be cpu, cuda or cuda:N, got 'tpu'"},
    {"device index not a number", "auth: {mode: none}\nmodels: [{name: m, path: p, device: \"cuda:x\"}]\n",
     "models[0].device: must be cpu, cuda or cuda:N, got 'cuda:x'"},
    {"negative batching limit", "auth: {mode: none}\nmodels: [{name: m, path: p, batching: {max_num_seqs: -1}}]\n",
     "models[0].batching: max_num_seqs must be positive"},
    {"admission fraction above one", "auth: {mode: none}\nmodels: [{name: m, path: p, batching: {admit_wait_fraction: 1.5}}]\n",
     "models[0].batching: admit_wait_fraction must be in (0, 1], got 1.5"},
    {"step factor below one", "auth: {mode: none}\nmodels: [{name: m, path: p, batching: {max_step_factor: 0.5}}]\n",
     "models[0].batching: max_step_factor must be in [1, 1000], got 0.5"},
    {"negative queue timeout",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {priority_queue_policy: "
     "{1: {timeout_us: -1}}}}]\n",
     "models[0].dynamic_batching: queue policy values must be >= 0"},
    {"priority level outside the levels",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {priority_queue_policy: {3: {}}}}]\n",
     "models[0].dynamic_batching: priority_queue_policy level 3 is outside [1, 1]"},
    {"non-integer priority level",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {priority_queue_policy: {gold: {}}}}]\n",
     "models[0].dynamic_batching.priority_queue_policy.gold: expected an integer, got 'gold'"},
    {"preferred batch size above the maximum",
     "auth: {mode: none}\nmodels: [{name: m, path: p, dynamic_batching: {max_batch_size: 4, "
     "preferred_batch_sizes: [2, 8]}}]\n",
     "models[0].dynamic_batching: preferred_batch_sizes must be ascending"},
    {"unknown truncation", "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {truncation: middle}}]\n",
     "models[0].long_inputs.truncation: unknown value 'middle'"},
    {"unknown long_inputs key", "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {chunk_size: 4}}]\n",
     "models[0].long_inputs.chunk_size: unknown key"},
    {"overlap leaving no content",
     "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {chunk_tokens: 64, chunk_overlap: 64}}]\n",
     "models[0].long_inputs: chunk_overlap: 64 leaves no content token"},
    {"negative max_input_tokens",
     "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {max_input_tokens: -1}}]\n",
     "models[0].long_inputs: max_input_tokens: must be >= 0"},
    {"unknown aggregate",
     "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {classify_aggregate: median}}]\n",
     "models[0].long_inputs.classify_aggregate: unknown value 'median'"},
    {"max_inputs of 0", "auth: {mode: none}\nmodels: [{name: m, path: p, long_inputs: {max_inputs: 0}}]\n",
     "models[0].long_inputs: max_inputs: must be in [1, 1000000]"},
    {"max_logprobs above what the samplers return", "auth: {mode: none}\napi: {max_logprobs: 21}\nmodels: [{name: m, path: p}]\n",
     "api.max_logprobs: must be in [0, 20]"},
    {"max_choices of 0", "auth: {mode: none}\napi: {max_choices: 0}\nmodels: [{name: m, path: p}]\n",
     "api.max_choices: must be in [1, 1024]"},
    {"unknown api key", "auth: {mode: none}\napi: {max_n: 4}\nmodels: [{name: m, path: p}]\n", "api.max_n: unknown key"},
    {"unknown pooling", "auth: {mode: none}\nmodels: [{name: m, path: p, pooling: sum}]\n",
     "models[0].pooling: expected one of cls, mean, max, last; got 'sum'"},
};

TEST(ServerConfigTest, BadConfigsFailWithTheirReason) {
  const ScopedEnv env{{"FERRY_TEST_SET_KEY", "set-value"}};
  unsetenv("FERRY_TEST_UNSET_KEY");
  for (const BadConfig& bad : kBadConfigs) {
    Result<ServerConfig> config = ParseServerConfig(bad.yaml);
    if (config.ok()) {
      ADD_FAILURE() << bad.name << ": parsed";
      continue;
    }
    EXPECT_EQ(config.status().code(), StatusCode::kInvalidArgument) << bad.name;
    EXPECT_NE(config.status().message().find(bad.message), std::string::npos)
        << bad.name << "\n  expected: " << bad.message << "\n  got:      " << config.status().message();
  }
}

TEST(ServerConfigTest, LongInputsAndPooling) {
  const char* yaml =
      "auth: {mode: none}\n"
      "models:\n"
      "  - name: m\n    path: p\n    pooling: cls\n    normalize: false\n"
      "    long_inputs: {truncation: chunk, chunk_tokens: 256, chunk_overlap: 32, classify_aggregate: max,\n"
      "                  embeddings_aggregate: first, token_aggregation: average, token_merge: hf,\n"
      "                  max_input_tokens: 100000}\n"
      "  - name: d\n    path: q\n";
  Result<ServerConfig> config = ParseServerConfig(yaml);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const ModelConfig& m = config->models[0];
  EXPECT_EQ(m.pooling, io::PoolingMode::kCls);
  EXPECT_EQ(m.normalize, false);
  EXPECT_EQ(m.long_inputs.truncation, chunk::Truncation::kChunk);
  EXPECT_EQ(m.long_inputs.chunk_tokens, 256);
  EXPECT_EQ(m.long_inputs.chunk_overlap, 32);
  EXPECT_EQ(m.long_inputs.classify_aggregate, chunk::ClassifyAggregate::kMax);
  EXPECT_EQ(m.long_inputs.embeddings_aggregate, chunk::EmbedAggregate::kFirst);
  EXPECT_EQ(m.long_inputs.token_aggregation, chunk::TokenAggregation::kAverage);
  EXPECT_EQ(m.long_inputs.token_merge, chunk::TokenMerge::kHf);
  EXPECT_EQ(m.long_inputs.max_input_tokens, 100000);
  // The defaults: errors for long inputs, the model's window, an eighth of it shared.
  const ModelConfig& d = config->models[1];
  EXPECT_FALSE(d.pooling.has_value());
  EXPECT_FALSE(d.normalize.has_value());
  EXPECT_EQ(d.long_inputs.truncation, chunk::Truncation::kError);
  EXPECT_EQ(d.long_inputs.chunk_tokens, 0);
  EXPECT_EQ(d.long_inputs.chunk_overlap, -1);
  EXPECT_EQ(d.long_inputs.token_aggregation, chunk::TokenAggregation::kSimple);
  EXPECT_EQ(d.long_inputs.token_merge, chunk::TokenMerge::kCenter);
  EXPECT_EQ(d.long_inputs.max_input_tokens, 0);
}

TEST(ServerConfigTest, MessagesNeverQuoteKeys) {
  const char* yaml = "tenants:\n  - {name: a, keys: [secret-one]}\n  - {name: b, keys: [secret-one]}\n";
  Result<ServerConfig> config = ParseServerConfig(yaml);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().message().find("secret"), std::string::npos) << config.status().message();
}

TEST(ServerConfigTest, LoopbackHosts) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost", "::1", "[::1]", "0:0:0:0:0:0:0:1",
                           "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "example.com", "", "127.0.0.1.nip.io",
                           "::2", "::ffff:10.0.0.1", "localhost.example.com"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(ServerConfigTest, LoadReportsAMissingFile) {
  Result<ServerConfig> config = LoadServerConfig(ConfigPath("no-such-file.yaml"));
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("no-such-file.yaml"), std::string::npos);
}

TEST(ServerConfigTest, ApplyModelFlag) {
  Result<ServerConfig> parsed = LoadServerConfig(ConfigPath("demo.yaml"));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ServerConfig config = *parsed;

  // Replacing keeps the model's batching options.
  ASSERT_TRUE(ApplyModelFlag(config, "kjv-decoder=/tmp/other-decoder").ok());
  ASSERT_EQ(config.models.size(), 2u);
  EXPECT_EQ(config.models[0].path, "/tmp/other-decoder");
  EXPECT_EQ(config.models[0].batching.max_num_batched_tokens, 256);

  // A new name is added with default options; only the first '=' splits.
  ASSERT_TRUE(ApplyModelFlag(config, "extra=dir/with=sign").ok());
  ASSERT_EQ(config.models.size(), 3u);
  EXPECT_EQ(config.models[2].name, "extra");
  EXPECT_EQ(config.models[2].path, "dir/with=sign");
  EXPECT_EQ(config.models[2].batching.max_num_seqs, sched::ContinuousBatchingOptions().max_num_seqs);
  EXPECT_TRUE(config.Validate().ok()) << config.Validate().ToString();

  for (const char* bad : {"=path", "name=", "="}) {
    const Status status = ApplyModelFlag(config, bad);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("NAME=PATH"), std::string::npos) << status.message();
  }
  EXPECT_EQ(config.models.size(), 3u);

  // vLLM's form, --model PATH: the model is named after the folder (or .ferry / .gguf file).
  ASSERT_TRUE(ApplyModelFlag(config, "/models/Qwen2.5-7B-Instruct/").ok());
  ASSERT_EQ(config.models.size(), 4u);
  EXPECT_EQ(config.models[3].name, "Qwen2.5-7B-Instruct");
  EXPECT_EQ(config.models[3].path, "/models/Qwen2.5-7B-Instruct");
  ASSERT_TRUE(ApplyModelFlag(config, "engines/llama.ferry").ok());
  EXPECT_EQ(config.models[4].name, "llama");
  ASSERT_TRUE(ApplyModelFlag(config, "gguf/tinyllama-q8_0.gguf").ok());
  EXPECT_EQ(config.models[5].name, "tinyllama-q8_0");
  EXPECT_EQ(config.models[5].path, "gguf/tinyllama-q8_0.gguf");
  EXPECT_EQ(ApplyModelFlag(config, "/").code(), StatusCode::kInvalidArgument);

  // The name is checked by Validate().
  ASSERT_TRUE(ApplyModelFlag(config, "bad name=p").ok());
  EXPECT_NE(config.Validate().message().find("models[6].name"), std::string::npos);
}

// Command-line flags win over the file, and validation sees the result: a file that is
// invalid on its own (keys without tenants, 0.0.0.0 without keys, a bad port) is served
// once a flag fixes it.
TEST(ServerConfigTest, OverridesApplyBeforeValidation) {
  const std::string keys_without_tenants = "auth: {mode: keys}\nmodels: [{name: m, path: p}]\n";
  Result<ServerConfig> refused = ParseServerConfig(keys_without_tenants);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("needs at least one tenant key"), std::string::npos);
  ServerConfigOverrides no_auth;
  no_auth.no_auth = true;
  Result<ServerConfig> served = ParseServerConfig(keys_without_tenants, no_auth);
  ASSERT_TRUE(served.ok()) << served.status().ToString();
  EXPECT_EQ(served->auth.mode, AuthMode::kNone);

  const std::string open_host = "listener: {host: 0.0.0.0, port: 70000}\nauth: {mode: none}\n"
                                "models: [{name: m, path: p}]\nlog: {level: error, request_log: true}\n";
  ServerConfigOverrides port_only;
  port_only.port = 0;
  Result<ServerConfig> still_open = ParseServerConfig(open_host, port_only);
  ASSERT_FALSE(still_open.ok());
  EXPECT_NE(still_open.status().message().find("loopback"), std::string::npos) << still_open.status().ToString();
  ServerConfigOverrides host_only;
  host_only.host = "127.0.0.1";
  Result<ServerConfig> bad_port = ParseServerConfig(open_host, host_only);
  ASSERT_FALSE(bad_port.ok());
  EXPECT_NE(bad_port.status().message().find("listener.port"), std::string::npos) << bad_port.status().ToString();

  ServerConfigOverrides all;
  all.host = "::1";
  all.port = 0;
  all.log_level = LogLevel::kWarn;
  all.no_request_log = true;
  all.models = {"m=/other/path", "extra=q"};
  Result<ServerConfig> c = ParseServerConfig(open_host, all);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listener.host, "::1");
  EXPECT_EQ(c->listener.port, 0);
  EXPECT_EQ(c->log.level, LogLevel::kWarn);
  EXPECT_FALSE(c->log.request_log);
  ASSERT_EQ(c->models.size(), 2u);
  EXPECT_EQ(c->models[0].path, "/other/path");
  EXPECT_EQ(c->models[1].name, "extra");

  // What no flag names keeps the file's value.
  ServerConfigOverrides listener_only;
  listener_only.host = "127.0.0.1";
  listener_only.port = 9000;
  Result<ServerConfig> kept = ParseServerConfig(open_host, listener_only);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->log.level, LogLevel::kError);
  EXPECT_TRUE(kept->log.request_log);
  EXPECT_EQ(kept->auth.mode, AuthMode::kNone);

  // A bad --model flag is reported as such, not as a problem of the file.
  ServerConfigOverrides bad_model;
  bad_model.models = {"=no-name"};
  Result<ServerConfig> flagged = LoadServerConfig(ConfigPath("demo.yaml"), bad_model);
  ASSERT_FALSE(flagged.ok());
  EXPECT_EQ(flagged.status().message().rfind("--model expects NAME=PATH", 0), 0u) << flagged.status().ToString();
}

TEST(ServerConfigTest, LoadAppliesOverridesToTheFile) {
  ServerConfigOverrides o;
  o.port = 0;
  o.log_level = LogLevel::kTrace;
  Result<ServerConfig> c = LoadServerConfig(ConfigPath("demo.yaml"), o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->listener.port, 0);
  EXPECT_EQ(c->listener.host, "127.0.0.1");
  EXPECT_EQ(c->log.level, LogLevel::kTrace);
  EXPECT_EQ(c->models.size(), 2u);
}

TEST(ServerConfigTest, ParseLogLevelNamesEveryLevel) {
  for (LogLevel level : {LogLevel::kTrace, LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError}) {
    Result<LogLevel> parsed = ParseLogLevel(LogLevelName(level));
    ASSERT_TRUE(parsed.ok()) << LogLevelName(level) << ": " << parsed.status().ToString();
    EXPECT_EQ(*parsed, level);
  }
  for (const char* bad : {"", "WARN", "warning", "loud"}) {
    Result<LogLevel> parsed = ParseLogLevel(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.status().message().find("trace, debug, info, warn or error"), std::string::npos);
  }
}

TEST(ServerConfigTest, ValidateCoversConfigsBuiltInCode) {
  ServerConfig config;
  EXPECT_NE(config.Validate().message().find("needs at least one tenant key"), std::string::npos);
  config.auth.mode = AuthMode::kNone;
  EXPECT_TRUE(config.Validate().ok());
  config.listener.host = "192.168.1.10";
  EXPECT_FALSE(config.Validate().ok());
  config.listener.host = "localhost";
  config.models.push_back(ModelConfig{});
  EXPECT_NE(config.Validate().message().find("models[0].name"), std::string::npos);
}

}  // namespace
}  // namespace ferry::serve

namespace ferry::serve {
namespace {

TEST(ConfigWarmupTest, WarmupTakesABoolOrAMode) {
  auto parse = [](const std::string& value) {
    return ParseServerConfig("auth: {mode: none}\nmodels:\n  - name: m\n    path: /x\n    warmup: " + value + "\n");
  };
  auto c = parse("minimal");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->models[0].warmup);
  EXPECT_EQ(c->models[0].warmup_mode, ModelConfig::WarmupMode::kMinimal);
  EXPECT_EQ(parse("full")->models[0].warmup_mode, ModelConfig::WarmupMode::kFull);
  EXPECT_EQ(parse("auto")->models[0].warmup_mode, ModelConfig::WarmupMode::kAuto);
  EXPECT_EQ(parse("true")->models[0].warmup_mode, ModelConfig::WarmupMode::kAuto);
  EXPECT_FALSE(parse("false")->models[0].warmup);
  EXPECT_FALSE(parse("everything").ok());
}

}  // namespace
}  // namespace ferry::serve

namespace ferry::serve {
namespace {

TEST(ConfigMemoryBudgetTest, PerModelHostBudget) {
  Result<ServerConfig> parsed = ParseServerConfig(
      "auth: {mode: none}\nmodels: [{name: m, path: p, host_memory_budget_bytes: 4000000000}, {name: n, path: q}]\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->models[0].host_memory_budget_bytes, 4000000000);
  EXPECT_EQ(parsed->models[1].host_memory_budget_bytes, 0);
  Result<ServerConfig> negative =
      ParseServerConfig("auth: {mode: none}\nmodels: [{name: m, path: p, host_memory_budget_bytes: -1}]\n");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("host_memory_budget_bytes: must be at least 0"), std::string::npos)
      << negative.status().message();
}

}  // namespace
}  // namespace ferry::serve
