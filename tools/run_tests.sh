#!/usr/bin/env bash
# Runs every test with Bazel and ends with one line "N passed, N failed[, N skipped]".
# Counts are per test target, plus one per static check (tools/checks/*.sh). A target counts as skipped when it passed only by skipping
# everything (GPU tests on a machine without a GPU); the skipped ones are named.
# Extra arguments go to `bazel test` (e.g. --config=asan).
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
log=build/test_output.log
summary=build/test_summary.txt
rm -f "$summary"

bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=0
failed=0
skipped=0
skipped_names=()
while read -r target status; do
  if [[ "$status" == PASSED ]]; then
    test_log="bazel-testlogs/${target#//}"
    test_log="${test_log/://}/test.log"
    if [[ -f "$test_log" ]] && grep -q '^\[  SKIPPED \]' "$test_log" &&
       grep -q '^\[  PASSED  \] 0 tests' "$test_log"; then
      skipped=$((skipped + 1))
      skipped_names+=("$target")
    else
      passed=$((passed + 1))
    fi
  else
    failed=$((failed + 1))
  fi
done < <(sed -nE 's#^(//[^ ]+)[[:space:]]+(\(cached\) )?(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|NO STATUS|INCOMPLETE|FLAKY|REMOTE FAILURE).*#\1 \3#p' "$log" |
         sed -E 's/ (FAILED TO BUILD|NO STATUS|REMOTE FAILURE)$/ FAILED/')

# Static checks of the tree (layering, lock annotations): each tools/checks/*.sh is one
# test, passed when it exits 0. Skipped under a sanitizer config (they do not compile code
# under test differently).
if [[ $# -eq 0 ]]; then
  for check in tools/checks/*.sh; do
    [[ -e "$check" ]] || continue
    if "$check" > "build/$(basename "$check" .sh).log" 2>&1; then
      echo "//$check PASSED"
      passed=$((passed + 1))
    else
      echo "//$check FAILED (build/$(basename "$check" .sh).log):"
      tail -n 20 "build/$(basename "$check" .sh).log"
      failed=$((failed + 1))
      rc=1
    fi
  done
fi

# A failure before any test ran (analysis or build error) must not read as success.
if ((rc != 0 && failed == 0)); then failed=1; fi

for name in "${skipped_names[@]}"; do
  echo "skipped (no GPU on this machine): $name"
done
line="$passed passed, $failed failed"
((skipped > 0)) && line="$line, $skipped skipped"
echo "$line" | tee "$summary"
exit "$rc"
