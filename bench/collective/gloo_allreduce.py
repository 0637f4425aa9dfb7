"""Peer for allreduce_bench: torch.distributed allreduce with the gloo backend on loopback.
Usage: /usr/bin/python3 gloo_allreduce.py RANKS MB ITERS  -> one JSON line (same fields)."""
import json, os, sys, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, mb, iters, port, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n = int(mb * (1 << 20) / 4)
    t = torch.ones(n, dtype=torch.float32)
    bar = torch.zeros(world)
    times = []
    for it in range(iters + 2):
        dist.all_reduce(bar)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        if it >= 2:
            times.append(dt)
        t.fill_(1.0)
    if rank == 0:
        times.sort()
        q.put(times[len(times) // 2])
    dist.destroy_process_group()


if __name__ == "__main__":
    world, mb, iters = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, mb, iters, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    med = q.get()
    for p in procs:
        p.join()
    nbytes = int(mb * (1 << 20) / 4) * 4
    algbw = nbytes / med / 1e9
    print(json.dumps({"bench": "gloo_allreduce", "ranks": world, "bytes": nbytes, "iters": iters,
                      "median_s": round(med, 6), "algbw_GBps": round(algbw, 3),
                      "busbw_GBps": round(algbw * 2 * (world - 1) / world, 3)}))
