#!/usr/bin/env bash
# Configures and builds a preset (default: release). Usage: scripts/build.sh [debug|release] [targets...]
# TROUPE_WERROR=ON|OFF in the environment (re)configures with -DTROUPE_WERROR (warnings as errors);
# unset, a configured build directory keeps what it has (a fresh one: OFF).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
shift || true
if [[ -n "${TROUPE_WERROR:-}" ]]; then
  cmake --preset "$preset" -DTROUPE_WERROR="$TROUPE_WERROR" >/dev/null
elif [[ ! -f "build/$preset/build.ninja" ]]; then
  cmake --preset "$preset" -DTROUPE_WERROR=OFF >/dev/null
else
  # Configured already (the cache keeps its settings): configured again, a few seconds, so that what
  # was installed since is found (libtorch after `install-deps.sh --demo`: the TorchScript plugin).
  cmake --preset "$preset" >/dev/null
fi
# Two parallel jobs: these machines have 2 cores and CAF translation units are large.
jobs="${TROUPE_BUILD_JOBS:-$(nproc)}"
if [[ $# -gt 0 ]]; then
  cmake --build --preset "$preset" -j "$jobs" --target "$@"
else
  cmake --build --preset "$preset" -j "$jobs"
fi
