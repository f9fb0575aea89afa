// `vllm-cpp chat --url`: streamed chat completions from an OpenAI-compatible server.
#include <httplib.h>

#include "cli/chat_session.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

using json = nlohmann::json;

// "http://host:8000/v1/" -> {"http://host:8000", "/v1"}.
std::pair<std::string, std::string> split_url(const std::string& url) {
  if (url.rfind("https://", 0) == 0)
    throw Error("--url " + url + ": https is not supported by this build; use http://");
  if (url.rfind("http://", 0) != 0) throw Error("--url " + url + ": must start with http://");
  const size_t slash = url.find('/', 7);
  std::string origin = url.substr(0, slash);
  std::string base = slash == std::string::npos ? "" : url.substr(slash);
  while (!base.empty() && base.back() == '/') base.pop_back();
  if (origin.size() == 7) throw Error("--url " + url + ": no host");
  return {origin, base};
}

// The message of an OpenAI-style error body, else the body itself (shortened).
std::string error_message(int status, const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  std::string msg = body.substr(0, 300);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    msg = e.is_object() ? e.value("message", e.dump()) : e.dump();
  }
  return "the server answered " + std::to_string(status) + ": " + msg;
}

class RemoteChat : public ChatSession {
 public:
  explicit RemoteChat(const ChatOptions& opts) : opts_(opts) {
    auto [origin, base] = split_url(opts.url);
    base_ = base;
    client_ = std::make_unique<httplib::Client>(origin);
    client_->set_connection_timeout(10);
    client_->set_read_timeout(3600);
    if (!opts.api_key.empty()) headers_.emplace("Authorization", "Bearer " + opts.api_key);
    model_ = opts.model_name.empty() ? first_model() : opts.model_name;
  }

  const std::string& model_name() const override { return model_; }

  std::string reply(const json& messages, const std::function<void(const std::string&)>& on_text,
                    const std::atomic<bool>& stop) override {
    httplib::Request req;
    req.method = "POST";
    req.path = base_ + "/chat/completions";
    req.headers = headers_;
    req.headers.emplace("Content-Type", "application/json");
    req.body = request_body(messages).dump();
    int status = 0;
    std::string error_body, pending, text, stream_error;
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data, n);
        return true;
      }
      pending.append(data, n);
      for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
        const std::string line = pending.substr(0, eol);
        pending.erase(0, eol + 1);
        const std::string piece = event_text(line, stream_error);
        if (!stream_error.empty()) return false;  // no exception through httplib
        text += piece;
        if (!piece.empty()) on_text(piece);
      }
      return !stop.load();
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool sent = client_->send(req, res, err);
    if (!stream_error.empty()) throw Error(stream_error);
    if (!sent && !(err == httplib::Error::Canceled && stop.load()))
      throw Error("lost the server at " + opts_.url + ": " + httplib::to_string(err));
    if (status != 200) throw Error(error_message(status, error_body));
    return text;
  }

 private:
  std::string first_model() {
    auto res = client_->Get(base_ + "/models", headers_);
    if (!res)
      throw Error("cannot reach the server at " + opts_.url + ": " + httplib::to_string(res.error()) +
                  " (is `vllm-cpp serve` running there?)");
    if (res->status == 404)
      throw Error(error_message(404, res->body) + " (--url is the API base, e.g. " +
                  "http://localhost:8000/v1)");
    if (res->status != 200) throw Error(error_message(res->status, res->body));
    const json j = json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
        !j["data"][0].contains("id"))
      throw Error(opts_.url + "/models: no model listed");
    return j["data"][0]["id"].get<std::string>();
  }

  json request_body(const json& messages) const {
    json body = {{"model", model_}, {"messages", messages}, {"stream", true}};
    if (opts_.temperature >= 0) body["temperature"] = opts_.temperature;
    if (opts_.top_p >= 0) body["top_p"] = opts_.top_p;
    if (opts_.max_tokens > 0) body["max_tokens"] = opts_.max_tokens;
    if (opts_.seed >= 0) body["seed"] = opts_.seed;
    if (opts_.ignore_eos) body["ignore_eos"] = true;
    return body;
  }

  // The text one SSE line carries ("data: {chunk}"); an error event sets `error`.
  static std::string event_text(std::string line, std::string& error) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("data:", 0) != 0) return "";
    const std::string payload = line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5);
    if (payload == "[DONE]") return "";
    const json j = json::parse(payload, nullptr, false);
    if (!j.is_object()) {
      error = "the server sent a malformed event: " + payload.substr(0, 200);
      return "";
    }
    if (j.contains("error")) {
      const json& code = j["error"].is_object() ? j["error"].value("code", json()) : json();
      error = error_message(code.is_number_integer() ? code.get<int>() : 500, payload);
      return "";
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return "";
    const json& delta = j["choices"][0].value("delta", json::object());
    auto content = delta.find("content");
    return content != delta.end() && content->is_string() ? content->get<std::string>() : "";
  }

  ChatOptions opts_;
  std::string base_, model_;
  std::unique_ptr<httplib::Client> client_;
  httplib::Headers headers_;
};

}  // namespace

std::unique_ptr<ChatSession> connect_chat_server(const ChatOptions& opts) {
  return std::make_unique<RemoteChat>(opts);
}

}  // namespace vllm::cli
