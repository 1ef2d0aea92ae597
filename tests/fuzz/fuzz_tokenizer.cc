// Text through each tokenizer family ferry ships: byte-level BPE (GPT-2), WordPiece (BERT),
// SentencePiece-style BPE from tokenizer.json and a SentencePiece tokenizer.model (LLaMA).
// The first byte picks the family, the rest is the text. Invariants: encoding either
// succeeds or refuses invalid UTF-8; every id is in the vocabulary; decoding what was
// encoded succeeds; streaming detokenization gives exactly what Decode gives; and byte-level
// BPE, which loses nothing, gives the text back. Decoding arbitrary ids never crashes.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

namespace {

using ferry::tokenizer::Tokenizer;

struct Family {
  std::unique_ptr<Tokenizer> tok;
  bool lossless = false;   // Decode(Encode(text), keep special) == text for valid UTF-8
  bool streamable = true;  // the streaming detokenizer matches Decode (WordPiece's joining
                           // of word pieces is Decode's alone)
};

std::vector<Family>& Families() {
  static std::vector<Family> families = [] {
    std::vector<Family> out;
    auto load = [&](const std::map<std::string, std::string>& files, bool lossless, bool wordpiece = false) {
      auto t = ferry::tokenizer::LoadTokenizerFromFiles(files);
      FUZZ_CHECK(t.ok());
      out.push_back(Family{std::move(t).value(), lossless, !wordpiece});
    };
    auto read = [](const std::string& path) {
      FILE* f = std::fopen(path.c_str(), "rb");
      FUZZ_CHECK(f != nullptr);
      std::string s;
      char buf[65536];
      for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
      std::fclose(f);
      return s;
    };
    using ferry::fuzz::Fixture;
    load({{"tokenizer.json", read(Fixture("tokenizers/gpt2/tokenizer.json"))},
          {"tokenizer_config.json", read(Fixture("tokenizers/gpt2/tokenizer_config.json"))}},
         true);
    load({{"tokenizer.json", read(Fixture("tokenizers/bert/tokenizer.json"))},
          {"tokenizer_config.json", read(Fixture("tokenizers/bert/tokenizer_config.json"))}},
         false, /*wordpiece=*/true);
    load({{"tokenizer.json", read(Fixture("tokenizers/llama/tokenizer.json"))},
          {"tokenizer_config.json", read(Fixture("tokenizers/llama/tokenizer_config.json"))}},
         false);
    load({{"tokenizer.model", read(Fixture("tokenizers/llama/tokenizer.model"))},
          {"tokenizer_config.json", read(Fixture("tokenizers/llama/tokenizer_config.json"))}},
         false);
    return out;
  }();
  return families;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<Family>& families = Families();
  const Family& f = families[data[0] % families.size()];
  const Tokenizer& tok = *f.tok;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);

  if (data[0] & 0x80) {
    // Arbitrary ids, two bytes each: decoding refuses unknown ids and never crashes.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < text.size(); i += 2) {
      ids.push_back(static_cast<int32_t>(static_cast<uint16_t>(text[i]) | (static_cast<uint16_t>(text[i + 1]) << 8)) %
                    (tok.vocab_size() + 8));
    }
    (void)tok.Decode(ids, true);
    (void)tok.Decode(ids, false);
    return 0;
  }

  auto ids = tok.Encode(text);
  if (!ids.ok()) return 0;  // invalid UTF-8 is refused, never crashes
  for (int32_t id : ids.value()) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  auto with_special = tok.EncodeWithSpecial(text);
  FUZZ_CHECK(with_special.ok());
  FUZZ_CHECK(with_special.value().ids.size() == with_special.value().type_ids.size());
  for (int32_t id : with_special.value().ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());

  auto decoded = tok.Decode(ids.value(), /*skip_special=*/false);
  FUZZ_CHECK(decoded.ok());
  if (f.lossless) FUZZ_CHECK(decoded.value() == text);

  if (!f.streamable) return 0;
  // Streaming gives what Decode gives.
  ferry::tokenizer::IncrementalDetokenizer detok(tok, /*skip_special=*/false);
  std::string streamed;
  for (int32_t id : ids.value()) detok.Add(id, &streamed);
  streamed += detok.Flush();
  FUZZ_CHECK(streamed == decoded.value());
  return 0;
}
