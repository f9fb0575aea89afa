"""The chat page at / in a real browser: headless Chromium driven over its DevTools protocol
(websocket-client). The page streams a reply equal to the chat completions answer, Stop ends a
long generation on the server, model output is shown as text (no HTML from the model runs),
an API key is asked for and sent, and --no-webui turns / into a 404.
Set VLLM_CPP_UPDATE_SCREENSHOT=1 to rewrite docs/chat_page.png from the first test."""
import base64
import itertools
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import time

import openai
import pytest
import requests
import websocket

from test_server import MODEL_NAME, ServerProcess, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium tab, spoken to over the DevTools protocol."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="chat-page-")
        port = free_port()
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", f"--remote-debugging-port={port}",
             "--remote-allow-origins=*", f"--user-data-dir={self.profile}",
             "--window-size=900,640", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                targets = requests.get(f"http://127.0.0.1:{port}/json/list", timeout=2).json()
                page = next(t for t in targets if t["type"] == "page")
                break
            except (requests.RequestException, StopIteration, ValueError):
                if time.monotonic() > deadline:
                    self.close()
                    pytest.fail("chromium did not open its DevTools port")
                time.sleep(0.2)
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                              suppress_origin=True)
        self.ids = itertools.count(1)

    def call(self, method, **params):
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def js(self, expression):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{expression}: {out['exceptionDetails']}")
        return out["result"].get("value")

    def wait(self, expression, timeout=60):
        deadline = time.monotonic() + timeout
        while not self.js(expression):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for: {expression}")
            time.sleep(0.05)

    def open(self, url):
        self.call("Page.navigate", url="about:blank")  # a fresh page, no form state kept
        self.wait("location.href === 'about:blank'")
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && !!document.getElementById('send')")

    def close(self):
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it with WITH_TEST_MODELS=1)")
    b = Browser()
    yield b
    b.close()


@pytest.fixture(scope="module")
def server(binary):
    srv = ServerProcess(binary).wait_ready()
    yield srv
    assert srv.stop() == 0


def fill(browser, **fields):
    """Sets the page's inputs by id (settings and the message box)."""
    for key, value in fields.items():
        browser.js(f"document.getElementById({json.dumps(key)}).value = {json.dumps(value)}")


def send_and_wait(browser, text, turns):
    fill(browser, input=text)
    browser.js("document.getElementById('send').click()")
    browser.wait(f"chatState.history.length === {2 * turns} && !chatState.controller", 120)
    return browser.js("chatState.history[chatState.history.length - 1].content")


def count_text_updates(browser):
    """From now on, records the text length of the newest reply at every DOM change."""
    browser.js("""window.seen = [];
      new MutationObserver(() => {
        const m = document.querySelectorAll('#log .msg.assistant');
        if (m.length) window.seen.push(m[m.length - 1].textContent.length);
      }).observe(document.getElementById('log'), {subtree: true, childList: true, characterData: true})""")


def test_page_streams_a_reply(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length > 0")
    assert browser.js("[...document.getElementById('model').options].map(o => o.value)") == [MODEL_NAME]
    fill(browser, temperature="0", max_tokens="40", system="You are a helpful assistant.")
    count_text_updates(browser)
    question = "What is the capital of France?"
    reply = send_and_wait(browser, question, 1)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    expected = client.chat.completions.create(
        model=MODEL_NAME, temperature=0, max_tokens=40,
        messages=[{"role": "system", "content": "You are a helpful assistant."},
                  {"role": "user", "content": question}]).choices[0].message.content
    assert reply == expected
    # Streamed: the reply grew over several DOM updates before its end.
    lengths = [n for n in browser.js("window.seen") if n > 0]
    assert len(set(lengths)) > 1, lengths
    assert browser.js("document.querySelector('#log .msg.user').textContent") == question
    shown = browser.js("document.querySelectorAll('#log .msg.assistant')[0].textContent")
    assert " ".join(shown.split()) == " ".join(expected.replace("**", "").split())
    if os.environ.get("VLLM_CPP_UPDATE_SCREENSHOT"):
        browser.js("document.querySelector('details').open = true")
        png = browser.call("Page.captureScreenshot", format="png")["data"]
        (ROOT / "docs" / "chat_page.png").write_bytes(base64.b64decode(png))
    # A second turn carries the first; Clear chat forgets both.
    send_and_wait(browser, "And of Germany?", 2)
    assert browser.js("chatState.history.map(m => m.role)") == ["user", "assistant"] * 2
    browser.js("document.getElementById('clear').click()")
    assert browser.js("chatState.history.length + document.querySelectorAll('#log .msg').length") == 0


def test_stop_ends_the_generation(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length > 0")
    fill(browser, extra=json.dumps({"max_tokens": 1500, "ignore_eos": True}))
    fill(browser, input="Tell me a long story.")
    browser.js("document.getElementById('send').click()")
    browser.wait("chatState.updates > 5")
    assert server.metrics()["vllm:num_requests_running"] == 1
    assert browser.js("document.getElementById('stop').disabled") is False
    browser.js("document.getElementById('stop').click()")
    deadline = time.monotonic() + 5
    while server.metrics()["vllm:num_requests_running"] != 0:
        assert time.monotonic() < deadline, "the stopped request still runs on the server"
        time.sleep(0.05)
    browser.wait("!chatState.controller && chatState.history.length === 2")
    assert browser.js("document.querySelector('#log .msg.assistant .stopped') !== null")
    assert browser.js("document.getElementById('send').disabled") is False
    assert len(browser.js("chatState.history[1].content")) > 0


def test_model_output_is_text_not_html(browser, server):
    browser.open(server.url + "/")
    browser.wait("document.getElementById('model').options.length > 0")
    # The server's structured output forces the reply to be exactly this text.
    text = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> **bold** `a<b`'
    regex = (r'<script>window\.pwned=1</script><img src=x onerror="window\.pwned=2"> '
             r'\*\*bold\*\* `a<b`')
    fill(browser, extra=json.dumps({"structured_outputs": {"regex": regex}, "max_tokens": 200}))
    assert send_and_wait(browser, "Say something.", 1) == text
    assert browser.js("document.querySelectorAll('#log script, #log img').length") == 0
    assert browser.js("window.pwned === undefined")
    shown = browser.js("document.querySelector('#log .msg.assistant').textContent")
    assert shown == '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> bold a<b'
    # The markdown around it still renders: bold and inline code.
    assert browser.js("document.querySelector('#log .msg.assistant strong').textContent") == "bold"
    assert browser.js("document.querySelector('#log .msg.assistant code').textContent") == "a<b"


def test_page_asks_for_the_api_key(browser, binary):
    srv = ServerProcess(binary, "--api-key", "sesame").wait_ready()
    try:
        page = requests.get(srv.url + "/", timeout=10)  # the page itself needs no key
        assert page.status_code == 200
        browser.open(srv.url + "/")
        browser.wait("!document.getElementById('keybox').hidden")
        assert browser.js("document.getElementById('model').options.length") == 0
        browser.js("""const k = document.getElementById('apikey'); k.value = 'sesame';
                      k.dispatchEvent(new Event('change'))""")
        browser.wait("document.getElementById('model').options.length > 0")
        fill(browser, max_tokens="4")
        assert send_and_wait(browser, "Hi", 1)
    finally:
        browser.js("sessionStorage.clear()")
        assert srv.stop() == 0


def test_page_is_self_contained_and_can_be_turned_off(binary, server):
    r = requests.get(server.url + "/", timeout=10)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html")
    for needle in ('src="http', "src='http", 'href="http', "url(http", "@import", "//cdn"):
        assert needle not in r.text, needle
    srv = ServerProcess(binary, "--no-webui").wait_ready()
    try:
        assert requests.get(srv.url + "/", timeout=10).status_code == 404
        assert requests.get(srv.url + "/v1/models", timeout=10).status_code == 200
    finally:
        assert srv.stop() == 0


# The renderer against CommonMark's output for the subset it covers (whitespace between block
# tags aside): https://spec.commonmark.org/ examples of emphasis, code spans, lists, fences.
MARKDOWN_CASES = [
    ("a *b* **c** `d`", "<p>a <em>b</em> <strong>c</strong> <code>d</code></p>"),
    ("```py\nx = 1 < 2\n```", "<pre><code>x = 1 &lt; 2</code></pre>"),
    ("- one\n- two", "<ul><li>one</li><li>two</li></ul>"),
    ("1. one\n2. two", "<ol><li>one</li><li>two</li></ol>"),
    ("p1\n\np2", "<p>p1</p><p>p2</p>"),
    ("snake_case_name", "<p>snake_case_name</p>"),
    ("`**not bold**`", "<p><code>**not bold**</code></p>"),
    ("<b onclick=x>hi</b> & more", "<p>&lt;b onclick=x&gt;hi&lt;/b&gt; &amp; more</p>"),
]


@pytest.mark.parametrize("source,html", MARKDOWN_CASES)
def test_markdown_subset(browser, server, source, html):
    if browser.js("typeof renderMarkdown") != "function":
        browser.open(server.url + "/")
    assert browser.js(f"renderMarkdown({json.dumps(source)})") == html
