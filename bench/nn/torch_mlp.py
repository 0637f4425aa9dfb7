"""PyTorch peer of bench/nn/mlp_bench.cpp: the same MLP 784-256-128-10, batch, optimizer
(SGD, momentum 0.9) and data layout, on one thread; with --model cnn, the CNN of
examples/fashion_mnist_cnn.toml (Adam 1e-3). Prints one JSON line.

Run with Debian's python (/usr/bin/python3, python3-torch 1.13)."""
import argparse
import json
import os
import time

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--rounds", type=int, default=5)
args = parser.parse_args()

torch.set_num_threads(1)
torch.manual_seed(1)
rows = args.batch * 100
if args.model == "cnn":
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(),
        torch.nn.BatchNorm2d(64), torch.nn.MaxPool2d(2), torch.nn.Dropout(0.25), torch.nn.Flatten(),
        torch.nn.Linear(64 * 12 * 12, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    x = torch.rand(rows, 1, 28, 28)
else:
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(rows, 784)
y = torch.randint(0, 10, (rows,))


def step(i):
    first = (i * args.batch) % rows
    xb, yb = x[first:first + args.batch], y[first:first + args.batch]
    loss = F.cross_entropy(model(xb), yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for i in range(50):
    step(i)
# Best round by wall time and by this thread's CPU time (see mlp_bench.cpp).
best_wall, best_cpu = 0.0, 0.0
for r in range(args.rounds):
    t0, c0 = time.perf_counter(), time.thread_time()
    for i in range(args.steps):
        step(i)
    best_wall = max(best_wall, args.steps * args.batch / (time.perf_counter() - t0))
    best_cpu = max(best_cpu, args.steps * args.batch / (time.thread_time() - c0))
print(json.dumps({"bench": f"torch_{args.model}_train", "peer": "pytorch " + torch.__version__, "batch": args.batch,
                  "threads": torch.get_num_threads(), "samples_per_s": best_cpu, "samples_per_wall_s": best_wall,
                  "openblas_threads_env": os.environ.get("OPENBLAS_NUM_THREADS", "")}))
