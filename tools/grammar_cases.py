"""The grammars of the structured-output oracle (tools/make_grammar_fixtures.py): regexes, GBNF
grammars and JSON schemas, hand-written ones (function-calling tools, API payloads, config files)
plus seeded random object schemas. Each case: (name, kind, text) with kind regex | grammar |
json_schema | json_object | choice (text: JSON list) | structural_tag (text: vLLM's legacy
{"structures", "triggers"} JSON)."""
import json
import random

REGEXES = [
    r"\d{3}-\d{3}-\d{4}", r"[A-Z][a-z]{2,8}", r"(yes|no|maybe)", r"[a-f0-9]{8}",
    r"-?\d+(\.\d+)?", r"[A-Za-z_][A-Za-z0-9_]*", r"(0|[1-9][0-9]*)", r"(\+|-)?[0-9]{1,4}",
    r"[a-z]+@[a-z]+\.(com|org|net)", r"https?://[a-z0-9.-]+(/[a-z0-9_-]*)*",
    r"([01][0-9]|2[0-3]):[0-5][0-9]", r"\d{4}-\d{2}-\d{2}", r"(ab|cd)*e",
    r"[^\n]{0,20}", r"The answer is (A|B|C|D)\.", r"#[0-9a-fA-F]{6}",
    r"[A-Z]{3} \d{1,5}", r"(true|false)", r"\[(\d+, )*\d+\]", r"[aeiou]+x?",
    r"x{2,5}y{0,3}z", r"Name: [A-Z][a-z]+\nAge: \d{1,3}", r"(\w+ ){2,4}\w+\.",
    r"[^aeiou ]{1,12}", r"\s*[a-z]+\s*", r"(cat|category|catalog)s?",
    r"[0-9]+(,[0-9]{3})*", r"v\d+\.\d+\.\d+(-[a-z]+)?", r"\"[^\"]*\"",
    r"SELECT [a-z_]+ FROM [a-z_]+( WHERE [a-z_]+ = \d+)?;", r".{1,10}", r"(\d\d)+",
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun)day?", r"[\-+*/]{1,3}", r"[é-ü]{1,4}[a-z]",
    r"(a|b|c)(d|e|f)*(g|h)+", r"\(\d+\)", r"[.?!]", r"\t?[A-Z]+:\s\d+",
]

GRAMMARS = [
    'root ::= "yes" | "no"',
    'root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= factor (("*" | "/") factor)*\n'
    'factor ::= [0-9]+ | "(" expr ")"',
    'root ::= item+\nitem ::= "- " [a-z]+ "\\n"',
    'root ::= "[" (num ("," num)*)? "]"\nnum ::= [0-9]+',
    'root ::= greeting " " name "!"\ngreeting ::= "Hello" | "Hi" | "Hey"\nname ::= [A-Z] [a-z]*',
    'root ::= stmt+\nstmt ::= ident " = " value ";\\n"\nident ::= [a-z_]+\n'
    'value ::= [0-9]+ | "\\"" [^"]* "\\""',
    'root ::= "<" tag ">" [^<]* "</" tag ">"\ntag ::= "b" | "i" | "em"',
    'root ::= date "T" time\ndate ::= [0-9]{4} "-" [0-9]{2} "-" [0-9]{2}\n'
    'time ::= [0-9]{2} ":" [0-9]{2}',
    'root ::= sexp\nsexp ::= atom | "(" sexp (" " sexp)* ")"\natom ::= [a-z]+ | [0-9]+',
    'root ::= [A-Z] [a-z]{1,6} (" " [a-z]{1,8}){0,5} "."',
    'root ::= "{" ws "\\"k\\"" ws ":" ws [0-9]+ ws "}"\nws ::= [ \\t\\n]*',
    'root ::= line ("\\n" line)*\nline ::= [a-z]+ ("," [a-z]+)*',
    'root ::= "SELECT " cols " FROM " [a-z]+\ncols ::= "*" | [a-z]+ (", " [a-z]+)*',
    'root ::= ("a" | "ab" | "abc") "d"?',
    'root ::= func "(" args? ")"\nfunc ::= "add" | "sub" | "mul"\n'
    'args ::= arg ("," " "? arg)*\narg ::= "-"? [0-9]+',
]

TOOLS = [
    {"type": "object", "properties": {
        "location": {"type": "string", "description": "City and state"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
     "required": ["location", "unit"], "additionalProperties": False},
    {"type": "object", "properties": {
        "query": {"type": "string"}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
        "safe_search": {"type": "boolean"}},
     "required": ["query"], "additionalProperties": False},
    {"type": "object", "properties": {
        "to": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5},
        "subject": {"type": "string"}, "body": {"type": "string"},
        "priority": {"enum": ["low", "normal", "high"]}},
     "required": ["to", "subject", "body"], "additionalProperties": False},
    {"type": "object", "properties": {
        "name": {"type": "string"}, "arguments": {"type": "object"}},
     "required": ["name", "arguments"], "additionalProperties": False},
    {"type": "object", "properties": {
        "a": {"type": "number"}, "b": {"type": "number"},
        "op": {"type": "string", "enum": ["+", "-", "*", "/"]}},
     "required": ["a", "b", "op"], "additionalProperties": False},
    {"type": "object", "properties": {
        "id": {"type": "integer"}, "title": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "done": {"type": "boolean"}, "due": {"type": ["string", "null"]}},
     "required": ["id", "title", "done"], "additionalProperties": False},
    {"type": "object", "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": {"type": "object", "properties": {
            "role": {"enum": ["system", "user", "assistant"]}, "content": {"type": "string"}},
            "required": ["role", "content"], "additionalProperties": False}},
        "temperature": {"type": "number"}, "max_tokens": {"type": "integer", "minimum": 1},
        "stream": {"type": "boolean"}},
     "required": ["model", "messages"], "additionalProperties": False},
    {"type": "object", "properties": {
        "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+$"},
        "services": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "port": {"type": "integer", "minimum": 1, "maximum": 65535},
            "replicas": {"type": "integer", "minimum": 0, "maximum": 10}},
            "required": ["name", "port"], "additionalProperties": False}, "maxItems": 3}},
     "required": ["version", "services"], "additionalProperties": False},
    {"$defs": {"address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"}, "zip": {"type": "string", "pattern": "[0-9]{5}"}},
        "required": ["street", "city"], "additionalProperties": False}},
     "type": "object", "properties": {
        "name": {"type": "string"}, "home": {"$ref": "#/$defs/address"},
        "work": {"$ref": "#/$defs/address"}},
     "required": ["name", "home"], "additionalProperties": False},
    {"type": "object", "properties": {
        "status": {"const": "ok"}, "code": {"type": "integer", "minimum": 100, "maximum": 599},
        "data": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"type": "integer"}}]}},
     "required": ["status", "code", "data"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object", "properties": {
        "value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["value"], "additionalProperties": False}}, "$ref": "#/$defs/node"},
    {"type": "array", "items": {"type": "object", "properties": {
        "x": {"type": "number"}, "y": {"type": "number"}}, "required": ["x", "y"],
        "additionalProperties": False}, "minItems": 2, "maxItems": 4},
    {"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number"}}, "required": ["sentiment"], "additionalProperties": False},
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    {"type": "object", "additionalProperties": {"type": "integer"}},
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"},
    {"type": ["integer", "string"]}, {"enum": ["red", "green", "blue", 42, None, True]},
    {"type": "array", "items": {"type": "string", "maxLength": 3}},
    {"type": "integer", "minimum": -100, "maximum": 100},
    {"type": "integer", "exclusiveMinimum": 0},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
        "c": {"type": "integer"}}, "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 0}},
     "required": ["kind", "r"], "additionalProperties": False},
    {"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"],
                "additionalProperties": False},
               {"type": "object", "properties": {"kind": {"const": "b"}, "n": {"type": "integer"}},
                "required": ["kind", "n"], "additionalProperties": False}]},
    {"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object",
        "properties": {"sku": {"type": "string", "pattern": "[A-Z]{3}-[0-9]{4}"},
                       "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
        "required": ["sku", "qty"], "additionalProperties": False}, "minItems": 1}},
     "required": ["items"], "additionalProperties": False},
    {"type": "object", "properties": {"text": {"type": "string"}, "lang": {"type": "string",
        "enum": ["en", "fr", "de"]}}, "required": ["text", "lang"], "additionalProperties": False},
    {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}],
     "items": False},
    {},
]


def random_schema(rng, depth=0):
    kinds = ["string", "integer", "number", "boolean", "enum", "null"]
    if depth < 2:
        kinds += ["object", "array", "object"]
    k = rng.choice(kinds)
    if k == "enum":
        return {"enum": rng.sample(["a", "bb", "ccc", "on", "off", 1, 2, 3.5, None, False], rng.randint(1, 4))}
    if k == "integer" and rng.random() < 0.4:
        lo = rng.randint(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randint(0, 2000)}
    if k == "string" and rng.random() < 0.3:
        return {"type": "string", "maxLength": rng.randint(1, 6)}
    if k == "array":
        s = {"type": "array", "items": random_schema(rng, depth + 1)}
        if rng.random() < 0.5:
            s["minItems"] = rng.randint(0, 2)
            s["maxItems"] = s["minItems"] + rng.randint(0, 3)
        return s
    if k == "object":
        names = rng.sample(["id", "name", "value", "tags", "meta", "x", "y", "enabled", "count",
                            "label", "kind", "score"], rng.randint(1, 4))
        props = {n: random_schema(rng, depth + 1) for n in names}
        req = [n for n in names if rng.random() < 0.6]
        return {"type": "object", "properties": props, "required": req, "additionalProperties": False}
    return {"type": k}


# Structural tags: free text until a trigger, then begin + JSON + end. Short triggers ("<",
# "e") so that random walks reach the structures; overlapping and nested-prefix triggers.
STRUCTURAL_TAGS = [
    {"structures": [
        {"begin": "<f=get>", "schema": TOOLS[0], "end": "</f>"},
        {"begin": "<f=find>", "schema": TOOLS[1], "end": "</f>"}],
     "triggers": ["<f"]},
    {"structures": [{"begin": "e", "schema": {"type": "object", "properties": {
        "n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False},
        "end": "\n"}], "triggers": ["e"]},
    {"structures": [{"begin": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ",
                     "schema": TOOLS[0], "end": "}\n</tool_call>"}],
     "triggers": ["<tool_call>"]},
    {"structures": [
        {"begin": "<", "schema": {"type": "array", "items": {"type": "boolean"}}, "end": ">"},
        {"begin": "a=", "schema": {"type": "string"}, "end": ";"},
        {"begin": "ha!", "end": "."}],
     "triggers": ["<", "a", "ha"]},
]


def cases(num_random_schemas=40):
    out = []
    for i, r in enumerate(REGEXES):
        out.append((f"regex_{i:02d}", "regex", r))
    for i, g in enumerate(GRAMMARS):
        out.append((f"gbnf_{i:02d}", "grammar", g))
    for i, s in enumerate(TOOLS):
        out.append((f"schema_{i:02d}", "json_schema", json.dumps(s)))
    rng = random.Random(1234)
    for i in range(num_random_schemas):
        out.append((f"random_schema_{i:02d}", "json_schema", json.dumps(random_schema(rng))))
    out.append(("json_object", "json_object", ""))
    out.append(("choice_00", "choice", json.dumps(["yes", "no", "not sure"])))
    out.append(("choice_01", "choice", json.dumps(["Paris", "London", "Berlin", "Pa"])))
    for i, t in enumerate(STRUCTURAL_TAGS):
        out.append((f"structural_tag_{i:02d}", "structural_tag", json.dumps(t)))
    return out
