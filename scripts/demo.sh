#!/usr/bin/env bash
# Installs the dependencies, builds troupe (release) and runs the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release troupe
./build/release/troupe --help
