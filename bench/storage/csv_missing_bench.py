#!/usr/bin/env python3
"""`troupe data import csv` with missing cells: --missing zero against --missing mean (the training
rows' means, a statistics pass), with and without --standardize, and the same pipeline in pandas
(read_csv, the training rows' means filled in, standardized with their mean and deviation, to a
float32 array; it writes no store). CPU seconds (user + sys), median of --reps.

    csv_missing_bench.py TROUPE [--rows 1000000] [--cols 20] [--missing 0.05] [--reps 3] [--dir /tmp/csvbench]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import time

import numpy as np


def write_csv(path, rows, cols, missing):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(rows, cols)) * rng.uniform(0.1, 1e4, size=cols)
    gaps = rng.random((rows, cols)) < missing
    y = rng.integers(0, 2, size=rows)
    with open(path, "w") as f:
        f.write(",".join(f"x{i}" for i in range(cols)) + ",y\n")
        for r in range(rows):
            f.write(",".join("" if gaps[r, i] else f"{x[r, i]:.6g}" for i in range(cols)) + f",{y[r]}\n")


def cpu_of(args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def pandas_pipeline(path):
    import pandas as pd
    t = time.process_time()
    df = pd.read_csv(path)
    df.pop("y")
    test = np.random.default_rng(0).random(len(df)) < 0.2
    mean = df[~test].mean()
    df = df.fillna(mean)
    std = df[~test].std(ddof=0)
    ((df - mean) / std).to_numpy(dtype=np.float32)
    return time.process_time() - t


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--cols", type=int, default=20)
    p.add_argument("--missing", type=float, default=0.05)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--dir", default="/tmp/csvbench")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    csv = os.path.join(a.dir, "m.csv")
    write_csv(csv, a.rows, a.cols, a.missing)
    print(f"{csv}: {a.rows} rows x {a.cols} dense columns, {a.missing:.0%} cells missing, "
          f"{os.path.getsize(csv) / 1e6:.1f} MB; CPU seconds, median of {a.reps}")
    store = os.path.join(a.dir, "store")
    times = {}
    for _ in range(a.reps):  # interleaved
        for policy in ("zero", "mean"):
            for std in ([], ["--standardize"]):
                shutil.rmtree(store, ignore_errors=True)
                args = [a.troupe, "data", "import", "csv", csv, "--out", store, "--label", "y", "--missing", policy,
                        "--test-fraction", "0.2", *std]
                times.setdefault(f"troupe --missing {policy}{' --standardize' if std else ''}", []).append(
                    cpu_of(args))
        times.setdefault("pandas: read_csv, fillna(train mean), standardize", []).append(pandas_pipeline(csv))
    for name, ts in times.items():
        print(f"  {name:55s} {statistics.median(ts):6.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})")


if __name__ == "__main__":
    main()
