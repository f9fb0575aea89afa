#!/usr/bin/env bash
# Builds the CUDA-enabled binaries here and packs what the GPU machine needs into .device/
# (ignored by git; name it in the device tool's `carry`): the test and CLI binaries, the
# shared libraries its image lacks, and the Llama-3 tokenizer for the benchmark checkpoints.
# Then scripts/gpu_check.sh runs there.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-cuda}
[ -f "$BUILD/build.ninja" ] || cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$BUILD" -j"$(nproc)" --target test_runtime test_model test_engine vllm-cpp
# Staged elsewhere and carried as one xz archive: the four binaries' GPU code alone is near
# the device tool's 64 MiB limit. scripts/gpu_check.sh unpacks it.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/.device/bin "$stage"/.device/lib "$stage"/.device/tokenizer
cp "$BUILD"/test_runtime "$BUILD"/test_model "$BUILD"/test_engine "$BUILD"/vllm-cpp "$stage"/.device/bin/
strip "$stage"/.device/bin/*
for lib in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$stage"/.device/lib/
done
cp ../shared/tokenizers/llama3/tokenizer.json ../shared/tokenizers/llama3/tokenizer_config.json \
  "$stage"/.device/tokenizer/
mkdir -p .device && rm -f .device/device.tar.xz  # scripts/fuzz_device.sh packs beside it
tar -C "$stage" -cf - .device | xz -T0 -6 > .device/device.tar.xz
du -sh .device
