#!/usr/bin/env bash
# Everything issue #28 asks of the device machine (one GPU, 16 cores), in one go of at most ~8
# minutes: the GPU tests, the GPU training benchmark against PyTorch CUDA, NCCL communicator
# rebuilds, and with a core per process the recovery benchmark (pinned), DeepFM end to end against
# one PyTorch process, and ring allreduce at 4 and 8 ranks against gloo. Each step has its own time
# limit; its log, JSON lines and gtest JSON land in OUT, and a summary is printed at the end.
#
# Here (no GPU, the CUDA build of build/release): every step runs and the GPU parts print why they
# skipped. On the device machine, first `bench/device/pack.sh` here, then there:
#   bench/device/run.sh --unpack OUT
# --unpack: unpack device-pack/ (Debian libraries with dpkg -x under /opt/troupe-deps, never into /;
# Fashion-MNIST; the stripped binaries as build/release), find the device's cuBLAS and NCCL, and
# give the test binaries the absolute paths they were built with (/work/main).
# --only a,b: run only those steps, in the script's order (info torch_gpu plugin model_gpu serve_gpu
# noise_scale blas_pool gpu_tests gpu_bench deepfm recovery allreduce nccl control checkpoint predict); the steps
# of this stage's issue (49) come first, so that a call that runs out of time loses the older ones.
# Exits 1 when a step failed (its rc in OUT/steps.jsonl). TROUPE_BUILD_DIR: another build than
# build/release (not with --unpack).
# Usage: bench/device/run.sh [--unpack] [--only STEPS] OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
unpack=0 only="" out=""
while (($#)); do
  case "$1" in
    --unpack) unpack=1 ;;
    --only) only="$2"; shift ;;
    *) out="$1" ;;
  esac
  shift
done
[[ -n "$out" ]] || { echo "usage: bench/device/run.sh [--unpack] [--only STEPS] OUT" >&2; exit 2; }
mkdir -p "$out"
out="$(cd "$out" && pwd)"
rm -f "$out"/steps.jsonl "$out"/results.jsonl "$out"/*.log "$out"/gtest_*.json  # this run's only
build=${TROUPE_BUILD_DIR:-build/release}
t_start=$(date +%s)

if ((unpack)); then
  deps=/opt/troupe-deps
  if [[ -d build/release && ! -L build/release ]]; then
    echo "unpack: build/release is a build here; --unpack is for the device machine" >&2
    exit 2
  fi
  mkdir -p "$deps"
  for d in device-pack/debs/*.deb; do dpkg -x "$d" "$deps"; done
  tar -C device-pack -xJf device-pack/bin.tar.xz
  mkdir -p build && rm -rf build/release && ln -s "$PWD/device-pack/build/release" build/release
  if [[ ! -e /usr/share/datasets/fashion-mnist ]]; then
    mkdir -p /usr/share/datasets && ln -s "$deps/usr/share/datasets/fashion-mnist" /usr/share/datasets/
  fi
  # The binaries were built in /work/main (TROUPE_BIN, TROUPE_SOURCE_DIR).
  if [[ "$PWD" != /work/main && ! -e /work/main ]]; then mkdir -p /work && ln -s "$PWD" /work/main; fi
  libdirs="$PWD/device-pack/lib:$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib/x86_64-linux-gnu/openblas-pthread"
  for so in libcublas.so.13 libnccl.so.2; do
    f=$(find /usr/local/cuda*/ /usr/lib /opt -name "$so" 2>/dev/null | grep -v troupe-deps | head -1)
    [[ -n "$f" ]] && libdirs="$libdirs:$(dirname "$f")" || echo "unpack: $so not found on this machine"
  done
  export LD_LIBRARY_PATH="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  echo "unpack: LD_LIBRARY_PATH=$LD_LIBRARY_PATH ($(($(date +%s) - t_start)) s)"
fi

# The first Python with torch (the device's has CUDA; Debian's /usr/bin/python3 a CPU-only one).
py=""
for cand in ${TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if "$cand" -c 'import torch' >/dev/null 2>&1; then py=$(command -v "$cand"); break; fi
done

summary="$out/summary.txt"
failed=0
: >"$summary"
want() { [[ -z "$only" || ",$only," == *",$1,"* ]]; }
# step NAME LIMIT_S CMD...: runs CMD with its output in OUT/NAME.log, records rc and seconds.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  want "$name" || return 0
  t0=$(date +%s%N)
  echo "== $name (limit ${limit}s): $*" | tee -a "$out/$name.log"
  # A step is a function of this script: a bash of its own runs it under timeout.
  timeout -k 5 "$limit" bash -c "set -o pipefail; $*" >>"$out/$name.log" 2>&1
  rc=$?
  ((rc == 0)) || failed=1
  printf '{"step": "%s", "rc": %d, "seconds": %d.%d}\n' "$name" "$rc" \
    $((($(date +%s%N) - t0) / 1000000000)) $((($(date +%s%N) - t0) / 100000000 % 10)) | tee -a "$out/steps.jsonl"
}

info() {
  nvidia-smi -L 2>&1 || echo "nvidia-smi: none"
  lscpu | grep -m1 "Model name" || true
  echo "kernel: $(uname -r) (gVisor reports 4.4.0)"
  echo "cores: $(nproc)  memory: $(free -g | awk '/Mem/ {print $2}') GiB  python: ${py:-none}"
  [[ -n "$py" ]] && "$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  local missing=0
  local b
  for b in $(sed "s|^|$build/|" bench/device/binaries.txt); do
    if ldd "$b" 2>&1 | grep -q "not found"; then
      echo "ldd $b:"; ldd "$b" | grep "not found"; missing=1
    fi
  done
  echo "ldd: $( ((missing)) && echo 'libraries missing' || echo 'every library found')"
  return $missing
}

gpu_tests() {
  local rc=0 t
  # GPU_TESTS: these only (a later call's short list).
  for t in ${GPU_TESTS:-tests/gpu/gpu_cuda_test tests/gpu/gpu_layers_test tests/gpu/gpu_optimizer_test \
           tests/gpu/gpu_trainer_test tests/gpu/gpu_comm_plan_test tests/gpu/gpu_train_cli_test \
           tests/actors/actors_allreduce_gpu_test tests/job/gpu_job_test tests/gpu/gpu_nccl_comm_test \
           tests/gpu/gpu_norms_test}; do
    echo "-- $t"
    "$build/$t" --gtest_output="json:$out/gtest_$(basename "$t").json" || rc=1
  done
  return $rc
}

# NCCL communicator rebuilds (size 1: one GPU cannot hold two ranks of one communicator): NCCL's
# own init timings, then 20-epoch churns (back-to-back changes) under bounds on the aborts that run
# at once (1: one at a time, as before 2026-11-27), 100 epochs under 16 and 32 (8 left
# a p90 of 235-281 ms over 100 epochs on the H200), then the 100-epoch churn test under the default (32).
# (NCCL settings -- NCCL_SET_STACK_SIZE, CUDA_MODULE_LOADING, NVLS, cuMem -- moved it by under 5% on
# the H100 and the H200: docs/benchmarks.md.)
nccl() {
  local t="$build/tests/gpu/gpu_nccl_comm_test" k line
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT TROUPE_NCCL_CHURN_EPOCHS=10 "$t" --gtest_filter='*churn*' 2>&1 |
    grep -E "Init timings|NCCL version|Skipped" | sed -n '1,4p;$p'
  for k in 1 4 8 16; do
    line=$(TROUPE_NCCL_ABORTS_IN_FLIGHT=$k TROUPE_NCCL_CHURN_EPOCHS=20 "$t" --gtest_filter='*churn*' |
           grep '^{"bench": "nccl_rebuild"')
    echo "nccl churn, 20 epochs, aborts in flight $k: ${line:-no figures}"
    [[ -n "$line" ]] || { echo "nccl: no rebuild figures (no GPU?)"; "$t"; return; }
    echo "$line" >>"$out/results.jsonl"
  done
  for k in 16 32; do
    line=$(TROUPE_NCCL_ABORTS_IN_FLIGHT=$k TROUPE_NCCL_CHURN_EPOCHS=100 "$t" --gtest_filter='*churn*' |
           grep '^{"bench": "nccl_rebuild"')
    echo "nccl churn, 100 epochs, aborts in flight $k: ${line:-no figures}"
    echo "$line" >>"$out/results.jsonl"
  done
  "$t" --gtest_output="json:$out/gtest_gpu_nccl_comm_test.json" | tee "$out/nccl_comm_test.out"
  local rc=${PIPESTATUS[0]}
  grep '^{"bench": "nccl_rebuild"' "$out/nccl_comm_test.out" >>"$out/results.jsonl"
  return "$rc"
}

gpu_bench() {
  TORCH_PYTHON="$py" bench/gpu/run.sh "$build" --rounds 3 | tee -a "$out/results.jsonl"
  return "${PIPESTATUS[0]}"
}

# Ring allreduce against gloo at 4 and 8 ranks, 1 MB and 64 MB, with a job's rings (4 MiB) and what
# a job on one host runs (at 64 MB the fused pipeline, shm/pipeline.cpp); at 64 MB also the
# exchanges (--exchanges), 1 MiB and 16 MiB rings (the best size depends on the machine's caches),
# and lanes (--lanes H: up to H threads per rank, each over rings of its own; a job's [job]
# ring_lanes, by default the CPUs over the ranks, at most 4) on the 16 cores: 4 ranks x 2 and 4
# lanes (4 also with the exchanges), 8 ranks x 2.
allreduce() {
  local ranks mb iters args variants
  local bench="$build/bench/collective/allreduce_bench"
  for ranks in 4 8; do
    for mb in 1 64; do
      iters=$([[ $mb == 1 ]] && echo 200 || echo 20)
      "$bench" --ranks $ranks --mb $mb --iters $iters | tee -a "$out/results.jsonl"
      if [[ $mb == 64 ]]; then
        variants=("--exchanges" "--capacity-kb 1024" "--capacity-kb 16384" "--lanes 2")
        ((ranks == 4)) && variants+=("--lanes 4" "--lanes 4 --exchanges")
        for args in "${variants[@]}"; do
          # shellcheck disable=SC2086 # $args: a variant's words
          "$bench" --ranks $ranks --mb 64 --iters 10 $args | tee -a "$out/results.jsonl"
        done
      fi
      "$py" bench/collective/gloo_allreduce.py $ranks $mb $iters | tee -a "$out/results.jsonl"
    done
  done
}

# Once against torchrun, then four times troupe alone (issue 49: 5 runs); the job logs (the
# replacement's timeline) kept.
recovery() {
  local r
  for r in 1 2 3 4 5; do
    "$py" bench/recovery/recovery_bench.py "$build/troupe" --pin $( ((r > 1)) && echo --troupe-only) \
      --keep "$out/recovery_$r" | tee -a "$out/results.jsonl"
    ((PIPESTATUS[0] == 0)) || return 1
  done
}

deepfm() {
  local threads
  "$py" bench/job/job_bench.py --only e2e,torch --work /tmp/troupe_device_job_bench | tee -a "$out/results.jsonl"
  # DEEPFM_THREADS=6: one PyTorch process given as many threads as troupe's job has processes (2 PS
  # + 4 workers) too (on the H200 in 2026-11: 3.62x against 6 threads, 4.23x against 1).
  for threads in ${DEEPFM_THREADS:-}; do
    "$py" bench/job/job_bench.py --only torch --threads $threads --work /tmp/troupe_device_job_bench |
      tee -a "$out/results.jsonl"
  done
}

# A user's TorchScript module on the GPU (issue #27 item 6): the plugin built there against the
# device's libtorch, then train --local and a 2-worker job with device = "gpu".
torch_gpu() {
  bench/device/torch_gpu.sh "$build" "$py" "$out/torch_gpu" | tee -a "$out/results.jsonl"
  return "${PIPESTATUS[0]}"
}

# One master for 1,000 and 4,000 simulated workers (issue 29), with cores to spare: leases/s and
# lease latency at 80 ms tasks (the target's offered load) and with no think time.
control() {
  local args=(--troupe "$build/troupe" --no-etcd --io-threads 4 --seconds 5 --work /tmp/troupe_device_control)
  local n_l_hb
  for n_l_hb in "1000 80 0" "1000 0 0" "4000 0 1000"; do
    set -- $n_l_hb
    # --heartbeat-ms 0: the transport's defaults.
    "$build/bench/control/control_bench" "${args[@]}" --workers "$1" --task-ms "$2" --heartbeat-ms "$3" \
      >"$out/control_$1_$2.json" || return 1
    # The figures that matter, as one "bench" line for the summary.
    python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({"bench": "control", **{k: d.get(k) for k in ("workers", "task_ms", "leases_per_s", "lease_p50_ms", "lease_p99_ms", "death_last_ms", "master_cpu_frac_leasing", "join_ms")}}))' \
      "$out/control_$1_$2.json" | tee -a "$out/results.jsonl"
  done
}

# A PS shard checkpointing every second while one client pulls and pushes (issue 29 part 2), with
# cores to spare: checkpoint slices over 1 ms (wall and CPU), pull/push latency inside and outside
# checkpoints, and the machine's own stalls.
checkpoint() {
  local r
  for r in 1 2; do
    "$build/bench/ps/ps_bench" --loopback --seconds 10 --checkpoint-ms 1000 --full-every 3 \
      >"$out/checkpoint_$r.json" || return 1
    python3 -c 'import json, sys
d = json.load(open(sys.argv[1])); c = d["checkpoints"]; l = d["latency_by_phase"]
row = {"bench": "checkpoint", "rows_per_s": d["rows_per_s"], "stall_max_ms": d["machine_stalls"]["unit_max_ms"]}
row.update({k + "_" + f: c[k][f] for k in ("full", "incremental")
            for f in ("slices", "slices_over_1ms", "slices_over_1ms_cpu", "longest_slice_ms_max")})
row.update({ph + "_" + op + "_max_ms": l[ph][op]["max_ms"] for ph in ("full", "incremental", "outside")
            for op in ("pull", "push")})
print(json.dumps(row))' "$out/checkpoint_$r.json" | tee -a "$out/results.jsonl"
  done
}

# Issue 49 item 2: a built-in model trained with [job] device = "gpu" (the CUDA backend) ends with a
# model.pt that the device's Python scores as the job's own evaluation did, on the CPU (1e-5) and on
# cuda:0 (1e-4). (The TorchScript module's GPU job is checked in torch_gpu.)
model_gpu() {
  local d=/tmp/troupe_device_model dev tol cache line
  if ! nvidia-smi -L >/dev/null 2>&1; then echo "model_gpu: no GPU here, nothing to train on it"; return 0; fi
  rm -rf "$d" && mkdir -p "$d"
  "$build/troupe" run examples/fashion_mnist_gpu.toml --workers 2 --set train.epochs=1 --set job.root="\"$d/jobs\"" \
    --job-id mlp-gpu --quiet >"$d/run.out" 2>"$d/run.err" || { tail -5 "$d/run.err"; return 1; }
  echo "{\"bench\": \"gpu_job\", \"result\": $(tail -1 "$d/run.out")}"
  cache=$(ls -d "$d"/jobs/datasets/*/ | head -1)
  "$build/bench/job/export_records" "${cache}test" "$d/test" >/dev/null || return 1
  for dev in cpu cuda; do
    tol=$([[ $dev == cpu ]] && echo 1e-5 || echo 1e-4)
    line=$("$py" tests/model/check_model.py "$d/jobs/mlp-gpu/model" "$d/test" "$d/jobs/mlp-gpu/result.json" \
             --device $dev --tolerance $tol) || { echo "model_gpu on $dev: $line"; return 1; }
    echo "{\"bench\": \"model_export_gpu\", \"model\": \"mlp\", \"on\": \"$dev\", \"check\": $line}"
  done
}

# Issue 46's prediction benchmark where cores are not shared: troupe predict with 1, 2 and 4 workers
# (1 libtorch thread each) against one PyTorch process over the same model.pt and records.
predict() {
  [[ -n "$py" ]] || { echo "predict: no Python with torch here"; return 1; }
  "$py" -c 'import numpy' || { echo "predict: $py has no numpy"; return 1; }
  "$py" bench/model/predict_bench.py "$build/troupe" --rounds 2 --workers 1 2 4 --python "$py" \
    --dir /tmp/troupe_device_predict | tee -a "$out/results.jsonl"
}

# Issue 49 item 3: the two GPU jobs' models (model_gpu's built-in MLP, torch_gpu's TorchScript MLP)
# served by `troupe serve --device cuda` with 2 replicas, the open-loop generator at rates rising by
# sqrt 2 (rows/s at p99 <= 20 ms; 1-row and 64-row requests, for the built-in model in JSON and with
# binary tensor data) against the same model.pt's plain batched forward in the device's PyTorch
# CUDA; for the built-in model also a replica SIGKILLed and a hot swap under load (none may fail).
serve_gpu() {
  local rc=0
  if ! nvidia-smi -L >/dev/null 2>&1; then echo "serve_gpu: no GPU here, nothing to serve on it"; return 0; fi
  [[ -d /tmp/troupe_device_model/jobs/mlp-gpu/model ]] || { echo "serve_gpu: model_gpu's model is missing"; return 1; }
  # 8 HTTP threads (they parse the JSON) of the 16 cores; SERVE_MODELS=mlp: the built-in model only.
  local threads=${SERVE_HTTP_THREADS:-8}
  "$py" bench/serve/gpu.py "$build" /tmp/troupe_device_model/jobs/mlp-gpu/model /tmp/troupe_device_model/test \
    --root /tmp/troupe_device_serve/mlp --label mlp --seconds 2 --http-threads "$threads" --binary \
    $( [[ "${SERVE_EVENTS:-1}" == 1 ]] && echo --events) |
    tee -a "$out/results.jsonl"
  ((PIPESTATUS[0] == 0)) || rc=1
  [[ "${SERVE_MODELS:-mlp,torchscript}" == *torchscript* ]] || return $rc
  if [[ -d "$out/torch_gpu/jobs/torch-gpu/model" ]]; then
    "$py" bench/serve/gpu.py "$build" "$out/torch_gpu/jobs/torch-gpu/model" "$out/torch_gpu/test" \
      --root /tmp/troupe_device_serve/torchscript --label torchscript --seconds 2 --rows 64 \
      --http-threads "$threads" | tee -a "$out/results.jsonl"
    ((PIPESTATUS[0] == 0)) || rc=1
  else
    echo "serve_gpu: torch_gpu's model is missing"; rc=1
  fi
  return $rc
}

# Issue 49 item 4: the gradient noise scale's cost in an allreduce step at 4 and 8 ranks with the
# cores to spare (noise_scale_bench: estimate on vs off in alternating blocks; the default every 8,
# and every step), then on the GPU (the strategy's device path: one replica, and two host-staged on
# the one GPU; at every 8 and every 1). NOISE_CPU=0: the GPU part only.
noise_scale() {
  local every
  for every in 8 1; do
    [[ "${NOISE_CPU:-1}" == 1 ]] || break
    OPENBLAS_NUM_THREADS=1 "$build/bench/worker/noise_scale_bench" --ranks 4,8 --blocks 30 --steps 24 \
      --models mlp64,mlp256 --every $every 2>/dev/null | grep '"bench"' | tee -a "$out/results.jsonl"
    ((PIPESTATUS[0] == 0)) || return 1
  done
  for every in 8 1; do
    "$build/bench/worker/noise_scale_bench" --device gpu --ranks 1,2 --batches 512,64 --blocks 30 --steps 24 \
      --every $every 2>/dev/null | grep '"bench"' | tee -a "$out/results.jsonl"
    ((PIPESTATUS[0] == 0)) || return 1
  done
}

# The TorchScript plugin torch_gpu builds against the device's libtorch (with CUDA) is what every
# later step that loads a model.pt needs there (the job's export, serve, predict): none is packed.
plugin_from_torch_gpu() {
  if [[ -z "${TROUPE_TORCHSCRIPT_PLUGIN:-}" && -e "$out/torch_gpu/libtroupe_torchscript.so" ]] && ((unpack)); then
    export TROUPE_TORCHSCRIPT_PLUGIN="$out/torch_gpu/libtroupe_torchscript.so"
    echo "TROUPE_TORCHSCRIPT_PLUGIN=$TROUPE_TORCHSCRIPT_PLUGIN"
  fi
}

export out build py
export -f info gpu_tests nccl gpu_bench allreduce recovery deepfm torch_gpu control checkpoint model_gpu predict \
  serve_gpu noise_scale
step info 30 info
step torch_gpu 240 torch_gpu
# plugin: torch_gpu's first part alone (the plugin the later steps load model.pt with), for a call
# that runs model_gpu or serve_gpu without torch_gpu.
step plugin 150 "TORCH_GPU_PLUGIN_ONLY=1 torch_gpu"
plugin_from_torch_gpu
step model_gpu 120 model_gpu
step serve_gpu 240 serve_gpu
step noise_scale 90 noise_scale
# The BLAS pool's threads and denormals (docs/benchmarks.md, "The BLAS pool's threads") with the
# device's 16 cores: troupe's pool as found at main and restarted, against PyTorch's.
step blas_pool 60 "TORCH_PYTHON=$py bash bench/nn/blas_pool.sh $build $(nproc)"
step gpu_tests 240 gpu_tests
step gpu_bench 60 gpu_bench
step deepfm 100 deepfm
step recovery 150 recovery
step allreduce 150 allreduce
step nccl 180 nccl
step control 120 control
step checkpoint 90 checkpoint
step predict 240 predict

{
  echo "device run: $(($(date +%s) - t_start)) s"
  cat "$out/steps.jsonl" 2>/dev/null
  for j in "$out"/gtest_*.json; do
    [[ -e "$j" ]] || continue
    python3 - "$j" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
runs = [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
skipped = [t for t in runs if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN"]
failed = [t for t in runs if t.get("failures")]
print(f'{sys.argv[1].rsplit("/", 1)[1]}: {len(runs)} tests, {len(failed)} failed, {len(skipped)} skipped'
      + "".join(f'\n  FAILED {t["classname"]}.{t["name"]}: {t["failures"][0]["failure"][:300]}' for t in failed))
EOF
  done
  grep -h '"bench"' "$out/results.jsonl" 2>/dev/null | cut -c1-400
} | tee "$summary"
exit "$failed"
