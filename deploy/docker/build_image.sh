#!/usr/bin/env bash
# Builds an mtrain container image with podman from binaries already built (this checkout's
# Bazel build, by default), on a Debian 12 base made here from Debian's packages with
# debootstrap: no registry and no in-image Bazel build. `make image` runs it.
#
#   build_image.sh [--flavor=cpu|cuda] [--tag=NAME] [--bin_dir=DIR] [--corpus=FILE]
#                  [--context=DIR] [--runtime_base=IMAGE|cuda-standin] [--podman_env=FILE]
#
#   --flavor        cpu (deploy/docker/Dockerfile.cpu, the default) or cuda (Dockerfile.cuda)
#   --tag           the image's name (default localhost/mtrain-FLAVOR:dev)
#   --bin_dir       holds coordinator, worker, train and trainctl (default: bazel-bin's)
#   --corpus        the shipped corpus (default tests/data/shakespeare.txt)
#   --context       the build context; the collected runtime goes to CONTEXT/build/image/
#                   FLAVOR (default: the repository root)
#   --runtime_base  the runtime stage's base. cpu: the Debian base (default). cuda: NVIDIA's
#                   image (default; must be pullable), or `cuda-standin`: the Debian base
#                   plus this machine's CUDA libraries in /usr/local/cuda/lib64, the layout
#                   of NVIDIA's image, to build and run the CUDA image where NVIDIA's
#                   registry is out of reach
#   --podman_env    write the environment podman needs on this machine (CONTAINERS_CONF=...
#                   or nothing) to FILE, for running the image afterwards
#
# Environment: MTRAIN_DEBIAN_MIRROR (default http://deb.debian.org/debian) for debootstrap.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
readonly repo
readonly base_image=localhost/mtrain-debian:bookworm
readonly standin_image=localhost/mtrain-cuda-standin:13
# Libraries the CUDA image's base provides (NVIDIA's runtime + cuDNN image); the rest is
# bundled. The same list as Dockerfile.cuda's build stage.
readonly cuda_provided='^lib(cuda|cudart|cublas|cublasLt|nccl|cudnn|nvrtc)\.so'

flavor=cpu
tag=""
bin_dir="$repo/bazel-bin"
corpus="$repo/tests/data/shakespeare.txt"
context="$repo"
runtime_base=""
podman_env=""
for arg in "$@"; do
  case "$arg" in
    --flavor=*) flavor="${arg#--flavor=}" ;;
    --tag=*) tag="${arg#--tag=}" ;;
    --bin_dir=*) bin_dir="${arg#--bin_dir=}" ;;
    --corpus=*) corpus="${arg#--corpus=}" ;;
    --context=*) context="${arg#--context=}" ;;
    --runtime_base=*) runtime_base="${arg#--runtime_base=}" ;;
    --podman_env=*) podman_env="${arg#--podman_env=}" ;;
    *) echo "build_image.sh: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ "$flavor" == cpu || "$flavor" == cuda ]] ||
  { echo "build_image.sh: --flavor must be cpu or cuda, not '$flavor'" >&2; exit 2; }
tag="${tag:-localhost/mtrain-$flavor:dev}"

say() { echo "image: $*"; }
die() { echo "image: $*" >&2; exit 1; }
# Exit status 3: podman cannot run on this machine at all (tests skip with the reason).
cannot_run_here() { echo "image: $*" >&2; exit 3; }

command -v podman >/dev/null ||
  cannot_run_here "podman is not installed (make deps installs it, with runc and debootstrap)"

# Binaries: the Bazel targets' outputs, or any directory holding the four.
binaries=()
for name in coordinator/coordinator worker/worker worker/train coordinator/cli/trainctl; do
  if [[ -x "$bin_dir/$name" ]]; then
    binaries+=("$bin_dir/$name")
  elif [[ -x "$bin_dir/$(basename "$name")" ]]; then
    binaries+=("$bin_dir/$(basename "$name")")
  else
    die "no $(basename "$name") in $bin_dir: build first (bazel build //coordinator //worker" \
        "//worker:train //coordinator/cli:trainctl) or pass --bin_dir"
  fi
done
[[ -f "$corpus" ]] || die "no corpus at $corpus"

# The Debian base, made once per machine: debootstrap's minimal variant of bookworm (the
# release the binaries are built on, so the runtime packages' libraries are the tested
# ones), imported as an image. A lock keeps two builds from making it at once.
make_base() {
  exec 9>/tmp/mtrain-debian-base.lock
  flock 9
  if podman image exists "$base_image"; then return; fi
  command -v debootstrap >/dev/null || die "debootstrap is not installed (make deps)"
  [[ $(id -u) -eq 0 ]] ||
    die "making the Debian base needs root (debootstrap installs packages into a root" \
        "file system): run make image as root once, or import a base yourself as $base_image"
  local mirror="${MTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  local rootfs
  rootfs=$(mktemp -d /tmp/mtrain-rootfs.XXXXXX)
  say "making the Debian 12 base $base_image with debootstrap from $mirror (about a minute)"
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" > "$rootfs.log" 2>&1; then
    tail -20 "$rootfs.log" >&2
    rm -rf "$rootfs"
    die "debootstrap failed (log above; MTRAIN_DEBIAN_MIRROR picks another mirror)"
  fi
  tar --numeric-owner -C "$rootfs" -cf "$rootfs.tar" .
  podman import --quiet --change 'CMD ["/bin/bash"]' "$rootfs.tar" "$base_image" > /dev/null
  rm -rf "$rootfs" "$rootfs.log" "$rootfs.tar"
  exec 9>&-
}
make_base

# Podman's defaults fail on some hosts: crun refuses a hybrid cgroup v1/v2 hierarchy, and
# its default ulimits (RLIMIT_NOFILE 1048576) fail where the host's hard limit is lower
# and cannot be raised. deploy/docker/podman-compat.conf (runc, cgroupfs, the host's
# limits) is used then, and only then, and said so.
probe=$(podman run --rm --network=none "$base_image" true 2>&1) && probe_ok=true || probe_ok=false
if ! $probe_ok; then
  export CONTAINERS_CONF="$repo/deploy/docker/podman-compat.conf"
  say "podman's default runtime fails here ($(echo "$probe" | tail -1));" \
      "using CONTAINERS_CONF=$CONTAINERS_CONF"
  retry=$(podman run --rm --network=none "$base_image" true 2>&1) ||
    cannot_run_here "podman cannot run a container here, with its defaults ($probe) or with" \
        "$CONTAINERS_CONF ($retry)"
fi
if [[ -n "$podman_env" ]]; then
  if [[ -n "${CONTAINERS_CONF:-}" ]]; then
    echo "CONTAINERS_CONF=$CONTAINERS_CONF" > "$podman_env"
  else
    : > "$podman_env"
  fi
fi

# NVIDIA's CUDA runtime image keeps its libraries in /usr/local/cuda/lib64 on the loader's
# path; the stand-in does the same with this machine's copies of exactly those libraries.
make_cuda_standin() {
  exec 9>/tmp/mtrain-debian-base.lock
  flock 9
  if podman image exists "$standin_image"; then return; fi
  local dir
  dir=$(mktemp -d /tmp/mtrain-standin.XXXXXX)
  mkdir -p "$dir/lib64"
  ldd "${binaries[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r library; do
      if [[ "$(basename "$library")" =~ $cuda_provided ]]; then
        cp -L "$library" "$dir/lib64/"
      fi
    done
  say "making $standin_image: $base_image with $(find "$dir/lib64" -type f | wc -l) CUDA libraries" \
      "of this machine (NVIDIA's image's layout)"
  cat > "$dir/Containerfile" <<STANDIN
FROM $base_image
COPY lib64/ /usr/local/cuda/lib64/
RUN echo /usr/local/cuda/lib64 > /etc/ld.so.conf.d/cuda.conf && ldconfig
STANDIN
  podman build --quiet -f "$dir/Containerfile" -t "$standin_image" "$dir" > /dev/null
  rm -rf "$dir"
  exec 9>&-
}

build_args=(--build-arg BINARIES=prebuilt --build-arg "BUILD_BASE_IMAGE=$base_image")
mode=packages
provided='^$'
case "$flavor" in
  cpu)
    build_args+=(--build-arg "RUNTIME_BASE_IMAGE=${runtime_base:-$base_image}")
    ;;
  cuda)
    mode=bundle
    provided="$cuda_provided"
    if [[ "$runtime_base" == cuda-standin ]]; then
      make_cuda_standin
      runtime_base="$standin_image"
    fi
    [[ -z "$runtime_base" ]] || build_args+=(--build-arg "RUNTIME_BASE_IMAGE=$runtime_base")
    ;;
esac

# The runtime, collected as the Dockerfile's build-from-source stage would collect it.
staging="$context/build/image/$flavor"
rm -rf "$staging"
mkdir -p "$staging"
say "collecting the runtime into $staging"
"$repo/deploy/docker/collect_runtime.sh" --out="$staging" --mode="$mode" \
  --provided="$provided" "${binaries[@]}" "$corpus" | sed 's/^/image: /'

say "building $tag from deploy/docker/Dockerfile.$flavor"
# Docker's image format, not OCI's: it keeps the Dockerfile's SHELL.
podman build --layers --format=docker -f "$repo/deploy/docker/Dockerfile.$flavor" "${build_args[@]}" \
  -t "$tag" "$context" 2>&1 | sed 's/^/image: /'
say "built $tag ($(podman image inspect --format "{{.Size}}" "$tag" | numfmt --to=iec))"
if [[ -n "${CONTAINERS_CONF:-}" ]]; then
  say "run it here with CONTAINERS_CONF=$CONTAINERS_CONF podman run ..."
fi
