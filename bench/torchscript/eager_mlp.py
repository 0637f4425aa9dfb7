"""The peer of bench/torchscript/run.sh: the same MLP (784-256-128-10) trained by a plain eager
PyTorch loop in Python, one thread, Adam (troupe's epsilon), batch 64, one epoch of Fashion-MNIST.
Prints one JSON line with samples/s (training steps only, as troupe's samples_per_s) and accuracy."""
import gzip
import json
import sys
import time

import numpy as np
import torch
from torch import nn

DIR = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"


def read(images, labels):
    with gzip.open(f"{DIR}/{images}") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(f"{DIR}/{labels}") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


torch.set_num_threads(1)
torch.manual_seed(1)
x, y = read("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
tx, ty = read("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(m.parameters(), lr=0.001, eps=1e-7)
order = torch.randperm(len(y))
start = time.perf_counter()
for s in range(0, len(y), 64):
    i = order[s:s + 64]
    loss = nn.functional.cross_entropy(m(x[i]), y[i])
    opt.zero_grad()
    loss.backward()
    opt.step()
secs = time.perf_counter() - start
with torch.no_grad():
    acc = float((m(tx).argmax(1) == ty).float().mean())
print(json.dumps({"peer": "eager PyTorch " + torch.__version__, "samples_per_s": len(y) / secs,
                  "wall_seconds": secs, "test_accuracy": acc}))
