#include "structured/json_schema.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "structured/charset.h"
#include "structured/regex.h"
#include "util/check.h"

namespace vllm::structured {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void unsupported(const std::string& what) {
  throw Error("JSON schema: " + what + " is not supported");
}

// Integers as decimal text, [lo, hi] with both >= 0, as grammar alternatives.
class IntRange {
 public:
  explicit IntRange(GrammarBuilder& g) : g_(g) {
    ByteSet d;
    d.add_range('0', '9');
    digit_ = g_.cls(d);
  }
  Symbol digit() const { return digit_; }
  Symbol cls(char lo, char hi) {
    ByteSet s;
    s.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
    return g_.cls(s);
  }
  // Same-length decimal strings from lo to hi.
  void same_len(const std::string& lo, const std::string& hi, Seq prefix, std::vector<Seq>& out) {
    const size_t n = lo.size();
    if (n == 0) {
      out.push_back(std::move(prefix));
      return;
    }
    if (lo[0] == hi[0]) {
      prefix.push_back(g_.byte(static_cast<uint8_t>(lo[0])));
      same_len(lo.substr(1), hi.substr(1), std::move(prefix), out);
      return;
    }
    const std::string zeros(n - 1, '0'), nines(n - 1, '9');
    if (lo.substr(1) == zeros && hi.substr(1) == nines) {
      Seq s = prefix;
      s.push_back(cls(lo[0], hi[0]));
      for (size_t i = 1; i < n; ++i) s.push_back(digit_);
      out.push_back(std::move(s));
      return;
    }
    Seq a = prefix;
    a.push_back(g_.byte(static_cast<uint8_t>(lo[0])));
    same_len(lo.substr(1), nines, std::move(a), out);
    if (lo[0] + 1 <= hi[0] - 1) {
      Seq m = prefix;
      m.push_back(cls(static_cast<char>(lo[0] + 1), static_cast<char>(hi[0] - 1)));
      for (size_t i = 1; i < n; ++i) m.push_back(digit_);
      out.push_back(std::move(m));
    }
    Seq b = prefix;
    b.push_back(g_.byte(static_cast<uint8_t>(hi[0])));
    same_len(zeros, hi.substr(1), std::move(b), out);
  }
  // [lo, hi] (hi < 0: unbounded), lo >= 0, hi <= 1e18.
  void range(long long lo, long long hi, Seq prefix, std::vector<Seq>& out) {
    const size_t lo_len = std::to_string(lo).size();
    const size_t hi_len = hi < 0 ? lo_len : std::to_string(hi).size();
    for (size_t d = lo_len; d <= hi_len; ++d) {
      const long long first = d == 1 ? 0 : pow10(d - 1);
      const long long last = d >= 19 ? std::numeric_limits<long long>::max() : pow10(d) - 1;
      const long long a = std::max(lo, first);
      const long long b = hi < 0 ? last : std::min(hi, last);
      if (a <= b) same_len(std::to_string(a), std::to_string(b), prefix, out);
    }
    if (hi < 0) {  // every number with more digits than lo
      Seq s = prefix;
      s.push_back(cls('1', '9'));
      for (size_t i = 0; i < lo_len; ++i) s.push_back(digit_);
      s.push_back(g_.star(digit_));
      out.push_back(std::move(s));
    }
  }

 private:
  static long long pow10(size_t d) {
    long long p = 1;
    for (size_t i = 0; i < d; ++i) p *= 10;
    return p;
  }
  GrammarBuilder& g_;
  Symbol digit_;
};

class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& g, const ojson& root, const JsonOptions& options)
      : g_(g), root_(root), options_(options) {
    ByteSet w;
    for (char c : {' ', '\t', '\n', '\r'}) w.add(static_cast<uint8_t>(c));
    if (!options.whitespace_pattern.empty())
      ws_ = g_.opt(regex_to_grammar(g_, options.whitespace_pattern));
    else if (!options.any_whitespace)
      ws_ = g_.empty();
    else
      ws_ = g_.star(g_.cls(w));
  }

  Symbol compile(const ojson& s, int depth = 0) {
    if (depth > 64) unsupported("nesting deeper than 64 levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) unsupported("the schema false");
      return any_value();
    }
    if (!s.is_object()) throw Error("JSON schema: a schema must be an object or a boolean");
    static const std::set<std::string> known = {
        "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
        "oneOf", "allOf", "items", "prefixItems", "minItems", "maxItems", "minLength",
        "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "$ref", "$defs", "definitions", "title", "description", "default",
        "examples", "$schema", "$id", "$comment", "deprecated", "readOnly", "writeOnly",
        "x-guidance", "strict", "name", "example", "markdownDescription"};
    for (const auto& [k, v] : s.items())
      if (!known.count(k)) unsupported("the keyword '" + k + "'");
    if (s.contains("$ref")) {
      if (s.size() > 1)
        for (const auto& [k, v] : s.items())
          if (k != "$ref" && k != "description" && k != "title" && k != "$defs" &&
              k != "definitions" && k != "default")
            unsupported("'$ref' next to '" + k + "'");
      return ref(s["$ref"].get<std::string>(), depth);
    }
    if (s.contains("const")) return literal_value(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) unsupported("an empty or non-array 'enum'");
      std::vector<Seq> alts;
      for (const auto& v : s["enum"]) alts.push_back({literal_value(v)});
      return g_.rule_of("enum", std::move(alts));
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_array() || s[k].empty()) unsupported(std::string("an empty '") + k + "'");
      for (const auto& [key, v] : s.items())
        if (key == "type" || key == "properties" || key == "items" || key == "enum")
          unsupported(std::string("'") + k + "' next to '" + key + "'");
      std::vector<Seq> alts;
      for (const auto& sub : s[k]) alts.push_back({compile(sub, depth + 1)});
      return g_.rule_of(k, std::move(alts));
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].size() != 1 || s.contains("type"))
        unsupported("'allOf' other than a single schema");
      return compile(s["allOf"][0], depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) types.push_back(s["type"].get<std::string>());
      else if (s["type"].is_array())
        for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
      else unsupported("a 'type' that is not a string or a list");
    } else {
      // Untyped: implied by the keywords present, else any value.
      if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
        types.push_back("object");
      else if (s.contains("items") || s.contains("prefixItems"))
        types.push_back("array");
      else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") ||
               s.contains("maxLength"))
        types.push_back("string");
      else
        return any_value();
    }
    std::vector<Seq> alts;
    for (const std::string& t : types) alts.push_back({typed(s, t, depth)});
    if (alts.size() == 1) return alts[0][0];
    return g_.rule_of("types", std::move(alts));
  }

  Symbol any_value() {
    if (any_ >= 0) return Symbol::rule(any_);
    any_ = g_.new_rule("json_value");
    const Symbol v = Symbol::rule(any_);
    const Symbol member = g_.seq({string_sym(-1, -1), ws_, g_.byte(':'), ws_, v});
    const Symbol obj = list('{', member, '}', 0, -1);
    const Symbol arr = list('[', v, ']', 0, -1);
    for (Seq s : {Seq{obj}, Seq{arr}, Seq{string_sym(-1, -1)}, Seq{number(false)},
                  g_.literal("true"), g_.literal("false"), g_.literal("null")})
      g_.add_alt(any_, std::move(s));
    return v;
  }

  Symbol object_any() {
    any_value();
    const Symbol member = g_.seq({string_sym(-1, -1), ws_, g_.byte(':'), ws_, Symbol::rule(any_)});
    return list('{', member, '}', 0, -1);
  }

 private:
  Symbol typed(const ojson& s, const std::string& t, int depth) {
    if (t == "null") return g_.lit("null");
    if (t == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
    if (t == "string") return string_schema(s);
    if (t == "integer") return integer(s);
    if (t == "number") return number_schema(s);
    if (t == "array") return array(s, depth);
    if (t == "object") return object(s, depth);
    unsupported("the type '" + t + "'");
  }

  // open item (sep item){min-1,max-1} close, with whitespace between tokens.
  Symbol list(char open, Symbol item, char close, int min, int max) {
    const Symbol sep_item = g_.seq({ws_, g_.byte(','), ws_, item});
    const Symbol more = g_.repeat(sep_item, std::max(min - 1, 0), max < 0 ? -1 : max - 1);
    std::vector<Seq> alts;
    if (max != 0)
      alts.push_back({g_.byte(static_cast<uint8_t>(open)), ws_, item, more, ws_,
                      g_.byte(static_cast<uint8_t>(close))});
    if (min == 0)
      alts.push_back({g_.byte(static_cast<uint8_t>(open)), ws_,
                      g_.byte(static_cast<uint8_t>(close))});
    return g_.rule_of("list", std::move(alts));
  }

  Symbol ref(const std::string& r, int depth) {
    if (auto it = refs_.find(r); it != refs_.end()) return Symbol::rule(it->second);
    const ojson* target = nullptr;
    if (r == "#") {
      target = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (r.rfind(p, 0) != 0) continue;
        const std::string name = r.substr(p.size());
        const std::string section = p.substr(2, p.size() - 3);
        if (root_.contains(section) && root_[section].contains(name))
          target = &root_[section][name];
      }
    }
    if (!target) unsupported("the reference '" + r + "' (only #, #/$defs/... and #/definitions/...)");
    const int rule = g_.new_rule("ref " + r);
    refs_[r] = rule;
    g_.add_alt(rule, {compile(*target, depth + 1)});
    return Symbol::rule(rule);
  }

  // A JSON value, compact, as the only text accepted.
  Symbol literal_value(const ojson& v) {
    if (v.is_object() || v.is_array()) unsupported("an object or array in 'enum' or 'const'");
    return g_.lit(v.dump());
  }

  // One character of a JSON string: anything but '"', '\', control characters and DEL, or an
  // escape.
  Symbol string_char() {
    if (char_ >= 0) return Symbol::rule(char_);
    char_ = g_.new_rule("json_char");
    g_.add_alt(char_, {codepoints(g_, complement({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}),
                                  "json char")});
    ByteSet esc, hex;
    for (char c : std::string("\"\\nrbtf")) esc.add(static_cast<uint8_t>(c));
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    g_.add_alt(char_, {g_.byte('\\'), g_.cls(esc)});
    // \u escapes only for what has no other spelling (U+0000-U+001F, U+007F), as llguidance.
    ByteSet zero_one, f;
    zero_one.add_range('0', '1');
    f.add('f');
    f.add('F');
    const Symbol u00 = g_.seq({g_.byte('\\'), g_.byte('u'), g_.byte('0'), g_.byte('0')});
    g_.add_alt(char_, {u00, g_.cls(zero_one), g_.cls(hex)});
    g_.add_alt(char_, {u00, g_.byte('7'), g_.cls(f)});
    return Symbol::rule(char_);
  }

  // A key of additionalProperties next to listed properties: llguidance spells these with
  // any \uXXXX escape.
  Symbol free_key() {
    string_char();
    const int r = g_.new_rule("json_key_char");
    g_.add_alt(r, {Symbol::rule(char_)});
    const auto set = [&](const char* chars) {
      ByteSet b;
      for (const char* c = chars; *c; ++c) b.add(static_cast<uint8_t>(*c));
      return g_.cls(b);
    };
    const Symbol h = set("0123456789abcdefABCDEF");
    const Symbol u = g_.seq({g_.byte('\\'), g_.byte('u')});
    const Symbol d = set("dD");
    // Not a surrogate; or a high surrogate and then a low one.
    g_.add_alt(r, {u, set("0123456789abcABCeEfF"), h, h, h});
    g_.add_alt(r, {u, d, set("01234567"), h, h});
    g_.add_alt(r, {u, d, set("89abAB"), h, h, u, d, set("cdefCDEF"), h, h});
    return g_.seq({g_.byte('"'), g_.star(Symbol::rule(r)), g_.byte('"')});
  }

  Symbol string_sym(int min, int max) {
    const Symbol body = min <= 0 && max < 0 ? g_.star(string_char())
                                            : g_.repeat(string_char(), std::max(min, 0), max);
    return g_.seq({g_.byte('"'), body, g_.byte('"')});
  }

  Symbol string_schema(const ojson& s) {
    const int min = s.value("minLength", 0), max = s.contains("maxLength") ? s["maxLength"].get<int>() : -1;
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength"))
        unsupported("'pattern' together with 'minLength' or 'maxLength'");
      std::string p = s["pattern"].get<std::string>();
      return pattern_string(p);
    }
    if (s.contains("format")) {
      const std::string f = s["format"].get<std::string>();
      static const std::map<std::string, std::string> formats = {
          {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
          {"time", "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
          {"date-time",
           "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:([0-5]"
           "[0-9]|60)(\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
          {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
          {"email", "[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}"},
      };
      auto it = formats.find(f);
      if (it == formats.end()) unsupported("the string format '" + f + "'");
      return pattern_string(it->second, /*anchored=*/true);
    }
    if (max >= 0 && max < min) unsupported("maxLength below minLength");
    return string_sym(min, max);
  }

  // A regex over the string's characters, found anywhere in it unless anchored by ^ / $ (JSON
  // Schema's search semantics); the characters JSON must escape are refused.
  Symbol pattern_string(std::string p, bool anchored = false) {
    bool start = anchored, end = anchored;
    if (!p.empty() && p.front() == '^') p.erase(0, 1), start = true;
    if (!p.empty() && p.back() == '$' && (p.size() < 2 || p[p.size() - 2] != '\\'))
      p.pop_back(), end = true;
    if (p.find('"') != std::string::npos || p.find("\\\\") != std::string::npos)
      unsupported("a 'pattern' that can match '\"' or '\\'");
    Seq s{g_.byte('"')};
    if (!start) s.push_back(g_.star(string_char()));
    s.push_back(regex_to_grammar(g_, p));
    if (!end) s.push_back(g_.star(string_char()));
    s.push_back(g_.byte('"'));
    return g_.seq(std::move(s));
  }

  Symbol integer(const ojson& s) {
    const auto bound = [&](const char* k, bool& has) -> long long {
      has = s.contains(k);
      if (!has) return 0;
      const double v = s[k].get<double>();
      if (v > 1e18 || v < -1e18) unsupported(std::string("the bound '") + k + "' beyond 1e18");
      return static_cast<long long>(v);
    };
    bool has_min, has_max, has_xmin, has_xmax;
    long long lo = bound("minimum", has_min), hi = bound("maximum", has_max);
    const long long xlo = bound("exclusiveMinimum", has_xmin), xhi = bound("exclusiveMaximum", has_xmax);
    if (has_min && s["minimum"].get<double>() != double(lo)) ++lo;  // a fractional bound
    if (has_xmin) lo = has_min ? std::max(lo, xlo + 1) : xlo + 1, has_min = true;
    if (has_xmax) hi = has_max ? std::min(hi, xhi - 1) : xhi - 1, has_max = true;
    if (has_min && has_max && lo > hi) unsupported("integer bounds with no integer between them");
    IntRange r(g_);
    std::vector<Seq> alts;
    const Seq minus{g_.byte('-')};
    // Non-negative part [max(lo,0), hi] and negative part [-min(hi,-1)...-lo] as "-" [..].
    if (!has_max || hi >= 0) r.range(has_min ? std::max(lo, 0LL) : 0, has_max ? hi : -1, {}, alts);
    if (!has_min || lo < 0) {
      const long long nlo = has_max ? std::max(1LL, -hi) : 1;
      r.range(nlo, has_min ? -lo : -1, minus, alts);
    }
    // "-0" is a JSON integer too (zero); llguidance allows it where negatives are allowed.
    if ((!has_min || lo < 0) && (!has_max || hi >= 0)) alts.push_back({g_.byte('-'), g_.byte('0')});
    if (alts.empty()) unsupported("these integer bounds");
    return g_.rule_of("integer", std::move(alts));
  }

  Symbol number(bool non_negative, bool exponent = true) {
    ByteSet d, e, pm;
    d.add_range('0', '9');
    e.add('e');
    e.add('E');
    pm.add('+');
    pm.add('-');
    const Symbol digit = g_.cls(d);
    ByteSet d19;
    d19.add_range('1', '9');
    const Symbol int_part = g_.alt({{g_.byte('0')}, {g_.cls(d19), g_.star(digit)}});
    const Symbol frac = g_.opt(g_.seq({g_.byte('.'), g_.plus(digit)}));
    const Symbol exp = g_.opt(g_.seq({g_.cls(e), g_.opt(g_.cls(pm)), g_.plus(digit)}));
    Seq s;
    if (!non_negative) s.push_back(g_.opt(g_.byte('-')));
    s.insert(s.end(), {int_part, frac});
    if (exponent) s.push_back(exp);
    return g_.seq(std::move(s));
  }

  Symbol number_schema(const ojson& s) {
    for (const char* k : {"maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) unsupported(std::string("'") + k + "' on a number (integers only)");
    if (s.contains("minimum")) {
      if (s["minimum"].get<double>() != 0.0) unsupported("a number 'minimum' other than 0");
      return number(true, /*exponent=*/false);  // llguidance writes bounded numbers without one
    }
    return number(false);
  }

  Symbol array(const ojson& s, int depth) {
    const int min = s.value("minItems", 0);
    const int max = s.contains("maxItems") ? s["maxItems"].get<int>() : -1;
    if (max >= 0 && max < min) unsupported("maxItems below minItems");
    if (s.contains("prefixItems")) {
      const ojson& pre = s["prefixItems"];
      if (!s.contains("items") || s["items"] != false || s.contains("minItems") || s.contains("maxItems"))
        unsupported("'prefixItems' other than a fixed tuple (with \"items\": false)");
      // Any leading part of the tuple (JSON Schema does not require the items to be there).
      Symbol tail = g_.empty();
      for (size_t i = pre.size(); i-- > 0;) {
        const Symbol item = compile(pre[i], depth + 1);
        tail = i == 0 ? g_.opt(g_.seq({item, tail}))
                      : g_.opt(g_.seq({ws_, g_.byte(','), ws_, item, tail}));
      }
      return g_.seq({g_.byte('['), ws_, tail, ws_, g_.byte(']')});
    }
    const Symbol item = s.contains("items") ? compile(s["items"], depth + 1) : any_value();
    return list('[', item, ']', min, max);
  }

  Symbol object(const ojson& s, int depth) {
    std::vector<std::string> names;
    std::vector<Symbol> props;
    std::set<std::string> required;
    if (s.contains("required"))
      for (const auto& r : s["required"]) required.insert(r.get<std::string>());
    if (s.contains("properties"))
      for (const auto& [k, v] : s["properties"].items()) {
        names.push_back(k);
        props.push_back(g_.seq({g_.lit(ojson(k).dump()), ws_, g_.byte(':'), ws_,
                                compile(v, depth + 1)}));
      }
    for (const std::string& r : required)
      if (std::find(names.begin(), names.end(), r) == names.end())
        unsupported("a 'required' property '" + r + "' not listed in 'properties'");
    // Additional properties: any key (not checked against the listed ones), after the listed.
    std::optional<Symbol> extra;
    const ojson add = s.contains("additionalProperties") ? s["additionalProperties"]
                                                         : ojson(options_.additional_properties);
    if (!(add.is_boolean() && !add.get<bool>()))
      extra = g_.seq({names.empty() ? string_sym(-1, -1) : free_key(), ws_, g_.byte(':'), ws_,
                      compile(add, depth + 1)});
    const Symbol comma = g_.seq({ws_, g_.byte(','), ws_});
    // first[i]: nothing written yet, properties i.. remain; rest[i]: something written.
    const int n = static_cast<int>(names.size());
    std::vector<int> first(n + 1), rest(n + 1);
    first[n] = g_.new_rule("obj_first");
    rest[n] = g_.new_rule("obj_rest");
    g_.add_alt(first[n], {});
    if (extra) {
      const Symbol more = g_.star(g_.seq({comma, *extra}));
      g_.add_alt(first[n], {*extra, more});
      g_.add_alt(rest[n], {more});
    } else {
      g_.add_alt(rest[n], {});
    }
    for (int i = n - 1; i >= 0; --i) {
      first[i] = g_.new_rule("obj_first");
      rest[i] = g_.new_rule("obj_rest");
      g_.add_alt(first[i], {props[i], Symbol::rule(rest[i + 1])});
      g_.add_alt(rest[i], {comma, props[i], Symbol::rule(rest[i + 1])});
      if (!required.count(names[i])) {
        g_.add_alt(first[i], {Symbol::rule(first[i + 1])});
        g_.add_alt(rest[i], {Symbol::rule(rest[i + 1])});
      }
    }
    return g_.seq({g_.byte('{'), ws_, Symbol::rule(first[0]), ws_, g_.byte('}')});
  }

  GrammarBuilder& g_;
  const ojson& root_;
  JsonOptions options_;
  Symbol ws_;
  int any_ = -1, char_ = -1;
  std::map<std::string, int> refs_;
};

}  // namespace

Symbol json_schema_to_grammar(GrammarBuilder& g, std::string_view schema_json,
                              const JsonOptions& options) {
  ojson schema;
  try {
    schema = ojson::parse(schema_json);
  } catch (const ojson::exception& e) {
    throw Error(std::string("JSON schema: not valid JSON: ") + e.what());
  }
  if (schema.is_object() && schema.contains("x-guidance"))
    unsupported("'x-guidance' settings");
  SchemaCompiler c(g, schema, options);
  return c.compile(schema);
}

Symbol json_object_grammar(GrammarBuilder& g, const JsonOptions& options) {
  const ojson empty = ojson::object();
  SchemaCompiler c(g, empty, options);
  return c.object_any();
}

}  // namespace vllm::structured
