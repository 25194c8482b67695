#!/usr/bin/env bash
# Layering of the tree (README "Layout"): the two daemons never include each other, and the
# daemon-neutral libraries (spec/, plan/, checkpoint/, common/, model/, data/, tokenizer/)
# include neither daemon.
#   1. No such #include exists (grep).
#   2. Bazel refuses a new one: a probe package is created inside worker/ with a target that
#      depends on //coordinator:job_manager, and `bazel build` must fail with a visibility
#      error (likewise coordinator/ -> //worker:trainer). The probes are removed on exit.
# Exit status 0 when the layering holds.
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0

forbid() {  # forbid DIR PATTERN WHY
  local hits
  hits=$(grep -rEn --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' \
    "^#include \"($2)/" "$1" || true)
  if [[ -n "$hits" ]]; then
    echo "FORBIDDEN ($3):"
    echo "$hits"
    status=1
  else
    echo "ok: nothing under $1/ includes $2/"
  fi
}
forbid worker coordinator "the worker executes assignments; it never includes the coordinator"
forbid coordinator worker "the coordinator never links the worker's engine"
for lib in spec plan checkpoint common model data tokenizer; do
  forbid "$lib" 'coordinator|worker' "daemon-neutral libraries include neither daemon"
done

probe() {  # probe PACKAGE DEP
  local pkg=$1 dep=$2
  mkdir -p "$pkg"
  cat > "$pkg/BUILD" <<BUILD
cc_library(
    name = "probe",
    srcs = ["probe.cc"],
    deps = ["$dep"],
    tags = ["manual"],
)
BUILD
  echo 'int LayeringProbe() { return 0; }' > "$pkg/probe.cc"
  local out
  out=$(bazel build --noshow_progress "//$pkg:probe" 2>&1)
  local rc=$?
  rm -rf "$pkg"
  if ((rc == 0)); then
    echo "FORBIDDEN dependency built: //$pkg:probe -> $dep (visibility must refuse it)"
    status=1
  elif grep -q 'is not visible from target' <<<"$out"; then
    echo "ok: bazel refuses //$pkg:probe -> $dep (not visible)"
  else
    echo "probe //$pkg:probe -> $dep failed for another reason:"
    echo "$out" | tail -n 20
    status=1
  fi
}
trap 'rm -rf worker/layering_probe coordinator/layering_probe' EXIT
probe worker/layering_probe //coordinator:job_manager
probe coordinator/layering_probe //worker:trainer
exit "$status"
