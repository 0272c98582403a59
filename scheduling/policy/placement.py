"""Placement: free capacity per node in best-fit buckets, gangs placed all at once or not at all."""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping, Sequence

from .data import INF, JobRequest, Node


class Cluster:
    """Free capacity per node with best-fit buckets keyed by free GPUs (per GPU model).

    ``eg/ec/em`` ("extra") exist while a reservation is active: what each node can still
    give to a job that runs past the reserved start without breaking the reservation.
    """

    __slots__ = (
        "names",
        "index",
        "model",
        "cap_g",
        "cap_c",
        "cap_m",
        "fg",
        "fc",
        "fm",
        "free_g",
        "maxg",
        "buckets",
        "models",
        "eg",
        "ec",
        "em",
        "extra_g",
    )

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.names = [n.name for n in nodes]
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.model = [n.gpu_model for n in nodes]
        self.cap_g = [n.gpus for n in nodes]
        self.cap_c = [float(n.cpus) for n in nodes]
        self.cap_m = [n.memory_mb for n in nodes]
        self.fg = list(self.cap_g)
        self.fc = list(self.cap_c)
        self.fm = list(self.cap_m)
        self.maxg = max(self.cap_g, default=0)
        self.models = sorted(set(self.model))
        self.buckets: dict[str, list[dict[int, None]]] = {}
        self.eg: list[int] | None = None
        self.ec: list[float] | None = None
        self.em: list[int] | None = None
        self.extra_g = 0
        self.free_g = 0

    def all_free(self) -> Cluster:
        """A cluster of the same nodes with all of them free, as ``Cluster(nodes)`` gives,
        sharing the lists that never change."""
        cl = Cluster.__new__(Cluster)
        cl.names, cl.index, cl.model, cl.models = self.names, self.index, self.model, self.models
        cl.cap_g, cl.cap_c, cl.cap_m, cl.maxg = self.cap_g, self.cap_c, self.cap_m, self.maxg
        cl.fg, cl.fc, cl.fm = list(self.cap_g), list(self.cap_c), list(self.cap_m)
        cl.buckets = {}
        cl.eg = cl.ec = cl.em = None
        cl.extra_g = cl.free_g = 0
        return cl

    def build(self) -> None:
        self.buckets = {m: [{} for _ in range(self.maxg + 1)] for m in self.models}
        for i, f in enumerate(self.fg):
            self.buckets[self.model[i]][min(max(f, 0), self.maxg)][i] = None
        self.free_g = sum(f for f in self.fg if f > 0)

    def take(self, i: int, g: int, c: float, m: int, extra: bool = False) -> None:
        old = self.fg[i]
        new = self.fg[i] = old - g
        self.fc[i] -= c
        self.fm[i] -= m
        if self.buckets:  # the node's bucket: min(max(free, 0), top); max(free, 0) for free_g
            top = self.maxg
            ob = 0 if old < 0 else top if old > top else old
            nb = 0 if new < 0 else top if new > top else new
            if ob != nb:
                b = self.buckets[self.model[i]]
                del b[ob][i]
                b[nb][i] = None
            self.free_g += (new if new > 0 else 0) - (old if old > 0 else 0)
        if extra and self.eg is not None:
            self.eg[i] -= g
            self.ec[i] -= c
            self.em[i] -= m
            self.extra_g -= g

    def give(self, i: int, g: int, c: float, m: int, extra: bool = False) -> None:
        self.take(i, -g, -c, -m, extra)

    def find(self, g: int, c: float, m: int, model: str, constrained: bool) -> int:
        models = (model,) if model else self.models
        fc, fm = self.fc, self.fm
        eg, ec, em = self.eg, self.ec, self.em
        for level in range(max(g, 0), self.maxg + 1):
            for mdl in models:
                blist = self.buckets.get(mdl)
                if blist is None:
                    continue
                for i in blist[level]:
                    if (
                        fc[i] >= c
                        and fm[i] >= m
                        and (not constrained or (eg[i] >= g and ec[i] >= c and em[i] >= m))
                    ):
                        return i
        return -1

    def place(self, job: JobRequest, constrained: bool) -> dict[str, int] | None:
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        if job.workers == 1:  # most jobs: no gang to undo
            i = self.find(g, c, m, job.gpu_model, constrained)
            if i < 0:
                return None
            self.take(i, g, c, m, constrained)
            return {self.names[i]: 1}
        taken: list[int] = []
        for _ in range(job.workers):
            i = self.find(g, c, m, job.gpu_model, constrained)
            if i < 0:
                for k in taken:
                    self.give(k, g, c, m, constrained)
                return None
            self.take(i, g, c, m, constrained)
            taken.append(i)
        placement: dict[str, int] = {}
        for k in taken:
            name = self.names[k]
            placement[name] = placement.get(name, 0) + 1
        return placement

    def unplace(self, job: JobRequest, placement: Mapping[str, int], constrained: bool) -> None:
        g, c, m = job.gpus_per_worker, job.cpus_per_worker, job.memory_mb_per_worker
        for name, w in placement.items():
            self.give(self.index[name], w * g, w * c, w * m, constrained)


def fits_count(fg: int, fc: float, fm: int, g: int, c: float, m: int) -> int:
    """How many identical workers fit in the given free amounts."""
    k = INF
    if g > 0:
        k = fg // g
    if c > 0:
        k = min(k, math.floor(fc / c + 1e-9))
    if m > 0:
        k = min(k, fm // m)
    if k == INF:
        return 1 << 30
    return max(int(k), 0)


def fits_counts(fg: Sequence, fc: Sequence, fm: Sequence, g: int, c: float, m: int) -> list[int]:
    """``fits_count`` for each node's free amounts (the same numbers, in C-level maps)."""
    each = []
    if g > 0:
        each.append(map(operator.floordiv, fg, itertools.repeat(g)))
    if c > 0:
        each.append(map(math.floor, map(operator.add, map(operator.truediv, fc, itertools.repeat(c)),
                                         itertools.repeat(1e-9))))
    if m > 0:
        each.append(map(operator.floordiv, fm, itertools.repeat(m)))
    if not each:
        return [1 << 30] * len(fg)
    k = each[0] if len(each) == 1 else map(min, *each)
    return list(map(max, map(int, k), itertools.repeat(0)))
