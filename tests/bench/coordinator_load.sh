#!/usr/bin/env bash
# tests/bench/coordinator_load.cc against a fresh coordinator on this machine (see
# against_coordinator.sh).
#
#   tests/bench/coordinator_load.sh --workers=256 --seconds=20
exec "$(dirname "$0")/against_coordinator.sh" coordinator_load "$@"
