"""The dashboard page in headless Chromium over job directories written by hand (no job runs):
- markup in every string a job writes (events, nodes.json, result.json) is shown as text: no element
  is created from it and no script runs (the page holds the token that stops jobs);
- the loss reads with 4 significant digits, and the loss chart's x-axis labels do not overlap;
- a finished job's progress is its result's (1000/1000), not its last metrics sample's (991/1000);
- a job whose events file cannot be read lists with that error, beside the others.
Usage: dashboard_page_test.py TROUPE_BIN WORK_DIR ARTEFACT_DIR (exit 77: skipped, outside CI)."""
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_job import Browser, Dashboard, wait_for  # noqa: E402

XSS = '<img src=x onerror="window.__xss=(window.__xss||0)+1"><script>window.__xss=99</script>'


def write_events(d, events):
    with open(os.path.join(d, "events.jsonl"), "w") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")


def make_jobs(root):
    now = int(time.time() * 1000)
    evil = os.path.join(root, "evil")
    os.makedirs(os.path.join(evil, "logs"))
    events = [{"t_ms": now - 60_000, "kind": "job_start", "strategy": XSS, "workers": 2},
              {"t_ms": now - 59_000, "kind": "join", "node": "worker-0#0" + XSS, "epoch": 1},
              {"t_ms": now - 58_000, "kind": "died", "node": "worker-1#0", "cause": XSS}]
    for i in range(40):
        events.append({"t_ms": now - 50_000 + i * 1000, "kind": "metrics", "samples": 2_500_000 * (i + 1),
                       "samples_per_s": 51234.567 + i, "loss": 0.44365636132706227 - i * 1e-4 if i < 39 else 0.44365636132706227,
                       "tasks_todo": XSS, "tasks_doing": 1, "tasks_done": i, "epoch": XSS, "workers_alive": 2,
                       "batch": 128 if i < 20 else 240, "goodput": 8000.0 + 50 * i, "noise_scale": 300.0 + i,
                       "lr_factor": 1.0, "progress": float(i)})
    events.append({"t_ms": now - 1000, "kind": "checkpoint", "node": XSS, "task": XSS})
    write_events(evil, events)
    with open(os.path.join(evil, "nodes.json"), "w") as f:
        json.dump({"updated_ms": now, "nodes": [{"name": "worker-0", "incarnation": XSS, "role": XSS, "state": XSS,
                                                  "pid": XSS}]}, f)
    with open(os.path.join(evil, "logs", "worker-0.log"), "w") as f:
        f.write(XSS + "\n")
    done = os.path.join(root, "done")
    os.makedirs(done)
    write_events(done, [{"t_ms": now - 120_000, "kind": "job_start", "strategy": "async_ps", "workers": 2},
                        {"t_ms": now - 110_000, "kind": "metrics", "samples": 1000, "loss": 0.5, "workers_alive": 2,
                         "tasks_todo": 0, "tasks_doing": 9, "tasks_done": 991},
                        {"t_ms": now - 100_000, "kind": "job_end", "state": "finished"}])
    with open(os.path.join(done, "result.json"), "w") as f:
        json.dump({"status": "finished", "tasks_done": 1000, "tasks_failed": 0, "reason": XSS}, f)
    piped = os.path.join(root, "piped")
    os.makedirs(piped)
    os.mkfifo(os.path.join(piped, "events.jsonl"))


ROW = "(() => { const r = document.querySelector('tr[data-job=\"%s\"]'); return r ? [...r.children].map((c) => c.textContent) : null; })()"
TASKS = "Object.fromEntries([...document.querySelectorAll('#tasks tr')].map((r) => [r.children[0].textContent, r.children[1].textContent]))"
# Elements made from job data would be <img> or <script> inside the page's tables and lists.
INJECTED = "document.querySelectorAll('main img, main script, #jobs b, #tasks img').length"
# The loss chart's x-axis labels: for each pair of neighbours, the gap between their centres less
# half of each label's width (canvas pixels); negative: they overlap.
AXIS_GAPS = """(() => {
  const u = job.charts['chart-loss'], a = u.axes[0];
  if (!a._splits || !a._values) return null;
  u.ctx.save(); u.ctx.font = a.font[0];
  const ticks = a._splits.map((v, i) => ({ x: u.valToPos(v, 'x', true), w: u.ctx.measureText(String(a._values[i])).width }))
    .filter((t) => t.x >= 0 && t.x <= u.ctx.canvas.width);
  u.ctx.restore();
  const gaps = [];
  for (let i = 1; i < ticks.length; i++) gaps.push(ticks[i].x - ticks[i - 1].x - (ticks[i].w + ticks[i - 1].w) / 2);
  return { gaps, labels: a._values.map(String) };
})()"""


# The goodput chart's axes: the global batch on one of its own (it was drawn against goodput's, 240
# reading as "8k").
GOODPUT_AXES = """(() => {
  const u = job.charts['chart-goodput'];
  return u ? u.axes.map((a) => ({ scale: a.scale || 'y', labels: (a._values || []).map(String) })) : null;
})()"""


def main():
    troupe, work, artefacts = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    root = os.path.join(work, "jobs")
    os.makedirs(root)
    os.makedirs(artefacts, exist_ok=True)
    make_jobs(root)
    browser = Browser(work)
    dash = Dashboard(troupe, root, work)
    try:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=dash.url + "/?job=evil")
        wait_for("the evil job's tasks table", lambda: browser.eval(TASKS).get("samples") == "100000000", 30)
        wait_for("the membership list", lambda: browser.eval("document.querySelectorAll('#membership li').length") >= 3, 10)
        wait_for("the nodes table", lambda: browser.eval("document.querySelectorAll('#nodes tr').length") >= 1, 10)
        tasks = browser.eval(TASKS)
        assert tasks["TODO"] == XSS, "markup shown other than as its text: %r" % tasks
        assert tasks["loss"] == "0.4437", "loss shown as %r" % tasks["loss"]
        row = browser.eval(ROW % "evil")
        assert row and row[2] == XSS, row
        assert XSS in browser.eval("document.getElementById('membership').textContent")
        assert XSS in browser.eval("document.getElementById('nodes').textContent")
        assert browser.eval(INJECTED) == 0, "elements made from a job's strings"
        assert browser.eval("window.__xss") is None, "a job's events ran script in the page"
        axis = browser.eval(AXIS_GAPS)
        assert axis and len(axis["labels"]) >= 2, axis
        assert min(axis["gaps"]) > 0, "the loss chart's x-axis labels overlap: %s" % axis
        print("loss chart x labels %s, smallest gap %.0f px" % (axis["labels"], min(axis["gaps"])))
        wait_for("goodput points", lambda: browser.eval(
            "Number(document.getElementById('chart-goodput').dataset.points || 0)") >= 2, 10)
        axes = browser.eval(GOODPUT_AXES)
        batch = [a for a in axes or [] if a["scale"] == "batch"]
        assert batch and batch[0]["labels"], "no axis for the global batch: %s" % axes
        assert all(float(v) <= 300 for v in batch[0]["labels"]), "batch axis labels %s" % batch[0]["labels"]
        print("goodput chart axes %s" % axes)
        done = browser.eval(ROW % "done")
        assert done and done[1] == "finished" and done[4] == "1000/1000", done
        piped = browser.eval(ROW % "piped")
        assert piped and "FIFO" in piped[1], piped
        shot = os.path.join(artefacts, "dashboard_page_test.png")
        browser.screenshot(shot)
        assert browser.eval("window.__xss") is None
        print("OK")
    finally:
        browser.close()
        dash.close()


if __name__ == "__main__":
    main()
