// Subcommand registration: each add_* attaches its options and callback to the app.
#pragma once
#include <CLI/CLI.hpp>

namespace vllm::cli {

void add_generate(CLI::App& app);
void add_bench(CLI::App& app);

// Runs fn, turning vllm::Error and std::exception into "error: ..." on stderr and exit 1.
int run_guarded(const std::function<int()>& fn);

}  // namespace vllm::cli
