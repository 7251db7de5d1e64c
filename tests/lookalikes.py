"""Straggler look-alikes the simulator does not model, laid over its snapshots.

The simulator makes every healthy rank of a job equally busy (plus scrape noise), so on its own
it cannot show the two patterns the straggler detector must not page on:
- sequence-length imbalance: each step, every rank gets a different amount of work and all wait
  for the busiest; which rank that is changes from step to step. Per scrape a rank reads as the
  average over the scrape's steps of (its work / the step's largest work). `one_heavy_per_scrape`
  is the adversarial extreme: a single rank does all the extra work for a whole scrape.
- pipeline-stage imbalance: the GPUs of one node (a heavier stage) are uniformly busier than the
  rest of the job, for good.
Both scale the activity gauges (util, graphics, tensor, DRAM) of the job's GPUs, like the
simulator's own straggler (simulator/levels.py); the phases stay the simulator's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType

import numpy as np

from detectors.signals import DRAM_ACTIVE, GR_ACTIVE, TENSOR_ACTIVE, UTIL
from observer.fleet.model import FleetSnapshot

Frames = Iterable[tuple[float, FleetSnapshot]]
Factor = Callable[[np.random.Generator, np.ndarray, FleetSnapshot], np.ndarray]
"""(rng, row positions of one job's GPUs, snapshot) -> activity factor per row (<= 1)."""
SCALED = (UTIL, GR_ACTIVE, TENSOR_ACTIVE, DRAM_ACTIVE)


def sequence_imbalance(sd: float = 0.15, steps: int = 10) -> Factor:
    """Per-step work per rank ~ lognormal(0, sd); a rank's activity is its mean share of the
    step's busiest rank over `steps` steps per scrape. sd 0.15: the longest of 32 sequences
    buckets is ~35 % above the median."""

    def factor(rng: np.random.Generator, rows: np.ndarray, snap: FleetSnapshot) -> np.ndarray:
        work = rng.lognormal(0.0, sd, (steps, rows.shape[0]))
        out: np.ndarray = (work / work.max(axis=1, keepdims=True)).mean(axis=0)
        return out

    return factor


def one_heavy_per_scrape(extra: float = 0.25) -> Factor:
    """A random rank does `extra` more work for a whole scrape; the others wait for it."""

    def factor(rng: np.random.Generator, rows: np.ndarray, snap: FleetSnapshot) -> np.ndarray:
        out = np.full(rows.shape[0], 1.0 / (1.0 + extra))
        out[rng.integers(rows.shape[0])] = 1.0
        return out

    return factor


def heavy_stage(extra: float = 0.15, which: int = 0) -> Factor:
    """The job's GPUs on its `which`-th node (by node position) carry `extra` more work."""

    def factor(rng: np.random.Generator, rows: np.ndarray, snap: FleetSnapshot) -> np.ndarray:
        nodes = snap.gpus.node_index[rows]
        stage = np.unique(nodes)[which % np.unique(nodes).shape[0]]
        return np.where(nodes == stage, 1.0, 1.0 / (1.0 + extra))

    return factor


def overlay(
    frames: Frames, jobs: Iterable[str], factor: Factor, seed: int
) -> Iterator[tuple[float, FleetSnapshot]]:
    """The frames with `factor` applied to each of `jobs`' GPUs (by job key), per snapshot."""
    wanted = frozenset(jobs)
    for t, snap in frames:
        rng = np.random.default_rng([seed, int(t)])
        scale = np.ones(len(snap.gpus))
        for j, job in enumerate(snap.jobs):
            if str(job.key) in wanted:
                rows = np.flatnonzero(snap.gpus.job_index == j)
                if rows.shape[0]:
                    scale[rows] = factor(rng, rows, snap)
        metrics = dict(snap.metrics)
        for name in SCALED:
            col = metrics.get(name)
            if col is not None:
                metrics[name] = dataclasses.replace(col, value=col.value * scale)
        yield t, dataclasses.replace(snap, metrics=MappingProxyType(metrics))
