"""Hostile chat templates and malformed tools against `vllm-cpp serve`, black-box: every hostile
render (a 10^10-step loop, an exponential macro, 100 MB of output, huge products and ranges)
must end in a 400 OpenAI-style error naming the limit within 2 s on /v1/chat/completions and on
/tokenize, and the server must serve a normal request right after. A request's own
chat_template is refused unless the server trusts it; malformed tools get 400 naming the entry."""
import time

import pytest
import requests

from test_server import MODEL_NAME, ServerProcess

# A server template whose loop bound comes from chat_template_kwargs (the template is trusted,
# the bound is not).
KWARGS_LOOP = ("{% for i in range(n|default(1)) %}{% for j in range(n|default(1)) %}{% endfor %}"
               "{% endfor %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
               "<|im_end|>\n{% endfor %}<|im_start|>assistant\n")

LOOP = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
MACRO = ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
         "{{ f(60) }}")
BIG_OUTPUT = "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}"
HOSTILE = [
    ("loop", LOOP, "step limit"),
    ("macro", MACRO, "step limit"),
    ("output-100mb", BIG_OUTPUT, "output size limit"),
    ("str-times", "{{ 'a' * 10**10 }}", "output size limit"),
    ("list-times", "{{ range(100000)|list * 100000 }}", "output size limit"),
    ("join", "{{ range(100000)|join('x' * 1000) }}", "output size limit"),
    ("concat-loop", "{% set ns = namespace(s='') %}{% for i in range(100000) %}"
                    "{% set ns.s = ns.s ~ ('x' * 1000) %}{% endfor %}", "step limit"),
    ("range", "{% for i in range(10**10) %}{% endfor %}", "Range too big"),
]
MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def trusting(binary):
    srv = ServerProcess(binary, "--trust-request-chat-template").wait_ready()
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def strict(binary, tmp_path_factory):
    path = tmp_path_factory.mktemp("tmpl") / "loop.jinja"
    path.write_text(KWARGS_LOOP)
    srv = ServerProcess(binary, "--chat-template", str(path)).wait_ready()
    yield srv
    assert srv.stop() == 0


def post(srv, path, body, timeout=30):
    start = time.monotonic()
    r = requests.post(srv.url + path, json=body, timeout=timeout)
    return r, time.monotonic() - start


def assert_error(r, status, *fragments):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["object"] == "error"
    err = body["error"]
    assert err["code"] == status and err["type"] == "BadRequestError"
    for f in fragments:
        assert f in err["message"], err["message"]
    return err


def chat(**kw):
    return {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 4, **kw}


def assert_serves_normally(srv):
    r, _ = post(srv, "/v1/chat/completions", chat())
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("length", "stop")
    r, _ = post(srv, "/tokenize", {"model": MODEL_NAME, "messages": MESSAGES})
    assert r.status_code == 200 and r.json()["count"] > 0, r.text


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_template_is_a_fast_400(trusting, path, case):
    _, template, fragment = case
    r, seconds = post(trusting, path, chat(chat_template=template))
    assert_error(r, 400, fragment)
    assert seconds < 2.0
    assert_serves_normally(trusting)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_loop_bound_from_kwargs_is_a_fast_400(strict, path):
    r, seconds = post(strict, path, chat(chat_template_kwargs={"n": 100000}))
    err = assert_error(r, 400, "step limit", "--chat-template-max-steps")
    assert err["param"] == "messages"
    assert seconds < 2.0
    r, _ = post(strict, path, chat(chat_template_kwargs={"n": 10}))
    assert r.status_code == 200, r.text


def test_hostile_requests_at_once_leave_the_server_responsive(trusting):
    """Two hostile renders in flight (the issue's two-core attack) and a normal request behind."""
    import concurrent.futures
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        hostile = [pool.submit(post, trusting, "/tokenize", chat(chat_template=LOOP))
                   for _ in range(2)]
        time.sleep(0.05)
        normal = pool.submit(post, trusting, "/v1/chat/completions", chat())
        for f in hostile:
            r, seconds = f.result()
            # Which bound ends the loop first depends on the machine's load: the 10M steps
            # take about 0.5 s on an idle core, the clock stops it at 1 s.
            err = assert_error(r, 400)
            assert "step limit" in err["message"] or "time limit" in err["message"], err
            assert seconds < 4.0
        r, seconds = normal.result()
        assert r.status_code == 200, r.text
        assert seconds < 6.0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
def test_request_template_needs_the_trust_flag(strict, trusting, path):
    template = "{% for m in messages %}{{ m.content }}!{% endfor %}"
    r, _ = post(strict, path, chat(chat_template=template))
    err = assert_error(r, 400, "--trust-request-chat-template")
    assert err["param"] == "chat_template"
    # Through the kwargs too, as vLLM refuses it.
    r, _ = post(strict, path, chat(chat_template_kwargs={"chat_template": template}))
    assert_error(r, 400, "--trust-request-chat-template")
    r, _ = post(trusting, "/tokenize", {"model": MODEL_NAME, "messages": MESSAGES,
                                        "chat_template": template, "return_token_strs": True})
    assert r.status_code == 200, r.text
    assert "".join(r.json()["token_strs"]) == "Hi!"
    r, _ = post(trusting, "/tokenize", {"model": MODEL_NAME, "messages": MESSAGES,
                                        "chat_template_kwargs": {"chat_template": template},
                                        "return_token_strs": True})
    assert "".join(r.json()["token_strs"]) == "Hi!"
    count = len(r.json()["token_strs"])
    r, _ = post(trusting, "/v1/chat/completions", chat(chat_template=template))
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == count


GOOD_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                              "parameters": {"type": "object", "properties": {}},
                                              "strict": False}}
BAD_TOOLS = [
    ("ints", [1, 2, 3], "'tools[0]' must be an object, not a number"),
    ("no-name", [{"type": "function", "function": {"description": "x"}}],
     "'tools[0].function.name' is required"),
    ("name-not-str", [{"type": "function", "function": {"name": 7}}],
     "'tools[0].function.name' must be a string, not a number"),
    ("type-not-function", [GOOD_TOOL, {"type": "retrieval", "function": {"name": "f"}}],
     "'tools[1].type' must be 'function', not \"retrieval\""),
    ("no-function", [{"type": "function"}], "'tools[0].function' is required"),
    ("function-not-object", [{"type": "function", "function": "f"}],
     "'tools[0].function' must be an object, not a string"),
    ("description-not-str", [{"function": {"name": "f", "description": 1}}],
     "'tools[0].function.description' must be a string"),
    ("parameters-not-object", [{"function": {"name": "f", "parameters": []}}],
     "'tools[0].function.parameters' must be an object, not a list"),
    ("strict-not-bool", [{"function": {"name": "f", "strict": "yes"}}],
     "'tools[0].function.strict' must be a boolean, not a string"),
    ("not-a-list", {"type": "function"}, "'tools' must be a list, not an object"),
]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/tokenize"])
@pytest.mark.parametrize("case", BAD_TOOLS, ids=[c[0] for c in BAD_TOOLS])
def test_malformed_tools_are_a_400_naming_the_entry(trusting, path, case):
    _, tools, message = case
    r, _ = post(trusting, path, chat(tools=tools))
    err = assert_error(r, 400, message)
    assert err["param"] == "tools"


def test_valid_tools_are_accepted(trusting):
    # "type" defaults to "function"; optional fields may be null; unknown keys are tolerated.
    tools = [GOOD_TOOL, {"function": {"name": "f", "description": None, "parameters": None}},
             {"type": "function", "function": {"name": "g"}, "extra": 1}]
    # tool_choice "none": tools alone mean "auto", which (as in vLLM) needs
    # --enable-auto-tool-choice (tests/python/test_tool_calling.py).
    r, _ = post(trusting, "/v1/chat/completions", chat(tools=tools, tool_choice="none"))
    assert r.status_code == 200, r.text
    r, _ = post(trusting, "/tokenize", {"model": MODEL_NAME, "messages": MESSAGES,
                                        "tools": tools})
    assert r.status_code == 200, r.text
