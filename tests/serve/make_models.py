#!/usr/bin/env python3
"""Model directories as a job writes them (docs/model_format.md), made with plain PyTorch, for the
serving tests and benchmarks: model.pt (torch.jit.script) + model.json.

  make_models.py OUT_DIR [--bench]

writes OUT_DIR/<name>/ for
  mlp       multiclass, dense only: forward(dense) -> [rows, 5] logits, class names
  mlp_v2    the same shapes, other weights and a later created_unix_ms (a newer version to swap to)
  lr        binary, dense only: forward(dense) -> [rows, 1]
  deepfm    binary, sparse: forward(dense, ids) with the embedding rows inside (emb_ids, emb_rows)
  wide      multiclass with 7 classes: incompatible with mlp (a swap to it must be refused)
  broken    model.json fine, model.pt not TorchScript (a swap to it must be refused)
  slow      the mlp's shapes, ~120 ms a forward (backpressure, timeouts)
  slow_on_big  the mlp's shapes, fast, but ~4 s a forward on rows whose first value is over 100
and with --bench also
  fmnist    the Fashion-MNIST MLP 784-256-128-10 of the project's examples
Each directory also gets reference.json: inputs and the module's outputs computed here, so a test
compares what the server answers with what PyTorch computes (to 1e-5).
"""
import json
import os
import sys
import time

import torch
from torch import nn

torch.manual_seed(7)


class Mlp(nn.Module):
    def __init__(self, dense_dim: int, hidden: int, classes: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dense_dim, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.net(dense)


class Fmnist(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.net(dense)


class Slow(nn.Module):
    """The mlp's shapes, ~120 ms a forward: fills the queue in the tests of backpressure and timeouts."""

    def __init__(self, dense_dim: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(dense_dim, classes)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        # Work that grows with the rows' width as well as the interpreter's per-op cost: ~120 ms
        # on one core here, well past the tests' request_timeout_ms of 20 on a faster CPU too.
        x = dense.repeat(1, 100)
        for _ in range(20000):
            x = torch.tanh(x)
        return self.linear(x[:, : dense.shape[1]])


class SlowOnBig(nn.Module):
    """The mlp's shapes; fast, but ~4 s a forward on rows whose first value is over 100 (a forward slow
    for some inputs: it outlasts the serve tests' 1 s heartbeat timeout)."""

    def __init__(self, dense_dim: int, classes: int):
        super().__init__()
        self.linear = nn.Linear(dense_dim, classes)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if bool(dense[0, 0] > 100.0):
            x = dense.repeat(1, 100)
            for _ in range(1500000):
                x = torch.tanh(x)
            return self.linear(x[:, : dense.shape[1]])
        return self.linear(dense)


class Lr(nn.Module):
    def __init__(self, dense_dim: int):
        super().__init__()
        self.linear = nn.Linear(dense_dim, 1)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.linear(dense)


class DeepFm(nn.Module):
    """The contract's sparse model: the trained embedding rows inside (emb_ids sorted, emb_rows), an
    id the job never trained reads a zero row."""

    def __init__(self, dense_dim: int, fields: int, dim: int, trained_ids: torch.Tensor):
        super().__init__()
        self.register_buffer("emb_ids", trained_ids)
        self.emb_rows = nn.Parameter(torch.randn(trained_ids.numel(), dim) * 0.5)
        self.linear = nn.Linear(dense_dim, 1)
        self.deep = nn.Sequential(nn.Linear(fields * dim + dense_dim, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.searchsorted(self.emb_ids, ids).clamp(max=self.emb_ids.size(0) - 1)
        hit = self.emb_ids[pos] == ids
        emb = self.emb_rows[pos] * hit.unsqueeze(-1).to(self.emb_rows.dtype)
        s = emb.sum(dim=1)
        fm = 0.5 * (s * s - (emb * emb).sum(dim=1)).sum(dim=1, keepdim=True)
        return self.linear(dense) + fm + self.deep(torch.cat([emb.flatten(1), dense], dim=1))


def model_json(model, forward, dense_dim, fields, buckets, kind, classes, job, created, class_names=None,
               columns=None):
    j = {
        "format": "troupe-model", "format_version": 1, "troupe_version": "0.1.0",
        "model": model, "forward": forward,
        "dense_dim": dense_dim, "fields": fields, "buckets_per_field": buckets,
        "output": {"kind": kind, "classes": classes, "logits": 1 if kind == "binary" else classes},
        "job": {"id": job, "strategy": "allreduce", "epochs": 1, "step": 100, "from": "final"},
        "metrics": {"test_loss": 0.5, "test_accuracy": 0.8, "test_auc": None},
        "created_unix_ms": created,
    }
    if class_names:
        j["class_names"] = class_names
    if columns:
        j["columns"] = columns
    return j


def write(out, name, module, meta, inputs):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    scripted = torch.jit.script(module.eval())
    scripted.save(os.path.join(d, "model.pt"))
    with open(os.path.join(d, "model.json"), "w") as f:
        json.dump(meta, f, indent=2)
    with torch.no_grad():
        logits = scripted(*inputs)
    if logits.dim() == 1:
        logits = logits.unsqueeze(1)
    probs = torch.sigmoid(logits) if meta["output"]["kind"] == "binary" else torch.softmax(logits, dim=1)
    ref = {"dense": inputs[0].tolist(), "logits": logits.tolist(), "probabilities": probs.tolist()}
    if len(inputs) > 1:
        ref["ids"] = inputs[1].tolist()
    if meta["output"]["kind"] == "multiclass":
        ref["class_ids"] = logits.argmax(dim=1).tolist()
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)


def main():
    out = sys.argv[1]
    bench = "--bench" in sys.argv
    now = int(time.time() * 1000)
    rows = 9
    names = ["tee", "trouser", "pullover", "dress", "coat"]
    dense = torch.randn(rows, 12)
    write(out, "mlp", Mlp(12, 32, 5), model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 5, "job-mlp-1", now - 2000,
                                               class_names=names), [dense])
    write(out, "mlp_v2", Mlp(12, 32, 5),
          model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 5, "job-mlp-2", now - 1000, class_names=names), [dense])
    columns = {"label": "clicked", "dense": ["age", "income", "d2", "d3", "d4", "d5"], "sparse": [],
               "delimiter": ",", "hash": "troupe-category-v1", "missing": "zero",
               "standardize": {"income": {"mean": 50000.0, "std": 20000.0}}}
    write(out, "lr", Lr(6), model_json("lr", ["dense"], 6, 0, 0, "binary", 2, "job-lr-1", now, columns=columns),
          [torch.randn(rows, 6)])
    fields, buckets = 3, 1000
    trained = torch.sort(torch.cat([torch.randperm(buckets)[:40] + f * buckets for f in range(fields)])).values
    # Every field's id in its own range [f * buckets, (f + 1) * buckets): trained ones where (row + field)
    # is even, others (zero rows) where it is odd.
    by_field = [trained[trained // buckets == f] for f in range(fields)]
    ids = torch.tensor([[by_field[f][(r * 7) % by_field[f].numel()].item() if (r + f) % 2 == 0
                         else f * buckets + (r * 31 + 17 * f) % buckets for f in range(fields)] for r in range(rows)],
                       dtype=torch.int64)
    write(out, "deepfm", DeepFm(4, fields, 4, trained),
          model_json("deepfm", ["dense", "ids"], 4, fields, buckets, "binary", 2, "job-deepfm-1", now),
          [torch.randn(rows, 4), ids])
    write(out, "wide", Mlp(12, 8, 7), model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 7, "job-wide-1", now),
          [dense])
    write(out, "slow", Slow(12, 5),
          model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 5, "job-slow-1", now, class_names=names), [dense[:2]])
    write(out, "slow_on_big", SlowOnBig(12, 5),
          model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 5, "job-slow-on-big-1", now, class_names=names),
          [dense[:2]])
    broken = os.path.join(out, "broken")
    os.makedirs(broken, exist_ok=True)
    with open(os.path.join(broken, "model.pt"), "wb") as f:
        f.write(b"not a torchscript archive")
    with open(os.path.join(broken, "model.json"), "w") as f:
        json.dump(model_json("mlp", ["dense"], 12, 0, 0, "multiclass", 5, "job-broken-1", now + 1000,
                             class_names=names), f)
    if bench:
        write(out, "fmnist", Fmnist(),
              model_json("mlp", ["dense"], 784, 0, 0, "multiclass", 10, "job-fmnist-1", now), [torch.rand(4, 784)])


if __name__ == "__main__":
    main()
