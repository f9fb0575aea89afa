// `vllm-cpp chat`: an interactive chat in the terminal, with `vllm chat`'s flags. Talks to a
// server (--url, default http://localhost:8000/v1) or, with -m MODEL, to a model loaded here.
// The history lives here; /clear forgets it, /exit or Ctrl-D ends, Ctrl-C stops one reply.
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/chat_session.h"
#include "cli/commands.h"
#include "util/check.h"

namespace vllm::cli {
namespace {

using json = nlohmann::json;

struct ChatArgs {
  ChatOptions opts;
  std::string system_prompt;
  std::string quick;  // -q MESSAGE: one reply, then exit
  bool url_given = false;
};

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

// Ctrl-C sets a flag instead of ending the process. No SA_RESTART: a read blocked at the
// prompt returns, so Ctrl-C there ends the chat (as in vLLM's), while during a reply the
// session sees the flag at its next token and stops.
void catch_sigint() {
  struct sigaction sa = {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;
  sigaction(SIGINT, &sa, nullptr);
}

json fresh_history(const std::string& system_prompt) {
  json messages = json::array();
  if (!system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", system_prompt}});
  return messages;
}

// One turn: the user's line in, the reply streamed to stdout. The turn joins the history
// only when a reply came (a stopped reply keeps what it had).
bool take_turn(ChatSession& session, json& messages, const std::string& line) {
  messages.push_back({{"role", "user"}, {"content", line}});
  g_interrupted.store(false);
  std::string reply;
  try {
    reply = session.reply(messages, [](const std::string& piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }, g_interrupted);
  } catch (const std::exception& e) {
    messages.erase(messages.end() - 1);
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return false;
  }
  if (g_interrupted.exchange(false)) std::fputs(" [stopped]", stdout);
  std::fputs("\n", stdout);
  std::fflush(stdout);
  messages.push_back({{"role", "assistant"}, {"content", reply}});
  return true;
}

int run_chat(const ChatArgs& a) {
  if (a.url_given && !a.opts.model_path.empty())
    throw Error("--url and --model go separately: a server, or a model loaded here");
  std::unique_ptr<ChatSession> session =
      a.opts.model_path.empty() ? connect_chat_server(a.opts) : load_chat_model(a.opts);
  std::printf("Using model: %s\n", session->model_name().c_str());
  json messages = fresh_history(a.system_prompt);
  catch_sigint();
  if (!a.quick.empty()) return take_turn(*session, messages, a.quick) ? 0 : 1;
  std::printf("Type a message and press Enter. /clear forgets the conversation; /exit or Ctrl-D "
              "ends it; Ctrl-C stops a reply.\n");
  std::string line;
  while (true) {
    std::fputs("> ", stdout);
    std::fflush(stdout);
    g_interrupted.store(false);
    if (!std::getline(std::cin, line)) break;  // EOF, or Ctrl-C at the prompt
    if (line == "/exit" || line == "/quit") break;
    if (line == "/clear") {
      messages = fresh_history(a.system_prompt);
      std::puts("(conversation cleared)");
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    take_turn(*session, messages, line);
  }
  std::fputs("\n", stdout);
  return 0;
}

}  // namespace

void add_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  ChatOptions& o = a->opts;
  CLI::App* cmd = app.add_subcommand("chat", "Chat in the terminal with a server or a local model");
  cmd->add_option("--url", o.url, "The server's OpenAI API base")
      ->capture_default_str()->each([a](const std::string&) { a->url_given = true; });
  cmd->add_option("--model-name", o.model_name,
                  "Model to ask the server for (default: the first of /v1/models)");
  cmd->add_option("--api-key", o.api_key, "Bearer token for the server (default: $OPENAI_API_KEY)");
  cmd->add_option("--model,-m", o.model_path,
                  "Load this .gguf file or Hugging Face directory here instead of using a server");
  cmd->add_option("--system-prompt", a->system_prompt, "A system message that opens the chat");
  cmd->add_option("--quick,-q", a->quick, "Send this one message, print the reply and exit");
  cmd->add_option("--temperature", o.temperature, "0 = greedy (default: the server's, or 1)")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-p", o.top_p)->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--max-tokens,-n", o.max_tokens, "Most tokens per reply (default: no limit)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--seed", o.seed, "Sampling seed")->check(CLI::Range(int64_t{0}, INT64_MAX));
  cmd->add_flag("--ignore-eos", o.ignore_eos, "Keep generating past the end-of-sequence token");
  cmd->add_option("--max-model-len", o.max_model_len, "With --model: the context of the chat")
      ->check(CLI::Range(16, 1 << 24))->capture_default_str();
  cmd->add_option("--device", o.device, "With --model: cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads,-t", o.threads, "With --model: CPU threads (default: all cores)")
      ->check(CLI::Range(1, 1024));
  cmd->callback([a] {
    if (a->opts.api_key.empty())
      if (const char* env = std::getenv("OPENAI_API_KEY"); env != nullptr) a->opts.api_key = env;
    std::exit(run_guarded([&] { return run_chat(*a); }));
  });
}

}  // namespace vllm::cli
