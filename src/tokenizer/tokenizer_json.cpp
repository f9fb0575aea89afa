// Loading a Hugging Face tokenizer.json (+ tokenizer_config.json) into a Pipeline, including the
// post-processor that transformers rebuilds from add_bos_token / add_eos_token.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/json_reader.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/wordpiece.h"
#include "util/check.h"

namespace vllm {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error("bad JSON in " + path + ": " + e.what());
  }
}

std::optional<std::string> opt_string(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_object()) return v.at("content").get<std::string>();  // an AddedToken
  return v.get<std::string>();
}

std::unique_ptr<tok::TokenModel> make_model(const tok::TokenizerJson& file) {
  const json& m = file.doc.at("model");
  const std::string type = m.value("type", std::string("BPE"));
  if (type == "WordPiece") {
    tok::WordPieceOptions o;
    o.unk_token = opt_string(m, "unk_token").value_or(o.unk_token);
    o.continuing_subword_prefix =
        opt_string(m, "continuing_subword_prefix").value_or(o.continuing_subword_prefix);
    o.max_input_chars_per_word = m.value("max_input_chars_per_word", o.max_input_chars_per_word);
    return std::make_unique<tok::WordPieceModel>(file.vocab, std::move(o));
  }
  if (type != "BPE") throw Error("unsupported tokenizer model type: " + type);
  tok::BpeOptions o;
  o.unk_token = opt_string(m, "unk_token");
  o.fuse_unk = m.value("fuse_unk", false);
  o.byte_fallback = m.value("byte_fallback", false);
  o.ignore_merges = m.value("ignore_merges", false);
  o.continuing_subword_prefix = opt_string(m, "continuing_subword_prefix").value_or("");
  o.end_of_word_suffix = opt_string(m, "end_of_word_suffix").value_or("");
  return std::make_unique<tok::BpeModel>(file.vocab, file.merges, std::move(o));
}

// Fills prefix/suffix ids from a post_processor (TemplateProcessing "single", Roberta/Bert, or a
// Sequence of those; ByteLevel adds nothing).
void apply_post_processor(const json& j, tok::Pipeline& p) {
  if (j.is_null()) return;
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const auto& x : j.at("processors")) apply_post_processor(x, p);
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    p.prefix_ids.push_back(j.at("cls").at(1).get<int32_t>());
    p.suffix_ids.insert(p.suffix_ids.begin(), j.at("sep").at(1).get<int32_t>());
    return;
  }
  if (type != "TemplateProcessing")
    throw Error("unsupported tokenizer post_processor type: " + type);
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    const auto& ids = j.at("special_tokens").at(name).at("ids");
    auto& dst = seen_sequence ? after : before;
    for (const auto& id : ids) dst.push_back(id.get<int32_t>());
  }
  p.prefix_ids.insert(p.prefix_ids.end(), before.begin(), before.end());
  p.suffix_ids.insert(p.suffix_ids.begin(), after.begin(), after.end());
}

// transformers 4.x classes that rebuild the post-processor on load, with their add_bos/add_eos
// defaults: TemplateProcessing(bos? $A eos?) replaces whatever tokenizer.json had.
const std::map<std::string, std::pair<bool, bool>>& rebuilding_classes() {
  static const std::map<std::string, std::pair<bool, bool>> m = {
      {"LlamaTokenizer", {true, false}},     {"LlamaTokenizerFast", {true, false}},
      {"CodeLlamaTokenizer", {true, false}}, {"CodeLlamaTokenizerFast", {true, false}},
      {"GemmaTokenizer", {true, false}},     {"GemmaTokenizerFast", {true, false}},
      {"CohereTokenizer", {true, false}},    {"CohereTokenizerFast", {true, false}},
      {"GPTNeoXTokenizer", {false, false}},  {"GPTNeoXTokenizerFast", {false, false}},
  };
  return m;
}

std::optional<int32_t> lookup(const tok::Pipeline& p, const std::string& token) {
  if (auto id = p.added.id_of(token)) return id;
  return p.model->token_to_id(token);
}

void apply_config(const json& cfg, tok::Pipeline& p) {
  p.bos_token = opt_string(cfg, "bos_token").value_or("");
  p.eos_token = opt_string(cfg, "eos_token").value_or("");
  if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      p.chat_template = ct.get<std::string>();
    } else if (ct.is_array() && !ct.empty()) {  // named templates: "default", else the first
      p.chat_template = ct[0].at("template").get<std::string>();
      for (const auto& t : ct)
        if (t.value("name", std::string()) == "default")
          p.chat_template = t.at("template").get<std::string>();
    }
  }
  const auto it = rebuilding_classes().find(cfg.value("tokenizer_class", std::string()));
  if (it == rebuilding_classes().end()) return;
  const bool add_bos = cfg.value("add_bos_token", it->second.first);
  const bool add_eos = cfg.value("add_eos_token", it->second.second);
  p.prefix_ids.clear();
  p.suffix_ids.clear();
  auto resolve = [&](const std::string& token, const char* what) {
    auto id = token.empty() ? std::nullopt : lookup(p, token);
    if (!id)
      throw Error(std::string("tokenizer_config asks for ") + what +
                  " but it is not in the vocabulary");
    return *id;
  };
  if (add_bos) p.prefix_ids.push_back(resolve(p.bos_token, "add_bos_token"));
  if (add_eos) p.suffix_ids.push_back(resolve(p.eos_token, "add_eos_token"));
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_files(const std::string& tokenizer_json,
                                                 const std::string& tokenizer_config_json) {
  const tok::TokenizerJson file = tok::read_tokenizer_json(tokenizer_json);
  const json& j = file.doc;
  auto p = std::make_unique<tok::Pipeline>();
  try {
    p->model = make_model(file);
    p->normalizer = tok::make_normalizer(j.value("normalizer", json()));
    p->pre_tokenizer = tok::make_pre_tokenizer(j.value("pre_tokenizer", json()));
    p->decoder = tok::make_decoder(j.value("decoder", json()));
    for (const auto& a : j.value("added_tokens", json::array())) {
      tok::AddedToken t;
      t.content = a.at("content").get<std::string>();
      // As tokenizers does, content already in the model vocabulary keeps the model's id.
      t.id = p->model->token_to_id(t.content).value_or(a.at("id").get<int32_t>());
      t.special = a.value("special", false);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      p->added.add(std::move(t));
    }
    apply_post_processor(j.value("post_processor", json()), *p);
    if (!tokenizer_config_json.empty()) apply_config(read_json(tokenizer_config_json), *p);
  } catch (const json::exception& e) {
    throw Error("unexpected tokenizer.json content in " + tokenizer_json + ": " + e.what());
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(p)));
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const std::string& dir) {
  const auto base = std::filesystem::path(dir);
  const auto config = base / "tokenizer_config.json";
  return from_files((base / "tokenizer.json").string(),
                    std::filesystem::exists(config) ? config.string() : std::string());
}

}  // namespace vllm
