// The encoder routes end to end, in process, with long inputs: truncation modes, windows
// merged per aggregate (checked against the engine run window by window), pairs, token
// classification with character offsets, /v1/score, sentence-transformers pooling,
// cancellation of queued windows, truncate_prompt_tokens, and every bad input.
#include "serve/encoder_routes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "chunk/merge.h"
#include "chunk/token_entities.h"
#include "chunk/windows.h"
#include "engine/encoder_runner.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "serve/server.h"
#include "test_client.h"
#include "test_util.h"
#include "tools/checkpoint_maker.h"

namespace ferry::serve {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::HttpReply;
using testing::PostJson;
using namespace std::chrono_literals;

// Verse-like text of about `words` words, varied so that windows differ.
std::string LongText(int words) {
  static const char* kParts[] = {"And the LORD spake unto Moses,", "saying, Speak unto the children of Israel,",
                                 "and they went up to Jerusalem", "with Aaron and his sons", "in the wilderness of Sinai;",
                                 "and the people murmured against Moses.", "Then said Jesus unto his disciples,",
                                 "Blessed are the meek: for they shall inherit the earth."};
  std::string text;
  int n = 0;
  for (int i = 0; n < words; ++i) {
    text += (text.empty() ? "" : " ") + std::string(kParts[(i * 5 + i / 8) % 8]);
    n += 5;
  }
  return text;
}

std::shared_ptr<engine::Engine> MustLoad(const std::string& path) {
  auto e = engine::Engine::Load(path, {.threads = 2});
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? *e : nullptr;
}

void MakeModel(const fs::path& dir, const std::string& head, int labels) {
  tools::CheckpointSpec spec;
  spec.preset = "bert-test-vocab";
  spec.dtype = DType::kF32;
  spec.head = head;
  spec.num_labels = labels;
  spec.seed = 7;
  spec.tokenizer_dir = ferry::testing::FixturePath("tokenizers/bert");
  ASSERT_TRUE(tools::MakeCheckpoint(spec, dir.string()).ok());
}

class EncoderRoutesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("ferry_encoder_routes_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    MakeModel(*dir_ / "tok", "token", 0);
    MakeModel(*dir_ / "cross", "sequence", 1);
    MakeModel(*dir_ / "st", "none", 0);
    // A sentence-transformers embedding model: CLS pooling, then Normalize.
    std::ofstream(*dir_ / "st" / "modules.json")
        << R"([{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
               {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
               {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}])";
    fs::create_directories(*dir_ / "st" / "1_Pooling");
    std::ofstream(*dir_ / "st" / "1_Pooling" / "config.json")
        << R"({"word_embedding_dimension":64,"pooling_mode_cls_token":true,"pooling_mode_mean_tokens":false,
               "pooling_mode_max_tokens":false,"pooling_mode_mean_sqrt_len_tokens":false})";
    const std::string root = ferry::testing::SourcePath("");
    const std::string yaml =
        "listener: {host: 127.0.0.1, port: 0, max_body_bytes: 2000000}\n"
        "auth: {mode: none}\n"
        "models:\n"
        "  - name: cls\n    path: " + root + "/models/demo/kjv-classifier\n    threads: 2\n"
        "    dynamic_batching: {max_batch_size: 16, max_queue_delay_us: 1000}\n"
        "    long_inputs: {max_input_tokens: 150000}\n"
        "  - name: slow\n    path: " + root + "/models/demo/kjv-classifier\n    threads: 1\n    warmup: false\n"
        "    dynamic_batching: {max_batch_size: 1, max_queue_delay_us: 0}\n"
        "  - name: tok\n    path: " + (*dir_ / "tok").string() + "\n    threads: 2\n"
        "  - name: cross\n    path: " + (*dir_ / "cross").string() + "\n    threads: 2\n"
        "  - name: st\n    path: " + (*dir_ / "st").string() + "\n    threads: 2\n"
        "    long_inputs: {truncation: chunk, chunk_tokens: 32}\n"
        "  - name: dec\n    path: " + root + "/models/demo/kjv-decoder\n    threads: 2\n    warmup: false\n"
        "    batching: {max_num_seqs: 4, max_num_batched_tokens: 128}\n"
        "log: {level: warn, request_log: false}\n";
    auto cfg = ParseServerConfig(yaml);
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto s = Server::Create(*cfg);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = s->release();
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_TRUE(server_->WaitUntilReady(120000));
    cls_ = new std::shared_ptr<engine::Engine>(MustLoad(root + "/models/demo/kjv-classifier"));
    tok_ = new std::shared_ptr<engine::Engine>(MustLoad((*dir_ / "tok").string()));
    cross_ = new std::shared_ptr<engine::Engine>(MustLoad((*dir_ / "cross").string()));
    st_ = new std::shared_ptr<engine::Engine>(MustLoad((*dir_ / "st").string()));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete cls_;
    delete tok_;
    delete cross_;
    delete st_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  int port() const { return server_->port(); }
  HttpReply Post(const std::string& path, const json& body) { return PostJson(port(), path, body); }
  json SlowBatcher() {
    const json status = testing::Http(port(), "GET", "/admin/status").Json();
    for (const json& m : status["models"]) {
      if (m["id"] == "slow") return m["batcher"];
    }
    return json();
  }

  // The windows the route cuts, cut here by chunk/ directly.
  static chunk::InputPlan Windows(const engine::Engine& e, const std::string& text, int chunk_tokens, int overlap,
                                  chunk::Truncation t = chunk::Truncation::kChunk) {
    auto ids = e.tokenizer()->Encode(text);
    EXPECT_TRUE(ids.ok());
    auto plan = chunk::PlanInput(chunk::TemplateOf(e.tokenizer()), *ids, std::nullopt, t, {chunk_tokens, overlap});
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return std::move(plan).value();
  }
  static std::vector<engine::EncodedInput> Inputs(const chunk::InputPlan& plan) {
    std::vector<engine::EncodedInput> in;
    for (const auto& w : plan.windows) in.push_back({w.ids, w.type_ids});
    return in;
  }
  static std::vector<std::vector<float>> Rows(const Tensor& t) {
    std::vector<std::vector<float>> rows;
    for (int64_t r = 0; r < t.dim(0); ++r) rows.emplace_back(t.data<float>() + r * t.dim(1), t.data<float>() + (r + 1) * t.dim(1));
    return rows;
  }

  static fs::path* dir_;
  static Server* server_;
  static std::shared_ptr<engine::Engine>* cls_;
  static std::shared_ptr<engine::Engine>* tok_;
  static std::shared_ptr<engine::Engine>* cross_;
  static std::shared_ptr<engine::Engine>* st_;
};

fs::path* EncoderRoutesTest::dir_ = nullptr;
Server* EncoderRoutesTest::server_ = nullptr;
std::shared_ptr<engine::Engine>* EncoderRoutesTest::cls_ = nullptr;
std::shared_ptr<engine::Engine>* EncoderRoutesTest::tok_ = nullptr;
std::shared_ptr<engine::Engine>* EncoderRoutesTest::cross_ = nullptr;
std::shared_ptr<engine::Engine>* EncoderRoutesTest::st_ = nullptr;

void ExpectProbs(const json& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k].get<double>(), want[k], 2e-5) << what << " label " << k;
}

TEST_F(EncoderRoutesTest, ChunkedClassificationIsTheMergeOfItsWindowsForEveryAggregate) {
  const std::string text = LongText(500);
  const chunk::InputPlan plan = Windows(**cls_, text, 64, 16);
  ASSERT_GE(plan.windows.size(), 8u);
  auto logits = engine::Classify(**cls_, Inputs(plan));
  ASSERT_TRUE(logits.ok());
  const auto rows = Rows(*logits);
  for (auto [name, aggregate] : {std::pair{"weighted_mean", chunk::ClassifyAggregate::kWeightedMean},
                                 std::pair{"mean_probs", chunk::ClassifyAggregate::kMeanProbs},
                                 std::pair{"max", chunk::ClassifyAggregate::kMax}}) {
    HttpReply r = Post("/v1/classify", {{"model", "cls"}, {"input", {text, "Jesus wept."}}, {"truncation", "chunk"},
                                        {"chunk_tokens", 64}, {"chunk_overlap", 16}, {"aggregate", name}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = r.Json();
    EXPECT_EQ(j["data"][0]["windows"], plan.windows.size());
    EXPECT_EQ(j["data"][1]["windows"], 1);
    const chunk::MergedClassification want = chunk::MergeClassification(rows, plan.ContentWeights(), aggregate);
    ExpectProbs(j["data"][0]["probs"], want.probs, name);
    // Usage counts every token the model read.
    EXPECT_EQ(j["usage"]["prompt_tokens"].get<int64_t>(), plan.TotalTokens() + 5) << j["usage"];
  }
}

TEST_F(EncoderRoutesTest, TruncationAtTheEndClassifiesTheFirstWindow) {
  const std::string text = LongText(300);
  const chunk::InputPlan plan = Windows(**cls_, text, 128, 0, chunk::Truncation::kEnd);
  ASSERT_EQ(plan.windows.size(), 1u);
  ASSERT_TRUE(plan.truncated);
  auto logits = engine::Classify(**cls_, Inputs(plan));
  ASSERT_TRUE(logits.ok());
  HttpReply r = Post("/v1/classify", {{"model", "cls"}, {"input", text}, {"truncation", "end"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["data"][0]["truncated"], true);
  ExpectProbs(r.Json()["data"][0]["probs"], chunk::Softmax(Rows(*logits)[0]), "end");
  // The default (truncation "error") refuses it, naming the input.
  HttpReply refused = Post("/v1/classify", {{"model", "cls"}, {"input", text}});
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(refused.Json()["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(refused.Json()["error"]["param"], "input");
}

TEST_F(EncoderRoutesTest, PairsKeepTheirStructure) {
  const std::string question = "Who went up to Jerusalem?";
  const std::string passage = LongText(30);
  auto enc = (*cls_)->tokenizer()->EncodeWithSpecial(question, passage);
  ASSERT_TRUE(enc.ok());
  auto logits = engine::Classify(**cls_, {{enc->ids, enc->type_ids}});
  ASSERT_TRUE(logits.ok());
  HttpReply r = Post("/v1/classify", {{"model", "cls"}, {"input", question}, {"text_pair", passage}});
  ASSERT_EQ(r.status, 200) << r.body;
  ExpectProbs(r.Json()["data"][0]["probs"], chunk::Softmax(Rows(*logits)[0]), "pair");
  // A long passage: windows of the passage, the question repeated in each.
  const std::string long_passage = LongText(400);
  HttpReply chunked = Post("/v1/classify", {{"model", "cls"}, {"input", {question}}, {"text_pair", {long_passage}},
                                            {"truncation", "chunk"}});
  ASSERT_EQ(chunked.status, 200) << chunked.body;
  EXPECT_GT(chunked.Json()["data"][0]["windows"].get<int>(), 3);
}

TEST_F(EncoderRoutesTest, ChunkedEmbeddingsAreTheWeightedMeanOfWindowsThenNormalized) {
  const std::string text = LongText(400);
  const chunk::InputPlan plan = Windows(**cls_, text, 100, 12);
  auto pooled = engine::Embed(**cls_, Inputs(plan), engine::Pooling::kMean, false);
  ASSERT_TRUE(pooled.ok());
  for (auto [name, aggregate] : {std::pair{"weighted_mean", chunk::EmbedAggregate::kWeightedMean},
                                 std::pair{"first", chunk::EmbedAggregate::kFirst}}) {
    std::vector<float> want = chunk::MergeEmbeddings(Rows(*pooled), plan.ContentWeights(), aggregate);
    chunk::L2Normalize(want);
    HttpReply r = Post("/v1/embeddings", {{"model", "cls"}, {"input", text}, {"truncation", "chunk"},
                                          {"chunk_tokens", 100}, {"chunk_overlap", 12}, {"aggregate", name}});
    ASSERT_EQ(r.status, 200) << r.body;
    const json reply = r.Json();
    const json& got = reply["data"][0]["embedding"];
    ASSERT_EQ(got.size(), want.size());
    for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(got[j].get<double>(), want[j], 1e-5) << name << " " << j;
  }
  // normalize: false gives the merged vector itself.
  HttpReply raw = Post("/v1/embeddings", {{"model", "cls"}, {"input", "Jesus wept."}, {"normalize", false}});
  ASSERT_EQ(raw.status, 200) << raw.body;
  double norm = 0;
  const json raw_reply = raw.Json();
  for (const json& v : raw_reply["data"][0]["embedding"]) norm += v.get<double>() * v.get<double>();
  EXPECT_GT(std::abs(std::sqrt(norm) - 1.0), 1e-3);
}

TEST_F(EncoderRoutesTest, SentenceTransformersPoolingIsUsedAndReported) {
  const std::string text = "The LORD is my shepherd; I shall not want.";
  auto enc = (*st_)->tokenizer()->EncodeWithSpecial(text);
  auto cls = engine::Embed(**st_, {{enc->ids, enc->type_ids}}, engine::Pooling::kCls, true);
  ASSERT_TRUE(cls.ok());
  HttpReply r = Post("/v1/embeddings", {{"model", "st"}, {"input", text}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json reply = r.Json();
  const json& got = reply["data"][0]["embedding"];
  for (int64_t j = 0; j < cls->dim(1); ++j) EXPECT_NEAR(got[j].get<double>(), cls->data<float>()[j], 1e-5) << j;
  // The config's long_inputs default (chunk) applies without asking.
  HttpReply chunked = Post("/v1/embeddings", {{"model", "st"}, {"input", LongText(80)}});
  ASSERT_EQ(chunked.status, 200) << chunked.body;
  EXPECT_GT(chunked.Json()["data"][0]["windows"].get<int>(), 1);

  const json models = testing::Http(port(), "GET", "/v1/models").Json();
  std::map<std::string, json> cards;
  for (const json& m : models["data"]) cards[m["id"].get<std::string>()] = m["ferry"];
  EXPECT_EQ(cards["st"]["pooling"]["mode"], "cls");
  EXPECT_EQ(cards["st"]["pooling"]["normalize"], true);
  EXPECT_EQ(cards["st"]["pooling"]["source"], "sentence-transformers (1_Pooling/config.json)");
  EXPECT_EQ(cards["st"]["routes"], json({"/v1/embeddings", "/v1/score"}));
  EXPECT_EQ(cards["cls"]["pooling"]["source"], "default");
  EXPECT_EQ(cards["cls"]["routes"], json({"/v1/embeddings", "/v1/classify"}));
  EXPECT_EQ(cards["tok"]["routes"], json({"/v1/embeddings", "/v1/token-classify"}));
  EXPECT_EQ(cards["cross"]["routes"], json({"/v1/embeddings", "/v1/classify", "/v1/score"}));
  EXPECT_EQ(cards["cls"]["long_inputs"]["max_input_tokens"], 150000);
  EXPECT_EQ(cards["tok"]["labels"][1], "B-PER");
}

TEST_F(EncoderRoutesTest, TokenClassificationReportsEveryTokenWithItsCharacterOffsets) {
  const std::string text = "Moses went up to Jerusalem with A\xC3\xA4ron.";  // one non-ASCII letter
  std::vector<tokenizer::TokenOffset> offsets;
  auto ids = (*tok_)->tokenizer()->EncodeWithOffsets(text, &offsets);
  ASSERT_TRUE(ids.ok());
  auto enc = (*tok_)->tokenizer()->EncodeWithSpecial(text);
  auto logits = engine::ClassifyTokens(**tok_, {{enc->ids, enc->type_ids}});
  ASSERT_TRUE(logits.ok());
  const auto rows = Rows(*logits);
  const chunk::CharText chars(text);
  HttpReply r = Post("/v1/token-classify", {{"model", "tok"}, {"input", text}, {"aggregation", "none"},
                                            {"ignore_labels", json::array()}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json reply = r.Json();
  const json& entities = reply["data"][0]["entities"];
  ASSERT_EQ(entities.size(), ids->size());
  const auto& labels = (*tok_)->config().id2label;
  for (size_t i = 0; i < ids->size(); ++i) {
    const json& e = entities[i];
    const auto [start, end] = chars.FromBytes(offsets[i].begin, offsets[i].end);
    EXPECT_EQ(e["start"], start);
    EXPECT_EQ(e["end"], end);
    EXPECT_EQ(e["text"], std::string(chars.Slice(start, end)));
    EXPECT_EQ(e["index"], i + 1);  // after [CLS]
    const std::vector<double> p = chunk::Softmax(rows[i + 1]);
    const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    EXPECT_EQ(e["label"], labels.at(static_cast<int>(best)));
    EXPECT_NEAR(e["score"].get<double>(), p[best], 1e-5);
  }
  EXPECT_EQ(entities.back()["text"], ".");
  EXPECT_EQ(entities[entities.size() - 2]["end"], 37);  // "Aäron" ends at code point 37 (byte 38)
}

TEST_F(EncoderRoutesTest, ChunkedTokenClassificationTakesEachTokenFromItsCenterWindow) {
  const std::string text = LongText(120);
  const chunk::InputPlan plan = Windows(**tok_, text, 24, 6);
  ASSERT_GE(plan.windows.size(), 6u);
  auto logits = engine::ClassifyTokens(**tok_, Inputs(plan));
  ASSERT_TRUE(logits.ok());
  const auto rows = Rows(*logits);
  // Each window's rows start after the previous window's.
  std::vector<size_t> first_row;
  size_t row = 0;
  std::vector<chunk::Span> spans;
  for (const auto& w : plan.windows) {
    first_row.push_back(row);
    row += w.ids.size();
    spans.push_back(w.content);
  }
  const std::vector<int> owners = chunk::CenterOwners(spans, plan.windowed_tokens);
  HttpReply r = Post("/v1/token-classify", {{"model", "tok"}, {"input", text}, {"truncation", "chunk"},
                                            {"chunk_tokens", 24}, {"chunk_overlap", 6}, {"aggregation", "none"},
                                            {"ignore_labels", json::array()}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json reply = r.Json();
  const json& entities = reply["data"][0]["entities"];
  ASSERT_EQ(entities.size(), static_cast<size_t>(plan.windowed_tokens));
  EXPECT_EQ(r.Json()["data"][0]["windows"], plan.windows.size());
  const auto& labels = (*tok_)->config().id2label;
  for (int t = 0; t < plan.windowed_tokens; ++t) {
    const size_t w = static_cast<size_t>(owners[static_cast<size_t>(t)]);
    const auto& win = plan.windows[w];
    const std::vector<double> p = chunk::Softmax(rows[first_row[w] + static_cast<size_t>(win.content_at + t - win.content.begin)]);
    const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
    ASSERT_EQ(entities[static_cast<size_t>(t)]["label"], labels.at(static_cast<int>(best))) << "token " << t;
    EXPECT_NEAR(entities[static_cast<size_t>(t)]["score"].get<double>(), p[best], 1e-5);
    EXPECT_EQ(entities[static_cast<size_t>(t)]["index"], t + 1);
  }
  // Grouped strategies and transformers' merge answer too, with entities inside the text.
  for (const char* aggregation : {"simple", "first", "average", "max"}) {
    for (const char* merge : {"center", "hf"}) {
      HttpReply g = Post("/v1/token-classify", {{"model", "tok"}, {"input", text}, {"truncation", "chunk"},
                                                {"chunk_tokens", 24}, {"aggregation", aggregation},
                                                {"chunk_merge", merge}, {"ignore_labels", json::array()}});
      ASSERT_EQ(g.status, 200) << g.body;
      uint32_t last_end = 0;
      const json grouped = g.Json();
      for (const json& e : grouped["data"][0]["entities"]) {
        EXPECT_EQ(e["text"], text.substr(e["start"], e["end"].get<size_t>() - e["start"].get<size_t>()));
        if (std::string(merge) == "center") {
          EXPECT_GE(e["start"].get<uint32_t>(), last_end) << aggregation;  // no overlaps
        }
        last_end = e["end"];
      }
    }
  }
}

TEST_F(EncoderRoutesTest, ScoreFollowsVllmForCrossAndBiEncoders) {
  const std::string q = "Who led Israel out of Egypt?";
  const std::vector<std::string> docs = {"Moses led the children of Israel.", "Jesus wept.", LongText(200)};
  // Cross-encoder: sigmoid of the pair's logit; the long document is windowed.
  HttpReply r = Post("/v1/score", {{"model", "cross"}, {"text_1", q}, {"text_2", docs}, {"truncation", "chunk"}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = r.Json();
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["id"].get<std::string>().rfind("score-", 0), 0u);
  ASSERT_EQ(j["data"].size(), 3u);
  for (size_t i = 0; i < 2; ++i) {
    auto enc = (*cross_)->tokenizer()->EncodeWithSpecial(q, docs[i]);
    auto logit = engine::Classify(**cross_, {{enc->ids, enc->type_ids}});
    ASSERT_TRUE(logit.ok());
    EXPECT_EQ(j["data"][i]["object"], "score");
    EXPECT_EQ(j["data"][i]["index"], i);
    EXPECT_NEAR(j["data"][i]["score"].get<double>(), 1.0 / (1.0 + std::exp(-logit->data<float>()[0])), 1e-5);
  }
  // N x N, and mismatched counts.
  HttpReply nn = Post("/v1/score", {{"model", "cross"}, {"text_1", {q, q}}, {"text_2", {docs[0], docs[1]}}});
  ASSERT_EQ(nn.status, 200) << nn.body;
  EXPECT_NEAR(nn.Json()["data"][1]["score"].get<double>(), j["data"][1]["score"].get<double>(), 1e-6);
  HttpReply bad = Post("/v1/score", {{"model", "cross"}, {"text_1", {q, q}}, {"text_2", docs}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.Json()["error"]["param"], "text_2");
  // Bi-encoder: the cosine of the two embeddings.
  HttpReply bi = Post("/v1/score", {{"model", "st"}, {"text_1", q}, {"text_2", docs[0]}});
  ASSERT_EQ(bi.status, 200) << bi.body;
  auto a = (*st_)->tokenizer()->EncodeWithSpecial(q);
  auto b = (*st_)->tokenizer()->EncodeWithSpecial(docs[0]);
  auto v = engine::Embed(**st_, {{a->ids, a->type_ids}, {b->ids, b->type_ids}}, engine::Pooling::kCls, true);
  ASSERT_TRUE(v.ok());
  double dot = 0;
  for (int64_t k = 0; k < v->dim(1); ++k) dot += static_cast<double>(v->data<float>()[k]) * v->data<float>()[v->dim(1) + k];
  EXPECT_NEAR(bi.Json()["data"][0]["score"].get<double>(), dot, 1e-5);
  // An eight-label classifier is no cross-encoder.
  EXPECT_EQ(Post("/v1/score", {{"model", "cls"}, {"text_1", q}, {"text_2", "a"}}).Json()["error"]["param"], "model");
}

TEST_F(EncoderRoutesTest, ADisconnectCancelsTheQueuedWindowsOfItsRequest) {
  // About 800 windows of 128 tokens on a model that runs one window at a time.
  const std::string text = LongText(80000);
  const json body = {{"model", "slow"}, {"input", text}, {"truncation", "chunk"}};
  const std::string payload = body.dump();
  {
    testing::TestConnection c(port());
    ASSERT_TRUE(c.connected());
    c.SendRaw("POST /v1/classify HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(payload.size()) + "\r\n\r\n" + payload);
    // Wait until its windows are queued, then leave.
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    json batcher;
    do {
      std::this_thread::sleep_for(5ms);
      batcher = SlowBatcher();
    } while (batcher["queued"].get<int>() < 100 && std::chrono::steady_clock::now() < deadline);
    ASSERT_GE(batcher["queued"].get<int>(), 100) << batcher;
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  json batcher;
  do {
    std::this_thread::sleep_for(5ms);
    batcher = SlowBatcher();
  } while (batcher["queued"].get<int>() > 0 && std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(batcher["queued"], 0) << batcher;
  EXPECT_GE(batcher["cancelled"].get<int>(), 100) << batcher;
  EXPECT_LT(batcher["items"].get<int>(), 700) << batcher;  // most windows never ran
  // The model serves the next request.
  HttpReply r = Post("/v1/classify", {{"model", "slow"}, {"input", "Jesus wept."}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(EncoderRoutesTest, TruncatePromptTokensKeepsTheLastTokens) {
  const std::string prompt = "In the beginning God created the heaven and the earth. And the earth was without form";
  HttpReply r = Post("/v1/completions", {{"model", "dec"}, {"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0},
                                         {"truncate_prompt_tokens", 4}, {"echo", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.Json()["usage"]["prompt_tokens"], 4);
  const std::string echoed = r.Json()["choices"][0]["text"];
  EXPECT_NE(echoed.find("without form"), std::string::npos) << echoed;
  EXPECT_EQ(echoed.find("beginning"), std::string::npos) << echoed;
  // A prompt far over the context: without truncate_prompt_tokens a 400 before tokenizing,
  // with it the last tokens.
  std::string huge;
  for (int i = 0; i < 400; ++i) huge += prompt + ". ";
  huge += "The end";
  HttpReply over = Post("/v1/completions", {{"model", "dec"}, {"prompt", huge}, {"max_tokens", 1}});
  EXPECT_EQ(over.status, 400) << over.body;
  EXPECT_EQ(over.Json()["error"]["code"], "context_length_exceeded");
  HttpReply kept = Post("/v1/completions", {{"model", "dec"}, {"prompt", huge}, {"max_tokens", 1}, {"temperature", 0},
                                            {"truncate_prompt_tokens", 16}, {"echo", true}});
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(kept.Json()["usage"]["prompt_tokens"], 16);
  const std::string tail = kept.Json()["choices"][0]["text"];
  EXPECT_NE(tail.find("The end"), std::string::npos) << tail;
  HttpReply zero = Post("/v1/completions", {{"model", "dec"}, {"prompt", prompt}, {"truncate_prompt_tokens", 0}});
  EXPECT_EQ(zero.status, 400);
  EXPECT_EQ(zero.Json()["error"]["param"], "truncate_prompt_tokens");
}

TEST_F(EncoderRoutesTest, BadInputsAreFourHundredsNamingTheField) {
  const std::string long_text = LongText(300);
  struct Bad {
    std::string name;
    std::string path;
    json body;
    int status;
    std::string param;
  };
  const std::vector<Bad> cases = {
      {"empty document", "/v1/classify", {{"model", "cls"}, {"input", ""}}, 400, "input"},
      {"empty document, chunked", "/v1/embeddings", {{"model", "cls"}, {"input", {"a", ""}}, {"truncation", "chunk"}}, 400, "input"},
      {"empty pair", "/v1/classify", {{"model", "cls"}, {"input", "a"}, {"text_pair", ""}}, 400, "text_pair"},
      {"unknown truncation", "/v1/classify", {{"model", "cls"}, {"input", "a"}, {"truncation", "middle"}}, 400, "truncation"},
      {"overlap leaves no content", "/v1/classify",
       {{"model", "cls"}, {"input", long_text}, {"truncation", "chunk"}, {"chunk_tokens", 32}, {"chunk_overlap", 32}}, 400,
       "chunk_overlap"},
      {"overlap over the room after specials", "/v1/classify",
       {{"model", "cls"}, {"input", long_text}, {"truncation", "chunk"}, {"chunk_tokens", 32}, {"chunk_overlap", 30}}, 400,
       "chunk_overlap"},
      {"window over the context", "/v1/classify", {{"model", "cls"}, {"input", "a"}, {"chunk_tokens", 129}}, 400, "chunk_tokens"},
      {"window without content", "/v1/classify",
       {{"model", "cls"}, {"input", long_text}, {"truncation", "chunk"}, {"chunk_tokens", 2}, {"chunk_overlap", 0}}, 400,
       "chunk_tokens"},
      {"unknown classify aggregate", "/v1/classify", {{"model", "cls"}, {"input", "a"}, {"aggregate", "median"}}, 400, "aggregate"},
      {"unknown embeddings aggregate", "/v1/embeddings", {{"model", "cls"}, {"input", "a"}, {"aggregate", "max"}}, 400, "aggregate"},
      {"unknown token aggregation", "/v1/token-classify", {{"model", "tok"}, {"input", "a"}, {"aggregation", "mean"}}, 400, "aggregation"},
      {"unknown chunk merge", "/v1/token-classify", {{"model", "tok"}, {"input", "a"}, {"chunk_merge", "nms"}}, 400, "chunk_merge"},
      {"token route on a sequence classifier", "/v1/token-classify", {{"model", "cls"}, {"input", "a"}}, 400, "model"},
      {"token route with token ids", "/v1/token-classify", {{"model", "tok"}, {"input", {101, 102}}}, 400, "input"},
      {"ignore_labels not a list", "/v1/token-classify", {{"model", "tok"}, {"input", "a"}, {"ignore_labels", "O"}}, 400, "ignore_labels"},
      {"pairs that do not match", "/v1/classify", {{"model", "cls"}, {"input", {"a", "b"}}, {"text_pair", {"c"}}}, 400, "text_pair"},
      {"pair with token ids", "/v1/classify", {{"model", "cls"}, {"input", {{5, 6}}}, {"text_pair", {"c"}}}, 400, "text_pair"},
      {"classify on an embedding model", "/v1/classify", {{"model", "st"}, {"input", "a"}}, 400, "model"},
      {"score without text_2", "/v1/score", {{"model", "cross"}, {"text_1", "a"}}, 400, "text_2"},
      {"score on a decoder", "/v1/score", {{"model", "dec"}, {"text_1", "a"}, {"text_2", "b"}}, 400, "model"},
      {"token classify on a decoder", "/v1/token-classify", {{"model", "dec"}, {"input", "a"}}, 400, "model"},
      {"unknown field", "/v1/classify", {{"model", "cls"}, {"input", "a"}, {"chunk_size", 3}}, 400, ""},
      {"over max_input_tokens", "/v1/classify", {{"model", "cls"}, {"input", LongText(130000)}, {"truncation", "chunk"}}, 413, "input"},
  };
  for (const Bad& c : cases) {
    HttpReply r = Post(c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    const json j = r.Json();
    ASSERT_TRUE(j.contains("error")) << c.name << ": " << r.body;
    if (!c.param.empty()) {
      EXPECT_EQ(j["error"]["param"], c.param) << c.name << ": " << r.body;
    }
    if (c.status == 413) {
      EXPECT_NE(j["error"]["message"].get<std::string>().find("max_input_tokens"), std::string::npos) << r.body;
    }
  }
  // The server is unharmed.
  EXPECT_EQ(Post("/v1/classify", {{"model", "cls"}, {"input", "Jesus wept."}}).status, 200);
}

// transformers' token-classification pipeline on a random tiny BERT, every aggregation
// strategy, with and without stride, when tools/fixtures/token_classification.py's output is
// in tests/fixtures/token_classification/.
TEST(TokenClassificationFixtureTest, MatchesTransformersPipeline) {
  const std::string dir = ferry::testing::SourcePath("tests/fixtures/token_classification");
  if (!fs::exists(dir + "/pipeline.json") || !fs::exists(dir + "/model/config.json")) {
    GTEST_SKIP() << "no transformers pipeline outputs in " << dir;
  }
  const json ref = json::parse(std::ifstream(dir + "/pipeline.json"));
  const std::string yaml = "listener: {host: 127.0.0.1, port: 0}\nauth: {mode: none}\nmodels:\n"
                           "  - name: tc\n    path: " + dir + "/model\n    threads: 2\n"
                           "log: {level: warn, request_log: false}\n";
  auto cfg = ParseServerConfig(yaml);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto server = Server::Create(*cfg);
  ASSERT_TRUE(server.ok());
  ASSERT_TRUE((*server)->Start().ok());
  ASSERT_TRUE((*server)->WaitUntilReady(60000));
  const int max_length = ref["max_length"];
  int compared = 0;
  for (const json& c : ref["cases"]) {
    for (const json& r : c["results"]) {
      json body = {{"model", "tc"}, {"input", c["text"]}, {"aggregation", r["aggregation"]},
                   {"ignore_labels", json::array()}, {"chunk_tokens", max_length}};
      if (r["stride"].is_null()) {
        body["truncation"] = "end";  // the pipeline truncates at model_max_length
      } else {
        body["truncation"] = "chunk";
        body["chunk_overlap"] = r["stride"];
        body["chunk_merge"] = r["merge"];
      }
      const std::string what = c["text"].get<std::string>().substr(0, 30) + " / " + body.dump();
      HttpReply reply = PostJson((*server)->port(), "/v1/token-classify", body);
      ASSERT_EQ(reply.status, 200) << what << ": " << reply.body;
      const json got = reply.Json()["data"][0]["entities"];
      const json& want = r["entities"];
      ASSERT_EQ(got.size(), want.size()) << what << "\n got " << got.dump() << "\nwant " << want.dump();
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i]["label"], want[i]["label"]) << what << " entity " << i;
        EXPECT_EQ(got[i]["start"], want[i]["start"]) << what << " entity " << i;
        EXPECT_EQ(got[i]["end"], want[i]["end"]) << what << " entity " << i;
        EXPECT_EQ(got[i]["word"], want[i]["word"]) << what << " entity " << i;
        EXPECT_NEAR(got[i]["score"].get<double>(), want[i]["score"].get<double>(), 1e-4) << what << " entity " << i;
        if (want[i].contains("index")) {
          EXPECT_EQ(got[i]["index"], want[i]["index"]) << what;
        }
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 100);
}

// ModernBERT through the server (tests/fixtures/architectures/modernbert-tiny): /v1/classify
// on the reference texts, one request with every input and a pair, against the softmax of
// transformers' float64 logits; an input over the vocabulary's ids is a 400 and the server
// keeps answering.
TEST(ModernBertRoutesTest, ClassifyMatchesTransformers) {
  const std::string dir = ferry::testing::SourcePath("tests/fixtures/architectures/modernbert-tiny");
  const json ref = json::parse(std::ifstream(dir + "/reference.json"));
  auto ref_file = io::SafetensorsFile::Open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref_file.ok()) << ref_file.status().ToString();
  const std::string yaml = "listener: {host: 127.0.0.1, port: 0}\nauth: {mode: none}\nmodels:\n"
                           "  - name: mb\n    path: " + dir + "\n    threads: 2\n"
                           "    dynamic_batching: {max_batch_size: 8, max_queue_delay_us: 1000}\n"
                           "log: {level: warn, request_log: false}\n";
  auto cfg = ParseServerConfig(yaml);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto server = Server::Create(*cfg);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE((*server)->Start().ok());
  ASSERT_TRUE((*server)->WaitUntilReady(60000));
  const int port = (*server)->port();
  json texts = json::array(), pairs = json::array();
  int with_pair = -1;
  for (const json& input : ref["inputs"]) {
    if (!input["text_pair"].is_null()) {
      with_pair = input["index"].get<int>();
      continue;
    }
    texts.push_back(input["text"]);
  }
  auto expect = [&](const json& got, int index, const std::string& what) {
    const Tensor t = (*ref_file)->Get("i" + std::to_string(index) + ".logits").value().ToF32();
    const std::vector<float> logits(t.data<float>(), t.data<float>() + t.numel());
    ExpectProbs(got["probs"], chunk::Softmax(logits), what);
  };
  HttpReply r = PostJson(port, "/v1/classify", {{"model", "mb"}, {"input", texts}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json data = r.Json()["data"];
  ASSERT_EQ(data.size(), texts.size());
  int row = 0;
  for (const json& input : ref["inputs"]) {
    if (!input["text_pair"].is_null()) continue;
    expect(data[row++], input["index"].get<int>(), input["text"].get<std::string>());
  }
  ASSERT_GE(with_pair, 0);
  const json& pair_input = ref["inputs"][with_pair];
  HttpReply p = PostJson(port, "/v1/classify",
                         {{"model", "mb"}, {"input", pair_input["text"]}, {"text_pair", pair_input["text_pair"]}});
  ASSERT_EQ(p.status, 200) << p.body;
  expect(p.Json()["data"][0], with_pair, "pair");

  HttpReply bad = PostJson(port, "/v1/classify", {{"model", "mb"}, {"input", {{2, 100000, 3}}}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_TRUE(bad.Json().contains("error")) << bad.body;
  EXPECT_EQ(PostJson(port, "/v1/classify", {{"model", "mb"}, {"input", texts[0]}}).status, 200);
}

}  // namespace
}  // namespace ferry::serve
