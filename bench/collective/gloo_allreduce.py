"""Peer for allreduce_bench: torch.distributed allreduce with the gloo backend on loopback.
Usage: /usr/bin/python3 gloo_allreduce.py RANKS MB ITERS  -> one JSON line (same fields)."""
import os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gloo_rank import result, timed_allreduces  # noqa: E402


def run(rank, world, mb, iters, port, q):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    nbytes, med, _ = timed_allreduces(world, mb, iters)
    if rank == 0:
        q.put((nbytes, med))
    dist.destroy_process_group()


if __name__ == "__main__":
    world, mb, iters = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    port = 29500 + os.getpid() % 1000
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, mb, iters, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    nbytes, med = q.get()
    for p in procs:
        p.join()
    print(result("gloo_allreduce", world, nbytes, iters, med))
