"""`troupe dashboard` over a running job, in headless Chromium (DevTools protocol): the job list shows
the job, the loss chart has points, the membership band marks a worker this test SIGKILLs, and the
page updates without a reload. Then the job's timeline holds what happened, a stop without the
token is refused, the stop with it goes through the control client and is answered (202) as soon
as the runner has it, and `troupe status` of the stopped job reads its timeline. A screenshot is
left in the build tree.
Usage: dashboard_browser_test.py TROUPE_BIN WORK_DIR ARTEFACT_DIR (exit 77: skipped)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_job import Browser, Dashboard, LiveJob, free_port, http, wait_for  # noqa: E402

DOM = {
    "row": "(() => { const r = document.querySelector('tr[data-job=\"dash\"]'); return r ? r.dataset.state : null; })()",
    "points": "Number(document.getElementById('chart-loss').dataset.points || 0)",
    "bad": "document.getElementById('chart-workers').dataset.bad || ''",
    "died": "document.querySelectorAll('#membership li.event-died[data-node=\"worker-1\"]').length",
    "updates": "Number(document.body.dataset.updates || 0)",
    "cpu": "[...document.querySelectorAll('#nodes tr')].filter(r => r.children[4].textContent !== '').length",
}


def check_browser(job, dash, browser, artefacts):
    browser.call("Page.enable")
    browser.call("Page.navigate", url=dash.url + "/?job=dash")
    assert wait_for("the job row", lambda: browser.eval(DOM["row"]) == "running", 30)
    assert wait_for("loss points", lambda: browser.eval(DOM["points"]) >= 2, 30)
    browser.eval("window.__loaded_once = 42")  # gone if the page reloads
    before = browser.eval(DOM["updates"])
    victim = job.pid("worker-1")
    assert victim > 0, "worker-1 is not running"
    os.kill(victim, signal.SIGKILL)
    print("SIGKILLed worker-1 (pid %d)" % victim)
    wait_for("worker-1 marked in the membership band", lambda: "worker-1" in browser.eval(DOM["bad"]).split(","), 30)
    assert browser.eval(DOM["died"]) >= 1, "no 'died' entry for worker-1 in the event list"
    assert browser.eval("window.__loaded_once") == 42, "the page reloaded"
    wait_for("the page to update", lambda: browser.eval(DOM["updates"]) > before, 10)
    wait_for("per-node CPU in the nodes table", lambda: browser.eval(DOM["cpu"]) >= 1, 20)
    job.wait_event("worker-1#1 joins", lambda e: e["kind"] == "join" and e["node"] == "worker-1#1", 30)
    shot = os.path.join(artefacts, "dashboard_browser_test.png")
    browser.screenshot(shot)
    print("screenshot:", shot, os.path.getsize(shot), "bytes")
    assert os.path.getsize(shot) > 10_000


def check_timeline(job):
    died = job.wait_event("worker-1#0 died", lambda e: e["kind"] == "died" and e["node"] == "worker-1#0", 10)
    assert "SIGKILL" in died["cause"], died
    job.wait_event("worker-1 replaced", lambda e: e["kind"] == "replaced" and e["node"] == "worker-1#1", 10)
    kinds = {e["kind"] for e in job.events()}
    for k in ("job_start", "join", "metrics", "node_stats", "checkpoint"):
        assert k in kinds, "no %s event in the timeline (kinds: %s)" % (k, sorted(kinds))
    m = [e for e in job.events() if e["kind"] == "metrics"][-1]
    assert m["samples"] > 0 and "loss" in m and m["workers_alive"] >= 1, m


def check_stop(job, dash, troupe):
    stop = dash.url + "/api/jobs/dash/stop"
    assert http(stop, "POST")[0] == 401, "a stop without the token went through"
    assert http(stop, "POST", {"Authorization": "Bearer wrong"})[0] == 401
    assert http(stop + "?token=../../token", "POST")[0] == 401
    with open(os.path.join(job.job_dir, "token")) as f:
        token = f.read().strip()
    # Answered once the runner has the request, not when the job has ended (it took ~5 s): the page
    # polls the job's state. 1 s is generous (tens of ms here); tight limits are for benchmarks.
    t0 = time.monotonic()
    status, body = http(stop, "POST", {"Authorization": "Bearer " + token}, timeout=30)
    took = time.monotonic() - t0
    assert status == 202 and json.loads(body).get("stop") == "requested", (status, body)
    assert took < 1.0, "the stop request took %.2f s" % took
    print("stop requested in %.3f s" % took)
    job.proc.wait(30)
    end = wait_for("job_end", lambda: next((e for e in job.events() if e["kind"] == "job_end"), None), 10)
    assert end["state"] == "stopped", end
    # The record names who stopped it (it said "troupe stop" for the dashboard's stop too).
    assert "the dashboard, for 127.0.0.1:" in end.get("cause", ""), end
    out = subprocess.run([troupe, "status", "--json", "--job-dir", job.job_dir], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert s["state"] == "stopped" and s["source"] == "events.jsonl", s
    assert any(e["kind"] == "died" and e["node"] == "worker-1#0" for e in s["recent"]), s["recent"]
    print("troupe status of the stopped job:", out.stdout[:300])


def check_network_listen(troupe, work):
    """Beyond loopback the dashboard needs the cluster token: refused without one, and then every
    request must carry it."""
    env = {k: v for k, v in os.environ.items() if k not in ("TROUPE_TOKEN", "TROUPE_CLUSTER_TOKEN")}
    out = subprocess.run([troupe, "dashboard", "--root", work, "--listen", "0.0.0.0:0"], env=env,
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 2 and "token" in out.stderr, (out.returncode, out.stderr)
    port = free_port()
    env["TROUPE_CLUSTER_TOKEN"] = "cluster-secret"
    p = subprocess.Popen([troupe, "dashboard", "--root", work, "--listen", "0.0.0.0:%d" % port], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = "http://127.0.0.1:%d/api/jobs" % port
        wait_for("the open dashboard", lambda: http(url)[0] == 401, 10)
        assert http(url, headers={"Authorization": "Bearer cluster-secret"})[0] == 200
        assert http(url + "?token=cluster-secret")[0] == 200
        assert http("http://127.0.0.1:%d/" % port)[0] == 200, "the page holds no data: served to anyone"
    finally:
        p.terminate()
        p.wait(10)


def main():
    troupe, work, artefacts = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(artefacts, exist_ok=True)
    browser = Browser(work)
    job = LiveJob(troupe, work, "dash")
    dash = None
    try:
        job.wait_event("worker-1 joins", lambda e: e["kind"] == "join" and e["node"].startswith("worker-1#"), 60)
        dash = Dashboard(troupe, os.path.join(work, "jobs"), work)
        check_browser(job, dash, browser, artefacts)
        check_timeline(job)
        check_stop(job, dash, troupe)
        check_network_listen(troupe, work)
        print("OK")
    except AssertionError:
        print(job.log_tail())
        raise
    finally:
        browser.close()
        if dash:
            dash.close()
        job.stop()


if __name__ == "__main__":
    main()
