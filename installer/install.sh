#!/usr/bin/env bash
# Installs the system packages Cypris builds against (Debian 12 / Ubuntu 22.04+), then configures
# and builds a Release build into build/. Safe to run again: installed packages are skipped and
# the build is incremental.
#
#   installer/install.sh               build cypris (build/app/cypris)
#   installer/install.sh --with-tests  also build the tests (then: ctest --test-dir build)
#   installer/install.sh --no-deps     skip the package step (you installed them yourself)
#
# Environment: CYPRIS_CUDA=AUTO|ON|OFF, CYPRIS_UI=AUTO|ON|OFF, CYPRIS_MPI=AUTO|ON|OFF,
# CYPRIS_CUDA_ARCHS="80;86;89;90", BUILD_DIR (default build), JOBS (default: number of cores).
set -euo pipefail

with_tests=OFF
install_deps=1
for arg in "$@"; do
  case "$arg" in
    --with-tests) with_tests=ON ;;
    --no-deps) install_deps=0 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument '$arg' (allowed: --with-tests, --no-deps, --help)" >&2; exit 2 ;;
  esac
done

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

packages=(
  build-essential cmake pkg-config git curl
  nlohmann-json3-dev libfmt-dev libspdlog-dev libyaml-cpp-dev
  libcurl4-openssl-dev libssl-dev libcpp-httplib-dev
  libsentencepiece-dev libpcre2-dev libutf8proc-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  libimgui-dev libglfw3-dev libgl-dev
  libgtest-dev libgmock-dev
  python3-jsonschema python3-lark python3-numpy
  python3-torch  # the float64 references that regenerate the test fixtures (tests/tools/gen_*_fixtures.py)
  xvfb xauth xdotool fonts-dejavu-core
)

if [ "$install_deps" = 1 ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null; then
      echo "install.sh: apt-get not found; install these packages with your package manager: ${missing[*]}" >&2
      exit 1
    fi
    sudo=()
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null && { sudo -n true 2>/dev/null || [ -t 0 ]; }; then
        sudo=(sudo)
      else
        echo "install.sh: installing packages needs root; run as root or with sudo, or install them and use" >&2
        echo "  --no-deps. Missing: ${missing[*]}" >&2
        exit 1
      fi
    fi
    echo "install.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# CUDA: the toolkit is not a Debian main package; it is used when nvcc is installed (for example
# /usr/local/cuda). Test builds compile one architecture (the GPU's own, or sm_90 without a GPU);
# release builds compile the full list.
archs="${CYPRIS_CUDA_ARCHS:-}"
if [ -z "$archs" ]; then
  if [ "$with_tests" = ON ]; then
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then archs=native; else archs=90; fi
  else
    archs="80;86;89;90"
  fi
fi

cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release \
  -DCYPRIS_BUILD_TESTS="$with_tests" \
  -DCYPRIS_CUDA="${CYPRIS_CUDA:-AUTO}" -DCYPRIS_UI="${CYPRIS_UI:-AUTO}" -DCYPRIS_MPI="${CYPRIS_MPI:-AUTO}" \
  -DCYPRIS_CUDA_ARCHS="$archs"
cmake --build "$build_dir" -j "$jobs"
echo "install.sh: built $build_dir/app/cypris"
