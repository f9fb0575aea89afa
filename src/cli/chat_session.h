// The two ends `vllm-cpp chat` talks to: an OpenAI-compatible server (streamed chat
// completions over HTTP) or a model loaded in this process (the generator `generate` uses).
// Both take the whole conversation each turn; the caller keeps the history.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace vllm::cli {

struct ChatOptions {
  std::string url = "http://localhost:8000/v1";  // remote: the server's /v1 base
  std::string model_name;                         // remote: empty = the first of /v1/models
  std::string api_key;                            // remote: Bearer token
  std::string model_path;                         // in-process: set = no server
  std::string device = "cpu";
  int max_model_len = 4096;  // in-process context
  int threads = 0;
  float temperature = -1;  // < 0: not sent (the server's default); in-process: 1, vLLM's default
  float top_p = -1;
  int max_tokens = 0;  // 0: not sent (up to the context's end)
  int64_t seed = -1;
  bool ignore_eos = false;
};

class ChatSession {
 public:
  virtual ~ChatSession() = default;
  virtual const std::string& model_name() const = 0;
  // Streams the reply to `messages` (OpenAI chat messages) through on_text, piece by piece,
  // and returns the whole reply. Stops early, keeping what came, once `stop` is set. Throws
  // vllm::Error for a failure the user must see (server error, prompt too long).
  virtual std::string reply(const nlohmann::json& messages,
                            const std::function<void(const std::string&)>& on_text,
                            const std::atomic<bool>& stop) = 0;
};

// Connects (GET {url}/models) and picks the model; throws vllm::Error when the server cannot
// be reached or answers with an error.
std::unique_ptr<ChatSession> connect_chat_server(const ChatOptions& opts);
// Loads the model at opts.model_path; throws vllm::Error for a bad path or no chat template.
std::unique_ptr<ChatSession> load_chat_model(const ChatOptions& opts);

}  // namespace vllm::cli
