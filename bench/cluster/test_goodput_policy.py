#!/usr/bin/python3
"""bench/cluster/goodput_policy.py: the allocation it makes from the jobs' reports (issue #48 item 4).

Needs pollux_policy.py (bench/goodput, branch pollux): skipped while it is not there, unless
TROUPE_POLLUX_POLICY names the file.
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import goodput_policy  # noqa: E402

try:
    PP = goodput_policy.load_pollux_policy(os.environ.get("TROUPE_POLLUX_POLICY"))
except ImportError as e:
    PP = None
    WHY = str(e)


def job(name, submit, noise_scale=None, per_worker=1500.0, max_workers=16, batch=128, m0=128):
    j = goodput_policy.JobState(name, "async_ps", batch, max_workers, submit)
    j.per_worker = per_worker
    if noise_scale is not None:
        sqr = 1.0
        j.grad = (sqr, noise_scale * sqr / m0, m0)  # var = tr / M0, noise scale = var / sqr * M0
    j.target = 1
    return j


@unittest.skipIf(PP is None, "pollux_policy.py not found")
class GoodputPolicyTest(unittest.TestCase):
    def policy(self, delay=0.05):
        return goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=delay)

    def test_uses_every_cpu_and_respects_bounds(self):
        jobs = [job("a", 0, 1e5, max_workers=8), job("b", 10, 1e5, max_workers=8), job("c", 20, 1e5, max_workers=4)]
        alloc = self.policy().allocate(jobs, 18, now=100)
        self.assertEqual(sum(alloc), 18)
        self.assertLessEqual(alloc[2], 4)
        self.assertTrue(all(a >= 1 for a in alloc))

    def test_linear_jobs_share_equally(self):
        jobs = [job("a", 0), job("b", 5), job("c", 9)]  # no noise report: linear speedups
        alloc = self.policy().allocate(jobs, 12, now=60)
        self.assertEqual(alloc, [4, 4, 4])

    def test_a_small_noise_scale_gets_fewer_cpus(self):
        # b's gradient noise is small: a bigger effective batch helps it little.
        jobs = [job("a", 0, noise_scale=1e5), job("b", 0, noise_scale=64)]
        alloc = self.policy().allocate(jobs, 16, now=60)
        self.assertEqual(sum(alloc), 16)
        self.assertGreater(alloc[0], alloc[1])

    def test_async_efficiency_none_counts_throughput_only(self):
        # The same two jobs as above: without the batch model an async job's noise does not matter.
        jobs = [job("a", 0, noise_scale=1e5), job("b", 0, noise_scale=64)]
        p = goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05, async_efficiency="none")
        self.assertEqual(p.allocate(jobs, 16, now=60), [8, 8])
        with self.assertRaises(ValueError):
            goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05, async_efficiency="x")

    def test_restart_cost_holds_young_jobs_still(self):
        # Pollux's 30 s restart on jobs 20 s old: a change costs more than it gains.
        jobs = [job("a", 0), job("b", 0)]
        jobs[0].target, jobs[1].target = 6, 2
        slow = self.policy(delay=30.0).allocate(jobs, 8, now=20)
        fast = self.policy(delay=0.05).allocate(jobs, 8, now=20)
        self.assertEqual(fast, [4, 4])
        self.assertNotEqual(slow, fast)

    def test_a_starting_job_gets_its_share_not_a_restart_penalty(self):
        # c arrives (target 0): its first allocation is a start, so it is not weighed down by the
        # restart factor (which would make the harmonic mean hand it most of the CPUs).
        jobs = [job("a", 0), job("b", 0), job("c", 60)]
        jobs[0].target, jobs[1].target, jobs[2].target = 6, 6, 0
        self.assertEqual(self.policy(delay=0.05).allocate(jobs, 12, now=60.01), [4, 4, 4])

    def test_looks_past_a_flat_step(self):
        # b's second worker adds nothing (its first had no sync to do), its eighth gives 3x: one CPU
        # at a time would leave it at one worker; the best gain per CPU gives it its share.
        p = self.policy()
        flat = {1: 1.0, 2: 1.0}
        p.goodput = lambda j, n, hosts=None: float(n) if j.name == "a" else (0.0 if n <= 0 else flat.get(n, 3.0 * n / 8))
        jobs = [job("a", 0, max_workers=8), job("b", 0, max_workers=8)]
        alloc = p.allocate(jobs, 16, now=60)
        self.assertEqual(sum(alloc), 16)
        self.assertEqual(alloc, [8, 8])

    def test_a_global_batch_job_is_sized_by_its_throughput_model(self):
        # b keeps its global batch of 512 (batch = "global"): compute 0.2 ms/sample split over its
        # replicas, a 50 ms allreduce across hosts. Its throughput flattens (about 2x at 4, 3x at 16),
        # so the linear job a gets most of the CPUs.
        p = self.policy()
        b = goodput_policy.JobState("b", "allreduce", 128, 16, 0, batch="global")
        b.grad, b.target = (1.0, 1.0, 512), 1
        b.perf = (0.0, 0.0002, 0.05, 0.0, 0.05, 0.0, 1.0)  # alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma
        self.assertAlmostEqual(p.goodput(b, 1) / 512, 1 / (0.0002 * 512), places=3)
        alloc = p.allocate([job("a", 0), b], 20, now=60)
        self.assertEqual(sum(alloc), 20)
        self.assertGreater(alloc[0], alloc[1])

    def test_a_fixed_batch_job_is_valued_at_its_own_batch_not_the_best(self):
        # The same measurements: "auto" picks its best batch at each size, "fixed" trains batch_size
        # per replica (its global batch n x 128), so it is never valued above "auto" and at 16
        # replicas (2,048 samples a step for a noise scale of 64) well below.
        p = self.policy()
        jobs = {}
        for mode in ("fixed", "auto"):
            j = goodput_policy.JobState(mode, "allreduce", 128, 16, 0, batch=mode)
            j.grad, j.target = (1.0, 64.0 / 128, 128), 1
            j.perf = (0.0, 0.0002, 0.05, 0.0, 0.001, 0.0, 1.0)
            jobs[mode] = j
        for n in (1, 4, 16):
            self.assertLessEqual(p.goodput(jobs["fixed"], n), p.goodput(jobs["auto"], n) * (1 + 1e-9))
        self.assertLess(p.goodput(jobs["fixed"], 16), 0.9 * p.goodput(jobs["auto"], 16))
        thr = PP.throughput(PP.PerfParams(*jobs["fixed"].perf), p.span(jobs["fixed"], 4), 4, 128)
        eff = PP.efficiency(PP.GradParams(1.0, 64.0 / 128), 128, 4 * 128)
        self.assertAlmostEqual(p.goodput(jobs["fixed"], 4), float(thr * eff), places=6)

    def sync_job(self, name="b", room=0, hosts=None, target=1):
        # A global-batch allreduce job whose ring costs 50 ms a step across hosts and 1 ms on one.
        b = goodput_policy.JobState(name, "allreduce", 128, 16, 0, batch="global")
        b.grad, b.target = (1.0, 1.0, 512), target
        b.perf = (0.0, 0.0002, 0.05, 0.0, 0.001, 0.0, 1.0)
        b.room = room
        b.hosts.update(hosts or {})
        return b

    def test_pack_models_a_ring_on_one_host_up_to_its_room(self):
        spread = goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05)
        packed = goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05, pack=True)
        b = self.sync_job(room=5)
        self.assertEqual(packed.span(b, 5), 1)
        self.assertEqual(packed.span(b, 6), 4)
        self.assertEqual(spread.span(b, 2), 2)
        self.assertGreater(packed.goodput(b, 5), 4 * packed.goodput(b, 1))  # nearly linear on one host
        self.assertLess(spread.goodput(b, 5), 2 * spread.goodput(b, 1))    # the network across hosts
        # So with pack it gets more CPUs (within its room) than spread, where the linear job a takes most.
        alloc_packed = packed.allocate([job("a", 0), b], 12, now=60)
        alloc_spread = spread.allocate([job("a", 0), self.sync_job(room=5)], 12, now=60)
        self.assertEqual(sum(alloc_packed), 12)
        self.assertLessEqual(alloc_packed[1], 5)
        self.assertGreater(alloc_packed[1], alloc_spread[1])

    def test_rooms_count_the_free_cpus_the_shrinks_leave(self):
        # b (2 workers on h2) can grow on h2 only once a's workers there leave: the first pass sees
        # 1 free CPU on h2 (room 3), the shrink of a frees 2 more (room 5).
        p = goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05, pack=True)
        a = job("a", 0, max_workers=8)
        a.target = 8
        b = self.sync_job(hosts={"h2": 2}, target=2)
        leaving = lambda j, n: ["h2"] * (j.target - n) if j.name == "a" else []  # noqa: E731
        alloc, where = p.allocate_placed([a, b], 10, now=60, idle={"h1": 0, "h2": 1, "h3": 0, "h4": 0},
                                         leaving=leaving)
        self.assertEqual(sum(alloc), 10)
        self.assertGreater(alloc[1], 2)
        self.assertLessEqual(alloc[1], b.room)
        self.assertEqual(where, {"b": "h2"})

    def test_place_puts_a_grow_where_most_of_its_ring_can_be(self):
        b = self.sync_job(hosts={"h2": 2}, target=2, room=4)
        c = self.sync_job("c", target=0, room=3)
        # b to 4: h2 holds its 2 and 2 free (4 of 4), h1 has 3 free (3 of 4): h2. c (new, 3): h1,
        # the host left with the most free CPUs once b's new workers are counted on h2.
        where = goodput_policy.place([b, c, job("a", 0)], [4, 3, 4], {"h1": 3, "h2": 2, "h3": 1})
        self.assertEqual(where, {"b": "h2", "c": "h1"})
        # Nothing for a ring that cannot be on one host (the policy spread it), nor for shrinking or
        # unchanged jobs, nor for async ones.
        self.assertEqual(goodput_policy.place([self.sync_job(room=4)], [6], {"h1": 6}), {})
        self.assertEqual(goodput_policy.place([b, job("a", 0)], [2, 6], {"h1": 6}), {})

    def test_pack_holds_a_ring_without_a_model_to_one_host(self):
        p = goodput_policy.GoodputPolicy(PP, cpus=24, hosts=4, restart_delay=0.05, pack=True)
        b = self.sync_job(room=4)
        b.perf, b.grad, b.per_worker = None, None, 600.0
        self.assertEqual(p.goodput(b, 4), 2400.0)
        self.assertEqual(p.goodput(b, 9), 2400.0)
        self.assertEqual(p.allocate([b], 20, now=10), [4])

    def test_charge_counts_lost_seconds(self):
        p = self.policy(delay=2.0)
        j = job("a", 0)
        p.charge(j, 3)
        p.charge(j, 3)
        self.assertEqual(j.restart_time, 2.0)
        self.assertEqual(j.target, 3)

    def test_reads_a_status(self):
        j = goodput_policy.JobState("x", "async_ps", 128, 8, 0)
        j.update({"workers_alive": 4, "samples_per_sec": 6000.0,
                  "goodput": {"grad_sqr": 0.5, "grad_var": 2.0, "base_batch": 256, "model": {}}})
        self.assertEqual(j.per_worker, 1500.0)
        self.assertEqual(j.grad, (0.5, 2.0, 256))


if __name__ == "__main__":
    unittest.main()
