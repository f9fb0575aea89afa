#!/usr/bin/env bash
# The main job on the default model, from a fresh machine: set-up, then generate.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/vllm-cpp generate "$@"
