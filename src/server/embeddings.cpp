// POST /v1/embeddings and /pooling, and loading a pooling model for `serve`. A request's inputs
// are queued as one job on the PoolingEngine; the HTTP thread waits for its vectors (the
// engine's worker batches concurrent requests together).
#include "server/embeddings.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "server/api_error.h"
#include "server/log.h"
#include "server/router.h"
#include "server/routes.h"
#include "server/serving.h"
#include "util/check.h"

namespace vllm::server {

namespace {

// --max-model-len checked against the model's position limit; 0 keeps `fallback`.
int pooling_max_model_len(const ServerConfig& cfg, int position_limit, int fallback) {
  const int asked = cfg.engine.max_model_len;
  if (asked <= 0) return fallback;
  if (asked > position_limit)
    throw Error("--max-model-len " + std::to_string(asked) +
                " is more than the model's max_position_embeddings (" +
                std::to_string(position_limit) + ")");
  return asked;
}

void load_bert(const ServerConfig& cfg, PoolingRuntime& rt) {
  rt.bert = BertModel::load(cfg.model_path, cfg.device);
  if (!std::filesystem::exists(std::filesystem::path(cfg.model_path) / "tokenizer.json"))
    throw Error(cfg.model_path + ": no tokenizer.json");
  rt.tokenizer = Tokenizer::from_dir(cfg.model_path);
}

void load_last_token(const ServerConfig& cfg, PoolingRuntime& rt) {
  if (cfg.device.kind != DeviceKind::Cpu)
    throw Error("--runner pooling: last-token pooling of decoder models runs on the CPU only "
                "(--device " + cfg.device.str() + " is not supported)");
  if (cfg.tensor_parallel_size != 1)
    throw Error("--runner pooling: last-token pooling runs on one rank "
                "(--tensor-parallel-size " + std::to_string(cfg.tensor_parallel_size) +
                " is not supported; use 1)");
  rt.decoder = load_model(cfg.model_path, {}, kCpu, cfg.engine.max_model_len);
  if (!rt.decoder.tokenizer) throw Error(cfg.model_path + ": no tokenizer found");
  const ModelConfig& c = rt.decoder.config();
  rt.last_token = std::make_unique<LastTokenPooling>(
      *rt.decoder.model, pooling_max_model_len(cfg, c.max_position_embeddings, 0));
}

}  // namespace

PoolingRuntime start_pooling(ServingContext& ctx, bool bert) {
  const ServerConfig& cfg = ctx.config;
  const auto t0 = std::chrono::steady_clock::now();
  PoolingRuntime rt;
  const PoolingModel* model = nullptr;
  int max_len = 0, vocab = 0;
  if (bert) {
    load_bert(cfg, rt);
    model = rt.bert.get();
    max_len = pooling_max_model_len(cfg, rt.bert->config().max_position_embeddings,
                                    rt.bert->max_model_len());
    vocab = rt.bert->config().vocab_size;
    ctx.tokenizer = rt.tokenizer.get();
  } else {
    load_last_token(cfg, rt);
    model = rt.last_token.get();
    max_len = model->max_model_len();
    vocab = rt.decoder.config().vocab_size;
    ctx.tokenizer = rt.decoder.tokenizer.get();
  }
  PoolingEngineConfig pc;
  pc.max_batch_tokens = std::max(cfg.engine.max_num_batched_tokens, 8192);
  rt.engine = std::make_unique<PoolingEngine>(*model, pc);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char line[240];
  std::snprintf(line, sizeof line,
                "model loaded in %.2f s on cpu: %s, hidden %d, vocab %d, max_model_len %d", load_s,
                model->describe().c_str(), model->hidden_size(), vocab, max_len);
  log_info(line);
  ctx.pooling = rt.engine.get();
  ctx.max_model_len = max_len;
  ctx.vocab_size = vocab;
  ctx.start_time = unix_time();
  return rt;
}

std::string f32_base64(const std::vector<float>& v) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * sizeof(float), '\0');
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian whatever the host
    uint32_t u;
    std::memcpy(&u, &v[i], sizeof u);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<char>((u >> (8 * b)) & 0xFF);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k)
      chunk = (chunk << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k)
      out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 0x3F] : '=';
  }
  return out;
}

ojson embedding_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                         const std::string& id, int64_t created) {
  ojson data = ojson::array();
  int64_t tokens = 0;
  for (size_t i = 0; i < vectors.size(); ++i) {
    tokens += static_cast<int64_t>(r.inputs.at(i).size());
    ojson embedding = r.base64 ? ojson(f32_base64(vectors[i])) : ojson(vectors[i]);
    data.push_back({{"index", i}, {"object", "embedding"}, {"embedding", std::move(embedding)}});
  }
  return {{"id", id},
          {"object", "list"},
          {"created", created},
          {"model", r.model},
          {"data", std::move(data)},
          {"usage",
           {{"prompt_tokens", tokens},
            {"total_tokens", tokens},
            {"completion_tokens", 0},
            {"prompt_tokens_details", nullptr}}}};
}

ojson pooling_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                       const std::string& id, int64_t created) {
  ojson body = embedding_response(r, vectors, id, created);
  for (ojson& item : body["data"]) {
    item["object"] = "pooling";
    item["data"] = std::move(item["embedding"]);
    item.erase("embedding");
  }
  return body;
}

namespace {

// Counts the request as in flight for the drain on shutdown.
class InFlight {
 public:
  explicit InFlight(ServingContext& ctx) : ctx_(ctx) { ++ctx_.in_flight; }
  ~InFlight() { --ctx_.in_flight; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  ServingContext& ctx_;
};

// One request's vectors from the pooling engine; the response is the caller's.
std::vector<std::vector<float>> pool(ServingContext& ctx, const EmbeddingRequest& r) {
  const InFlight in_flight(ctx);
  auto result = ctx.pooling->submit(r.inputs, r.normalize);
  if (!result)
    throw ApiError(503, "The server is overloaded: too many embedding requests are queued.");
  try {
    return result->get();
  } catch (const Error& e) {
    throw ApiError(500, std::string("embedding failed: ") + e.what());
  }
}

}  // namespace

void handle_embeddings(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const EmbeddingRequest r = parse_embedding_request(parse_body(req.body), ctx);
  const std::string id = response_id(ctx, req, r.request_id, "embd-");
  set_json(res, embedding_response(r, pool(ctx, r), id, unix_time()));
  set_request_id_header(ctx, req, res, id);
}

void handle_pooling(ServingContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const EmbeddingRequest r =
      parse_embedding_request(parse_body(req.body), ctx, PoolingApi::kPooling);
  const std::string id = response_id(ctx, req, r.request_id, "pool-");
  set_json(res, pooling_response(r, pool(ctx, r), id, unix_time()));
  set_request_id_header(ctx, req, res, id);
}

}  // namespace vllm::server
