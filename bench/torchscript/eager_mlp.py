"""The peer of bench/torchscript/run.sh: the same MLP (784-256-128-10) trained by a plain eager
PyTorch loop in Python, one thread, Adam (troupe's epsilon), batch 64, on Fashion-MNIST, timed as
`troupe train --local` times itself: each epoch's training steps and then its evaluation on the
test set, cumulative seconds after each epoch. Prints one JSON line: samples/s over all epochs and
over the epochs after the first (warm: the first epoch carries first-iteration costs on both sides).
    eager_mlp.py [--epochs E] [--dir FASHION_MNIST_DIR]"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
from torch import nn


def read(root, images, labels):
    with gzip.open(f"{root}/{images}") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(f"{root}/{labels}") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x, y = read(a.dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")
    tx, ty = read(a.dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(m.parameters(), lr=0.001, eps=1e-7)
    seconds, acc = [], 0.0
    start = time.perf_counter()
    for _ in range(a.epochs):
        order = torch.randperm(len(y))
        for s in range(0, len(y), 64):
            i = order[s:s + 64]
            loss = nn.functional.cross_entropy(m(x[i]), y[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            acc = float((m(tx).argmax(1) == ty).float().mean())
        seconds.append(time.perf_counter() - start)
    out = {"peer": "eager PyTorch " + torch.__version__, "epochs": a.epochs, "samples_per_s": a.epochs * len(y) / seconds[-1],
           "seconds": seconds, "test_accuracy": acc}
    if a.epochs > 1:
        out["warm_samples_per_s"] = (a.epochs - 1) * len(y) / (seconds[-1] - seconds[0])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
