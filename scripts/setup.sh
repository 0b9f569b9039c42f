#!/usr/bin/env bash
# Installs what ACTkit builds on (only what is missing) and builds it.
# Run from anywhere, as root or with sudo.
#   ACTKIT_TORCH       which LibTorch to build against:
#                        debian (default)  Debian's libtorch-dev 1.13, CPU only; builds into build/
#                        wheel             PyPI's torch 2.15.0 (the CUDA build; runs on CPUs too),
#                                          installed into .venv/ (this checkout's own virtual
#                                          environment, never the system Python); builds into
#                                          build-wheel/ with the CUDA kernels and NCCL; and
#                                          installs the Python package actkit into .venv/
#   ACTKIT_BUILD_DIR   build folder (default: build, or build-wheel for the wheel)
#   ACTKIT_TARGETS     what to build (default: actkit_cli, the tool and its library; "all": the
#                      tests and benchmarks too, as scripts/test.sh does)
#   ACTKIT_CMAKE_ARGS  extra CMake arguments
#   ACTKIT_SETUP       what to do: all (default), install (the packages and, for the wheel, the
#                      wheels: nothing is built), build (configure and build only: what install
#                      puts there must already be there)
# Compiler output is cached (ccache, in ~/.cache/ccache): a second build of
# the same sources, in either folder, takes seconds per file.
set -euo pipefail
cd "$(dirname "$0")/.."

torch_kind=${ACTKIT_TORCH:-debian}
case $torch_kind in
  debian | wheel) ;;
  *) echo "setup: ACTKIT_TORCH=$torch_kind: expected debian or wheel" >&2; exit 2 ;;
esac
phase=${ACTKIT_SETUP:-all}
case $phase in
  all | install | build) ;;
  *) echo "setup: ACTKIT_SETUP=$phase: expected all, install or build" >&2; exit 2 ;;
esac
# The wheels pinned here: the LibTorch 2.x that CI builds and tests, and
# the torchvision the oracle tests compare the zoo with in that world.
torch_wheel=torch==2.15.0
torchvision_wheel=torchvision==0.29.2
# The Hugging Face references of the oracle tests (random-initialised
# models, save_pretrained folders, tokenizers' own ids); transformers reads a
# tokenizer.model with protobuf.
hf_wheels=(transformers==5.23.0 tokenizers==0.23.3 safetensors==0.8.0 sentencepiece==0.2.3 protobuf==7.36.2)
# What pip builds the Python package (python/, pyproject.toml) with, and its tests run under.
python_wheels=(scikit-build-core==1.1.2 pytest==9.2.0)

packages=(
  build-essential cmake ninja-build pkg-config ccache
  libgloo-dev  # Gloo's headers: c10d's Gloo group includes them (docs/architecture.md)
  liburing-dev libtbb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  dataset-fashion-mnist fio
  fortunes  # the text corpus of actkit pipeline and the language models
  libicu-dev  # text/: the tokenizer.json pre-tokenizer patterns (\p{L}, look-ahead) and NFC
  libsentencepiece-dev  # text/: tokenizer.model, read by the reference library
  iproute2  # ip and tc: kernel-shaped links (actkit pipeline and dp --link kernel)
  python3  # the JSON checks of scripts/test.sh and the tables of the bench scripts
)
if [ "$torch_kind" = debian ]; then
  packages+=(libtorch-dev libopenblas0-pthread
             clang libclang-rt-14-dev  # libFuzzer and its sanitizers: scripts/fuzz.sh
             python3-torchvision)  # the oracle tests: the zoo against torchvision (tests/oracle)
else
  packages+=(python3-venv)
fi
# install_packages: the Debian packages above that are missing.
install_packages() {
  local missing=() p sudo=""
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
}

venv=.venv
# install_wheels: the wheels above into .venv, where they are not there yet.
install_wheels() {
  [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
  if ! "$venv/bin/python" -c "import sys, torch, torchvision; sys.exit(torch.__version__.split('+')[0] != '${torch_wheel#torch==}' or torchvision.__version__.split('+')[0] != '${torchvision_wheel#torchvision==}')" 2>/dev/null; then
    echo "setup: installing $torch_wheel into $venv"
    "$venv/bin/pip" install --disable-pip-version-check --no-input -q "$torch_wheel" "$torchvision_wheel"
  fi
  if ! "$venv/bin/python" -c "import sys, transformers, tokenizers, safetensors, sentencepiece, google.protobuf; sys.exit(transformers.__version__ != '${hf_wheels[0]#transformers==}')" 2>/dev/null; then
    echo "setup: installing ${hf_wheels[*]} into $venv"
    "$venv/bin/pip" install --disable-pip-version-check --no-input -q "${hf_wheels[@]}"
  fi
  if ! "$venv/bin/python" -c "import scikit_build_core, pytest" 2>/dev/null; then
    echo "setup: installing ${python_wheels[*]} into $venv"
    "$venv/bin/pip" install --disable-pip-version-check --no-input -q "${python_wheels[@]}"
  fi
}

# The Python package `actkit` into .venv, built by pip through
# scikit-build-core against .venv's torch (build folder: build-python/).
install_python_package() {
  echo "setup: installing the Python package actkit into $venv"
  CMAKE_ARGS="${CMAKE_ARGS:-} -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache" \
    CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    "$venv/bin/pip" install --disable-pip-version-check --no-input --no-build-isolation --no-deps -q .
}

# build: configures and builds ACTKIT_TARGETS in the build folder.
build() {
  local cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release) build_dir
  if command -v ccache >/dev/null; then
    cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    # The precompiled LibTorch header is used through -include: ccache needs
    # these to cache the files that use it.
    export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
  fi
  if [ "$torch_kind" = wheel ]; then
    build_dir="${ACTKIT_BUILD_DIR:-build-wheel}"
    local torch_prefix
    torch_prefix=$("$venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
      { echo "setup: no torch in $venv: run ACTKIT_TORCH=wheel ACTKIT_SETUP=install first" >&2; exit 1; }
    cmake_args+=(-DCMAKE_PREFIX_PATH="$torch_prefix" -DACTKIT_ORACLE_PYTHON="$PWD/$venv/bin/python")
  else
    build_dir="${ACTKIT_BUILD_DIR:-build}"
  fi
  local targets=${ACTKIT_TARGETS:-actkit_cli}
  # shellcheck disable=SC2086
  cmake -S . -B "$build_dir" "${cmake_args[@]}" ${ACTKIT_CMAKE_ARGS:-}
  if [ "$targets" = all ]; then
    cmake --build "$build_dir"
  else
    # shellcheck disable=SC2086
    cmake --build "$build_dir" --target $targets
  fi
}

if [ "$torch_kind" = wheel ]; then
  # The wheel's LibTorch is the CUDA build: its CMake package, and ACTkit's
  # CUDA kernels, need the CUDA toolkit (nvcc and its headers).
  if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
    echo "setup: ACTKIT_TORCH=wheel needs the CUDA toolkit (nvcc and headers, 12.x or 13.x, in /usr/local/cuda or on PATH)" >&2
    exit 1
  fi
fi
if [ "$phase" != build ]; then
  install_packages
  [ "$torch_kind" = debian ] || install_wheels
fi
[ "$phase" = install ] || build
if [ "$phase" != install ] && [ "$torch_kind" = wheel ]; then
  install_python_package
fi
