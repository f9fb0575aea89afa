// `vllm-cpp chat -m MODEL`: the conversation rendered with the model's chat template and run
// through the single-sequence generator, as `generate` runs a prompt.
#include <optional>

#include "cli/chat_session.h"
#include "model/generator.h"
#include "model/load.h"
#include "runtime/device.h"
#include "runtime/thread_pool.h"
#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

class LocalChat : public ChatSession {
 public:
  explicit LocalChat(const ChatOptions& opts)
      : opts_(opts),
        model_(load_model(opts.model_path, {}, parse_device(opts.device), opts.max_model_len)),
        name_(opts.model_path) {
    if (!model_.tokenizer) throw Error(opts.model_path + ": no tokenizer found");
    const auto& source = model_.tokenizer->chat_template();
    if (!source) throw Error(opts.model_path + ": the model has no chat template");
    template_ = ChatTemplate::parse(*source);
    generator_.emplace(*model_.model, opts.max_model_len);
  }

  const std::string& model_name() const override { return name_; }

  std::string reply(const nlohmann::json& messages,
                    const std::function<void(const std::string&)>& on_text,
                    const std::atomic<bool>& stop) override {
    const std::vector<int32_t> ids = encode(messages);
    const int room = opts_.max_model_len - static_cast<int>(ids.size());
    if (room <= 0)
      throw Error("the conversation is " + std::to_string(ids.size()) + " tokens, which fills "
                  "--max-model-len " + std::to_string(opts_.max_model_len) + "; /clear starts over");
    GenerateOptions gen;
    gen.max_tokens = opts_.max_tokens > 0 ? std::min(opts_.max_tokens, room) : room;
    gen.ignore_eos = opts_.ignore_eos;
    gen.sampling = SamplingParams{};
    if (opts_.temperature >= 0) gen.sampling.temperature = opts_.temperature;
    if (opts_.top_p >= 0) gen.sampling.top_p = opts_.top_p;
    if (opts_.seed >= 0) gen.sampling.seed = static_cast<uint64_t>(opts_.seed);
    // The prompt's last tokens as context, as the engine's detokenizer has them.
    const size_t ctx = std::min<size_t>(ids.size(), 8);
    IncrementalDetokenizer detok(*model_.tokenizer, /*skip_special_tokens=*/true,
                                 std::span<const int32_t>(ids).last(ctx));
    std::string text;
    auto emit = [&](const std::string& piece) {
      text += piece;
      if (!piece.empty()) on_text(piece);
    };
    generator_->generate(ids, gen, [&](int32_t tok) {
      emit(detok.push(tok));
      return !stop.load();
    });
    emit(detok.finish());
    return text;
  }

 private:
  // As the server's chat route renders a plain conversation: generation prompt on, no tools.
  std::vector<int32_t> encode(const nlohmann::json& messages) const {
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    context["messages"] = nlohmann::ordered_json::parse(messages.dump());
    context["tools"] = nullptr;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = true;
    context["bos_token"] = model_.tokenizer->bos_token();
    context["eos_token"] = model_.tokenizer->eos_token();
    return model_.tokenizer->encode(template_->render(context), false);
  }

  ChatOptions opts_;
  LoadedModel model_;
  std::string name_;
  std::optional<ChatTemplate> template_;
  std::optional<Generator> generator_;
};

}  // namespace

std::unique_ptr<ChatSession> load_chat_model(const ChatOptions& opts) {
  if (opts.threads > 0) set_num_threads(opts.threads);
  return std::make_unique<LocalChat>(opts);
}

}  // namespace vllm::cli
