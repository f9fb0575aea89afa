#!/usr/bin/env bash
# The main job on the default model, from a fresh machine: set-up, then the OpenAI-compatible
# server (`vllm-cpp serve`, 127.0.0.1:8000 unless flags say otherwise).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/vllm-cpp serve "$@"
