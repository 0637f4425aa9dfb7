#!/usr/bin/env bash
# Issue #27 item 6 on the device machine: a user's TorchScript module trained on the GPU.
# 1. Builds the TorchScript plugin (torchscript/src/torchscript_backend.cpp) against the libtorch of
#    PYTHON's torch (the device's PyTorch has CUDA; Debian's libtorch here has none), linked with
#    this build's nn and core libraries, into OUT/libtroupe_torchscript.so.
# 2. Scripts examples/torch/mlp.py's MLP with that torch, then `troupe train --local` trains it on
#    the CPU and on the GPU ([job] device = "gpu"), and `troupe run` trains it with 2 workers under
#    allreduce on the GPU: both must end with an accuracy within 0.02 of the CPU run.
# Prints one JSON line per run. Where the torch has no CUDA (here) the GPU runs must fail with the
# backend's message, and the step passes after the build and the CPU run.
# Usage: bench/device/torch_gpu.sh BUILD_DIR PYTHON OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
build=$(cd "$1" && pwd) py=$2 out=$3
mkdir -p "$out"
out=$(cd "$out" && pwd)
fail() { echo "torch_gpu: $*"; exit 1; }

read -r abi cuda incs libdir < <("$py" - << 'PY'
import torch, torch.utils.cpp_extension as c
print(int(torch._C._GLIBCXX_USE_CXX11_ABI), "yes" if torch.cuda.is_available() else "no",
      ":".join(c.include_paths()), c.library_paths()[0])
PY
) || fail "$py has no torch"
echo "torch: $("$py" -c 'import torch; print(torch.__version__)'), CXX11 ABI $abi, CUDA device: $cuda, lib $libdir"
((abi == 1)) || fail "this torch was built with the old C++ ABI (troupe passes std::string across the plugin)"

# 1. The plugin. libtorch_cuda is linked even though no symbol of it is used (--no-as-needed): its
#    load registers the CUDA backend. Undefined symbols (spdlog, fmt, OpenBLAS of the static
#    libraries) resolve in the troupe process that opens the plugin.
libs=(-ltorch -ltorch_cpu -lc10)
[[ -e $libdir/libtorch_cuda.so ]] && libs+=(-Wl,--no-as-needed -ltorch_cuda -lc10_cuda -Wl,--as-needed)
isys=()
IFS=: read -ra dirs <<< "$incs"
for d in "${dirs[@]}"; do isys+=(-isystem "$d"); done
plugin=$out/libtroupe_torchscript.so
t0=$(date +%s)
c++ -std=c++20 -O2 -DNDEBUG -fPIC -shared -w -Iactors/include -Inn/include -Icore/include -Imodel/include \
  -Istorage/include "${isys[@]}" torchscript/src/*.cpp "$build/nn/libtroupe_nn.a" "$build/core/libtroupe_core.a" \
  -L"$libdir" -Wl,-rpath,"$libdir" "${libs[@]}" -Wl,-Bsymbolic -o "$plugin" || fail "building the plugin"
echo "plugin built in $(($(date +%s) - t0)) s: $plugin"
export TROUPE_TORCHSCRIPT_PLUGIN=$plugin
[[ -z "${TORCH_GPU_PLUGIN_ONLY:-}" ]] || exit 0  # run.sh's plugin step: the build alone

# 2. The module, scripted by this torch, and the runs.
"$py" examples/torch/mlp.py "$out/mlp.pt" > /dev/null || fail "scripting examples/torch/mlp.py"
sed "s|^path = .*|path = \"$out/mlp.pt\"|" examples/torch/mlp.toml > "$out/mlp.toml"
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<< "$1" | tail -1; }
# run_local DEVICE: troupe train --local, its final JSON line.
run_local() {
  "$build/troupe" train --local "$out/mlp.toml" --set job.device="$1" --set train.epochs=2 \
    2> "$out/local-$1.err" | tail -1
}
cpu=$(run_local cpu) || fail "train --local on the CPU: $(tail -3 "$out/local-cpu.err")"
acc_cpu=$(field "$cpu" test_accuracy)
echo "{\"bench\": \"torchscript_local\", \"device\": \"cpu\", \"result\": $cpu}"
gpu=$(run_local gpu)
rc=$?
if [[ $cuda != yes ]]; then
  grep -q "libtorch has no CUDA\|libtorch sees no CUDA device" "$out/local-gpu.err" ||
    fail "no CUDA here, and the GPU run did not say so: $(tail -3 "$out/local-gpu.err")"
  echo "torch_gpu: no CUDA device for this torch: the GPU runs refused as they should ($(grep -o 'libtorch [a-z ]*CUDA[a-z ]*' "$out/local-gpu.err" | head -1))"
  exit 0
fi
((rc == 0)) || fail "train --local on the GPU: $(tail -5 "$out/local-gpu.err")"
echo "{\"bench\": \"torchscript_local\", \"device\": \"gpu\", \"result\": $gpu}"
grep -q '"placement":"cuda:0"' <<< "$gpu" || fail "train --local with device gpu did not train on cuda:0: $gpu"
acc_gpu=$(field "$gpu" test_accuracy)
"$build/troupe" run "$out/mlp.toml" --set job.device=gpu --set job.root="$out/jobs" --workers 2 \
  --job-id torch-gpu --quiet > "$out/run.out" 2> "$out/run.err" || fail "troupe run on the GPU: $(tail -5 "$out/run.err")"
job=$(tail -1 "$out/run.out")
echo "{\"bench\": \"torchscript_job\", \"device\": \"gpu\", \"workers\": 2, \"result\": $job}"
acc_job=$(field "$job" test_accuracy)
# Each worker names where its module trained ("torchscript model on the torchscript backend (cuda:0)").
for w in 0 1; do
  grep -m1 "backend (" "$out/jobs/torch-gpu/logs/worker-$w.log"
  grep -q "torchscript backend (cuda:0)" "$out/jobs/torch-gpu/logs/worker-$w.log" ||
    fail "worker-$w of the GPU job did not train on cuda:0"
done
echo "accuracy: train --local cpu $acc_cpu, gpu $acc_gpu; troupe run, 2 workers on the GPU: $acc_job"
# Issue 49 item 2: the GPU job's model (exported by its runner through this plugin) in the device's
# Python, on the CPU (1e-5) and on cuda:0 (1e-4), against the job's own evaluation.
cache=$(ls -d "$out"/jobs/datasets/*/ | head -1)
"$build/bench/job/export_records" "${cache}test" "$out/test" > /dev/null || fail "export_records of $cache"
for dev in cpu cuda; do
  tol=$([[ $dev == cpu ]] && echo 1e-5 || echo 1e-4)
  line=$("$py" tests/model/check_model.py "$out/jobs/torch-gpu/model" "$out/test" "$out/jobs/torch-gpu/result.json" \
           --device $dev --tolerance $tol) || fail "the GPU job's model on $dev: $line"
  echo "{\"bench\": \"model_export_gpu\", \"model\": \"torchscript\", \"on\": \"$dev\", \"check\": $line}"
done
for a in "$acc_gpu" "$acc_job"; do
  awk -v a="$a" -v b="$acc_cpu" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02) }' ||
    fail "a GPU accuracy ($a) is more than 0.02 from the CPU's ($acc_cpu)"
done
