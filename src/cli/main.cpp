// vllm-cpp: the command-line entry point. Each subcommand lives in its own file.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "util/check.h"

int main(int argc, char** argv) {
  CLI::App app{"vllm-cpp: LLM inference and serving engine"};
  app.set_version_flag("--version", VLLM_VERSION);
  app.require_subcommand(1);
  vllm::cli::add_generate(app);
  vllm::cli::add_bench(app);
  vllm::cli::add_serve(app);
  vllm::cli::add_tokenize(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
