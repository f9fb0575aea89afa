// `vllm-cpp tokenize`: the model's tokenizer and chat template for users and scripts. One text
// in, ids out; or JSON lines on stdin: strings -> id arrays (--jsonl), id arrays -> strings
// (--decode), chat requests -> rendered prompts (--chat). Bad lines get {"error": ...}.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "model/load.h"
#include "tokenizer/chat_template.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

struct TokenizeArgs {
  std::string model;
  std::vector<std::string> text;
  bool jsonl = false, decode = false, chat = false;
  bool add_special_tokens = false, skip_special_tokens = false;
  std::string chat_template;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The request stays an ordered_json from the parse on: templates see (and tojson prints) every
// object's keys in the order of the line, as Python's json.loads and jinja2 keep them.
std::string render_chat(const ChatTemplate& tmpl, const Tokenizer& tok, const ojson& req) {
  if (!req.is_object() || !req.contains("messages") || !req["messages"].is_array())
    throw Error("each line needs \"messages\": [...]");
  ojson ctx = req;
  if (!ctx.contains("add_generation_prompt")) ctx["add_generation_prompt"] = false;
  if (!ctx.contains("tools")) ctx["tools"] = nullptr;
  ctx["bos_token"] = tok.bos_token();
  ctx["eos_token"] = tok.eos_token();
  return tmpl.render(ctx);
}

int run_tokenize(const TokenizeArgs& a) {
  if (int(a.jsonl) + int(a.decode) + int(a.chat) > 1)
    throw Error("--jsonl, --decode and --chat are exclusive");
  const std::string path = a.model.empty() ? default_model_path() : a.model;
  std::unique_ptr<Tokenizer> tok = load_tokenizer(path);
  if (!a.jsonl && !a.decode && !a.chat) {
    std::string text;
    for (const auto& t : a.text) text += (text.empty() ? "" : " ") + t;
    std::cout << json(tok->encode(text, a.add_special_tokens)).dump() << "\n";
    return 0;
  }
  std::optional<ChatTemplate> tmpl;
  if (a.chat) {
    std::string source;
    if (!a.chat_template.empty())
      source = read_file(a.chat_template);
    else if (tok->chat_template())
      source = *tok->chat_template();
    else
      throw Error(path + " has no chat template; give one with --chat-template FILE");
    tmpl = ChatTemplate::parse(source);
  }
  int errors = 0;
  for (std::string line; std::getline(std::cin, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json out;
    try {
      const ojson in = ojson::parse(line);
      if (a.jsonl) {
        if (!in.is_string()) throw Error("each line must be a JSON string");
        out = tok->encode(in.get<std::string>(), a.add_special_tokens);
      } else if (a.decode) {
        if (!in.is_array()) throw Error("each line must be a JSON array of token ids");
        std::vector<int32_t> ids;
        for (const auto& v : in) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size())
            throw Error("invalid token id " + v.dump());
          ids.push_back(v.get<int32_t>());
        }
        out = tok->decode(ids, a.skip_special_tokens);
      } else {
        out = render_chat(*tmpl, *tok, in);
      }
    } catch (const std::exception& e) {
      ++errors;
      out = {{"error", e.what()}};
    }
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
  }
  std::cout.flush();
  return 0;
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Tokenize text, decode ids or render chat prompts");
  cmd->add_option("text", args->text, "Text to tokenize (single mode)");
  cmd->add_option("--model,-m", args->model, "A .gguf file or a Hugging Face model directory");
  cmd->add_flag("--jsonl", args->jsonl, "stdin: one JSON string per line -> id arrays");
  cmd->add_flag("--decode", args->decode, "stdin: one JSON id array per line -> strings");
  cmd->add_flag("--chat", args->chat, "stdin: {messages, tools?, add_generation_prompt?} -> prompt");
  cmd->add_flag("--add-special-tokens", args->add_special_tokens, "Add BOS/EOS as the model does");
  cmd->add_flag("--skip-special-tokens", args->skip_special_tokens, "With --decode");
  cmd->add_option("--chat-template", args->chat_template, "A Jinja template file to use instead");
  cmd->callback([args] { std::exit(run_guarded([&] { return run_tokenize(*args); })); });
}

}  // namespace vllm::cli
