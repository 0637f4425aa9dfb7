# One TorchElastic worker: the same MLP as the troupe job (784-$HIDDEN-10, Adam, batch 64) trained with
# gloo DDP on random Fashion-MNIST-shaped data. Appends one wall-clock timestamp (us) per step to
# $STEP_DIR/rank<r>.steps and writes its pid to $STEP_DIR/rank<r>.pid (the benchmark kills it).
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.set_num_threads(1)
    d = os.environ["STEP_DIR"]
    with open(f"{d}/rank{rank}.pid", "w") as f:
        f.write(str(os.getpid()))
    torch.manual_seed(1)
    layers, width = [], 784
    for h in [int(x) for x in os.environ.get("HIDDEN", "256,128").split(",")]:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers, nn.Linear(width, 10)))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    x = torch.rand(64, 784)
    y = torch.randint(0, 10, (64,))
    steps = int(os.environ.get("STEPS", "3000"))
    log = open(f"{d}/rank{rank}.steps", "a", buffering=1)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        log.write(f"{time.time_ns() // 1000}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
