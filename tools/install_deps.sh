#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only those missing; runs
# `apt-get update` only when something is missing. Idempotent and quiet when all is there.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3
  pkg-config
  g++
  protobuf-compiler libprotobuf-dev
  protobuf-compiler-grpc libgrpc++-dev grpc-proto
  libabsl-dev
  prometheus-cpp-dev
  libgtest-dev libgmock-dev
  libgloo-dev
  libopenblas-dev libopenblas0-openmp
  libsqlite3-dev
  nlohmann-json3-dev         # spec/json_syntax.cc: where a job spec's JSON breaks (header-only)
  prometheus                 # promtool: tests lint the /metrics text with `promtool check metrics`
  libjs-chart.js             # the status page's charts, served by the coordinator (no CDN)
  chromium                   # headless browser test of the status page
)

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
