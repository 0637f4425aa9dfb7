#!/usr/bin/env bash
# Installs troupe's build and test dependencies (Debian bookworm packages). Idempotent: installs
# only what is missing, runs `apt-get update` only when something must be installed.
#   scripts/install-deps.sh          build + tests
#   scripts/install-deps.sh --demo   only what building `troupe` and running examples/fashion_mnist.toml
#                                    need (scripts/demo.sh): no libtorch, browser, Prometheus or Python
#                                    plotting; a later full install adds them and scripts/build.sh
#                                    reconfigures to pick them up (the TorchScript plugin, say)
#   scripts/install-deps.sh --bench  also the benchmark peers (PyTorch, iperf3, Redis, FastAPI under
#                                    gunicorn/uvicorn for bench/serve)
# (pandas and scipy: Pollux's simulator, whose policy code the goodput tests check against.)
set -euo pipefail

# What configuring the project and building `troupe` need (GoogleTest too: the default configuration
# builds the tests' targets' definitions), and the demo's dataset.
packages=(build-essential cmake ninja-build pkg-config ccache
  libcaf-dev libcapnp-dev capnproto liblmdb-dev libboost-dev libspdlog-dev
  libgtest-dev libgmock-dev libopenblas-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libsodium-dev zlib1g-dev dataset-fashion-mnist procps)
case "${1:-}" in
  --demo | --bench | "") ;;
  *) echo "install-deps: unknown option '$1' (--demo, --bench or none)" >&2; exit 2 ;;
esac
if [[ "${1:-}" != "--demo" ]]; then
  packages+=(git lmdb-utils prometheus clang-format python3-matplotlib python3-numpy libtorch-dev
    python3-torch chromium python3-websocket wrk python3-requests python3-pandas python3-scipy python3-xxhash)
fi
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
