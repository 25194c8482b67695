#!/usr/bin/env bash
# tests/bench/rendezvous_flood.cc against a fresh coordinator on this machine (see
# against_coordinator.sh).
#
#   tests/bench/rendezvous_flood.sh [--values=600] [--value_bytes=1048576]
exec "$(dirname "$0")/against_coordinator.sh" rendezvous_flood "$@"
