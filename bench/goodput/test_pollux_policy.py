"""pollux_policy against the Pollux artifact's own code (bench/goodput/sim), on its own traces.

    cd bench/goodput && /usr/bin/python3 -m unittest test_pollux_policy
    /usr/bin/python3 -m unittest discover -s bench/goodput -p 'test_*.py'
"""
import csv
import os
import sys
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "sim"))

import pollux_policy as pp  # noqa: E402
import goodput as art_goodput  # noqa: E402  (the artifact's, bench/goodput/sim)
import nsga2  # noqa: E402
import pollux as art_pollux  # noqa: E402
import speedup as art_speedup  # noqa: E402
import utils as art_utils  # noqa: E402


def trace_profile(app, placements):
    """(nodes, replicas, atomic_bsz, compute, step) rows of an app's placements.csv."""
    rows = []
    with open(os.path.join(HERE, "sim", "traces", app, "placements.csv")) as f:
        for r in csv.DictReader(f):
            if r["placement"] in placements:
                step, sync = float(r["step_time"]), float(r["sync_time"])
                rows.append((len(r["placement"]), sum(map(int, r["placement"])),
                             int(r["local_bsz"]), step - sync, step))
    return [np.array(c) for c in zip(*rows)]


def random_models(rng, n):
    for _ in range(n):
        perf = pp.PerfParams(*rng.uniform(0.005, 0.2, 6), rng.uniform(1.0, 4.0))
        grad = pp.GradParams(rng.uniform(0.1, 5.0), rng.uniform(0.1, 50.0))
        yield perf, grad


class FitTest(unittest.TestCase):
    CASES = [("cifar10", {"1"}), ("cifar10", {"1", "2", "4"}),
             ("cifar10", {"1", "2", "4", "22", "44", "4444"}),
             ("imagenet", {"1", "4", "44", "444"}), ("bert", {"1", "2", "3", "4", "22"})]

    def test_gradient_matches_finite_differences(self):
        nodes, replicas, atomic, compute, step = trace_profile("cifar10", {"1", "2", "4", "22", "44"})
        rng = np.random.default_rng(1)
        for _ in range(5):
            x = np.concatenate([rng.uniform(0.01, 0.3, 6), [rng.uniform(1.0, 5.0)]])
            _, grad = pp._fit_objective(x, nodes, replicas, atomic, compute, step)
            h = 1e-7
            fd = [(pp._fit_objective(x + e, nodes, replicas, atomic, compute, step)[0] -
                   pp._fit_objective(x - e, nodes, replicas, atomic, compute, step)[0]) / (2 * h)
                  for e in np.eye(7) * h]
            np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)

    def test_fit_matches_artifact(self):
        for app, placements in self.CASES:
            data = trace_profile(app, placements)
            mine = pp.fit_perf_params(*data)
            theirs = art_goodput.fit_perf_params(*data)
            np.testing.assert_allclose(mine, theirs, rtol=1e-6, err_msg=f"{app} {placements}")

    def test_fitted_model_predicts_the_trace(self):
        nodes, replicas, atomic, compute, step = trace_profile("cifar10", {"1", "2", "4", "22", "44", "4444"})
        perf = pp.fit_perf_params(nodes, replicas, atomic, compute, step)
        pred = pp.step_time(perf, nodes, replicas, atomic)
        self.assertLess(np.sqrt(np.mean(np.log(pred / step) ** 2)), 0.25)


class GoodputTest(unittest.TestCase):
    def test_throughput_efficiency_goodput_match_artifact(self):
        rng = np.random.default_rng(2)
        nodes = np.array([1, 1, 1, 2, 4, 16])
        replicas = np.array([1, 2, 4, 8, 16, 64])
        atomic = np.array([32, 64, 128, 16, 100, 7])
        accum = np.array([0, 1, 0, 2, 0, 3])
        for perf, grad in random_models(rng, 10):
            fn = art_goodput.GoodputFunction(perf, grad, 16)
            np.testing.assert_allclose(pp.throughput(perf, nodes, replicas, atomic, accum),
                                       fn.throughput(nodes, replicas, atomic, accum), rtol=1e-12)
            batch = replicas * atomic * (accum + 1)
            np.testing.assert_allclose(pp.efficiency(grad, 16, batch), fn.efficiency(batch), rtol=1e-12)
            np.testing.assert_allclose(pp.goodput(perf, grad, 16, nodes, replicas, atomic, accum),
                                       fn(nodes, replicas, atomic, accum), rtol=1e-12)

    def test_efficiency_is_the_noise_scale_ratio(self):
        grad = pp.GradParams(sqr=2.0, var=30.0)
        pgns = pp.noise_scale(grad, 128)
        self.assertAlmostEqual(pp.efficiency(grad, 128, 128), 1.0)
        for m in (128, 256, 1024, 8192):
            self.assertAlmostEqual(pp.efficiency(grad, 128, m), (pgns + 128) / (pgns + m))

    def test_best_batch_matches_artifact(self):
        rng = np.random.default_rng(3)
        nodes = np.array([1, 1, 2, 4, 8])
        replicas = np.array([1, 4, 8, 16, 32])
        for perf, grad in random_models(rng, 10):
            fn = art_goodput.GoodputFunction(perf, grad, 128)
            for accumulation in (False, True):
                kw = dict(max_batch_size=4096, atomic_bsz_range=(32, 256), accumulation=accumulation)
                mine = pp.best_batch(perf, grad, 128, nodes, replicas, **kw)
                theirs = fn.optimize(nodes, replicas, **kw)
                for a, b in zip(mine, theirs):
                    np.testing.assert_allclose(a, b, rtol=1e-12)
                self.assertEqual(pp.best_batch(perf, grad, 128, 2, 8, **kw),
                                 fn.optimize(2, 8, **kw))

    def test_speedup_matches_artifact(self):
        rng = np.random.default_rng(4)
        nodes = np.array([0, 1, 1, 1, 2, 3, 8, 16])
        replicas = np.array([0, 1, 2, 4, 5, 12, 32, 64])
        for perf, grad in random_models(rng, 5):
            fn = art_goodput.GoodputFunction(perf, grad, 128)
            art = art_speedup.SpeedupFunction(fn, 4096, (32, 256), accumulation=True)
            mine = pp.speedup(perf, grad, 128, nodes, replicas, max_batch_size=4096,
                              atomic_bsz_range=(32, 256), accumulation=True)
            np.testing.assert_allclose(mine, art(nodes, replicas), rtol=1e-12)


class ObjectiveTest(unittest.TestCase):
    def make_problem(self, rng, num_jobs, base_state):
        models, jobs = [], []
        for perf, grad in random_models(rng, num_jobs):
            fn = art_goodput.GoodputFunction(perf, grad, 128)
            info = art_utils.JobInfo({"nvidia.com/gpu": 1},
                                     art_speedup.SpeedupFunction(fn, 4096, (32, 256), True),
                                     0, 0, 0, 64)
            info.num_restarts = int(rng.integers(0, 5))
            info.age = float(rng.uniform(0, 3000))
            models.append((perf, grad))
            jobs.append(info)
        nodes = [art_utils.NodeInfo({"nvidia.com/gpu": 4}, False) for _ in range(16)]
        return models, jobs, art_pollux.Problem(jobs, nodes, base_state)

    def test_objective_matches_artifact(self):
        rng = np.random.default_rng(5)
        for num_jobs in (1, 3, 7, 20):
            base = np.zeros((num_jobs, 16), dtype=int)
            base[np.arange(num_jobs), rng.integers(0, 16, num_jobs)] = 1
            models, jobs, problem = self.make_problem(rng, num_jobs, base)
            states = problem.repair(rng.integers(0, 3, (50, num_jobs * 16)))
            states = np.concatenate([states, base.reshape(1, -1)])
            theirs = -problem.evaluate(states)[:, 0]
            s = states.reshape(len(states), num_jobs, 16)
            fair_nodes, fair_replicas = pp.fair_share(num_jobs, 16, 4)
            sp = np.stack([pp.speedup(perf, grad, 128, np.count_nonzero(s[:, j], axis=1),
                                      s[:, j].sum(axis=1), base=(fair_nodes, fair_replicas),
                                      max_batch_size=4096, atomic_bsz_range=(32, 256),
                                      accumulation=True)
                           for j, (perf, grad) in enumerate(models)], axis=1)
            mine = pp.allocation_objective(
                sp, np.any(s != base, axis=2), [j.age for j in jobs],
                [30 * j.num_restarts for j in jobs], 30, node_share=16 / 64)
            np.testing.assert_allclose(mine, theirs, rtol=1e-9, err_msg=f"{num_jobs} jobs")

    def test_cheap_restarts_do_not_penalise(self):
        self.assertAlmostEqual(pp.restart_factor(600, 0.0, 0.05), 600 / 600.05)
        self.assertAlmostEqual(pp.restart_factor(600, 60.0, 30.0), 540 / 630)
        self.assertEqual(pp.restart_factor(20, 30.0, 30.0), 0.0)


class Nsga2Test(unittest.TestCase):
    """The simulator's NSGA-II stands in for pymoo's; its sorting must give the same fronts."""

    def test_fronts_match_the_dominance_matrix(self):
        rng = np.random.default_rng(6)
        for t in range(200):
            n = int(rng.integers(1, 200))
            F = rng.integers(0, 6, (n, 2)).astype(float) if t % 2 else rng.random((n, 2))
            fast = nsga2.non_dominated_fronts(F)
            ref = nsga2.non_dominated_fronts_reference(F)
            self.assertEqual(len(fast), len(ref))
            for a, b in zip(fast, ref):
                np.testing.assert_array_equal(a, np.sort(b))

    def test_crowding_distance(self):
        F = np.array([[0.0, 3.0], [1.0, 2.0], [1.0, 2.0], [3.0, 0.0]])
        cd = nsga2.crowding_distance(F)
        self.assertTrue(np.isinf(cd[0]) and np.isinf(cd[3]))
        self.assertEqual(cd[2], 0.0)  # a duplicate
        self.assertAlmostEqual(cd[1], (3 / 3 + 3 / 3) / 2)


if __name__ == "__main__":
    unittest.main()
