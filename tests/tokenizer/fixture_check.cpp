// Fixture comparison: every corpus string and random id sequence, exact equality, mismatches
// counted per check with the first examples kept for the failure message.
#include "fixture_check.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "gguf_vocab_reader.h"
#include "tokenizer/unicode.h"

namespace vllm::testing {
namespace {

using nlohmann::json;
constexpr const char* kDir = "fixtures/tokenizer/";

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string printable(const std::string& s, size_t limit = 80) {
  std::ostringstream os;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n')
      os << "\\n";
    else if (c < 0x20 || c == 0x7F)
      os << "\\x" << std::hex << int(c) << std::dec;
    else
      os << s[i];
  }
  if (s.size() > limit) os << "...";
  return os.str();
}

std::string ids_str(const std::vector<int32_t>& ids, size_t limit = 16) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ids.size() && i < limit; ++i) os << (i ? "," : "") << ids[i];
  if (ids.size() > limit) os << ",...(" << ids.size() << ")";
  os << "]";
  return os.str();
}

std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  IncrementalDetokenizer d(t, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string delta = d.push(id);
    if (!tok::utf8_is_valid(delta)) return "<invalid UTF-8 delta>";
    out += delta;
  }
  return out + d.finish();
}

}  // namespace

size_t FixtureReport::total() const {
  size_t n = 0;
  for (const auto& [k, v] : mismatches) n += v;
  return n;
}

std::string FixtureReport::summary(const std::string& name) const {
  std::ostringstream os;
  os << name << ": " << strings << " strings, " << id_sequences << " id sequences, mismatches:";
  for (const auto& [k, v] : mismatches) os << " " << k << "=" << v;
  for (const auto& e : examples) os << "\n  " << e;
  return os.str();
}

const Tokenizer* test_tokenizer(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::unique_ptr<Tokenizer> t;
  if (name == "smollm2_gguf") {
    if (std::filesystem::exists(kSmolGguf))
      t = Tokenizer::from_gguf_vocab(GgufMetaReader(kSmolGguf).read_vocab());
  } else {
    const std::string dir = kSharedTokenizers + name;
    if (std::filesystem::exists(dir + "/tokenizer.json")) t = Tokenizer::from_dir(dir);
  }
  return cache.emplace(name, std::move(t)).first->second.get();
}

const std::vector<std::string>& fixture_corpus() {
  static const std::vector<std::string> corpus = [] {
    std::ifstream in(std::string(kDir) + "corpus.jsonl");
    if (!in)
      throw std::runtime_error("missing fixtures/tokenizer/corpus.jsonl (run from the repo root)");
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);) {
      const json j = json::parse(line);
      out.push_back(j.contains("t") ? j["t"].get<std::string>()
                                    : from_hex(j.at("x").get<std::string>()));
    }
    return out;
  }();
  return corpus;
}

FixtureReport check_fixture(const Tokenizer& t, const std::string& name, bool with_stream,
                            bool with_added_specials) {
  const auto& corpus = fixture_corpus();
  std::ifstream in(std::string(kDir) + name + ".jsonl");
  if (!in) throw std::runtime_error("missing fixtures/tokenizer/" + name + ".jsonl");
  std::string line;
  std::getline(in, line);
  const json head = json::parse(line);
  const auto prefix = head.at("prefix").get<std::vector<int32_t>>();
  const auto suffix = head.at("suffix").get<std::vector<int32_t>>();
  const auto prefix_text = head.at("prefix_text").get<std::string>();
  const auto suffix_text = head.at("suffix_text").get<std::string>();

  FixtureReport r;
  for (const char* k : {"encode", "decode", "decode_ids", "decode_ids_skip"}) r.mismatches[k] = 0;
  if (with_added_specials)
    for (const char* k : {"encode_special", "decode_special", "decode_skip"}) r.mismatches[k] = 0;
  if (with_stream) r.mismatches["stream"] = 0;
  auto fail = [&](const char* check, const std::string& what) {
    ++r.mismatches[check];
    if (r.examples.size() < 6) r.examples.push_back(std::string(check) + ": " + what);
  };
  auto check_ids = [&](const char* check, const std::string& text, const std::vector<int32_t>& want,
                       const std::vector<int32_t>& got) {
    if (want == got) return;
    std::ostringstream os;
    os << "'" << printable(text) << "' want " << ids_str(want) << " got " << ids_str(got);
    fail(check, os.str());
  };
  auto check_text = [&](const char* check, const std::string& ctx, const std::string& want,
                        const std::string& got) {
    if (want == got) return;
    std::ostringstream os;
    os << ctx << " want '" << printable(want) << "' got '" << printable(got) << "'";
    fail(check, os.str());
  };

  size_t index = 0;
  while (std::getline(in, line)) {
    const json rec = json::parse(line);
    if (rec.contains("r")) {
      const auto ids = rec["r"].get<std::vector<int32_t>>();
      const std::string ctx = "ids " + ids_str(ids);
      const auto d = rec.at("d").get<std::string>(), s = rec.at("s").get<std::string>();
      check_text("decode_ids", ctx, d, t.decode(ids, false));
      check_text("decode_ids_skip", ctx, s, t.decode(ids, true));
      if (with_stream) {
        check_text("stream", ctx, d, stream_decode(t, ids, false));
        check_text("stream", ctx + " skip", s, stream_decode(t, ids, true));
      }
      ++r.id_sequences;
      continue;
    }
    if (rec.contains("i")) index = rec["i"].get<size_t>();  // a subset of the corpus
    if (index >= corpus.size())
      throw std::runtime_error(name + ".jsonl has more lines than the corpus");
    const std::string& text = corpus[index++];
    const std::string ref_text = tok::utf8_lossy(text);
    const auto n = rec.at("n").get<std::vector<int32_t>>();
    std::vector<int32_t> a = prefix;
    a.insert(a.end(), n.begin(), n.end());
    a.insert(a.end(), suffix.begin(), suffix.end());
    if (rec.contains("a")) a = rec["a"].get<std::vector<int32_t>>();
    const std::string d = rec.value("d", ref_text);
    const std::string s = rec.value("s", d);
    std::string da = prefix_text + d + suffix_text;
    if (rec.contains("da"))
      da = rec["da"].is_string() ? rec["da"].get<std::string>()
                                 : prefix_text + " " + d + suffix_text;

    check_ids("encode", text, n, t.encode(text, false));
    const std::string ctx = "ids of '" + printable(text, 40).append("'");
    check_text("decode", ctx, d, t.decode(n, false));
    if (with_added_specials) {
      check_ids("encode_special", text, a, t.encode(text, true));
      check_text("decode_special", ctx, da, t.decode(a, false));
      check_text("decode_skip", ctx, s, t.decode(a, true));
    }
    if (with_stream) {
      check_text("stream", ctx, with_added_specials ? da : d,
                 stream_decode(t, with_added_specials ? a : n, false));
      if (with_added_specials) check_text("stream", ctx + " skip", s, stream_decode(t, a, true));
    }
    ++r.strings;
  }
  if (r.strings == 0 || (!head.contains("variant") && r.strings != corpus.size()))
    throw std::runtime_error(name + ".jsonl does not cover the corpus");
  return r;
}

}  // namespace vllm::testing
