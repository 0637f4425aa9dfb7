#!/usr/bin/python3
"""Unit tests of the cluster experiments' summaries, figures and record parsing (no cluster needed).
ctest: cluster_experiments_plots. Exit 77 (skipped, reason printed) when matplotlib is missing."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import experiments  # noqa: E402
import plots  # noqa: E402


def run_of(allocations, jobs, cpus=10, t_end=100.0, **extra):
    r = {"experiment": "gang_vs_elastic", "mode": "elastic", "cluster_cpus": cpus, "t_end": t_end,
         "allocations": allocations, "jobs": jobs}
    r.update(extra)
    return r


def alloc(owner, cpus, start, end, name="x"):
    return {"slurm_job": 1, "name": name, "owner": owner, "role": "worker", "cpus": cpus, "submit": 0,
            "start": start, "end": end, "state": "COMPLETED"}


def job(name, submit, first, end, timeline=()):
    return {"name": name, "submit": submit, "first_step": first, "end": end, "result": {"status": "finished"},
            "timeline": list(timeline), "events": [{"t": 5, "kind": "join", "node": "worker-0#0"}]}


class Summaries(unittest.TestCase):
    def test_utilisation_is_allocated_cpu_seconds_over_the_window(self):
        # window [0, 100] (first submit .. last end); 10 CPUs: 4x100 + 6x50 = 700 of 1000.
        r = run_of([alloc("a", 4, 0, 100), alloc("b", 6, 50, 100), alloc("c", 3, None, None)],
                   [job("a", 0, 1, 100), job("b", 20, 50, 90)])
        s = plots.summarise(r)
        self.assertAlmostEqual(s["utilisation"], 0.7)
        self.assertAlmostEqual(s["makespan_s"], 100)
        self.assertAlmostEqual(s["avg_jct_s"], 85)
        self.assertEqual(s["queueing_delay_s"], {"a": 1, "b": 30})

    def test_running_allocations_are_clipped_at_the_end_and_outside_the_window_ignored(self):
        r = run_of([alloc("a", 10, -50, None)], [job("a", 0, 0, 40)], t_end=60)
        self.assertAlmostEqual(plots.summarise(r)["utilisation"], 1.0)  # [0, 40] of [-50, 60]

    def test_percentile(self):
        self.assertEqual(plots.percentile([1, 2, 3, 4], 0), 1)
        self.assertAlmostEqual(plots.percentile([1, 2, 3, 4], 50), 2.5)
        self.assertEqual(plots.percentile([7], 99), 7)

    def test_bad_runs_are_named(self):
        with self.assertRaisesRegex(plots.BadRun, "no 'allocations'"):
            plots.summarise({"experiment": "x", "mode": "gang", "cluster_cpus": 4, "jobs": []})
        with self.assertRaisesRegex(plots.BadRun, "ends .* before it starts"):
            plots.summarise(run_of([alloc("a", 1, 10, 5, name="w3")], []))
        with self.assertRaisesRegex(plots.BadRun, "cluster_cpus must be positive"):
            plots.summarise(run_of([], [], cpus=0))


class Records(unittest.TestCase):
    def test_slurm_job_names_give_owner_and_role(self):
        self.assertEqual(experiments.owner_role("troupe-job-a:worker-12"), ("job-a", "worker"))
        self.assertEqual(experiments.owner_role("troupe-t03:ps-0"), ("t03", "ps"))
        self.assertEqual(experiments.owner_role("gang:job-b"), ("job-b", "gang"))
        self.assertEqual(experiments.owner_role("service:4"), ("service", "service"))

    def test_job_record_reads_result_and_events_and_skips_a_torn_line(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "result.json"), "w") as f:
                json.dump({"status": "finished", "test_auc": 0.8, "first_step_wall_ms": 1_000_002_500}, f)
            with open(os.path.join(d, "events.jsonl"), "w") as f:
                f.write('{"t_ms": 1000001000, "kind": "job_start"}\n')
                f.write('{"t_ms": 1000003000, "kind": "metrics", "samples_per_s": 5.0, "workers_alive": 2}\n')
                f.write('{"t_ms": 1000004000, "kind": "preempted", "node": "worker-1#0"}\n')
                f.write('{"t_ms": 1000009000, "kind": "job_end"}\n{"t_ms": 10000')
            r = experiments.job_record(d, "a", 1_000_000, 1_000_000.5, {"priority": "low"})
        self.assertEqual(r["first_step"], 2.5)
        self.assertEqual(r["end"], 9.0)
        self.assertEqual(r["result"]["test_auc"], 0.8)
        self.assertEqual([e["kind"] for e in r["events"]], ["preempted"])
        self.assertEqual(r["timeline"][0]["workers"], 2)

    def test_a_run_whose_jobs_did_not_finish_fails_naming_them(self):
        ok = run_of([], [job("a", 0, 1, 50)])
        self.assertEqual(experiments.unfinished(ok), [])
        experiments.check_finished([ok])  # returns: every job finished
        failed = job("b", 0, None, 5)
        failed["result"] = {"status": "failed", "reason": "master died 11 times in a minute"}
        missing = job("c", 0, None, None)
        missing["result"] = {"status": "no result.json: [Errno 2]"}
        bad = run_of([], [job("a", 0, 1, 50), failed, missing])
        self.assertEqual(experiments.unfinished(bad),
                         [("b", "failed: master died 11 times in a minute"), ("c", "no result.json: [Errno 2]")])
        with self.assertRaises(SystemExit) as e:
            experiments.check_finished([ok, bad])
        self.assertIn("2 job(s) did not finish", str(e.exception.code))
        self.assertIn("gang_vs_elastic/elastic: b (failed: master died 11 times in a minute)", str(e.exception.code))
        coloc = run_of([], [job("train", 0, 1, 50)], reference={"status": "failed", "reason": "x"})
        self.assertEqual(experiments.unfinished(coloc), [("reference", "failed: x")])

    def test_the_trace_is_the_same_every_time(self):
        class A:
            scale = 1.0
        a, b = experiments.trace_schedule(A()), experiments.trace_schedule(A())
        self.assertEqual(a, b)
        self.assertEqual(len(a), 16)
        self.assertTrue(all(j["workers"] in (2, 4, 6, 8) and j["epochs"] >= 1 for j in a))


class Figures(unittest.TestCase):
    def test_every_figure_is_written_with_its_data(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("python3-matplotlib is not installed (scripts/install-deps.sh)")
        tl = [{"t": t, "samples_per_s": 10.0 * t, "loss": 1.0 / (t + 1), "workers": 2, "samples": t} for t in range(20)]
        gang = run_of([alloc("a", 5, 0, 50), alloc("b", 5, 50, 100)], [job("a", 0, 1, 50, tl), job("b", 10, 51, 100, tl)])
        gang["mode"] = "gang"
        elastic = run_of([alloc("a", 10, 0, 30), alloc("b", 10, 30, 60)], [job("a", 0, 1, 30, tl), job("b", 10, 11, 60, tl)])
        with tempfile.TemporaryDirectory() as d:
            files = plots.plot_runs([gang, elastic], d)
            names = {os.path.basename(f) for f in files}
            for stem in ("gang_vs_elastic_gang_allocation", "gang_vs_elastic_elastic_utilisation",
                         "gang_vs_elastic_elastic_jobs", "gang_vs_elastic_allocation", "gang_vs_elastic_times"):
                for ext in ("png", "svg", "json"):
                    self.assertIn(f"{stem}.{ext}", names)
            for f in files:
                self.assertGreater(os.path.getsize(f), 20, f)
            with open(os.path.join(d, "gang_vs_elastic_elastic_utilisation.json")) as f:
                self.assertAlmostEqual(json.load(f)["average"], 1.0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
