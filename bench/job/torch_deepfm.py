"""The PyTorch peer of bench/job: DeepFM trained in one process on the records troupe prepared
(exported by export_records as raw little-endian arrays). Same model as troupe's `deepfm`:
linear part (one zero-initialised weight per id, summed, + bias via the deep tower), FM
second-order term, deep tower (flattened embeddings -> hidden dense+ReLU -> 1), logits summed;
embeddings N(0, embedding_scale), dense layers Glorot-uniform, Adam(eps 1e-7), BCE loss.
Usage: torch_deepfm.py TRAIN_PREFIX TEST_PREFIX --epochs E --batch B --lr LR --dim D --hidden 64,32
Prints one JSON line."""
import argparse
import json
import time

import numpy as np
import torch


def load(prefix):
    meta = json.load(open(prefix + ".json"))
    rows, fields = meta["rows"], meta["fields"]
    labels = np.fromfile(prefix + ".labels.f32", dtype="<f4")
    sparse = np.fromfile(prefix + ".sparse.u64", dtype="<u8").reshape(rows, fields)
    assert labels.shape[0] == rows and meta["dense_dim"] == 0, "dense features are not supported here"
    return torch.from_numpy(sparse.astype(np.int64)), torch.from_numpy(labels.copy()), meta


class DeepFM(torch.nn.Module):
    def __init__(self, num_ids, fields, dim, hidden, scale):
        super().__init__()
        self.linear = torch.nn.Embedding(num_ids, 1)
        torch.nn.init.zeros_(self.linear.weight)
        self.emb = torch.nn.Embedding(num_ids, dim)
        torch.nn.init.normal_(self.emb.weight, std=scale)
        layers, width = [], fields * dim
        for h in hidden:
            lin = torch.nn.Linear(width, h)
            torch.nn.init.xavier_uniform_(lin.weight)
            torch.nn.init.zeros_(lin.bias)
            layers += [lin, torch.nn.ReLU()]
            width = h
        out = torch.nn.Linear(width, 1)
        torch.nn.init.xavier_uniform_(out.weight)
        torch.nn.init.zeros_(out.bias)
        self.deep = torch.nn.Sequential(*layers, out)

    def forward(self, ids):
        v = self.emb(ids)  # [B, F, D]
        linear = self.linear(ids).sum(dim=(1, 2))
        fm = 0.5 * (v.sum(1).pow(2) - v.pow(2).sum(1)).sum(1)
        deep = self.deep(v.flatten(1)).squeeze(1)
        return linear + fm + deep


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    s, y = scores[order], labels[order]
    # average ranks of tied scores
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    ranks = np.repeat(first + (counts + 1) / 2.0, counts)
    pos = y >= 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("train")
    ap.add_argument("test")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.005)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--hidden", default="64,32")
    ap.add_argument("--scale", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr, meta = load(a.train)
    xte, yte, _ = load(a.test)
    num_ids = meta["fields"] * meta["buckets_per_field"]
    model = DeepFM(num_ids, meta["fields"], a.dim, [int(h) for h in a.hidden.split(",")], a.scale)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=1e-7)
    lossf = torch.nn.BCEWithLogitsLoss()
    n = xtr.shape[0]
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        perm = torch.randperm(n)
        for s in range(0, n, a.batch):
            idx = perm[s:s + a.batch]
            opt.zero_grad()
            loss = lossf(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
    train_s = time.perf_counter() - t0
    with torch.no_grad():
        scores = torch.sigmoid(torch.cat([model(xte[s:s + 8192]) for s in range(0, xte.shape[0], 8192)]))
    print(json.dumps({"bench": "job_e2e", "system": "pytorch", "threads": a.threads, "epochs": a.epochs,
                      "train_rows": n, "train_seconds": train_s, "samples_per_sec": a.epochs * n / train_s,
                      "test_rows": int(xte.shape[0]), "test_auc": auc(scores.numpy(), yte.numpy())}))


if __name__ == "__main__":
    main()
