"""Structured output on SmolLM2, black-box: what the server generates under a JSON schema
validates with the `jsonschema` package, under a regex Python's re.fullmatch accepts it, under a
choice it is one of the choices; at temperature 0 and 1, streamed, with n > 1, through every
request form (response_format, structured_outputs, guided_*), and a schema the server cannot
compile is a 400 naming the problem."""
import json
import pathlib
import re

import jsonschema
import pytest
import requests

from test_server import MODEL_NAME, ServerProcess, client, server  # noqa: F401 (fixtures)

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"enum": ["Paris", "London", "Tokyo"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "object",
    "properties": {
        "location": {"type": "string", "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["location", "unit"],
    "additionalProperties": False,
}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"


def post(server, path, **body):
    body.setdefault("model", MODEL_NAME)
    return requests.post(server.url + path, json=body, timeout=300)


def chat(server, content, **body):
    body.setdefault("max_tokens", 200)
    r = post(server, "/v1/chat/completions", messages=[{"role": "user", "content": content}], **body)
    assert r.status_code == 200, r.text
    return r.json()["choices"]


def completion(server, prompt, **body):
    body.setdefault("max_tokens", 200)
    r = post(server, "/v1/completions", prompt=prompt, **body)
    assert r.status_code == 200, r.text
    return r.json()["choices"]


def finished_texts(choices):
    # A grammar that completes ends the stream with EOS: finish_reason "stop".
    for c in choices:
        assert c["finish_reason"] == "stop", c
    return [c["message"]["content"] if "message" in c else c["text"] for c in choices]


@pytest.mark.parametrize("temperature", [0, 1])
def test_json_schema_response_format_validates(server, temperature):
    choices = chat(server, "Describe a person as JSON.", temperature=temperature, n=3, seed=7,
                   response_format={"type": "json_schema",
                                    "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    for text in finished_texts(choices):
        jsonschema.validate(json.loads(text), PERSON)


@pytest.mark.parametrize("temperature", [0, 1])
def test_guided_json_on_completions_validates(server, temperature):
    choices = completion(server, "The weather query as JSON:", temperature=temperature, n=2,
                         seed=3, guided_json=WEATHER_TOOL)
    for text in finished_texts(choices):
        jsonschema.validate(json.loads(text), WEATHER_TOOL)


@pytest.mark.parametrize("temperature", [0, 1])
def test_regex_fullmatches(server, temperature):
    for body in ({"structured_outputs": {"regex": PHONE}}, {"guided_regex": PHONE}):
        choices = completion(server, "My phone number is ", temperature=temperature, n=2, seed=1,
                             **body)
        for text in finished_texts(choices):
            assert re.fullmatch(PHONE, text), text


@pytest.mark.parametrize("temperature", [0, 1])
def test_choice_is_one_of_them(server, temperature):
    options = ["positive", "negative", "neutral"]
    for body in ({"structured_outputs": {"choice": options}}, {"guided_choice": options}):
        choices = chat(server, "Sentiment of 'I love it'?", temperature=temperature, n=3, seed=5,
                       **body)
        for text in finished_texts(choices):
            assert text in options


def test_json_object_is_a_json_object(server):
    choices = chat(server, "Give me a JSON object.", temperature=0.7, n=2, seed=11,
                   response_format={"type": "json_object"}, max_tokens=400)
    for c in choices:
        if c["finish_reason"] == "stop":
            assert isinstance(json.loads(c["message"]["content"]), dict)
        else:  # an object can go on for ever: then at least a prefix of one
            assert c["message"]["content"].startswith("{")


def test_grammar_output_parses(server):
    grammar = 'root ::= num (" " op " " num)+\nop ::= "+" | "-" | "*"\nnum ::= [1-9] [0-9]{0,2}'
    choices = completion(server, "An arithmetic expression: ", temperature=1, n=3, seed=2,
                         structured_outputs={"grammar": grammar}, max_tokens=40)
    for c in choices:
        pattern = r"[1-9][0-9]{0,2}( [+*-] [1-9][0-9]{0,2})+"
        if c["finish_reason"] == "stop":
            assert re.fullmatch(pattern, c["text"]), c["text"]
        else:
            assert re.fullmatch(r"[1-9][0-9]{0,2}( [+*-] [1-9][0-9]{0,2})*( ([+*-]( [0-9]*)?)?)?",
                                c["text"]), c["text"]


def test_streaming_under_a_schema(server):
    r = requests.post(server.url + "/v1/chat/completions", stream=True, timeout=300, json={
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "A person, as JSON."}],
        "max_tokens": 200, "temperature": 1, "seed": 4, "stream": True,
        "structured_outputs": {"json": PERSON}})
    assert r.status_code == 200
    text, finish = "", None
    for line in r.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for c in chunk["choices"]:
            text += c["delta"].get("content") or ""
            finish = c.get("finish_reason") or finish
    assert finish == "stop"
    jsonschema.validate(json.loads(text), PERSON)


def test_openai_sdk_parse_with_pydantic(client):
    pydantic = pytest.importorskip("pydantic")

    class Weather(pydantic.BaseModel):
        location: str
        unit: str
        days: int

    parse = getattr(getattr(client, "beta", None), "chat", None)
    if parse is None or not hasattr(parse.completions, "parse"):
        parse = client.chat
    completion = parse.completions.parse(
        model=MODEL_NAME, messages=[{"role": "user", "content": "Weather in Oslo as JSON."}],
        response_format=Weather, max_tokens=200, temperature=0)
    msg = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(msg.parsed, Weather)
    jsonschema.validate(json.loads(msg.content), Weather.model_json_schema())


def test_json_layout_options(server):
    """vLLM's structured_outputs options: no whitespace at all, a whitespace pattern, and
    additionalProperties false by default."""
    open_schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10},
                                                    "age": {"type": "integer", "minimum": 0,
                                                            "maximum": 99}},
                   "required": ["name", "age"]}
    for options, layout in (({"disable_any_whitespace": True}, None),
                            ({"whitespace_pattern": "[ ]?"}, r"[ ]?"),
                            ({"disable_additional_properties": True}, None)):
        choices = chat(server, "A person as JSON.", temperature=0, max_tokens=100,
                       structured_outputs={"json": open_schema, **options})
        text = finished_texts(choices)[0]
        value = json.loads(text)
        closed = "disable_additional_properties" in options
        jsonschema.validate(value, {**open_schema, "additionalProperties": not closed})
        if "disable_any_whitespace" in options:
            assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False), text
        if layout:  # at most single spaces between the JSON tokens
            outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
            assert re.fullmatch(r'[^\s]*( [^\s]+)*', outside), text
    r = post(server, "/v1/completions", prompt="x", max_tokens=20, guided_whitespace_pattern="\n",
             guided_json={"type": "array", "items": {"type": "integer"}, "minItems": 2})
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["text"]
    if r.json()["choices"][0]["finish_reason"] == "stop":
        assert re.fullmatch(r"\[\n?-?\d+\n?(,\n?-?\d+\n?)+\]", text), text


def tag_segments(text, tag, cut=False):
    """Every structure in text under a legacy structural tag: (begin, JSON value, end) in order;
    asserts that each trigger is followed by a whole structure (begin, JSON of its schema, end).
    cut: the text was cut by max_tokens, so its last structure may be a prefix of one."""
    out, pos = [], 0
    decoder = json.JSONDecoder()
    while True:
        hits = [text.find(t, pos) for t in tag["triggers"] if text.find(t, pos) >= 0]
        if not hits:
            return out
        at = min(hits)
        st = next((s for s in tag["structures"] if text.startswith(s["begin"], at)), None)
        if st is None:
            assert cut and any(s["begin"].startswith(text[at:]) for s in tag["structures"]), text
            return out
        try:
            value, stop = decoder.raw_decode(text, at + len(st["begin"]))
        except json.JSONDecodeError:
            assert cut, text
            return out
        jsonschema.validate(value, st.get("schema") or {})
        if not text.startswith(st["end"], stop):
            assert cut and st["end"].startswith(text[stop:]), text
            return out
        out.append((st["begin"], value, st["end"]))
        pos = stop + len(st["end"])


TOOL_TAG = {"type": "structural_tag",
            "structures": [{"begin": "<tool=weather>", "schema": WEATHER_TOOL, "end": "</tool>"},
                           {"begin": "<tool=person>", "schema": PERSON, "end": "</tool>"}],
            "triggers": ["<tool="]}
TOOL_PROMPT = ('Tool calls look like <tool=weather>{"location": "Paris", "unit": "celsius"}</tool>.\n'
               'Q: weather in Oslo?\nA: <tool=weather>{"location": "Oslo", "unit": "celsius"}</tool>\n'
               'Q: weather in Rome?\nA: <tool=')


@pytest.mark.parametrize("temperature", [0, 1])
def test_structural_tag(server, temperature):
    """Free text, then a trigger; what follows the trigger is a begin, JSON of its schema and
    the end. The prompt stops inside the trigger, so the output has to complete one; the same
    tag through response_format (chat and completions, both forms), structured_outputs (JSON
    text) and the older top-level structural_tag."""
    so_tag = json.dumps({k: v for k, v in TOOL_TAG.items() if k != "type"})
    # xgrammar's newer form of the same tag.
    format_tag = {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": TOOL_TAG["triggers"],
        "tags": [{"type": "tag", "begin": s["begin"], "end": s["end"],
                  "content": {"type": "json_schema", "json_schema": s["schema"]}}
                 for s in TOOL_TAG["structures"]]}}
    for choices in (completion(server, TOOL_PROMPT, temperature=temperature, seed=5, n=2,
                               max_tokens=80, response_format=TOOL_TAG),
                    completion(server, TOOL_PROMPT, temperature=temperature, seed=5,
                               max_tokens=80, structured_outputs={"structural_tag": so_tag}),
                    completion(server, TOOL_PROMPT, temperature=temperature, seed=5,
                               max_tokens=80, response_format=format_tag),
                    completion(server, TOOL_PROMPT, temperature=temperature, seed=5,
                               max_tokens=80, structural_tag=so_tag)):
        for c in choices:
            # The prompt ends with "<tool=": a structure is where the text starts.
            text = "<tool=" + c["text"]
            assert c["finish_reason"] in ("stop", "length"), c
            segments = tag_segments(text, TOOL_TAG, cut=c["finish_reason"] == "length")
            assert segments, text
    choices = chat(server, "Weather in Paris? Answer with <tool=weather>{...}</tool>.",
                   temperature=temperature, seed=5, max_tokens=120, response_format=TOOL_TAG)
    tag_segments(choices[0]["message"]["content"], TOOL_TAG,
                 cut=choices[0]["finish_reason"] == "length")


@pytest.mark.parametrize("body,what", [
    ({"response_format": {"type": "structural_tag", "format": {"type": "or", "elements": []}}},
     "format type 'or' is not supported"),
    ({"structured_outputs": {"structural_tag": json.dumps(
        {"structures": [{"begin": "<a>", "end": "</a>"}], "triggers": ["<b>"]})}},
     "does not start with any trigger"),
    ({"response_format": {"type": "structural_tag", "triggers": ["<a"],
                          "structures": [{"begin": "<a>", "schema": {"not": {}}, "end": "</a>"}]}},
     "'not'"),
    ({"structured_outputs": {"structural_tag": "{oops"}}, "structured_outputs.structural_tag"),
    ({"guided_json": {"type": "object", "not": {"required": ["a"]}}}, "'not'"),
    ({"response_format": {"type": "json_schema",
                          "json_schema": {"name": "x", "schema": {"type": "string", "format": "ipv9"}}}},
     "ipv9"),
    ({"guided_regex": "(?<=a)b"}, "regex"),
    ({"structured_outputs": {"grammar": "root ::= missing"}}, "missing"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "only one"),
    ({"guided_json": "{not json"}, "guided_json"),
    ({"guided_regex": "a{100000}"}, "repetition bound"),
    # Found by fuzz_request_json: it was a 200 "stop" with text that did not match the regex.
    ({"structured_outputs": {"regex": "[a-z]{0,}??{3033}???=?max_completion_tok-8]+"}},
     "multiple repeat"),
    ({"guided_json": {"$ref": "#"}}, "left recursion"),
    # Found by fuzz_request_json: valid, but past the matcher's parse limit from its start (it
    # was a 200 "stop" with empty text that did not match).
    ({"structured_outputs": {"regex": "(x*){3033}b"}}, "too ambiguous"),
])
def test_uncompilable_constraints_are_a_400(server, body, what):
    for path, extra in (("/v1/completions", {"prompt": "x"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        r = post(server, path, max_tokens=4, **extra, **body)
        assert r.status_code == 400, r.text
        assert what in r.json()["error"]["message"], r.json()


# Forced bytes first (one token at a time, no mask walk), then a state past the matcher's parse
# limit: the request compiles, and fails once generation reaches that state.
LATE_LIMIT = "zqzqzqzqzq(x*){3033}b"


def test_grammar_limit_reached_mid_generation_is_an_error(server):
    """A completion whose grammar passes a matcher limit ends as an error the client sees:
    a 400 without streaming, an error event and a clean end with it, never a 200 "stop"."""
    for path, extra in (("/v1/completions", {"prompt": "x"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        r = post(server, path, max_tokens=30, n=2, structured_outputs={"regex": LATE_LIMIT},
                 **extra)
        assert r.status_code == 400, r.text
        assert "too ambiguous" in r.json()["error"]["message"], r.json()
        # Streaming: the head is out (200); the stream carries the error, then [DONE].
        r = requests.post(server.url + path, stream=True, timeout=300, json={
            "model": MODEL_NAME, "max_tokens": 30, "stream": True,
            "structured_outputs": {"regex": LATE_LIMIT}, **extra})
        assert r.status_code == 200
        events = [line[6:] for line in r.iter_lines() if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]", events
        assert "too ambiguous" in json.loads(events[-2])["error"]["message"], events
        text = "".join((c.get("text") or c.get("delta", {}).get("content") or "")
                       for e in events[:-2] for c in json.loads(e)["choices"])
        assert LATE_LIMIT.startswith(text[:10]) and text, text
    # Anthropic's and the Responses API's stream error events (a schema: their only way).
    schema = {"type": "string", "pattern": "^" + LATE_LIMIT + "$"}
    r = requests.post(server.url + "/v1/messages", stream=True, timeout=300, json={
        "model": MODEL_NAME, "max_tokens": 30, "stream": True,
        "messages": [{"role": "user", "content": "x"}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}}})
    lines = [line for line in r.iter_lines() if line]
    assert lines[-2] == b"event: error", lines
    assert json.loads(lines[-1][6:])["error"]["type"] == "invalid_request_error", lines
    r = requests.post(server.url + "/v1/responses", stream=True, timeout=300, json={
        "model": MODEL_NAME, "max_output_tokens": 30, "stream": True, "input": "x",
        "text": {"format": {"type": "json_schema", "name": "s", "schema": schema}}})
    lines = [line for line in r.iter_lines() if line]
    assert lines[-2] == b"event: error", lines
    assert "too ambiguous" in json.loads(lines[-1][6:])["message"], lines
    # The server goes on: the same server answers a plain request.
    assert post(server, "/v1/completions", prompt="x", max_tokens=2).status_code == 200


GEMMA = pathlib.Path(__file__).resolve().parents[2] / "models" / "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="module")
def gemma(binary):
    if not GEMMA.exists():
        pytest.skip(f"{GEMMA} absent (scripts/test.sh fetches it)")
    srv = ServerProcess(binary, str(GEMMA), "--seed", "0").wait_ready(timeout=120)
    yield srv
    assert srv.stop() == 0


def test_sentencepiece_vocabulary_gemma(gemma):
    """Gemma-3's SentencePiece vocabulary (a leading space is '▁', bytes are <0xAB> tokens)."""
    options = ["café", "thé", " über"]
    for temperature in (0, 1):
        r = post(gemma, "/v1/completions", prompt="Café or thé?", max_tokens=10, n=3, seed=3,
                 temperature=temperature, guided_choice=options)
        assert r.status_code == 200, r.text
        for text in finished_texts(r.json()["choices"]):
            assert text in options
        r = post(gemma, "/v1/completions", prompt="Call me at", max_tokens=30, n=3, seed=4,
                 temperature=temperature, guided_regex=PHONE)
        for text in finished_texts(r.json()["choices"]):
            assert re.fullmatch(PHONE, text), text
