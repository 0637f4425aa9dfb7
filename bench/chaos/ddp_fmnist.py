# One TorchElastic worker of the chaos-efficiency benchmark's peer (bench/chaos/efficiency.py): the
# troupe job's MLP (784-256-128-10, Adam 0.001, batch 64 a rank) trained with gloo DDP on the same
# Fashion-MNIST records (bench/job/export_records' arrays at $DATA.train.*), epoch after epoch.
# Like a careful PyTorch user, rank 0 saves a checkpoint (model, optimizer, step) every
# $CKPT_STEPS steps (atomically), and every (re)started worker resumes from the latest one: torchrun
# restarts every worker when one dies, and the steps since that checkpoint are lost. Rank 0 writes
# the global step of the model it holds to $OUT/progress after every step; each rank its pid to
# $OUT/rank<r>.pid (the benchmark kills one).
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn


def load(prefix):
    meta = json.load(open(prefix + ".json"))
    x = np.fromfile(prefix + ".dense.f32", dtype=np.float32).reshape(meta["rows"], meta["dense_dim"])
    y = np.fromfile(prefix + ".labels.f32", dtype=np.float32).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    out = os.environ["OUT"]
    with open(f"{out}/rank{rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    step = 0
    ckpt = f"{out}/checkpoint.pt"
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = state["step"]
    ddp = nn.parallel.DistributedDataParallel(model)
    x, y = load(os.environ["DATA"] + ".train")
    every = int(os.environ.get("CKPT_STEPS", "500"))
    per_epoch = len(x) // (64 * world)
    while True:
        epoch, at = divmod(step, per_epoch)
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(len(x), generator=g)
        for i in range(at, per_epoch):
            idx = order[(i * world + rank) * 64:(i * world + rank + 1) * 64]
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x[idx]), y[idx]).backward()
            opt.step()
            step += 1
            if rank == 0:
                with open(f"{out}/progress.tmp", "w") as f:
                    f.write(str(step))
                os.replace(f"{out}/progress.tmp", f"{out}/progress")
                if step % every == 0:
                    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt + ".tmp")
                    os.replace(ckpt + ".tmp", ckpt)


if __name__ == "__main__":
    main()
