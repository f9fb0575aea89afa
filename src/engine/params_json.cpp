#include "engine/params_json.h"

#include <cmath>

#include "util/check.h"

namespace vllm {
namespace {

using nlohmann::json;

[[noreturn]] void type_error(const char* field, const char* want) {
  throw Error(std::string("'") + field + "' must be " + want);
}

template <typename T>
void read_number(const json& j, const char* field, T& out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return;
  if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) type_error(field, "an integer");
    const auto v = it->get<int64_t>();
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
      throw Error(std::string("'") + field + "' is out of range");
    out = static_cast<T>(v);
  } else {
    if (!it->is_number()) type_error(field, "a number");
    out = it->get<T>();
  }
}

void read_bool(const json& j, const char* field, bool& out) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return;
  const auto v = lax_bool(*it);
  if (!v) type_error(field, "a boolean");
  out = *v;
}

std::vector<int32_t> read_ids(const json& v, const char* field) {
  if (!v.is_array()) type_error(field, "an array of token ids");
  std::vector<int32_t> ids;
  for (const auto& x : v) {
    if (!x.is_number_integer()) type_error(field, "an array of token ids");
    const auto t = x.get<int64_t>();
    if (t < 0 || t > std::numeric_limits<int32_t>::max())
      throw Error(std::string("'") + field + "' holds an invalid token id");
    ids.push_back(static_cast<int32_t>(t));
  }
  return ids;
}

// vLLM's bounds: a signed 64-bit integer (an integral float is read as pydantic does).
uint64_t read_seed(const json& v) {
  const std::string range = "'seed' must be in [-9223372036854775808, 9223372036854775807]";
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) throw Error(range);
    return v.get<uint64_t>();
  }
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d != std::floor(d)) type_error("seed", "an integer");
    // 2^63 and beyond (and integers past int64 that JSON parsing turned into floats).
    if (!(std::fabs(d) < 9223372036854775808.0)) throw Error(range);
    return static_cast<uint64_t>(static_cast<int64_t>(d));
  }
  type_error("seed", "an integer");
}

}  // namespace

SamplingParams sampling_params_from_json(const json& j, const Tokenizer* tok, SamplingParams p) {
  if (!j.is_object()) throw Error("the request must be a JSON object");
  read_number(j, "n", p.n);
  read_number(j, "temperature", p.temperature);
  read_number(j, "top_p", p.top_p);
  read_number(j, "top_k", p.top_k);
  read_number(j, "min_p", p.min_p);
  read_number(j, "presence_penalty", p.presence_penalty);
  read_number(j, "frequency_penalty", p.frequency_penalty);
  read_number(j, "repetition_penalty", p.repetition_penalty);
  read_number(j, "max_tokens", p.max_tokens);
  read_number(j, "min_tokens", p.min_tokens);
  read_bool(j, "ignore_eos", p.ignore_eos);
  read_bool(j, "include_stop_str_in_output", p.include_stop_str_in_output);
  read_bool(j, "skip_special_tokens", p.skip_special_tokens);
  if (auto it = j.find("seed"); it != j.end() && !it->is_null()) p.seed = read_seed(*it);
  for (const char* f : {"logprobs", "prompt_logprobs"}) {
    auto it = j.find(f);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) type_error(f, "an integer");
    const int v = static_cast<int>(std::clamp<int64_t>(it->get<int64_t>(), -1, 1 << 20));
    (std::string(f) == "logprobs" ? p.logprobs : p.prompt_logprobs) = v;
  }
  if (auto it = j.find("stop"); it != j.end() && !it->is_null()) {
    p.stop.clear();
    if (it->is_string()) {
      p.stop.push_back(it->get<std::string>());
    } else if (it->is_array()) {
      for (const auto& s : *it) {
        if (!s.is_string()) type_error("stop", "a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else {
      type_error("stop", "a string or an array of strings");
    }
  }
  if (auto it = j.find("stop_token_ids"); it != j.end() && !it->is_null())
    p.stop_token_ids = read_ids(*it, "stop_token_ids");
  if (auto it = j.find("allowed_token_ids"); it != j.end() && !it->is_null()) {
    p.allowed_token_ids = read_ids(*it, "allowed_token_ids");
    if (p.allowed_token_ids.empty()) throw Error("'allowed_token_ids' must not be empty");
  }
  if (auto it = j.find("logit_bias"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) type_error("logit_bias", "an object of token id -> bias");
    std::string bad_keys;  // every key that is not a token id, named in one message
    for (const auto& [k, v] : it->items()) {
      if (!v.is_number()) type_error("logit_bias", "an object of token id -> bias");
      int32_t id = 0;
      try {
        size_t used = 0;
        id = std::stoi(k, &used);
        if (used != k.size() || id < 0) throw std::invalid_argument(k);
      } catch (const std::exception&) {
        bad_keys += (bad_keys.empty() ? "'" : ", '") + k + "'";
        continue;
      }
      p.logit_bias[id] = std::clamp(v.get<float>(), -100.0f, 100.0f);
    }
    if (!bad_keys.empty())
      throw Error("'logit_bias' keys must be token ids; not token ids: " + bad_keys);
  }
  if (auto it = j.find("bad_words"); it != j.end() && !it->is_null()) {
    if (!it->is_array()) type_error("bad_words", "an array of strings");
    if (!tok) throw Error("'bad_words' needs a tokenizer");
    for (const auto& w : *it) {
      if (!w.is_string()) type_error("bad_words", "an array of strings");
      const std::string word = w.get<std::string>();
      // As vLLM: the word as written and with a leading space (BPE vocabularies differ).
      for (const std::string& form : {word, " " + word}) {
        auto ids = tok->encode(form, false);
        if (!ids.empty()) p.bad_words_ids.push_back(std::move(ids));
      }
    }
  }
  return p;
}

std::vector<int32_t> prompt_from_json(const json& prompt, const Tokenizer* tok) {
  if (prompt.is_string()) {
    if (!tok) throw Error("a text prompt needs a tokenizer");
    return tok->encode(prompt.get<std::string>(), true);
  }
  if (prompt.is_array()) return read_ids(prompt, "prompt");
  throw Error("'prompt' must be a string or an array of token ids");
}

json logprobs_to_json(const StepLogprobs& lp, const Tokenizer* tok) {
  auto entry = [&](const TokenLogprob& t) {
    json e = {{"token_id", t.token}, {"logprob", t.logprob}, {"rank", t.rank}};
    if (tok) e["token"] = tok->decode(std::span<const int32_t>(&t.token, 1), false);
    return e;
  };
  json top = json::array();
  for (const auto& t : lp.top) top.push_back(entry(t));
  json out = entry(lp.chosen);
  out["top_logprobs"] = std::move(top);
  return out;
}

}  // namespace vllm
