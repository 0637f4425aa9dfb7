"""PyTorch CUDA peer of bench/gpu/gpu_bench.cpp: the same models, batches, optimizers and step
(batch copied from host memory, forward, backward, loss read back with .item(), optimizer step),
best of several timed rounds. Prints JSON lines; without CUDA one line with the reason.
Usage: torch_gpu.py [--steps N] [--rounds R] [--fashion-mnist DIR]"""
import argparse
import gzip
import json
import os
import time

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=500)
parser.add_argument("--rounds", type=int, default=5)
parser.add_argument("--fashion-mnist", default="/usr/share/datasets/fashion-mnist")
args = parser.parse_args()

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(json.dumps({"bench": "torch_gpu_train", "skipped": "no torch: %s" % e}))
    raise SystemExit(0)
if not torch.cuda.is_available():
    print(json.dumps({"bench": "torch_gpu_train", "skipped": "torch %s has no CUDA device (built with CUDA: %s)"
                      % (torch.__version__, torch.version.cuda)}))
    raise SystemExit(0)
dev = torch.device("cuda:0")
torch.backends.cuda.matmul.allow_tf32 = False  # troupe's cuBLAS calls use plain FP32
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(1)


def load_fashion_mnist():
    for name in ("train-images-idx3-ubyte", "train-images-idx3-ubyte.gz"):
        path = os.path.join(args.fashion_mnist, name)
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                x = np.frombuffer(f.read()[16:], dtype=np.uint8).reshape(-1, 784).astype(np.float32) / 255.0
            lpath = path.replace("images-idx3", "labels-idx1")
            with opener(lpath, "rb") as f:
                y = np.frombuffer(f.read()[8:], dtype=np.uint8).astype(np.int64)
            return "fashion-mnist", torch.from_numpy(x), torch.from_numpy(y)
    g = torch.Generator().manual_seed(7)
    return "random 784-pixel images", torch.rand(60000, 784, generator=g), torch.randint(0, 10, (60000,), generator=g)


def timed(step, batches):
    for i in range(50):
        step(i % batches)
    best = 0.0
    i = 50
    for _ in range(args.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(i % batches)
            i += 1
        torch.cuda.synchronize()
        best = max(best, args.steps / (time.perf_counter() - t0))
    return best


def bench_mlp():
    source, x, y = load_fashion_mnist()
    x, y = x.pin_memory(), y.pin_memory()
    for batch in (64, 512):
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                    torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batches = x.shape[0] // batch

        def step(k):
            xb = x[k * batch:(k + 1) * batch].to(dev, non_blocking=True)
            yb = y[k * batch:(k + 1) * batch].to(dev, non_blocking=True)
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.item()

        rate = timed(step, batches) * batch
        print(json.dumps({"bench": "gpu_mlp_train", "impl": "pytorch " + torch.__version__, "batch": batch,
                          "data": source, "samples_per_s": rate}), flush=True)


class DeepFM(torch.nn.Module):
    """nn's deepfm: linear (per-id weight + dense layer), FM over the field embeddings, and an MLP
    on [flattened embeddings, dense features]; logits summed."""

    def __init__(self, ids, fields, dense_dim, dim, hidden):
        super().__init__()
        self.emb = torch.nn.Embedding(ids, dim)
        self.lin = torch.nn.Embedding(ids, 1)
        self.lin_dense = torch.nn.Linear(dense_dim, 1)
        layers, width = [], fields * dim + dense_dim
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        self.deep = torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))
        torch.nn.init.normal_(self.emb.weight, std=0.01)
        torch.nn.init.zeros_(self.lin.weight)

    def forward(self, ids, dense):
        v = self.emb(ids)
        s = v.sum(1)
        fm = 0.5 * (s * s - (v * v).sum(1)).sum(1, keepdim=True)
        linear = self.lin(ids).sum(1) + self.lin_dense(dense)
        deep = self.deep(torch.cat([v.flatten(1), dense], 1))
        return (linear + fm + deep).squeeze(1)


def bench_deepfm():
    rows, fields, vocab, dense_dim, batch = 200000, 26, 1000, 13, 512
    g = torch.Generator().manual_seed(3)
    # Zipf-like ids per field (as the synthetic-ctr generator), global ids field * vocab + rank.
    ranks = torch.from_numpy(np.minimum(np.random.default_rng(3).zipf(1.05, (rows, fields)) - 1, vocab - 1))
    ids = (ranks + torch.arange(fields) * vocab).pin_memory()
    dense = torch.randn(rows, dense_dim, generator=g).pin_memory()
    labels = (torch.rand(rows, generator=g) < 0.3).float().pin_memory()
    model = DeepFM(fields * vocab, fields, dense_dim, 8, [256, 128]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    batches = rows // batch

    def step(k):
        sl = slice(k * batch, (k + 1) * batch)
        logits = model(ids[sl].to(dev, non_blocking=True), dense[sl].to(dev, non_blocking=True))
        loss = F.binary_cross_entropy_with_logits(logits, labels[sl].to(dev, non_blocking=True))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    rate = timed(step, batches) * batch
    print(json.dumps({"bench": "gpu_deepfm_train", "impl": "pytorch " + torch.__version__, "batch": batch,
                      "data": "synthetic 26 fields x 1000 ids, 13 dense", "samples_per_s": rate}), flush=True)


print(json.dumps({"bench": "torch_device", "name": torch.cuda.get_device_name(0)}), flush=True)
bench_mlp()
bench_deepfm()
