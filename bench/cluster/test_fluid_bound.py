#!/usr/bin/python3
"""bench/cluster/fluid_bound.py: the fluid model against cases worked by hand (issue #48)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fluid_bound as fb  # noqa: E402

PACE = fb.experiments.PACE


def job(name, at, workers, worker_seconds, priority="low", shards=1):
    # epochs x rows / PACE = worker_seconds: rows = worker_seconds x PACE, one epoch.
    return {"name": name, "at": at, "workers": workers, "max_workers": 2 * workers, "shards": shards,
            "epochs": 1, "rows": worker_seconds * PACE, "priority": priority}


class FluidBoundTest(unittest.TestCase):
    def test_one_job_runs_at_its_maximum(self):
        # 22 CPUs after its control plane: 8 workers (its maximum), 80 worker-seconds: 10 s.
        for pol in fb.POLICIES.values():
            r = fb.simulate([job("a", 0, 4, 80)], pol)
            self.assertAlmostEqual(r["avg"], 10.0)

    def test_two_equal_jobs_processor_sharing_against_first_come(self):
        # 6 CPUs: 2 control planes of 2, 2 CPUs for workers. Each job 10 worker-seconds, max 2.
        jobs = [job("a", 0, 1, 10), job("b", 0, 1, 10)]
        shared = fb.simulate(jobs, fb.goodput, cpus=6)   # 1 + 1: both end at 10 s
        first = fb.simulate(jobs, fb.srpt, cpus=6)        # a at 2 ends at 5 s; b then 2 + ... ends at 10 s
        self.assertAlmostEqual(shared["avg"], 10.0)
        self.assertAlmostEqual(first["avg"], 7.5)
        self.assertAlmostEqual(first["makespan"], 10.0)

    def test_elastic_serves_its_own_workers_before_the_spare(self):
        # 10 CPUs: the own workers (4 + 4) first, the spare by arrival (a, the first, gets the 2 left).
        alloc = fb.elastic([{**job("a", 0, 4, 1), "left": 1}, {**job("b", 1, 4, 1), "left": 1}], 10)
        self.assertEqual(alloc, {"a": 6, "b": 4})
        # 6 CPUs: a high-priority job's own workers come before an earlier low one's.
        alloc = fb.elastic([{**job("a", 0, 4, 1), "left": 1}, {**job("b", 1, 4, 1, "high"), "left": 1}], 6)
        self.assertEqual(alloc, {"b": 4, "a": 2})
        alloc = fb.elastic([{**job("a", 0, 4, 1), "left": 1}, {**job("b", 1, 4, 1), "left": 1}], 6)
        self.assertEqual(alloc, {"a": 4, "b": 2})

    def test_control_planes_without_admission_deadlock(self):
        # 6 CPUs, 3 jobs of 2 control CPUs each arriving together: no CPU left for a worker.
        jobs = [job(n, 0, 1, 10) for n in "abc"]
        self.assertIn("deadlock", fb.simulate(jobs, fb.elastic, admission=False, cpus=6))
        r = fb.simulate(jobs, fb.elastic, admission=True, cpus=6)  # 3 CPUs each: two at a time
        self.assertNotIn("deadlock", r)
        self.assertEqual(len(r["jct"]), 3)

    def test_a_synchronous_job_keeps_its_global_batch(self):
        sync = {"sync_fraction": 0.3}
        self.assertEqual(fb.rate(sync, 1), 1.0)  # alone: no sync
        self.assertAlmostEqual(fb.rate(sync, 2), 1 / (0.5 + 0.3))
        self.assertAlmostEqual(fb.rate(sync, 8), 1 / (0.125 + 0.3))
        self.assertEqual(fb.rate({}, 8), 8.0)
        # Its data is cut so that at its own workers it takes as long as the trace's job.
        a = job("a", 0, 4, 80)
        m = fb.mixed([a, job("b", 0, 4, 80)], 0.3)
        self.assertAlmostEqual(fb.work(m[0]) / fb.rate(m[0], 4), fb.work(a) / 4)
        self.assertEqual(m[1], job("b", 0, 4, 80))

    def test_goodput_looks_past_a_flat_step(self):
        # R = 0.5: a second worker adds nothing (1 / (1/2 + 1/2) = 1), eight give 1.6x. With a
        # linear job beside it and 12 CPUs the best gain per CPU still gives it more than one.
        jobs = [{**job("a", 0, 4, 1), "left": 1, "sync_fraction": 0.5}, {**job("b", 0, 4, 1), "left": 1}]
        alloc = fb.goodput(jobs, 12)
        self.assertEqual(sum(alloc.values()), 12)
        self.assertGreater(alloc["a"], 1)

    def test_the_traces(self):
        t = fb.traces()
        self.assertEqual((len(t["trace"]), len(t["trace_heavy"])), (16, 24))
        light = {p: fb.simulate(t["trace"], f)["avg"] for p, f in fb.POLICIES.items()}
        self.assertLessEqual(light["srpt"], light["goodput"])
        self.assertIn("deadlock", fb.simulate(t["trace_heavy"], fb.elastic, admission=False))
        # Mixed with strong-scaling synchronous jobs (R = 0.3), the heavy trace is where a policy by
        # goodput wins: it gives the linear jobs the CPUs the synchronous ones cannot use.
        heavy = {p: fb.simulate(fb.mixed(t["trace_heavy"], 0.3), f)["avg"] for p, f in fb.POLICIES.items()}
        self.assertLess(heavy["goodput"], 0.85 * heavy["elastic"])
        same = fb.mixed(t["trace"], 0.0)  # R = 0: the same work (the sync jobs without a PS shard)
        self.assertEqual([fb.work(j) for j in same], [fb.work(j) for j in t["trace"]])
        self.assertEqual([j["shards"] for j in same[:2]], [0, 1])


if __name__ == "__main__":
    unittest.main()
