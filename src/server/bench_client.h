// The client side of `vllm-cpp bench serve`: one streaming OpenAI request (completions or
// chat) timed as vLLM's benchmark times it. TTFT is the first chunk with choices, each later
// chunk adds one inter-token latency, and the output length comes from the usage chunk.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace vllm::server {

struct BenchRequest {
  nlohmann::json prompt;  // text, or token ids for /v1/completions
  int prompt_len = 0;     // tokens, as generated (the usage chunk wins when present)
  int output_len = 0;     // max_tokens
};

struct RequestResult {
  bool success = false;
  double ttft = 0;     // seconds from send to the first chunk with choices
  double latency = 0;  // seconds from send to the last chunk
  std::vector<double> itl;
  int prompt_len = 0;
  int output_tokens = 0;
  std::string generated_text;
  std::string error;
  double start = 0;  // seconds since the benchmark began
};

struct BenchTarget {
  std::string base_url;  // http://host:port
  std::string endpoint;  // /v1/completions or /v1/chat/completions
  std::string model;
  std::string api_key;
  bool ignore_eos = false;
  double temperature = 0.0;
  bool chat() const { return endpoint.find("chat/completions") != std::string::npos; }
};

// A keep-alive client with benchmark timeouts (no read timeout worth hitting).
std::unique_ptr<httplib::Client> make_client(const std::string& base_url);
RequestResult send_request(httplib::Client& client, const BenchTarget& target,
                           const BenchRequest& request);
// GET /v1/models: the first served model name ("" when the server does not answer).
std::string first_served_model(const std::string& base_url, const std::string& api_key);
// POST /detokenize: the text of token ids, for text prompts of a given token length.
std::string detokenize(httplib::Client& client, const std::vector<int32_t>& ids,
                       const std::string& api_key);

}  // namespace vllm::server
