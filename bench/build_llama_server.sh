#!/usr/bin/env bash
# Build llama.cpp's own server (llama-server) from the llama.cpp source that llama-cpp-python ships, so
# bench.server_peer compares against the same llama.cpp as the library peer. CPU only, no web UI, no
# network at build time. Usage: bench/build_llama_server.sh VENV_BIN  (installs VENV_BIN/llama-server)
set -euo pipefail
bin=$(cd "$1" && pwd)
work=${LLAMA_BUILD_DIR:-build/llama-server}
mkdir -p "$work" && cd "$work"
version=$("$bin/python" -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))" 2>/dev/null || true)
if [ ! -d src ]; then
  "$bin/python" -m pip download --quiet --no-deps --no-binary :all: -d sdist "llama-cpp-python${version:+==$version}"
  mkdir -p unpacked && tar -xzf sdist/llama_cpp_python-*.tar.gz -C unpacked
  mv unpacked/llama_cpp_python-*/vendor/llama.cpp src
fi
cmake -S src -B build -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
  -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF >cmake.log
cmake --build build --target llama-server -j "$(nproc)" >build.log
cp build/bin/llama-server "$bin/llama-server"
echo "llama-server ${version:+(llama.cpp of llama-cpp-python $version) }installed at $bin/llama-server"
