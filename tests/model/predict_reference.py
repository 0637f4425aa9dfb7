"""Checks `troupe predict` output against the exported model in plain PyTorch.

    predict_reference.py MODEL_DIR INPUT_CSV PREDICTIONS_CSV

The input CSV has dense columns only (model.json's columns.dense, standardized with its
columns.standardize, in any column order). Checks that the predictions have one line per input row,
numbered 2.. in input order, and that their probabilities equal model.pt's on the same rows to 1e-5.
Prints one JSON line; exits 1 on a mismatch.
"""
import csv
import json
import sys

import numpy as np
import torch


def main():
    model_dir, input_csv, pred_csv = sys.argv[1:4]
    meta = json.load(open(model_dir + "/model.json"))
    cols = meta["columns"]
    scale = cols.get("standardize", {})
    with open(input_csv) as f:
        r = csv.reader(f)
        header = next(r)
        at = [header.index(c) for c in cols["dense"]]
        rows = []
        for line in r:
            v = [float(line[i]) for i in at]
            for k, c in enumerate(cols["dense"]):
                if c in scale:
                    s = scale[c]
                    v[k] = (v[k] - s["mean"]) / s["std"] if s["std"] != 0 else v[k] - s["mean"]
            rows.append(v)
    dense = torch.tensor(np.array(rows, dtype=np.float64), dtype=torch.float32)
    m = torch.jit.load(model_dir + "/model.pt")
    m.eval()
    with torch.no_grad():
        logits = m(dense).float()
    probs = torch.sigmoid(logits.reshape(-1)) if meta["output"]["kind"] == "binary" else torch.softmax(logits, 1)
    with open(pred_csv) as f:
        r = csv.reader(f)
        pheader = next(r)
        lines, got = [], []
        for line in r:
            lines.append(int(line[0]))
            if meta["output"]["kind"] == "binary":
                got.append(float(line[1]))
            else:
                got.append([float(x) for x in line[2:]])
    out = {"rows": len(rows), "predicted": len(lines), "header": pheader}
    bad = []
    if lines != list(range(2, len(rows) + 2)):
        bad.append("lines are not 2..%d in order" % (len(rows) + 1))
    else:
        diff = float(np.abs(np.array(got, dtype=np.float64) - probs.numpy().astype(np.float64)).max())
        out["max_abs_diff"] = diff
        if diff > 1e-5:
            bad.append("probabilities differ by %g" % diff)
    out["problems"] = bad
    print(json.dumps(out))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
