#!/usr/bin/env bash
# Installs the dependencies, builds (release preset) and runs the default test suite (everything
# but the `chaos` and `slow` labels) plus the chaos smoke scenario. Extra arguments go to ctest, e.g. scripts/test.sh -L chaos.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release
cd build/release
if [[ $# -gt 0 ]]; then
  ctest --output-on-failure -j 2 "$@"
else
  ctest --output-on-failure -j 2 -LE 'chaos|slow'
  # One short chaos scenario (a worker SIGKILLed under `troupe chaos`); the full suite: -L chaos.
  ctest --output-on-failure -L chaos -R smoke
fi
