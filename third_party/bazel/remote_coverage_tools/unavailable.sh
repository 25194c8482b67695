#!/bin/sh
echo "coverage unavailable offline: Bazel's coverage tools cannot be downloaded here" >&2
exit 1
