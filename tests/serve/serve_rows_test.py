#!/usr/bin/env python3
"""The troupe_rows extension (docs/serving.md, "Raw rows"): a model trained on a CSV answers rows
given as that CSV's columns, encoded as the import encoded them.

  troupe data import csv   a CSV as users have it (a string label, a categorical text column,
                           standardized numbers, missing cells filled with the column's mean)
  troupe run               a small MLP with an embedding for the text column (async PS); and another
                           of rows imported with other statistics
  troupe predict           the same rows as a CSV file (the reference: the import's own encoding)
  troupe serve             POST /v2/models/<name>/rows with the rows as JSON objects

The served probabilities equal predict's (to its 7 printed digits) row by row; a row whose number
comes as text, a null cell, a column the model does not use and the label are accepted; a null
cell is answered as its column's fill value of model.json given as a number; a missing
column, a value that is not a number, a row that is not an object, and a model without columns are
400s naming the problem.

  serve_rows_test.py TROUPE WORK_DIR
"""
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import Server, TestFailure, fail, log  # noqa: E402

JOB = """
[job]
name = "people"
strategy = "async_ps"
workers = 2
[ps]
shards = 1
[model]
type = "mlp"
hidden = [16]
[train]
epochs = 3
batch_size = 32
optimizer = "adam"
learning_rate = 0.01
seed = 1
[data]
source = "store"
train = "{store}/train"
test = "{store}/test"
"""

CITIES = ["Paris", "New York, NY", "São Paulo", "Zürich", ""]


def write_people(path, rows, seed, older=0):
    """`older`: years added to every age and income doubled (another import's statistics)."""
    rng = random.Random(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Age", "Annual Income", "City", "Bought"])
        for _ in range(rows):
            age, income, city = rng.randint(18, 80), rng.gauss(50000, 20000), rng.choice(CITIES)
            if older:
                age, income = age + older, income * 2
            bought = "yes" if (income > 55000 and age < 50) or city == "Zürich" else "no"
            w.writerow([age, "" if rng.random() < 0.03 else f"{income:.2f}", city, bought])


def run(args, **kw):
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(args)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


def train(troupe, work, root, name, older=0):
    """A model of people rows (`older`: another import's statistics); its directory."""
    write_people(os.path.join(work, f"{name}.csv"), 3000, 1, older)
    store = os.path.join(work, f"store-{name}")
    run([troupe, "data", "import", "csv", os.path.join(work, f"{name}.csv"), "--out", store, "--label", "Bought",
         "--sparse", "City", "--test-fraction", "0.2", "--missing", "mean", "--standardize"])
    with open(os.path.join(work, f"{name}.toml"), "w") as f:
        f.write(JOB.format(store=store))
    r = run([troupe, "run", os.path.join(work, f"{name}.toml"), "--set", f"job.root={root}", "--job-id", name,
             "--quiet"])
    return json.loads(r.stdout.strip().splitlines()[-1])["model_dir"]


def swapped_while_queued(troupe, work, root, model_dir):
    """Rows queued when the server swaps to a model imported with other statistics are encoded as the
    model that answers them encodes rows: they were encoded by the old one's encoder and answered by
    the new model (a 200 whose probabilities were neither model's). The request waits in the queue
    (max_delay_us 8 s: a batch waits for company) while `troupe serve reload` swaps."""
    other = train(troupe, work, root, "older", older=30)
    rows = [{"Age": 40 + k, "Annual Income": 60000.0 + 1000 * k, "City": "Paris"} for k in range(4)]
    srv = Server(troupe, model_dir, root, "swap", "--max-delay-us", "8000000", "--max-batch", "64")
    try:
        srv.wait_ready()
        url = f"{srv.url}/v2/models/swap/rows"

        def full(timeout=20):  # 64 rows fill a batch: it goes at once
            a = requests.post(url, json={"rows": rows * 16, "outputs": [{"name": "probabilities"}]}, timeout=timeout)
            if a.status_code != 200:
                fail(f"{a.status_code} {a.text}")
            return a.json()["model_version"], a.json()["outputs"][0]["data"][:4]

        old_version, old = full()
        queued = {}
        t = threading.Thread(target=lambda: queued.update(
            r=requests.post(url, json={"rows": rows, "outputs": [{"name": "probabilities"}]}, timeout=60)))
        t.start()
        time.sleep(0.5)
        run([troupe, "serve", "reload", "--root", root, "--name", "swap", other])
        new_version, new = full()
        t.join()
        a = queued["r"]
        if a.status_code != 200:
            fail(f"the queued rows: {a.status_code} {a.text}")
        got = a.json()["outputs"][0]["data"]
        if new_version == old_version or max(abs(x - y) for x, y in zip(old, new)) < 1e-3:
            fail(f"the two models answer alike ({old_version} {old}, {new_version} {new}): no test")
        if a.json()["model_version"] != new_version or max(abs(x - y) for x, y in zip(got, new)) > 1e-6:
            fail(f"rows queued across the swap: {a.json()['model_version']} {got}; the new model answers "
                 f"{new_version} {new}, the old {old_version} {old}")
        log(f"rows queued across a swap: encoded and answered by {new_version} ({got[0]:.4f}; the old "
            f"model {old[0]:.4f})")
    finally:
        srv.stop()


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = os.path.join(work, "jobs")
    model_dir = train(troupe, work, root, "p1")
    # New rows, the label column left out; the reference: troupe predict on them as a CSV file.
    write_people(os.path.join(work, "new.csv"), 40, 2)
    with open(os.path.join(work, "new.csv")) as f:
        rows = [dict(r) for r in csv.DictReader(f)]
    run([troupe, "predict", model_dir, "--data", os.path.join(work, "new.csv"), "--out",
         os.path.join(work, "predicted.csv"), "--workers", "1", "--root", root, "--quiet"])
    with open(os.path.join(work, "predicted.csv")) as f:
        want = [float(r["probability"]) for r in csv.DictReader(f)]
    srv = Server(troupe, model_dir, root, "people")
    try:
        srv.wait_ready()
        url = f"{srv.url}/v2/models/people/rows"
        meta = requests.get(f"{srv.url}/v2/models/people", timeout=5).json()
        if meta["troupe"].get("raw_rows") is not True:
            fail(f"the metadata does not offer raw rows: {meta}")
        # Numbers as numbers where they are (as a JSON client sends them), text otherwise; empty
        # cells as null; the label kept on half of them (ignored); a column the model does not use.
        body_rows = []
        for i, row in enumerate(rows):
            income = row["Annual Income"]
            out = {"Age": int(row["Age"]), "Annual Income": float(income) if income else None, "City": row["City"],
                   "Note": "unused"}
            if i % 2:
                out["Bought"] = row["Bought"]
            if i % 3 == 0:
                out["Age"] = row["Age"]  # a number's text
            body_rows.append(out)
        got = []
        for at in range(0, len(body_rows), 16):
            a = requests.post(url, json={"id": f"b{at}", "rows": body_rows[at:at + 16],
                                         "outputs": [{"name": "probabilities"}]}, timeout=10)
            if a.status_code != 200:
                fail(f"rows {at}..: {a.status_code} {a.text}")
            answer = a.json()
            if answer.get("id") != f"b{at}" or [o["name"] for o in answer["outputs"]] != ["probabilities"]:
                fail(f"answer {answer}")
            got += answer["outputs"][0]["data"]
        bad = [(k, g, w) for k, (g, w) in enumerate(zip(got, want)) if abs(g - w) > 1e-6 * max(1.0, abs(w))]
        if bad or len(got) != len(want):
            fail(f"served probabilities differ from troupe predict's: {bad[:5]} ({len(got)} vs {len(want)})")
        log(f"{len(got)} raw rows: the served probabilities equal troupe predict's on the same CSV rows")
        # --missing mean: a null cell reads as model.json's fill value of its column (the training
        # rows' mean), as if the client had sent that number.
        with open(os.path.join(model_dir, "model.json")) as f:
            columns = json.load(f)["columns"]
        fill = columns.get("fill", {}).get("Annual Income")
        if columns.get("missing") != "mean" or fill is None or not 40000 < fill < 60000:
            fail(f"model.json columns: missing {columns.get('missing')!r}, fill {columns.get('fill')!r}")
        gaps = [k for k, row in enumerate(body_rows) if row["Annual Income"] is None]
        if not gaps:
            fail("no row has a missing income (the data changed?)")
        filled = [dict(body_rows[k], **{"Annual Income": fill}) for k in gaps]
        a = requests.post(url, json={"rows": filled, "outputs": [{"name": "probabilities"}]}, timeout=10)
        if a.status_code != 200:
            fail(f"filled rows: {a.status_code} {a.text}")
        for k, g in zip(gaps, a.json()["outputs"][0]["data"]):
            if abs(g - got[k]) > 1e-6:
                fail(f"row {k}: null answered {got[k]}, the fill {fill} answered {g}")
        log(f"{len(gaps)} null incomes answered as the fill value {fill:.2f}")
        refused = [
            ({"rows": [{"Age": 30, "City": "Paris"}]}, "missing column 'Annual Income'"),
            # The cell's name, no position (it gave the training CSV's, which the client never saw).
            ({"rows": [{"Age": "thirty", "Annual Income": 1, "City": "Paris"}]},
             "rows[0]: column 'Age': 'thirty' is not a number"),
            ({"rows": [[30, 1, "Paris"]]}, "rows[0]: expected an object"),
            ({"rows": []}, "'rows': 0 rows"),
            ({"rows": [{"Age": {"x": 1}, "Annual Income": 1, "City": "Paris"}]}, "a number, a string or null"),
            ({"inputs": []}, "'rows' missing"),
        ]
        for body, words in refused:
            a = requests.post(url, json=body, timeout=10)
            if a.status_code != 400 or words not in a.json().get("error", ""):
                fail(f"{body}: {a.status_code} {a.text} (expected 400 naming {words!r})")
        a = requests.post(url, data=b"[" * 100000, timeout=10)
        if a.status_code != 400:
            fail(f"a deeply nested body: {a.status_code} {a.text}")
        log("bad rows: 400s naming the row, the column and the problem")
    finally:
        srv.stop()
    # A model whose data did not come from a CSV has no columns: its /rows says so.
    built_in = os.path.join(work, "built_in")
    shutil.copytree(model_dir, built_in)
    with open(os.path.join(built_in, "model.json")) as f:
        meta = json.load(f)
    meta.pop("columns", None)
    meta.pop("class_names", None)
    with open(os.path.join(built_in, "model.json"), "w") as f:
        json.dump(meta, f)
    srv = Server(troupe, built_in, root, "plain")
    try:
        srv.wait_ready()
        a = requests.post(f"{srv.url}/v2/models/plain/rows", json={"rows": [{"Age": 1}]}, timeout=10)
        if a.status_code != 400 or "has no columns" not in a.text:
            fail(f"a model without columns: {a.status_code} {a.text}")
        log("a model without columns: 400 saying so")
    finally:
        srv.stop()
    swapped_while_queued(troupe, work, root, model_dir)
    log("ok")


if __name__ == "__main__":
    try:
        main()
    except TestFailure:
        sys.exit(1)
