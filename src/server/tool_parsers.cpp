// The --tool-call-parser formats (hermes, llama3_json, mistral, qwen3_coder, pythonic,
// deepseek_v3) and tool_choice "required" output, each as a scan of an output prefix, plus the
// stream that turns successive scans into vLLM-shaped deltas.
#include <algorithm>
#include <random>

#include "server/marker_scan.h"
#include "server/tool_parser.h"
#include "util/check.h"

namespace vllm::server {
namespace {

size_t skip_ws(std::string_view t, size_t p) {
  while (p < t.size() && is_ws(t[p])) ++p;
  return p;
}

// Content up to `marker`: all of it when final, else without a tail that may begin it.
std::string_view text_before(std::string_view t, size_t marker_at, std::string_view marker,
                             bool final) {
  if (marker_at != std::string_view::npos) return t.substr(0, marker_at);
  if (final) return t;
  return t.substr(0, t.size() - held_back(t, marker));
}

ToolScan content_only(std::string_view t) {
  ToolScan s;
  s.content = std::string(t);
  s.has_content = true;
  return s;
}

// A JSON string literal at t[p] ('"'): its value and the offset past it; nullopt when cut.
std::optional<std::pair<std::string, size_t>> json_string(std::string_view t, size_t p,
                                                          bool* error) {
  NormalizedJson n = normalize_json(t, p);
  if (n.error) *error = true;
  if (!n.end) return std::nullopt;
  try {
    return std::make_pair(ojson::parse(n.out).get<std::string>(), *n.end);
  } catch (const ojson::exception&) {
    *error = true;
    return std::nullopt;
  }
}

// One {"name": ..., "<args key>": {...}} object at t[p], in any key order.
struct ObjectScan {
  ToolScan::Call call;
  bool args_seen = false;
  std::optional<size_t> end;
  bool error = false;
};

ObjectScan call_object(std::string_view t, size_t p, std::vector<std::string_view> arg_keys) {
  ObjectScan o;
  p = skip_ws(t, p);
  if (p >= t.size()) return o;
  if (t[p] != '{') {
    o.error = true;
    return o;
  }
  p = skip_ws(t, p + 1);
  for (bool first = true;; first = false) {
    if (p >= t.size()) return o;
    if (t[p] == '}' && first) break;
    if (t[p] != '"') {
      o.error = true;
      return o;
    }
    auto key = json_string(t, p, &o.error);
    if (!key) return o;
    p = skip_ws(t, key->second);
    if (p >= t.size()) return o;
    if (t[p] != ':') {
      o.error = true;
      return o;
    }
    p = skip_ws(t, p + 1);
    if (p >= t.size()) return o;
    const bool is_args =
        std::find(arg_keys.begin(), arg_keys.end(), key->first) != arg_keys.end() &&
        !o.args_seen;
    if (key->first == "name") {
      if (t[p] != '"') {
        o.error = true;
        return o;
      }
      auto name = json_string(t, p, &o.error);
      if (!name) return o;
      o.call.name = name->first;
      p = name->second;
    } else {
      NormalizedJson v = normalize_json(t, p);
      if (is_args) {
        o.args_seen = true;
        o.call.arguments = v.out;
      }
      if (v.error) o.error = true;
      if (!v.end) return o;
      p = *v.end;
    }
    p = skip_ws(t, p);
    if (p >= t.size()) return o;
    if (t[p] == ',') {
      p = skip_ws(t, p + 1);
      continue;
    }
    if (t[p] != '}') {
      o.error = true;
      return o;
    }
    break;
  }
  o.end = p + 1;
  if (o.call.name.empty() || !o.args_seen) o.error = true;  // vLLM reads both keys
  o.call.complete = !o.error;
  return o;
}

// Hermes (Qwen2.5, Qwen3, Hermes 2/3): <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>,
// content only before the first call.
class HermesParser : public ToolParser {
 public:
  bool keeps_special_tokens() const override { return true; }
  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kOpen = "<tool_call>";
    const size_t first = t.find(kOpen);
    if (first == std::string_view::npos) return content_only(text_before(t, first, kOpen, final));
    ToolScan s;
    s.content = std::string(t.substr(0, first));
    s.has_content = !s.content.empty();
    for (size_t at = first; at != std::string_view::npos; at = t.find(kOpen, at)) {
      ObjectScan o = call_object(t, at + kOpen.size(), {"arguments"});
      if (o.error || (final && !o.end)) return final ? content_only(t) : s;
      s.calls.push_back(o.call);
      if (!o.end) break;
      at = *o.end;
    }
    return s;
  }
};

// Llama 3.1/3.2 JSON: [<|python_tag|>]{"name": ..., "parameters": {...}}; more calls after "; ".
class Llama3JsonParser : public ToolParser {
 public:
  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kTag = "<|python_tag|>";
    size_t p = 0;
    if (t.starts_with(kTag)) {
      p = kTag.size();
    } else if (!t.starts_with("{")) {
      if (!final && kTag.starts_with(t)) return {};
      return content_only(t);
    }
    ToolScan s;
    while (p < t.size()) {
      ObjectScan o = call_object(t, p, {"arguments", "parameters"});
      if (o.error || (final && !o.end)) return final ? content_only(t) : s;
      s.calls.push_back(o.call);
      if (!o.end) break;
      p = skip_ws(t, *o.end);
      if (p < t.size() && t[p] == ';') p = skip_ws(t, p + 1);
    }
    return s;
  }
};

// Mistral: content[TOOL_CALLS] [{"name": ..., "arguments": {...}, "id": ...}, ...], or the
// newer content[TOOL_CALLS]name[ARGS]{...} repeated.
class MistralParser : public ToolParser {
 public:
  bool mistral_ids() const override { return true; }
  bool keeps_special_tokens() const override { return true; }
  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kTag = "[TOOL_CALLS]", kArgs = "[ARGS]";
    const size_t first = t.find(kTag);
    if (first == std::string_view::npos) return content_only(text_before(t, first, kTag, final));
    ToolScan s;
    s.content = std::string(t.substr(0, first));
    s.has_content = !s.content.empty();
    size_t p = skip_ws(t, first + kTag.size());
    if (p >= t.size()) return final ? content_only(t) : s;
    if (t[p] == '[') {
      p = skip_ws(t, p + 1);
      while (p < t.size()) {
        ObjectScan o = call_object(t, p, {"arguments"});
        if (o.error || (final && !o.end)) return final ? content_only(t) : s;
        s.calls.push_back(o.call);
        if (!o.end) return s;
        p = skip_ws(t, *o.end);
        if (p < t.size() && t[p] == ',') p = skip_ws(t, p + 1);
        else if (p < t.size() && t[p] == ']') return s;
        else if (p < t.size()) return final ? content_only(t) : s;
      }
      return final ? content_only(t) : s;
    }
    for (;;) {  // name[ARGS]{...}
      const size_t args = t.find(kArgs, p);
      if (args == std::string_view::npos) return final ? content_only(t) : s;
      ToolScan::Call call;
      call.name = std::string(t.substr(p, args - p));
      NormalizedJson v = normalize_json(t, args + kArgs.size());
      call.arguments = v.out;
      call.complete = v.end.has_value();
      if (v.error || (final && !v.end)) return final ? content_only(t) : s;
      s.calls.push_back(call);
      if (!v.end) return s;
      p = skip_ws(t, *v.end);
      if (t.substr(p).starts_with(kTag)) p = skip_ws(t, p + kTag.size());
      if (p >= t.size()) return s;
    }
  }
};

// tool_choice "required": the grammar makes the output a JSON list of {"name", "parameters"}.
class RequiredParser : public ToolParser {
 public:
  ToolScan scan(std::string_view t, bool final) const override {
    ToolScan s;
    size_t p = skip_ws(t, 0);
    if (p >= t.size()) return s;
    if (t[p] != '[') return final ? content_only(t) : s;
    p = skip_ws(t, p + 1);
    while (p < t.size()) {
      ObjectScan o = call_object(t, p, {"parameters"});
      if (o.error || (final && !o.end)) return final ? content_only(t) : s;
      s.calls.push_back(o.call);
      if (!o.end) return s;
      p = skip_ws(t, *o.end);
      if (p < t.size() && t[p] == ',') p = skip_ws(t, p + 1);
      else if (p < t.size()) return s;
    }
    return s;
  }
};

// DeepSeek-V3: content<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n
// ARGS\n```<｜tool▁call▁end｜>... ; the arguments are passed on as the model wrote them.
class DeepSeekV3Parser : public ToolParser {
 public:
  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kBegin = "<｜tool▁calls▁begin｜>",
                                      kCall = "<｜tool▁call▁begin｜>", kSep = "<｜tool▁sep｜>",
                                      kJson = "\n```json\n", kEnd = "\n```<｜tool▁call▁end｜>";
    const size_t first = t.find(kBegin);
    if (first == std::string_view::npos) return content_only(text_before(t, first, kBegin, final));
    ToolScan s;
    s.content = std::string(t.substr(0, first));
    s.has_content = !s.content.empty();
    for (size_t at = t.find(kCall, first); at != std::string_view::npos; at = t.find(kCall, at)) {
      const size_t sep = t.find(kSep, at);
      if (sep == std::string_view::npos) break;
      const size_t json = t.find(kJson, sep);
      if (json == std::string_view::npos) break;
      ToolScan::Call call;
      call.name = std::string(t.substr(sep + kSep.size(), json - sep - kSep.size()));
      const size_t args = json + kJson.size();
      const size_t end = t.find(kEnd, args);
      if (end == std::string_view::npos) {
        if (!final) {
          std::string_view rest = t.substr(args);
          call.arguments = std::string(rest.substr(0, rest.size() - held_back(rest, kEnd)));
          s.calls.push_back(call);
        }
        break;
      }
      call.arguments = std::string(t.substr(args, end - args));
      call.complete = true;
      s.calls.push_back(call);
      at = end + kEnd.size();
    }
    return s;
  }
};

std::string py_dumps(const ojson& v) { return normalize_json(v.dump()).out; }

// Qwen3-Coder: <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n
// </tool_call>; values are typed by the tool's parameter schema, as vLLM converts them.
class Qwen3CoderParser : public ToolParser {
 public:
  explicit Qwen3CoderParser(const ojson& tools) {
    if (!tools.is_array()) return;
    for (const ojson& tool : tools) {
      if (!tool.contains("function") || !tool["function"].is_object()) continue;
      const ojson& fn = tool["function"];
      if (!fn.contains("name") || !fn["name"].is_string()) continue;
      ojson props = ojson::object();
      if (fn.contains("parameters") && fn["parameters"].is_object() &&
          fn["parameters"].contains("properties") && fn["parameters"]["properties"].is_object())
        props = fn["parameters"]["properties"];
      params_[fn["name"].get<std::string>()] = props;
    }
  }

  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kOpen = "<tool_call>", kFn = "<function=",
                                      kFnEnd = "</function>", kParam = "<parameter=",
                                      kParamEnd = "</parameter>";
    const size_t first = t.find(kOpen);
    if (first == std::string_view::npos) return content_only(text_before(t, first, kOpen, final));
    ToolScan s;
    s.content = std::string(t.substr(0, first));
    s.has_content = !s.content.empty();
    for (size_t at = first; at != std::string_view::npos; at = t.find(kOpen, at)) {
      const size_t fn = t.find(kFn, at);
      if (fn == std::string_view::npos) break;
      const size_t name_end = t.find('>', fn);
      if (name_end == std::string_view::npos) break;
      ToolScan::Call call;
      call.name = std::string(t.substr(fn + kFn.size(), name_end - fn - kFn.size()));
      const size_t fn_end = t.find(kFnEnd, name_end);
      std::string_view body = t.substr(name_end + 1, fn_end == std::string_view::npos
                                                          ? std::string_view::npos
                                                          : fn_end - name_end - 1);
      const bool closed = fn_end != std::string_view::npos || final;
      std::vector<std::string> entries;
      for (size_t p = body.find(kParam); p != std::string_view::npos;) {
        const size_t pname_end = body.find('>', p);
        if (pname_end == std::string_view::npos) break;
        const std::string pname(body.substr(p + kParam.size(), pname_end - p - kParam.size()));
        size_t vend = body.find(kParamEnd, pname_end);
        size_t next = vend == std::string_view::npos ? std::string_view::npos
                                                     : vend + kParamEnd.size();
        if (vend == std::string_view::npos) {
          if (!closed) break;  // the value may go on
          vend = std::min(body.find(kParam, pname_end), body.size());
          next = vend;
        }
        std::string_view value = body.substr(pname_end + 1, vend - pname_end - 1);
        if (value.starts_with('\n')) value.remove_prefix(1);
        if (value.ends_with('\n')) value.remove_suffix(1);
        entries.push_back(ojson(pname).dump() + ": " + convert(call.name, pname, value));
        p = next == body.size() ? std::string_view::npos : body.find(kParam, next);
      }
      call.arguments = "{";
      for (size_t i = 0; i < entries.size(); ++i)
        call.arguments += (i ? ", " : "") + entries[i];
      call.complete = closed;
      if (closed) call.arguments += "}";
      s.calls.push_back(std::move(call));
      if (fn_end == std::string_view::npos) break;
      at = fn_end + kFnEnd.size();
    }
    return s;
  }

 private:
  std::string convert(const std::string& fn, const std::string& param,
                      std::string_view value) const {
    std::string lower(value);
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower == "null") return "null";
    std::string type = "string";
    auto f = params_.find(fn);
    if (f == params_.end() || !f->second.contains(param)) return ojson(std::string(value)).dump();
    const ojson& schema = f->second[param];
    if (schema.is_object() && schema.contains("type") && schema["type"].is_string())
      type = schema["type"].get<std::string>();
    std::transform(type.begin(), type.end(), type.begin(), ::tolower);
    const std::string text(value);
    if (type == "string" || type == "str" || type == "text" || type == "varchar" ||
        type == "char" || type == "enum")
      return ojson(text).dump();
    try {
      if (type.starts_with("int") || type.starts_with("uint") || type.starts_with("long") ||
          type.starts_with("short") || type.starts_with("unsigned")) {
        size_t used = 0;
        const long long v = std::stoll(text, &used);
        if (used == text.size()) return std::to_string(v);
        return ojson(text).dump();
      }
      if (type.starts_with("num") || type.starts_with("float")) {
        size_t used = 0;
        const double v = std::stod(text, &used);
        if (used != text.size()) return ojson(text).dump();
        if (v == static_cast<double>(static_cast<long long>(v)))
          return std::to_string(static_cast<long long>(v));
        return ojson(v).dump();
      }
    } catch (const std::exception&) {
      return ojson(text).dump();
    }
    if (type == "boolean" || type == "bool" || type == "binary")
      return lower == "true" ? "true" : "false";
    NormalizedJson j = normalize_json(text);
    if (!j.error && j.end && skip_ws(text, *j.end) == text.size()) return j.out;
    return ojson(text).dump();
  }

  std::map<std::string, ojson> params_;
};

// Python literals of pythonic calls: strings, numbers, True/False/None, lists, tuples, dicts.
class PyLiteral {
 public:
  PyLiteral(std::string_view t, size_t p) : t_(t), p_(p) {}
  size_t pos() const { return p_; }
  // nullopt when cut off or malformed (`error` tells which).
  std::optional<ojson> value(bool* error) {
    if (depth_ > 128) {  // untrusted text: no deep recursion
      *error = true;
      return std::nullopt;
    }
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{++depth_};
    p_ = skip_ws(t_, p_);
    if (p_ >= t_.size()) return std::nullopt;
    const char c = t_[p_];
    if (c == '\'' || c == '"') return string(error);
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')', error);
    if (c == '{') return dict(error);
    if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9')) return number(error);
    for (auto [word, v] : {std::pair<std::string_view, ojson>{"True", true},
                           {"False", false}, {"None", nullptr}}) {
      const std::string_view rest = t_.substr(p_, word.size());
      if (!word.starts_with(rest)) continue;
      if (rest.size() < word.size() || p_ + word.size() >= t_.size()) return std::nullopt;
      p_ += word.size();
      return v;
    }
    *error = true;
    return std::nullopt;
  }

 private:
  std::optional<ojson> string(bool* error) {
    const char q = t_[p_];
    std::string out;
    for (size_t p = p_ + 1; p < t_.size(); ++p) {
      const char c = t_[p];
      if (c == q) {
        p_ = p + 1;
        return ojson(out);
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (++p >= t_.size()) return std::nullopt;
      switch (t_[p]) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        default: out += '\\'; out += t_[p];
      }
    }
    (void)error;
    return std::nullopt;
  }
  std::optional<ojson> number(bool* error) {
    size_t q = p_;
    while (q < t_.size() && std::string_view("+-.0123456789eE_").find(t_[q]) != std::string_view::npos) ++q;
    if (q >= t_.size()) return std::nullopt;
    std::string lit(t_.substr(p_, q - p_));
    lit.erase(std::remove(lit.begin(), lit.end(), '_'), lit.end());
    if (!lit.empty() && lit[0] == '+') lit.erase(0, 1);
    try {
      size_t used = 0;
      ojson v;
      if (lit.find_first_of(".eE") == std::string::npos) v = std::stoll(lit, &used);
      else v = std::stod(lit, &used);
      if (used != lit.size()) throw std::invalid_argument(lit);
      p_ = q;
      return v;
    } catch (const std::exception&) {
      *error = true;
      return std::nullopt;
    }
  }
  std::optional<ojson> sequence(char close, bool* error) {
    ojson out = ojson::array();
    ++p_;
    for (;;) {
      p_ = skip_ws(t_, p_);
      if (p_ >= t_.size()) return std::nullopt;
      if (t_[p_] == close) {
        ++p_;
        return out;
      }
      auto v = value(error);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
      p_ = skip_ws(t_, p_);
      if (p_ >= t_.size()) return std::nullopt;
      if (t_[p_] == ',') ++p_;
      else if (t_[p_] != close) {
        *error = true;
        return std::nullopt;
      }
    }
  }
  std::optional<ojson> dict(bool* error) {
    ojson out = ojson::object();
    ++p_;
    for (;;) {
      p_ = skip_ws(t_, p_);
      if (p_ >= t_.size()) return std::nullopt;
      if (t_[p_] == '}') {
        ++p_;
        return out;
      }
      auto k = value(error);
      if (!k) return std::nullopt;
      p_ = skip_ws(t_, p_);
      if (p_ >= t_.size()) return std::nullopt;
      if (t_[p_] != ':') {
        *error = true;
        return std::nullopt;
      }
      ++p_;
      auto v = value(error);
      if (!v) return std::nullopt;
      out[k->is_string() ? k->get<std::string>() : k->dump()] = std::move(*v);
      p_ = skip_ws(t_, p_);
      if (p_ >= t_.size()) return std::nullopt;
      if (t_[p_] == ',') ++p_;
      else if (t_[p_] != '}') {
        *error = true;
        return std::nullopt;
      }
    }
  }
  std::string_view t_;
  size_t p_;
  int depth_ = 0;
};

// Pythonic (Llama 3.2/4, ToolACE): [get_weather(city="Paris"), f()], possibly inside
// <|python_start|>...<|python_end|>. Calls are reported whole.
class PythonicParser : public ToolParser {
 public:
  ToolScan scan(std::string_view t, bool final) const override {
    static constexpr std::string_view kStart = "<|python_start|>";
    size_t p = skip_ws(t, 0);
    if (t.substr(p).starts_with(kStart)) p = skip_ws(t, p + kStart.size());
    if (p >= t.size() || (!final && kStart.starts_with(t.substr(p)))) {
      if (final) return content_only(t);
      return {};
    }
    if (t[p] != '[') return content_only(t);
    ToolScan s;
    p = skip_ws(t, p + 1);
    bool error = false;
    while (p < t.size()) {
      size_t q = p;
      while (q < t.size() && (std::isalnum(static_cast<unsigned char>(t[q])) || t[q] == '_' ||
                              t[q] == '.'))
        ++q;
      if (q >= t.size()) break;
      if (q == p || t[q] != '(') {
        error = true;
        break;
      }
      ToolScan::Call call;
      call.name = std::string(t.substr(p, q - p));
      ojson args = ojson::object();
      p = skip_ws(t, q + 1);
      bool done = false;
      while (p < t.size()) {
        if (t[p] == ')') {
          done = true;
          ++p;
          break;
        }
        size_t k = p;
        while (k < t.size() && (std::isalnum(static_cast<unsigned char>(t[k])) || t[k] == '_')) ++k;
        const size_t eq = skip_ws(t, k);
        if (eq >= t.size()) break;
        if (k == p || t[eq] != '=') {
          error = true;
          break;
        }
        PyLiteral lit(t, eq + 1);
        auto v = lit.value(&error);
        if (!v) break;
        args[std::string(t.substr(p, k - p))] = std::move(*v);
        p = skip_ws(t, lit.pos());
        if (p < t.size() && t[p] == ',') p = skip_ws(t, p + 1);
        else if (p < t.size() && t[p] != ')') {
          error = true;
          break;
        }
      }
      if (error || !done) break;
      call.arguments = py_dumps(args);
      call.complete = true;
      s.calls.push_back(std::move(call));
      p = skip_ws(t, p);
      if (p < t.size() && t[p] == ',') p = skip_ws(t, p + 1);
      else if (p < t.size() && t[p] == ']') return s;
      else if (p < t.size()) {
        error = true;
        break;
      }
    }
    if (final) return content_only(t);  // no closing ']': not a call list after all
    return s;
  }
};

}  // namespace

const std::vector<std::string>& tool_parser_names() {
  static const std::vector<std::string> names = {"deepseek_v3", "hermes",    "llama3_json",
                                                 "mistral",     "pythonic",  "qwen3_coder"};
  return names;
}

std::unique_ptr<ToolParser> make_tool_parser(const std::string& name, const ojson& tools) {
  if (name == "hermes") return std::make_unique<HermesParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "mistral") return std::make_unique<MistralParser>();
  if (name == "qwen3_coder") return std::make_unique<Qwen3CoderParser>(tools);
  if (name == "pythonic") return std::make_unique<PythonicParser>();
  if (name == "deepseek_v3") return std::make_unique<DeepSeekV3Parser>();
  throw Error("unknown tool call parser '" + name + "'");
}

std::unique_ptr<ToolParser> make_required_tool_parser() {
  return std::make_unique<RequiredParser>();
}

ParsedTools parse_tool_calls(const ToolParser& parser, std::string_view text) {
  ToolScan s = parser.scan(text, true);
  ParsedTools out;
  if (s.has_content) out.content = s.content;
  for (auto& c : s.calls) out.calls.push_back({std::move(c.name), std::move(c.arguments)});
  return out;
}

std::string make_tool_call_id(bool mistral) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  static constexpr char kAlnum[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = mistral ? "" : "chatcmpl-tool-";
  for (int i = 0; i < (mistral ? 9 : 32); ++i)
    id += mistral ? kAlnum[rng() % (sizeof kAlnum - 1)] : kHex[rng() % 16];
  return id;
}

ojson ToolCallDelta::to_json() const {
  ojson j = {{"index", index}};
  ojson fn = ojson::object();
  if (id) {
    j["id"] = *id;
    j["type"] = "function";
  }
  if (name) fn["name"] = *name;
  if (!name || !arguments.empty()) fn["arguments"] = arguments;
  j["function"] = std::move(fn);
  return j;
}

ToolStreamDelta ToolCallStream::advance(const ToolScan& scan) {
  ToolStreamDelta d;
  // A final scan that gives up on a malformed call turns the text into content: what was
  // already sent stays, the rest follows.
  if (scan.content.size() > content_.size() && scan.content.starts_with(content_)) {
    d.content = scan.content.substr(content_.size());
    content_ = scan.content;
  }
  for (size_t i = 0; i < scan.calls.size(); ++i) {
    const ToolScan::Call& c = scan.calls[i];
    if (c.name.empty()) break;  // a call is announced by its name
    if (i == sent_.size()) {
      sent_.push_back({make_tool_call_id(parser_.mistral_ids()), true, 0});
      d.calls.push_back({static_cast<int>(i), sent_[i].id, c.name, ""});
    }
    Sent& s = sent_[i];
    if (c.arguments.size() > s.arguments) {
      d.calls.push_back({static_cast<int>(i), std::nullopt, std::nullopt,
                         c.arguments.substr(s.arguments)});
      s.arguments = c.arguments.size();
    }
  }
  return d;
}

ToolStreamDelta ToolCallStream::feed(std::string_view delta) {
  text_ += delta;
  return advance(parser_.scan(text_, false));
}

ToolStreamDelta ToolCallStream::finish() { return advance(parser_.scan(text_, true)); }

}  // namespace vllm::server
