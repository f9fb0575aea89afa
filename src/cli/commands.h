// Subcommand registration: each add_* attaches its options and callback to the app.
#pragma once
#include <CLI/CLI.hpp>

#include "runtime/kernel_options.h"
#include "runtime/node_group.h"

namespace vllm::cli {

void add_generate(CLI::App& app);
void add_bench(CLI::App& app);
void add_serve(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_chat(CLI::App& app);
void add_bench_serve(CLI::App& bench);  // `bench serve`, attached by add_bench
int64_t parse_bytes(const std::string& s);  // "4GiB", "512MiB", "1e9" or plain bytes
// --cpu-order into `order` (batch-invariant or llamacpp; runtime/ops.h CpuOrder).
void add_cpu_order_option(CLI::App& cmd, std::string& order);
// --dtype (model/load.h parse_dtype), with its help.
void add_dtype_option(CLI::App& cmd, std::string& dtype);
// --quantization (model/quantization.h: fp8 or none), with its help.
void add_quantization_option(CLI::App& cmd, std::string& quantization);
// --kv-cache-dtype (DecoderModel::set_kv_cache_dtype: auto, fp8, fp8_e4m3), with its help.
void add_kv_cache_dtype_option(CLI::App& cmd, std::string& kv_cache_dtype);

// --nnodes, --node-rank, --master-addr, --master-port (tensor parallel across processes;
// runtime/node_group.h), as torchrun spells them.
void add_node_group_options(CLI::App& cmd, NodeGroupConfig& nodes);

// --cpu-isa, --no-cuda-fusion, --no-cuda-pdl, --gemv-slices, --fp8-gemv-tensor-cores,
// --cuda-repeat-kernel
// (runtime/kernel_options.h): kernel choices for measurements and tests. The command applies
// them with set_kernel_options before loading.
void add_kernel_options(CLI::App& cmd, KernelOptions& options);

// Runs fn, turning vllm::Error and std::exception into "error: ..." on stderr and exit 1.
int run_guarded(const std::function<int()>& fn);

}  // namespace vllm::cli
