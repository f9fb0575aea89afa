#!/usr/bin/env bash
# The main job on the default model, from a fresh machine: set-up (packages, .venv/, model and
# the `vllm-cpp` binary only), then the OpenAI-compatible server (`vllm-cpp serve`, at
# 127.0.0.1:8000 unless flags say otherwise). Any `vllm-cpp serve` flags may follow.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh vllm-cpp
printf '\n==> serving models/SmolLM2-135M-Instruct.Q4_1.gguf (Ctrl-C stops it)\n'
exec "${BUILD_DIR:-build}/vllm-cpp" serve "$@"
