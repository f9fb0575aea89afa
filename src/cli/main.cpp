// vllm-cpp: the command-line entry point. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "util/check.h"

int main(int argc, char** argv) {
  CLI::App app{"vllm-cpp: LLM inference and serving engine"};
  app.set_version_flag("--version", VLLM_VERSION);
  app.require_subcommand(1);
  // As argparse (and so vLLM): a repeated option takes its last value. Subcommands copy these
  // defaults when they are created, so this must come before the add_* calls.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  vllm::cli::add_generate(app);
  vllm::cli::add_bench(app);
  vllm::cli::add_serve(app);
  vllm::cli::add_tokenize(app);
  vllm::cli::add_chat(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
