"""One rank of torch.distributed allreduce (gloo) for runs across hosts (scripts/hosts.sh).
Usage: /usr/bin/python3 gloo_rank.py RANK WORLD MASTER_ADDR PORT MB ITERS
Rank 0 prints one JSON line with the same fields as allreduce_tcp_rank. gloo_allreduce.py (one
host) times with the same function."""
import json, os, resource, sys, time
import torch
import torch.distributed as dist


def timed_allreduces(world, mb, iters):
    """Median seconds of `iters` allreduces of MB megabytes, each after a barrier allreduce."""
    n = int(mb * (1 << 20) / 4)
    t = torch.ones(n, dtype=torch.float32)
    bar = torch.zeros(world)
    times = []
    for it in range(iters + 2):
        if it == 2:
            cpu0 = cpu_used()
        dist.all_reduce(bar)
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        if it >= 2:
            times.append(dt)
        t.fill_(1.0)
    cpu1 = cpu_used()
    times.sort()
    return n * 4, times[len(times) // 2], [(b - a) / iters for a, b in zip(cpu0, cpu1)]


def cpu_used():
    """CPU seconds (user + system, all threads), voluntary context switches, and seconds the threads
    were runnable but waited for a core (/proc/self/task/*/schedstat) of this process."""
    u = resource.getrusage(resource.RUSAGE_SELF)
    runq = 0.0
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/schedstat") as f:
                runq += int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return u.ru_utime + u.ru_stime, u.ru_nvcsw, runq


def result(bench, world, nbytes, iters, med, cpu=None):
    algbw = nbytes / med / 1e9
    extra = {} if cpu is None else {"cpu_s_per_op": round(cpu[0], 6), "runq_s_per_op": round(cpu[2], 6),
                                    "vcsw_per_op": round(cpu[1])}
    return json.dumps({"bench": bench, "ranks": world, "bytes": nbytes, "iters": iters, "median_s": round(med, 6),
                       **extra, "algbw_GBps": round(algbw, 3), "busbw_GBps": round(algbw * 2 * (world - 1) / world, 3)})


if __name__ == "__main__":
    rank, world, addr, port, mb, iters = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]),
                                          float(sys.argv[5]), int(sys.argv[6]))
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    nbytes, med, cpu = timed_allreduces(world, mb, iters)
    if rank == 0:
        print(result("gloo_allreduce_hosts", world, nbytes, iters, med, cpu), flush=True)
    dist.destroy_process_group()
