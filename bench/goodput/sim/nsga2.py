# Copyright 2026 the troupe authors. Licensed under the Apache License,
# Version 2.0 (see LICENSE in this folder).
"""NSGA-II as pymoo 0.4.2.1 runs it for PolluxPolicy, in numpy alone.

The artifact's pollux.py calls pymoo.optimize.minimize(problem, NSGA2(pop_size=100,
sampling=<states>, crossover=Crossover(), mutation=Mutation(), repair=Repair()), ("n_gen", 100)).
pymoo is not packaged in Debian, so this re-implements the parts of pymoo 0.4.2.1 that call uses,
step for step (pymoo/model/{algorithm,crossover,mating,infill,initialization,survival}.py,
pymoo/algorithms/nsga2.py, pymoo/operators/selection/tournament_selection.py):

- initialisation: the given states, repaired, duplicates removed, evaluated, then one survival
  pass over all of them to give each a rank and a crowding distance (generation 1);
- each further generation (2..n_gen): mating until n_offsprings (= pop_size) unique offspring or
  100 rounds: binary tournaments (pressure 2) on Pareto dominance, then crowding distance, ties at
  random; the problem's crossover applied to each pair with probability 0.9; the problem's mutation
  and repair on every child; children that duplicate the population, earlier children or each
  other dropped; then the offspring evaluated, merged with the population, and cut back to
  pop_size by non-dominated rank, the split front by crowding distance (ties at random);
- the result: the non-dominated front of the last population (pymoo's `res.X`, `res.F`).

No constraints (every solution feasible), as in the artifact's Problem. The problem object gives
`evaluate(X) -> F` (minimised, n x 2), `crossover(X) -> X` on (2, n_matings, n_var),
`mutation(X) -> X` and `repair(X) -> X` on (n, n_var).
"""
import numpy as np

CROSSOVER_PROB = 0.9
MAX_MATING_ROUNDS = 100  # pymoo's n_max_iterations: 101 rounds at most


def minimize(problem, sampling, pop_size=100, n_gen=100):
    """Runs NSGA-II; returns (X, F) of the last population's non-dominated front."""
    X = _unique(problem.repair(np.asarray(sampling)))
    F = problem.evaluate(X)
    rank, crowd, keep = _survive(F, len(X))
    X, F, rank, crowd = X[keep], F[keep], rank[keep], crowd[keep]
    for _ in range(n_gen - 1):
        off = _mate(problem, X, F, rank, crowd, pop_size)
        if len(off) == 0:
            break
        X = np.concatenate([X, off])
        F = np.concatenate([F, problem.evaluate(off)])
        rank, crowd, keep = _survive(F, pop_size)
        X, F, rank, crowd = X[keep], F[keep], rank[keep], crowd[keep]
    front = non_dominated_fronts(F, only_first=True)[0]
    return X[front], F[front]


def _mate(problem, X, F, rank, crowd, n_offsprings):
    """pymoo's Mating.do: rounds of n_remaining children, duplicates (of X, of earlier children,
    of each other) dropped, until n_offsprings unique ones or 101 rounds."""
    off = []
    seen = {row.tobytes() for row in X}
    for _ in range(MAX_MATING_ROUNDS + 1):
        n_remaining = n_offsprings - len(off)
        if n_remaining <= 0:
            break
        n_select = -(-n_remaining // 2)
        parents = _tournament(F, crowd, n_select)  # (n_select, 2)
        parent_x = X[parents.T].copy()  # (2, n_select, n_var)
        do_crossover = np.random.random(n_select) < CROSSOVER_PROB
        crossed = problem.crossover(parent_x)
        parent_x[:, do_crossover, :] = crossed[:, do_crossover, :]
        children = parent_x.reshape(-1, X.shape[1])
        children = problem.repair(problem.mutation(children))
        for row in children:
            key = row.tobytes()
            if key not in seen:
                seen.add(key)
                off.append(row)
                if len(off) == n_offsprings:
                    break
    return np.array(off, dtype=X.dtype).reshape(-1, X.shape[1])


def _tournament(F, crowd, n_select):
    """pymoo's TournamentSelection(binary_tournament), tournament_type comp_by_dom_and_crowding."""
    n = len(F)
    n_random = n_select * 2 * 2
    n_perms = -(-n_random // n)
    perms = np.concatenate([np.random.permutation(n) for _ in range(n_perms)])[:n_random]
    P = perms.reshape(n_select * 2, 2)
    a, b = P[:, 0], P[:, 1]
    fa, fb = F[a], F[b]
    a_dom = np.all(fa <= fb, axis=1) & np.any(fa < fb, axis=1)
    b_dom = np.all(fb <= fa, axis=1) & np.any(fb < fa, axis=1)
    coin = np.random.random(len(P)) < 0.5
    by_crowd = np.where(crowd[a] > crowd[b], a,
                        np.where(crowd[a] < crowd[b], b, np.where(coin, a, b)))
    S = np.where(a_dom, a, np.where(b_dom, b, by_crowd))
    return S.reshape(n_select, 2)


def _survive(F, n_survive):
    """RankAndCrowdingSurvival: (rank, crowding) of every row and the indices that survive."""
    rank = np.full(len(F), np.iinfo(np.int64).max)
    crowd = np.zeros(len(F))
    survivors = []
    for k, front in enumerate(non_dominated_fronts(F, n_stop_if_ranked=n_survive)):
        cd = crowding_distance(F[front])
        rank[front] = k
        crowd[front] = cd
        if len(survivors) + len(front) > n_survive:
            # randomized_argsort(order='descending'): a random permutation, then a stable sort.
            perm = np.random.permutation(len(cd))
            order = perm[np.argsort(-cd[perm], kind="stable")]
            order = order[:n_survive - len(survivors)]
        else:
            order = np.arange(len(front))
        survivors.extend(front[order])
    return rank, crowd, np.array(survivors, dtype=int)


def non_dominated_fronts(F, n_stop_if_ranked=None, only_first=False):
    """Fronts of F (minimised, 2 objectives) in rank order, as index arrays; stops once
    n_stop_if_ranked rows are ranked (as pymoo's fast non-dominated sort).

    Two objectives allow a sweep: in lexicographic order of (f0, f1) a row can be dominated only
    by rows before it, and it is dominated by a front iff the front's smallest f1 is below its f1
    (or equal, from a row with a smaller f0); fronts' smallest f1 increase with rank, so a binary
    search finds the row's front. Exact duplicates share a front, as in pymoo.
    """
    assert F.shape[1] == 2
    order = np.lexsort((F[:, 1], F[:, 0]))
    f0, f1 = F[order, 0].tolist(), F[order, 1].tolist()
    best_f1, best_f0, members = [], [], []  # per front: smallest f1, its smallest f0
    for i in range(len(order)):
        a, b = f0[i], f1[i]
        lo, hi = 0, len(best_f1)
        while lo < hi:  # first front that does not dominate (a, b)
            mid = (lo + hi) // 2
            if best_f1[mid] < b or (best_f1[mid] == b and best_f0[mid] < a):
                lo = mid + 1
            else:
                hi = mid
        if lo == len(best_f1):
            best_f1.append(b)
            best_f0.append(a)
            members.append([order[i]])
        else:
            if b < best_f1[lo]:
                best_f1[lo], best_f0[lo] = b, a
            members[lo].append(order[i])
    fronts, ranked = [], 0
    for m in members:
        fronts.append(np.array(sorted(m), dtype=int))
        ranked += len(m)
        if only_first or (n_stop_if_ranked is not None and ranked >= n_stop_if_ranked):
            break
    return fronts


def non_dominated_fronts_reference(F):
    """The same fronts from the full dominance matrix (O(n^2)); for tests."""
    le = np.all(F[:, None, :] <= F[None, :, :], axis=2)
    lt = np.any(F[:, None, :] < F[None, :, :], axis=2)
    dominates = le & lt  # [i, j]: i dominates j
    count = dominates.sum(axis=0)
    fronts, done = [], np.zeros(len(F), dtype=bool)
    current = np.flatnonzero(count == 0)
    while len(current):
        fronts.append(current)
        done[current] = True
        count = count - dominates[current].sum(axis=0)
        current = np.flatnonzero((count == 0) & ~done)
    return fronts


def crowding_distance(F):
    """pymoo 0.4's calc_crowding_distance: inf for the ends, 0 for duplicates (all but the first)."""
    n_points, n_obj = F.shape
    if n_points <= 2:
        return np.full(n_points, np.inf)
    dup = np.zeros(n_points, dtype=bool)
    seen = set()
    for i, row in enumerate(F):
        key = row.tobytes()
        dup[i] = key in seen
        seen.add(key)
    is_unique = np.flatnonzero(~dup)
    _F = F[is_unique]
    I = np.argsort(_F, axis=0, kind="mergesort")
    _F = _F[I, np.arange(n_obj)]
    dist = np.vstack([_F, np.full(n_obj, np.inf)]) - np.vstack([np.full(n_obj, -np.inf), _F])
    norm = np.max(_F, axis=0) - np.min(_F, axis=0)
    norm[norm == 0] = np.nan
    with np.errstate(invalid="ignore", divide="ignore"):
        to_last, to_next = dist[:-1] / norm, dist[1:] / norm
    to_last[np.isnan(to_last)] = 0.0
    to_next[np.isnan(to_next)] = 0.0
    J = np.argsort(I, axis=0)
    cd = np.sum(to_last[J, np.arange(n_obj)] + to_next[J, np.arange(n_obj)], axis=1) / n_obj
    crowding = np.zeros(n_points)
    crowding[is_unique] = cd
    return crowding


def _unique(X):
    seen, keep = set(), []
    for i, row in enumerate(X):
        key = row.tobytes()
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return X[keep]
