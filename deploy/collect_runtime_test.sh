#!/usr/bin/env bash
# Runs deploy/docker/collect_runtime.sh on the real binaries, as the Dockerfiles' build
# stages do, and checks what a runtime image would get: the binaries and the corpus, a
# package list (CPU image), or a bundle of libraries that resolves everything but the C
# library, libstdc++ and CUDA (CUDA image), and that runs.
set -euo pipefail

readonly script=deploy/docker/collect_runtime.sh
readonly binaries=(coordinator/coordinator worker/worker worker/train coordinator/cli/trainctl)
readonly corpus=tests/data/shakespeare.txt
readonly provided='^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn|nvrtc)\.so'  # Dockerfile.cuda's
readonly from_base='^(libc|libm|libdl|libpthread|librt|libutil|libresolv|ld-linux[^ ]*|libstdc\+\+|libgcc_s)\.so'

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

packages="$TEST_TMPDIR/packages"
"$script" --out="$packages" --mode=packages "${binaries[@]}" "$corpus"
for binary in coordinator worker train trainctl; do
  [[ -x "$packages/bin/$binary" ]] || fail "$binary not collected"
done
cmp -s "$corpus" "$packages/data/shakespeare.txt" || fail "corpus not collected"
# The libraries of the Debian packages the build uses (tools/install_deps.sh).
for package in libgrpc++ libprotobuf libabsl libprometheus-cpp-pull libsqlite3 libgloo \
               libopenblas; do
  grep -q "^$package" "$packages/runtime-packages.txt" ||
    fail "no $package* in runtime-packages.txt: $(tr '\n' ' ' < "$packages/runtime-packages.txt")"
done
if grep -Eq '^(libc6|libstdc\+\+6|libgcc-s1)$' "$packages/runtime-packages.txt"; then
  fail "base packages listed: $(tr '\n' ' ' < "$packages/runtime-packages.txt")"
fi

bundle="$TEST_TMPDIR/bundle"
"$script" --out="$bundle" --mode=bundle --provided="$provided" "${binaries[@]}" "$corpus"
[[ ! -e "$bundle/runtime-packages.txt" ]] || fail "bundle mode wrote a package list"
# With only the bundle on the library path, every library resolves into it, except those
# the runtime image's base provides.
while read -r name path; do
  [[ "$name" =~ $from_base || "$name" =~ $provided ]] && continue
  [[ "$path" == "$bundle/lib/"* ]] || fail "$name resolves to $path, not into the bundle"
done < <(LD_LIBRARY_PATH="$bundle/lib" ldd "$bundle"/bin/* | awk '$2 == "=>" {print $1, $3}')
for library in "$bundle"/lib/*; do
  name=$(basename "$library")
  [[ "$name" =~ $from_base ]] && fail "$name bundled, but the base image has it"
  [[ "$name" =~ $provided ]] && fail "$name bundled, but the CUDA image provides it"
done
LD_LIBRARY_PATH="$bundle/lib" "$bundle/bin/trainctl" help > /dev/null ||
  fail "trainctl from the bundle does not run"

# Misuse is refused.
if "$script" --out="$TEST_TMPDIR/bad" --mode=other "${binaries[@]}" "$corpus" 2> /dev/null; then
  fail "an unknown mode was accepted"
fi
echo "PASS"
