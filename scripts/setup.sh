#!/usr/bin/env bash
# Installs the Debian packages ACTkit builds on (only those missing) and
# builds ACTkit into build/. Run from anywhere, as root or with sudo.
#   ACTKIT_BUILD_DIR   build folder (default: build)
#   ACTKIT_CMAKE_ARGS  extra CMake arguments
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev liburing-dev libtbb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev
  libopenblas0-pthread
  dataset-fashion-mnist fio
  fortunes  # the text corpus of actkit pipeline and the language models
  iproute2  # ip and tc: kernel-shaped links (actkit pipeline and dp --link kernel)
  python3  # the JSON checks of scripts/test.sh and the tables of the bench scripts
  python3-torchvision  # the oracle tests: the zoo against torchvision (tests/oracle)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build_dir="${ACTKIT_BUILD_DIR:-build}"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ACTKIT_CMAKE_ARGS:-}
cmake --build "$build_dir"
