"""The PyTorch peer of the torchscript job tests: trains a saved TorchScript module in plain
PyTorch (a Python loop, torch.optim.Adam with troupe's epsilon) on the records troupe prepared
(exported by bench/job/export_records), then prints {"accuracy", "auc"} on the test records.

    reference.py MODULE.pt TRAIN_PREFIX TEST_PREFIX --epochs N --batch B --lr LR
                 [--embedding-dim D --embedding-scale S]

For data with sparse fields the module's emb input comes from an nn.Embedding over the ids (rows
N(0, scale), as troupe's tables), trained by the same optimizer.
"""
import argparse
import json

import numpy as np
import torch


def load(prefix):
    meta = json.load(open(prefix + ".json"))
    rows, fields, dd = meta["rows"], meta["fields"], meta["dense_dim"]
    labels = np.fromfile(prefix + ".labels.f32", dtype=np.float32)
    dense = np.fromfile(prefix + ".dense.f32", dtype=np.float32).reshape(rows, dd) if dd else np.zeros((rows, 0), np.float32)
    sparse = np.fromfile(prefix + ".sparse.u64", dtype=np.uint64).reshape(rows, fields) if fields else None
    return torch.from_numpy(dense), (torch.from_numpy(sparse.astype(np.int64)) if sparse is not None else None), torch.from_numpy(labels)


def auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(1, n_pos * n_neg))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("module")
    p.add_argument("train")
    p.add_argument("test")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--embedding-dim", type=int, default=8)
    p.add_argument("--embedding-scale", type=float, default=0.01)
    p.add_argument("--classes", type=int, default=10)
    a = p.parse_args()
    torch.manual_seed(1)
    torch.set_num_threads(1)
    m = torch.jit.load(a.module)
    dense, sparse, labels = load(a.train)
    tdense, tsparse, tlabels = load(a.test)
    params = list(m.parameters())
    emb = None
    if sparse is not None:
        ids, inverse = torch.unique(torch.cat([sparse.flatten(), tsparse.flatten()]), return_inverse=True)
        sparse = inverse[: sparse.numel()].reshape(sparse.shape)
        tsparse = inverse[sparse.numel():].reshape(tsparse.shape)
        emb = torch.nn.Embedding(len(ids), a.embedding_dim)
        torch.nn.init.normal_(emb.weight, 0.0, a.embedding_scale)
        params += list(emb.parameters())
    opt = torch.optim.Adam(params, lr=a.lr, eps=1e-7)
    binary = a.classes == 2
    m.train()
    for _ in range(a.epochs):
        order = torch.randperm(len(labels))
        for s in range(0, len(labels), a.batch):
            i = order[s:s + a.batch]
            args = [dense[i]] + ([emb(sparse[i])] if emb is not None else [])
            out = m(*args)
            if binary:
                loss = torch.nn.functional.binary_cross_entropy_with_logits(out.reshape(-1), labels[i])
            else:
                loss = torch.nn.functional.cross_entropy(out, labels[i].long())
            opt.zero_grad()
            loss.backward()
            opt.step()
    m.eval()
    with torch.no_grad():
        args = [tdense] + ([emb(tsparse)] if emb is not None else [])
        out = m(*args)
        if binary:
            prob = torch.sigmoid(out.reshape(-1)).numpy()
            y = tlabels.numpy()
            print(json.dumps({"accuracy": float(((prob >= 0.5) == (y > 0.5)).mean()), "auc": auc(prob, y)}))
        else:
            print(json.dumps({"accuracy": float((out.argmax(1) == tlabels.long()).float().mean())}))


if __name__ == "__main__":
    main()
