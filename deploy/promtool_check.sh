#!/usr/bin/env bash
# Runs Debian's promtool on the shipped Prometheus files and fails unless it reports
# SUCCESS, e.g. `promtool_check.sh check config deploy/prometheus/prometheus.yml`.
set -euo pipefail

readonly PROMTOOL=/usr/bin/promtool
if [[ ! -x "$PROMTOOL" ]]; then
  echo "$PROMTOOL not found: run \`make deps\` (installs Debian's prometheus package)" >&2
  exit 1
fi

status=0
output=$("$PROMTOOL" "$@" 2>&1) || status=$?
echo "$output"
if [[ $status -ne 0 ]]; then
  echo "promtool $* failed with exit status $status" >&2
  exit "$status"
fi
if ! grep -q "SUCCESS" <<<"$output"; then
  echo "promtool $* did not report SUCCESS" >&2
  exit 1
fi
