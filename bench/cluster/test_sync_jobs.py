#!/usr/bin/python3
"""bench/cluster/sync_jobs.py and the mixed traces of experiments.py (issue #48): the sync jobs' sizes,
their job files (checked by `troupe config` when TROUPE_BIN names the binary), the same arrivals."""
import os
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiments  # noqa: E402
import sync_jobs  # noqa: E402


class SyncJobsTest(unittest.TestCase):
    def test_speedup_and_rows(self):
        self.assertEqual(sync_jobs.speedup(1, 0.45), 1.0)
        self.assertAlmostEqual(sync_jobs.speedup(8, 0.45), 1 / (0.125 + 0.45))
        # 40 s at 4 workers, R = 0.3: 40 x 600 x 1 / (0.25 + 0.3) rows.
        self.assertEqual(sync_jobs.rows_for(40, 4, 0.3), int(40 * 600 / 0.55))
        self.assertEqual(sync_jobs.rows_for(400, 8, 0.0) % 60000, 0)  # whole epochs past one

    def test_the_mixed_trace_keeps_the_arrivals(self):
        args = types.SimpleNamespace(scale=1.0, sync_fraction=0.45)
        plain = experiments.trace_schedule(args, n=24, mean_gap=6.0, seed=11)
        mixed = experiments.trace_schedule(args, n=24, mean_gap=6.0, seed=11, mixed=True)
        key = lambda j: (j["at"], j["name"], j["workers"], j["max_workers"], j["priority"])  # noqa: E731
        self.assertEqual([key(j) for j in plain], [key(j) for j in mixed])
        self.assertEqual([j.get("kind") for j in mixed[:4]], ["sync", None, "sync", None])
        self.assertEqual(mixed[0]["shards"], 0)

    def test_a_drain_picks_the_host_that_consolidates_a_ring_or_frees_a_block(self):
        ws = [(0, "h1"), (1, "h2"), (2, "h2"), (3, "h3"), (4, "h2"), (5, "h3")]
        self.assertEqual(experiments.drain_host("allreduce", ws), "h1")  # fewest: the ring keeps h2, h3
        self.assertEqual(experiments.drain_host("async_ps", ws), "h2")   # most: 3 CPUs free on one host
        self.assertIsNone(experiments.drain_host("allreduce", [(0, "h1"), (1, "h1")]))  # one host
        self.assertIsNone(experiments.drain_host("async_ps", []))
        # The policy's view of a shrink with --drain: the drained host's workers leave first.
        loop = types.SimpleNamespace(args=types.SimpleNamespace(drain=True), workers={"a": ws})
        loop.drained = lambda j: experiments.PolicyLoop.drained(loop, j)
        job = types.SimpleNamespace(name="a", strategy="async_ps", target=6)
        self.assertEqual(experiments.PolicyLoop.leaving(loop, job, 2), ["h2", "h2", "h2", "h3"])
        loop.args.drain = False  # the highest indices
        self.assertEqual(experiments.PolicyLoop.leaving(loop, job, 2), ["h3", "h2", "h3", "h2"])

    def test_slurm_view_counts_free_cpus_and_where_each_jobs_workers_are(self):
        sinfo = "h1|4/2/0/6\nh2|6/0/0/6\nh3|1/5/0/6\nbad line\n"
        squeue = ("troupe-t02:worker-0|RUNNING|h3|\n"
                  "troupe-t02:worker-1|PENDING||h3\n"      # placed on h3, waiting: counted there
                  "troupe-t02:master|RUNNING|h1|h1\n"
                  "troupe-t05:worker-3|PENDING||\n"        # not placed: nowhere yet
                  "troupe-t05:worker-2|RUNNING|h1|\n")
        idle, workers = experiments.slurm_view_of(sinfo, squeue)
        self.assertEqual(idle, {"h1": 2, "h2": 0, "h3": 4})
        self.assertEqual(workers, {"t02": [(0, "h3"), (1, "h3")], "t05": [(2, "h1")]})
        # Running spare workers (--spare) leave when an own worker wants their CPU: free for placement.
        idle, _ = experiments.slurm_view_of(sinfo, squeue, "h2\nh2\nh1\nhx\n")
        self.assertEqual(idle, {"h1": 3, "h2": 2, "h3": 4})

    def test_a_waiting_job_is_admitted_by_the_round_a_completion_triggers(self):
        """The policy loop's admission (its rounds replaced by a recorder: the loop's order is what is
        checked). A job that does not fit waits without a round; a completion that lets it in gets one
        round, the one that admits it with its share, not a round for the running jobs first."""
        args = types.SimpleNamespace(pollux_policy=None, restart_delay=0.05, async_efficiency="none", pack=False,
                                     period=60.0, scale=1.0, period_scales=False)
        loop = experiments.PolicyLoop(args, 0.0, "/nonexistent")
        calls, room = [], {"fits": False}

        def fake_round(new=None):
            calls.append(new.name if new is not None else None)
            return (3, "h2") if new is not None else None
        loop.round = fake_round
        loop.start()
        try:
            got = {}
            t = threading.Thread(target=lambda: got.update(
                start=loop.admit({"name": "t09", "kind": "sync", "max_workers": 8, "shards": 0}, 5.0,
                                 fits=lambda: room["fits"])))
            t.start()
            time.sleep(1.2)  # waiting: checked each 0.5 s, no round while it does not fit
            self.assertEqual(calls, [])
            self.assertTrue(t.is_alive())
            room["fits"] = True  # a job ended: its CPUs let t09 in
            loop.job_ended("t01")
            t.join(timeout=5)
            self.assertFalse(t.is_alive())
            self.assertEqual(calls, ["t09"])  # one round, the admitting one
            self.assertEqual(got["start"], 3)
            self.assertEqual(loop.first_host["t09"], "h2")
            self.assertEqual(loop.jobs["t09"].target, 3)
            loop.job_ended("t02")  # nobody waiting: a completion's round for the running jobs
            deadline = time.time() + 5
            while len(calls) < 2 and time.time() < deadline:
                time.sleep(0.05)
            self.assertEqual(calls, ["t09", None])
        finally:
            loop.stop.set()
            loop.wake.set()
            loop.join(timeout=5)

    @unittest.skipUnless(os.environ.get("TROUPE_BIN"), "TROUPE_BIN not set: the job files are not checked")
    def test_the_job_files_are_valid(self):
        with tempfile.TemporaryDirectory() as d:
            # (the async jobs' files name record stores, made by the experiments: not checked here)
            placed = (sync_jobs.sync_job_toml(d, "p", 70000, 3, 1, 6) + experiments.elastic_cluster("h1", spare=False)
                      + 'worker_host = "h3"\n')
            for name, text in (("sync", sync_jobs.sync_job_toml(d, "s", 70000, 3, 1, 6)), ("placed", placed)):
                path = os.path.join(d, name + ".toml")
                with open(path, "w") as f:
                    f.write(text)
                r = subprocess.run([os.environ["TROUPE_BIN"], "config", "check", path], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(": ok", r.stdout)


if __name__ == "__main__":
    unittest.main()
