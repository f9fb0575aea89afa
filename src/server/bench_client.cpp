#include "server/bench_client.h"

#include <httplib.h>

#include <chrono>

#include "util/check.h"

namespace vllm::server {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

httplib::Headers headers(const std::string& api_key) {
  httplib::Headers h;
  if (!api_key.empty()) h.emplace("Authorization", "Bearer " + api_key);
  return h;
}

json payload(const BenchTarget& t, const BenchRequest& r) {
  json body = {{"model", t.model}, {"temperature", t.temperature}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (t.chat()) {
    body["messages"] = json::array({{{"role", "user"}, {"content", r.prompt}}});
    body["max_completion_tokens"] = r.output_len;
  } else {
    body["prompt"] = r.prompt;
    body["max_tokens"] = r.output_len;
  }
  if (t.ignore_eos) body["ignore_eos"] = true;
  return body;
}

// Accumulates SSE bytes and applies vLLM's per-chunk timing rules.
class SseTimer {
 public:
  SseTimer(RequestResult& out, bool chat, Clock::time_point start)
      : out_(out), chat_(chat), start_(start) {}

  void feed(const char* data, size_t n) {
    buf_.append(data, n);
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      event(buf_.substr(0, end));
      buf_.erase(0, end + 2);
    }
  }
  bool got_first() const { return got_first_; }
  // Output tokens when the server sends no usage: one per chunk that carried text.
  int text_chunks() const { return text_chunks_; }

 private:
  void event(const std::string& ev) {
    if (ev.rfind("data: ", 0) != 0) return;
    const std::string payload = ev.substr(6);
    if (payload == "[DONE]") return;
    json data = json::parse(payload, nullptr, false);
    if (data.is_discarded()) return;
    const double now = since(start_);
    if (data.contains("choices") && data["choices"].is_array() && !data["choices"].empty()) {
      const json& c = data["choices"][0];
      const json* text = nullptr;
      if (chat_ && c.contains("delta") && c["delta"].contains("content")) text = &c["delta"]["content"];
      if (!chat_ && c.contains("text")) text = &c["text"];
      if (!got_first_) {
        got_first_ = true;
        out_.ttft = now;
      } else {
        out_.itl.push_back(now - last_);
      }
      last_ = now;
      if (text && text->is_string() && !text->get_ref<const std::string&>().empty()) {
        out_.generated_text += text->get<std::string>();
        ++text_chunks_;
      }
    } else if (data.contains("usage") && data["usage"].is_object()) {
      out_.output_tokens = data["usage"].value("completion_tokens", 0);
      out_.prompt_len = data["usage"].value("prompt_tokens", out_.prompt_len);
    }
    out_.latency = last_;
  }

  RequestResult& out_;
  bool chat_;
  Clock::time_point start_;
  std::string buf_;
  bool got_first_ = false;
  double last_ = 0;
  int text_chunks_ = 0;
};

}  // namespace

std::unique_ptr<httplib::Client> make_client(const std::string& base_url) {
  auto c = std::make_unique<httplib::Client>(base_url);
  c->set_connection_timeout(30);
  c->set_read_timeout(6 * 3600);  // as vLLM's AIOHTTP_TIMEOUT
  c->set_write_timeout(600);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  return c;
}

RequestResult send_request(httplib::Client& client, const BenchTarget& target,
                           const BenchRequest& request) {
  RequestResult out;
  out.prompt_len = request.prompt_len;
  const auto start = Clock::now();
  SseTimer timer(out, target.chat(), start);
  std::string error_body;
  int status = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = target.endpoint;
  req.headers = headers(target.api_key);
  req.headers.emplace("Content-Type", "application/json");
  req.body = payload(target, request).dump();
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status == 200) timer.feed(data, n);
    else error_body.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!client.send(req, res, err)) {
    out.error = "request failed: " + httplib::to_string(err);
  } else if (status != 200) {
    out.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 500);
  } else if (!timer.got_first()) {
    out.error = "the stream carried no choices";
  } else {
    out.success = true;
    if (out.output_tokens == 0) out.output_tokens = timer.text_chunks();
  }
  return out;
}

std::string first_served_model(const std::string& base_url, const std::string& api_key) {
  auto client = make_client(base_url);
  client->set_read_timeout(30);
  auto res = client->Get("/v1/models", headers(api_key));
  if (!res || res->status != 200) return "";
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  return j["data"][0].value("id", "");
}

std::string detokenize(httplib::Client& client, const std::vector<int32_t>& ids,
                       const std::string& api_key) {
  auto res = client.Post("/detokenize", headers(api_key), json({{"tokens", ids}}).dump(),
                         "application/json");
  if (!res || res->status != 200)
    throw Error("POST /detokenize failed" + (res ? ": HTTP " + std::to_string(res->status) : std::string()));
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("prompt") || !j["prompt"].is_string())
    throw Error("POST /detokenize: unexpected reply");
  return j["prompt"].get<std::string>();
}

}  // namespace vllm::server
