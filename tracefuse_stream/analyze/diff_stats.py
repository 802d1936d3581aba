"""Is a run-vs-run change real? The significance test of ``tracefuse diff``.

Why a module of its own: a diff without a test lists every op whose time moved by
step-to-step noise; two recordings of the same job must say "no significant change".
The rule (docs/diff.md, "Real vs noise"):

* for one figure (an operator's self time, a kernel's time, the step time, ...), each
  rank has one value per matched step in each run;
* the **step-to-step noise** is the pooled standard deviation of those values around
  their (rank, run) means, over every rank and both runs (``sum (n - 1)`` degrees of
  freedom: 16 for 4 ranks x 3 steps x 2 runs, where one rank alone would have 4);
* a rank's change is the difference of its two means, tested with Student's t on that
  pooled noise (two-sided); its size is the difference of its two **medians** over the
  steps (what the report shows);
* every rank together: each step's mean over the ranks, the two runs' step means
  compared by Student's t (``nb + nn - 2`` degrees of freedom): the steps are the
  independent units, not the ranks (a slow step is slow on every rank of a
  synchronous job: counting ranks as samples made two recordings of one job differ);
* the **rank-to-rank spread** then says where: "all" when the test of every rank
  together gives p < ALPHA_ALL and every rank changed the same way, by at least the
  floor (the
  change is uniform when every rank's size is within half of the ranks' median size
  and of 3 noise units of it), else the ranks that pass alone (rank-local).

No scipy: the t distribution's tail is the regularized incomplete beta function,
computed here by its continued fraction (Numerical Recipes' ``betacf``; exact to
~1e-12 for these arguments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Dict, List, Sequence

#: a rank's change is significant when its p-value is below this (about 0.2 false
#: positives among 200 figures x ranks of two runs of the same job)
ALPHA = 0.001
#: the test of every rank together: fewer degrees of freedom (the steps, not the ranks
#: x steps), and every rank must also have changed the same way by the floor
ALPHA_ALL = 0.01


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    front = math.exp(ln)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, dof: float) -> float:
    """P(|T| >= |t|) for Student's t with ``dof`` degrees of freedom."""
    if dof <= 0 or math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0
    return incomplete_beta(dof / 2.0, 0.5, dof / (dof + t * t))


@dataclass
class RankTest:
    """One figure on one rank: its size (medians, ns) and the test of its means."""

    base_ns: float  # median over the base run's matched steps
    new_ns: float
    p_value: float

    @property
    def delta_ns(self) -> float:
        return self.new_ns - self.base_ns


@dataclass
class FigureTest:
    """One figure on every rank, with the noise the tests used."""

    ranks: Dict[int, RankTest]
    noise_ns: float  # the pooled step-to-step standard deviation
    dof: int
    all_p: float = 1.0  # the test of the mean change over every rank (see figure_test)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def figure_test(base: Dict[int, Sequence[float]], new: Dict[int, Sequence[float]]) -> FigureTest:
    """The test of the module docstring, for one figure: ``base`` / ``new`` map each
    rank to its per-step values (ns) in that run, steps that lack the figure as 0."""
    ss, dof = 0.0, 0
    for runs in (base, new):
        for xs in runs.values():
            if len(xs) > 1:
                m = _mean(xs)
                ss += sum((x - m) ** 2 for x in xs)
                dof += len(xs) - 1
    sigma = math.sqrt(ss / dof) if dof else 0.0
    out: Dict[int, RankTest] = {}
    for r in sorted(base):
        xs, ys = list(base[r]), list(new.get(r) or [])
        if not xs or not ys:
            continue
        d = _mean(ys) - _mean(xs)
        se = sigma * math.sqrt(1.0 / len(xs) + 1.0 / len(ys))
        p = _p(d, se, dof) if dof else 1.0  # one step a run: the noise is unknown, nothing tested
        out[r] = RankTest(float(median(xs)), float(median(ys)), p)
    return FigureTest(out, sigma, dof, _steps_p([base[r] for r in out], [new[r] for r in out]))


def _steps_p(base: List[Sequence[float]], new: List[Sequence[float]]) -> float:
    """Every rank together, the steps the units: each step's mean over the ranks, the two
    runs' step means compared by Student's t (pooled, ``nb + nn - 2`` degrees of
    freedom). The ranks of a synchronous job are not independent (a slow step is slow
    on every rank, all wait for the slowest), so their values are averaged, not counted
    as more samples."""
    if not base or not new:
        return 1.0
    bm = [_mean(col) for col in zip(*base)]
    nm = [_mean(col) for col in zip(*new)]
    dof = len(bm) + len(nm) - 2
    if dof <= 0:
        return 1.0
    ss = sum((x - _mean(bm)) ** 2 for x in bm) + sum((y - _mean(nm)) ** 2 for y in nm)
    se = math.sqrt(ss / dof) * math.sqrt(1.0 / len(bm) + 1.0 / len(nm))
    return _p(_mean(nm) - _mean(bm), se, dof)


def _p(d: float, se: float, dof: int) -> float:
    if se > 0:
        return t_two_sided(d / se, dof)
    return 1.0 if d == 0 else 0.0  # no noise at all (a count, or the figure absent): certain


def uniform(deltas: List[float], noise_ns: float) -> bool:
    """Every rank changed by a similar amount: within half of the ranks' median change
    and of 3 noise units of it (both: small changes are judged by the noise)."""
    if not deltas:
        return False
    mid = median(deltas)
    allow = max(0.5 * abs(mid), 3.0 * noise_ns)
    return all(abs(d - mid) <= allow for d in deltas) and all((d > 0) == (mid > 0) for d in deltas)


__all__ = [
    "ALPHA",
    "ALPHA_ALL",
    "FigureTest",
    "RankTest",
    "incomplete_beta",
    "figure_test",
    "t_two_sided",
    "uniform",
]
