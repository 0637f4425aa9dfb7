"""A running job's /metrics, checked with the real tools: `promtool check metrics` passes on the live
output, and Debian's `prometheus` scrapes the job and returns its series through /api/v1/query.
Usage: prometheus_test.py TROUPE_BIN WORK_DIR (exit 77: skipped, with the reason printed)."""
import json
import os
import shutil
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_job import LiveJob, free_port, http, skip, wait_for  # noqa: E402


def trained(url):
    """The /metrics text once it counts trained samples and has a loss (the first loss window's: a
    scrape between the first samples and the window's end has none)."""
    status, body = http(url)
    lines = body.splitlines() if status == 200 else []
    if not any(ln.startswith("troupe_loss{") for ln in lines):
        return None
    for line in lines:
        if line.startswith("troupe_samples_total{") and float(line.split()[-1]) > 0:
            return body
    return None


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            skip(tool + " is not installed (scripts/install-deps.sh installs it)")
    shutil.rmtree(work, ignore_errors=True)
    job = LiveJob(troupe, work, "prom")
    prom = None
    try:
        addr = job.wait("metrics_address in nodes.json", lambda: job.nodes().get("metrics_address"), 30)
        url = "http://" + addr + "/metrics"
        # The series are there once the workers train (samples > 0) and a loss window ended.
        text = job.wait("samples and a loss on /metrics", lambda: trained(url), 60)
        check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True, capture_output=True)
        print("promtool check metrics:", check.returncode, check.stdout, check.stderr)
        assert check.returncode == 0, "promtool rejects the live /metrics"
        for family in ("troupe_samples_total", "troupe_tasks_total", "troupe_restarts_total",
                       "troupe_preemptions_total", "troupe_workers_alive", "troupe_membership_epoch",
                       "troupe_loss", "troupe_step_seconds_bucket", "troupe_recovery_seconds_bucket"):
            assert family in text, family + " missing from /metrics"
        assert http("http://" + addr + "/other")[0] == 404

        port = free_port()
        cfg = os.path.join(work, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: troupe\n    honor_labels: true\n"
                    "    static_configs:\n      - targets: ['%s']\n" % addr)
        prom_log = open(os.path.join(work, "prometheus.log"), "w")
        prom = subprocess.Popen(["prometheus", "--config.file=" + cfg, "--web.listen-address=127.0.0.1:%d" % port,
                                 "--storage.tsdb.path=" + os.path.join(work, "tsdb")],
                                stdout=prom_log, stderr=subprocess.STDOUT)
        api = "http://127.0.0.1:%d/api/v1/query?query=" % port

        def query(q):
            status, body = http(api + urllib.parse.quote(q))
            if status != 200:
                return None
            r = json.loads(body)["data"]["result"]
            return r or None

        series = wait_for("prometheus to scrape troupe_samples_total", lambda: query('troupe_samples_total{job="prom"}'), 60)
        print("prometheus returned:", json.dumps(series))
        labels = series[0]["metric"]
        assert labels["job"] == "prom" and labels["node"] == "master" and labels["role"] == "master", labels
        assert float(series[0]["value"][1]) > 0
        alive = wait_for("troupe_workers_alive", lambda: query('troupe_workers_alive{job="prom"}'), 30)
        assert float(alive[0]["value"][1]) >= 1, alive
        assert wait_for("the step-time histogram", lambda: query('troupe_step_seconds_count{job="prom"} > 0'), 30)
        print("OK: promtool passes and prometheus returns the job's series")
    except AssertionError:
        print(job.log_tail())
        raise
    finally:
        if prom:
            prom.terminate()
            prom.wait(10)
        job.stop()


if __name__ == "__main__":
    main()
