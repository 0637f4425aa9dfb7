#!/usr/bin/env bash
# Installs troupe's build and test dependencies (Debian bookworm packages). Idempotent: installs
# only what is missing, runs `apt-get update` only when something must be installed.
#   scripts/install-deps.sh          build + tests
#   scripts/install-deps.sh --bench  also the benchmark peers (PyTorch, iperf3, Redis, FastAPI under
#                                    gunicorn/uvicorn for bench/serve)
# (pandas and scipy: Pollux's simulator, whose policy code the goodput tests check against.)
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config ccache git
  libcaf-dev libcapnp-dev capnproto liblmdb-dev lmdb-utils libboost-dev libspdlog-dev
  libgtest-dev libgmock-dev libopenblas-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libsodium-dev zlib1g-dev dataset-fashion-mnist procps prometheus clang-format
  python3-matplotlib python3-numpy libtorch-dev python3-torch chromium python3-websocket
  wrk python3-requests python3-pandas python3-scipy)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(iperf3 redis-server redis-tools etcd-server etcd-client python3-fastapi python3-uvicorn gunicorn)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
