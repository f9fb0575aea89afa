// Serving an embedding model: loading it next to its tokenizer and pooling engine, and the
// /v1/embeddings request as vLLM parses it (inputs, truncation, output format).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/pooling_engine.h"
#include "model/bert.h"
#include "server/protocol.h"
#include "tokenizer/tokenizer.h"

namespace vllm::server {

struct ServingContext;

// What start_pooling loaded; ctx points into it, so it must outlive serving.
struct PoolingRuntime {
  std::unique_ptr<BertModel> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<PoolingEngine> engine;
};

// Loads the embedding model at ctx.config.model_path (CPU only) and fills ctx.pooling,
// ctx.tokenizer, ctx.max_model_len (--max-model-len, at most max_position_embeddings) and
// ctx.vocab_size. Throws vllm::Error for a model or flag it cannot serve.
PoolingRuntime start_pooling(ServingContext& ctx);

struct EmbeddingRequest {
  std::string model;  // the served name to report
  std::vector<std::vector<int32_t>> inputs;  // token ids to embed, truncated, in input order
  bool base64 = false;
  bool normalize = true;
  std::string request_id;
};

// The most inputs one request may carry (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// Parses and validates a /v1/embeddings body: every problem is an ApiError naming the field.
EmbeddingRequest parse_embedding_request(const ojson& body, const ServingContext& ctx);

// The response body for one request's vectors (OpenAI's shape, vLLM's id and usage).
ojson embedding_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                         const std::string& id, int64_t created);

// base64 of the vector's little-endian f32 bytes (what OpenAI clients decode).
std::string f32_base64(const std::vector<float>& v);

}  // namespace vllm::server
