#!/usr/bin/env bash
# Packs what bench/device/run.sh needs on the device machine (which has CUDA, PyTorch and a
# Python, but none of troupe's Debian libraries and no package access) into device-pack/ (ignored,
# 64 MiB at most with the working tree):
#   debs/      the Debian packages of every shared library the binaries load that the device's
#              image lacks (apt-get download; unpacked there with dpkg -x, never into /), and
#              Fashion-MNIST (dataset-fashion-mnist) for the GPU job tests and benchmarks;
#   bin.tar.xz the binaries run.sh uses, stripped, at their paths under build/release, the static
#              nn and core libraries the TorchScript plugin is linked with there (against the
#              device's libtorch: bench/device/torch_gpu.sh), and the CUDA runtime the binaries
#              were linked with (libcudart.so.13). cuBLAS and NCCL are the
#              device's own (its CUDA toolkit and PyTorch's wheels carry them; too large to carry).
# Usage: bench/device/pack.sh [build dir, default build/release]   (a CUDA build: TROUPE_CUDA=ON)
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build/release}"
out=device-pack
ldd "$build/troupe" 2>/dev/null | grep -q libcudart ||
  { echo "pack: $build is not a CUDA build (configure with -DTROUPE_CUDA=ON)" >&2; exit 1; }
mapfile -t bins < bench/device/binaries.txt  # what run.sh runs, under the build dir
rm -rf "$out" && mkdir -p "$out/debs" "$out/stage/build/release" "$out/stage/lib"
for b in "${bins[@]}"; do
  [[ -x "$build/$b" ]] || { echo "pack: $build/$b is not built" >&2; exit 1; }
  mkdir -p "$out/stage/build/release/$(dirname "$b")"
  strip -o "$out/stage/build/release/$b" "$build/$b"
done
for a in nn/libtroupe_nn.a core/libtroupe_core.a; do
  mkdir -p "$out/stage/build/release/$(dirname "$a")"
  strip --strip-debug -o "$out/stage/build/release/$a" "$build/$a"
done
cudart=$(ldd "$build/troupe" | awk '/libcudart/ {print $3}')
cp -L "$cudart" "$out/stage/lib/"
# Every library the binaries load, by package; the C/C++ runtime and zlib are on every image.
libs=$(for b in "${bins[@]}"; do ldd "$build/$b"; done | awk '/=>/ {print $3}' | sort -u |
       grep -v -E '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libz)\.so|cuda|nccl')
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "${l#/usr}"; done |
       cut -d: -f1 | sort -u)
(cd "$out/debs" && apt-get download $pkgs dataset-fashion-mnist 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
tar -C "$out/stage" -cJf "$out/bin.tar.xz" build lib
rm -rf "$out/stage"
echo "pack: $(ls "$out/debs" | wc -l) packages ($(echo $pkgs | tr '\n' ' ')+ dataset-fashion-mnist)"
du -sh "$out"/* | sed 's/^/pack: /'
echo "pack: with the working tree: $(( ($(du -sb "$out" | cut -f1) + $(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)) / 1048576 )) MiB (limit 64)"
