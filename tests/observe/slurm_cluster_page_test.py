"""The dashboard's cluster page over two real Slurm jobs (scripts/slurm-cluster.sh: slurmctld, slurmdbd
and 4 slurmd in namespaced hosts): two small jobs with launcher = "slurm" run at once, `troupe dashboard`
over its root answers /api/cluster with each job's Slurm jobs (every id in its slurm_jobs file, each
worker with the 2 CPUs it asked for, its node named) and a utilisation in (0, 1]; headless Chromium
shows the stacked chart with points. Needs root; exit 77 (skipped) with the reason otherwise.
Usage: slurm_cluster_page_test.py TROUPE_BIN WORK_DIR ARTEFACT_DIR (WORK_DIR unused: the hosts see
/var/tmp, not this machine's /tmp)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_job import Browser, Dashboard, LiveJob, http, skip, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CLUSTER = """launcher = "slurm"
control_partition = "high"
worker_partition = "low"
control_host = "h1"
worker_cpus = 2"""


def cluster_answer(dash, ids):
    """/api/cluster once slurmdbd holds every recorded Slurm job (troupe job -> ids), ended."""
    def ready():
        status, body = http(dash.url + "/api/cluster")
        j = json.loads(body)
        # Ended, and with its name: slurmdbd may list a job as `allocation` for a while.
        done = {name: {a["slurm_id"] for a in j.get("jobs", {}).get(name, []) if a["end_ms"] > 0 and a["node"]}
                for name in ids}
        return j if status == 200 and j.get("slurm") and all(done[n] >= ids[n] for n in ids) else None
    # Seconds as a rule; slurmdbd has taken over a minute on a loaded machine (a CI run timed out at 60).
    return wait_for("sacct to list every Slurm job of the job, ended", ready, 180, 1.0)


def check_api(j, ids):
    for name in ids:
        check_job(j, name, ids[name])
    s = j["series"]
    assert sorted(s["jobs"]) == sorted(ids) and len(s["t_ms"]) >= 2, s
    assert 0 < max(s["utilisation"]) <= 1, s["utilisation"]
    assert 0 < j["utilisation_avg"] <= 1, j["utilisation_avg"]
    assert all(c[-1] == 0 for c in s["cpus"]), "nothing held after the jobs ended"
    print("cluster: %d CPUs, %d Slurm jobs, average utilisation %.3f, at most %d CPUs held"
          % (j["total_cpus"], sum(len(v) for v in j["jobs"].values()), j["utilisation_avg"],
             max(map(sum, zip(*s["cpus"])))))


def check_job(j, name, ids):
    allocs = j["jobs"][name]
    sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True, text=True, check=True).stdout
    total = sum(int(c) for n, c in dict(line.split() for line in sinfo.splitlines()).items())
    assert j["total_cpus"] == total, "total_cpus %s, sinfo says %d" % (j["total_cpus"], total)
    assert {a["slurm_id"] for a in allocs} == ids, "allocations %s, slurm_jobs %s" % (allocs, ids)
    workers = [a for a in allocs if a["node"].startswith("worker-")]
    assert len(workers) >= 2 and all(a["cpus"] == 2 for a in workers), "%s: %s (ids %s)" % (name, allocs, ids)
    assert {"master", "ps-0"} <= {a["node"] for a in allocs}, "nodes: %s" % allocs


def check_page(dash, work, artefacts):
    browser = Browser(work)
    try:
        browser.call("Page.enable")
        browser.call("Page.navigate", url=dash.url + "/#cluster")
        points = "Number(document.getElementById('chart-cluster')?.dataset.points || 0)"
        wait_for("points in the cluster chart", lambda: browser.eval(points) >= 2, 30)
        shown = browser.eval("document.getElementById('chart-cluster').dataset.jobs").split(",")
        assert sorted(shown) == ["cpage", "cpage2"], shown
        assert browser.eval("document.querySelectorAll('#allocations tr').length") >= 8
        assert browser.eval("document.getElementById('job-list').hidden") is True
        shot = os.path.join(artefacts, "slurm_cluster_page_test.png")
        browser.screenshot(shot)
        print("screenshot:", shot, os.path.getsize(shot), "bytes")
    finally:
        browser.close()


def main():
    troupe, artefacts = sys.argv[1], sys.argv[3]
    if os.getuid() != 0:
        skip("the Slurm test cluster needs root (namespaces, daemons)")
    os.environ["TMPDIR"] = "/var/tmp"  # the dataset cache, seen by the hosts
    work = "/var/tmp/troupe-slurm-dash-%d" % os.getpid()
    os.makedirs(work)
    os.makedirs(artefacts, exist_ok=True)
    up = subprocess.run(["bash", os.path.join(HERE, "../../scripts/slurm-cluster.sh"), "up"],
                        capture_output=True, text=True)
    if up.returncode != 0:
        raise SystemExit("slurm-cluster.sh up failed:\n" + up.stdout[-2000:] + up.stderr[-2000:])
    # Two jobs at once, so the chart stacks: each master and PS shard takes 1 CPU of h1 (4 CPUs).
    jobs = [LiveJob(troupe, work, name, workers=2, rows=200_000, epochs=1, cluster=CLUSTER)
            for name in ("cpage", "cpage2")]
    dash = None
    try:
        ids = {}
        for job in jobs:
            rc = job.proc.wait(300)
            assert rc == 0, "%s failed (rc %d):\n%s" % (job.name, rc, job.log_tail())
            with open(os.path.join(job.job_dir, "slurm_jobs")) as f:
                ids[job.name] = {line.strip() for line in f if line.strip()}
            assert len(ids[job.name]) >= 4, "slurm_jobs: %s" % ids
        dash = Dashboard(troupe, os.path.join(work, "jobs"), work)
        check_api(cluster_answer(dash, ids), ids)
        check_page(dash, work, artefacts)
        print("OK")
    finally:
        if dash:
            dash.close()
        for job in jobs:
            job.stop()
        subprocess.run("squeue -h -o '%i %j' | awk '$2 ~ /^troupe-cpage2?:/ {print $1}' | xargs -r scancel",
                       shell=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
