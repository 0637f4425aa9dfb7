"""Checks an exported model directory the way a user would use it: plain PyTorch, no troupe.

    check_model.py MODEL_DIR TEST_PREFIX RESULT_JSON [--tolerance T] [--idx-images FILE] [--criteo-tsv FILE]

Loads MODEL_DIR/model.pt with torch.jit.load, runs it on the test records (TEST_PREFIX: a store
written out by bench/job/export_records), and compares its loss, accuracy and AUC on them with the
test_loss, test_accuracy and test_auc troupe's own evaluation wrote in RESULT_JSON. Prints one JSON
line with both; exits 1 when they differ by more than T (loss and AUC; accuracy by more than one
row in T * rows, at least one row: a logit a rounding away from 0 may flip).

The raw examples the test records came from, turned into the module's inputs by model.json's `input`
rules (docs/model_format.md), add "raw_rows_match": whether they equal the test records bit for bit
(a mismatch exits 1):
--idx-images FILE  a Fashion-MNIST idx3 images file (gzipped or not): its first images' bytes times
                   dense_scale, in float32;
--criteo-tsv FILE  the Criteo TSV file the test store was imported from: log(1 + x) of the positive
                   integers, the categoricals hashed (python3-xxhash) into ids.
"""
import argparse
import gzip
import json
import math
import sys

import numpy as np
import torch


def load(prefix):
    meta = json.load(open(prefix + ".json"))
    rows, fields, dd = meta["rows"], meta["fields"], meta["dense_dim"]
    labels = np.fromfile(prefix + ".labels.f32", dtype=np.float32)
    dense = (np.fromfile(prefix + ".dense.f32", dtype=np.float32).reshape(rows, dd) if dd
             else np.zeros((rows, 0), np.float32))
    ids = (np.fromfile(prefix + ".sparse.u64", dtype=np.uint64).reshape(rows, fields).astype(np.int64) if fields
           else None)
    return torch.from_numpy(dense), (torch.from_numpy(ids) if ids is not None else None), torch.from_numpy(labels)


def raw_images(path, rows, meta):
    """The first `rows` images of an idx3 file, as model.json's `input` says to read them."""
    data = (gzip.open if path.endswith(".gz") else open)(path, "rb").read()
    magic, count, h, w = np.frombuffer(data[:16], dtype=">u4")
    assert magic == 0x803, "not an idx3 images file: " + path
    pixels = np.frombuffer(data[16:16 + rows * h * w], dtype=np.uint8).reshape(rows, h * w)
    return pixels.astype(np.float32) * np.float32(meta["input"]["dense_scale"])


def criteo_rows(path, rows, meta):
    """The first `rows` lines of a Criteo TSV file as model.json's `input` says to read them."""
    import xxhash  # Debian's python3-xxhash
    buckets = meta["buckets_per_field"]
    dense = np.zeros((rows, 13), np.float32)
    ids = np.zeros((rows, 26), np.int64)
    with open(path) as f:
        for r, line in zip(range(rows), f):
            cols = line.rstrip("\n").split("\t")
            for i, c in enumerate(cols[1:14]):
                x = float(int(c)) if c else 0.0
                dense[r, i] = np.float32(math.log1p(x) if x > 0 else x)
            for fld, c in enumerate(cols[14:40]):
                local = 0 if c == "" else 1 + xxhash.xxh64(c.encode("utf-8"), seed=fld).intdigest() % (buckets - 1)
                ids[r, fld] = fld * buckets + local
    return dense, ids


def auc(scores, labels):
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / max(1, n_pos * n_neg))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("test")
    p.add_argument("result")
    p.add_argument("--tolerance", type=float, default=1e-5)
    p.add_argument("--device", default="cpu", help="cpu or cuda: where model.pt runs")
    p.add_argument("--idx-images", help="the test rows' Fashion-MNIST idx3 images file")
    p.add_argument("--criteo-tsv", help="the Criteo TSV file the test store was imported from")
    a = p.parse_args()
    meta = json.load(open(a.model_dir + "/model.json"))
    result = json.load(open(a.result))
    m = torch.jit.load(a.model_dir + "/model.pt", map_location=a.device)
    m.eval()
    dense, ids, labels = load(a.test)
    raw_match = None
    if a.idx_images:
        raw_match = bool(np.array_equal(raw_images(a.idx_images, len(labels), meta), dense.numpy()))
    if a.criteo_tsv:
        raw_dense, raw_ids = criteo_rows(a.criteo_tsv, len(labels), meta)
        raw_match = bool(np.array_equal(raw_dense, dense.numpy()) and np.array_equal(raw_ids, ids.numpy()))
    dense = dense.to(a.device)
    ids = ids.to(a.device) if ids is not None else None
    with torch.no_grad():
        logits = m(dense, ids) if meta["forward"] == ["dense", "ids"] else m(dense)
    logits = logits.float().cpu()
    out = {"rows": len(labels)}
    if meta["output"]["kind"] == "binary":
        logits = logits.reshape(-1)
        out["loss"] = float(torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.float()))
        probs = torch.sigmoid(logits).numpy()
        out["accuracy"] = float(((probs >= 0.5) == (labels.numpy() > 0.5)).mean())
        out["auc"] = auc(probs, labels.numpy())
    else:
        out["loss"] = float(torch.nn.functional.cross_entropy(logits, labels.long()))
        out["accuracy"] = float((logits.argmax(1) == labels.long()).float().mean())
    troupe = {"loss": result["test_loss"], "accuracy": result["test_accuracy"]}
    if "test_auc" in result and "auc" in out:
        troupe["auc"] = result["test_auc"]
    flips = max(1.0, a.tolerance * len(labels)) / len(labels)
    bad = [k for k in troupe
           if abs(out[k] - troupe[k]) > (flips + 1e-12 if k == "accuracy" else a.tolerance * max(1.0, abs(troupe[k])))]
    report = {"pytorch": out, "troupe": troupe, "torch_version": torch.__version__, "differ": bad}
    if raw_match is not None:
        report["raw_rows_match"] = raw_match
    print(json.dumps(report))
    return 1 if bad or raw_match is False else 0


if __name__ == "__main__":
    sys.exit(main())
