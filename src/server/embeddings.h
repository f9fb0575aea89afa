// Serving a pooling model (a BERT encoder, or a decoder pooled by its last token): loading it
// next to its tokenizer and pooling engine, and the /v1/embeddings and /pooling requests as
// vLLM parses them (inputs, truncation, output format).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/pooling_engine.h"
#include "model/bert.h"
#include "model/last_token_pooling.h"
#include "model/load.h"
#include "server/protocol.h"
#include "tokenizer/tokenizer.h"

namespace vllm::server {

struct ServingContext;

// What start_pooling loaded; ctx points into it, so it must outlive serving.
struct PoolingRuntime {
  std::unique_ptr<BertModel> bert;  // a BertModel checkpoint, else:
  LoadedModel decoder;              // a decoder (and its tokenizer) pooled by its last token
  std::unique_ptr<LastTokenPooling> last_token;
  std::unique_ptr<Tokenizer> tokenizer;  // the BERT checkpoint's
  std::unique_ptr<PoolingEngine> engine;
};

// Loads the model at ctx.config.model_path for pooling (CPU only, one rank): a BertModel
// directory (`bert`) pooled as its sentence-transformers config says, else a decoder pooled by
// its last token. Fills ctx.pooling, ctx.tokenizer, ctx.max_model_len (--max-model-len, at
// most the model's position limit) and ctx.vocab_size. Throws vllm::Error for a model or flag
// it cannot serve.
PoolingRuntime start_pooling(ServingContext& ctx, bool bert);

struct EmbeddingRequest {
  std::string model;  // the served name to report
  std::vector<std::vector<int32_t>> inputs;  // token ids to embed, truncated, in input order
  bool base64 = false;
  bool normalize = true;
  std::string request_id;
};

// The most inputs one request may carry (OpenAI's limit).
inline constexpr size_t kMaxEmbeddingInputs = 2048;

// Which route a request came by: /v1/embeddings, or /pooling (vLLM's PoolingCompletionRequest:
// `task` "embed" only, `use_activation` for normalize, and unknown fields refused).
enum class PoolingApi { kEmbeddings, kPooling };

// Parses and validates a body of `api`: every problem is an ApiError naming the field.
EmbeddingRequest parse_embedding_request(const ojson& body, const ServingContext& ctx,
                                         PoolingApi api = PoolingApi::kEmbeddings);

// The response body for one request's vectors (OpenAI's shape, vLLM's id and usage).
ojson embedding_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                         const std::string& id, int64_t created);

// The /pooling response body: vLLM's PoolingResponse (data[i].data is the vector, or its
// base64).
ojson pooling_response(const EmbeddingRequest& r, const std::vector<std::vector<float>>& vectors,
                       const std::string& id, int64_t created);

// base64 of the vector's little-endian f32 bytes (what OpenAI clients decode).
std::string f32_base64(const std::vector<float>& v);

}  // namespace vllm::server
