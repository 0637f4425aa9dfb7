#!/usr/bin/env bash
# Configures and builds a preset (default: release). Usage: scripts/build.sh [debug|release] [targets...]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
if [[ ! -f "build/$preset/build.ninja" ]]; then
  cmake --preset "$preset" >/dev/null
fi
# Two parallel jobs: these machines have 2 cores and CAF translation units are large.
jobs="${TROUPE_BUILD_JOBS:-$(nproc)}"
if [[ $# -gt 0 ]]; then
  cmake --build --preset "$preset" -j "$jobs" --target "$@"
else
  cmake --build --preset "$preset" -j "$jobs"
fi
