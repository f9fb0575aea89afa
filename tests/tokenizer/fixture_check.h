// Test helper: compares a Tokenizer with the Hugging Face oracle files in fixtures/tokenizer/
// (written by tools/make_tokenizer_fixtures.py) and counts mismatches per kind of check.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace vllm::testing {

struct FixtureReport {
  size_t strings = 0, id_sequences = 0;
  std::map<std::string, size_t> mismatches;  // check name -> count
  std::vector<std::string> examples;         // the first few mismatches, printable
  size_t total() const;
  std::string summary(const std::string& name) const;
};

// The tokenizers under test, loaded once per process: the shared HF folders by name
// ("llama3", ...) and "smollm2_gguf". nullptr when the files are absent.
const Tokenizer* test_tokenizer(const std::string& name);
inline constexpr const char* kSharedTokenizers = "../shared/tokenizers/";
inline constexpr const char* kSmolGguf = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

// Corpus entries as raw bytes (some are invalid UTF-8).
const std::vector<std::string>& fixture_corpus();

// Encode/decode checks against fixtures/tokenizer/<name>.jsonl; with_stream also checks that
// IncrementalDetokenizer deltas add up to decode(). Without with_added_specials the checks that
// depend on the bos/eos a tokenizer adds (encode_special, decode_special, decode_skip) are left
// out, for a tokenizer that shares the fixture's vocabulary but not its post-processor.
FixtureReport check_fixture(const Tokenizer& tokenizer, const std::string& name, bool with_stream,
                            bool with_added_specials = true);

}  // namespace vllm::testing
