"""Job identity: which distributed job a pod belongs to, and which rank it is.

Every operator names its jobs with its own pod label (Kubeflow, JobSet, Volcano, batch Jobs), and
numbers ranks with its own index labels. This module is the one place that knows those labels, so
that the Prometheus path (kube-state-metrics `kube_pod_labels`) and the Kubernetes API path group
pods into the same jobs with the same ranks.

- Job: the first label key of a configurable ordered list that the pod carries; the job key is
  `namespace/<label value>` and the job kind is that label key.
- Rank: from the operator's index labels — `training.kubeflow.org/replica-index`,
  `jobset.sigs.k8s.io/job-global-index` (or `job-index`) combined with
  `batch.kubernetes.io/job-completion-index`, `volcano.sh/task-index`,
  `batch.kubernetes.io/job-completion-index` — or else the pod name's trailing ordinal
  (`llama-worker-3` -> 3). Leader roles (`master`, `chief`) rank before workers (PyTorchJob:
  master is rank 0, worker i is rank i+1); `launcher`, `ps` and `evaluator` pods belong to the job
  but have no rank.
- kube-state-metrics exports pod labels sanitised (`label_training_kubeflow_org_job_name`); both
  that form and the bare sanitised form are accepted.

Pods are few (one per 8 GPUs), so this works on Pod records; GPUs never pass through here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache, partial
from operator import attrgetter
from typing import NamedTuple

from observer.fleet.model import NO_INDEX, Job, JobKey, Pod

DEFAULT_JOB_LABEL_KEYS: tuple[str, ...] = (
    "training.kubeflow.org/job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "volcano.sh/job-name",
    "batch.kubernetes.io/job-name",
    "job-name",
)
"""Job-name labels of Kubeflow, JobSet, Volcano and batch Jobs (old and new key), in priority
order: a JobSet's pods also carry `batch.kubernetes.io/job-name` of their child Job, so the
JobSet key must win."""

KUBEFLOW_INDEX = "training.kubeflow.org/replica-index"
KUBEFLOW_ROLE = "training.kubeflow.org/replica-type"
JOBSET_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
VOLCANO_INDEX = "volcano.sh/task-index"
VOLCANO_ROLE = "volcano.sh/task-spec"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

LEADER_ROLES = frozenset({"master", "chief"})
NON_RANK_ROLES = frozenset({"launcher", "ps", "evaluator"})

_ORDINAL = re.compile(r"-(\d+)$")
_SANITISE = re.compile(r"[^a-zA-Z0-9_]")


@cache
def label_forms(key: str) -> tuple[str, ...]:
    """A label key as Kubernetes writes it and as kube-state-metrics exports it."""
    bare = _SANITISE.sub("_", key)
    return (key, f"label_{bare}", bare)


def label_value(labels: Mapping[str, str], key: str) -> str | None:
    """The non-empty value of `key` in any of its forms, else None."""
    for form in label_forms(key):
        value = labels.get(form)
        if value:
            return value
    return None


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


class _RankParts(NamedTuple):
    role: str
    major: int | None
    """JobSet child-job index (global when available)."""
    minor: int


def _rank_parts(pod: Pod, ksm: bool) -> _RankParts | None:
    labels = pod.labels
    get: Callable[[str], str | None] = (
        partial(label_value, labels) if ksm else labels.get  # kube-state-metrics' form or not
    )
    role = (get(KUBEFLOW_ROLE) or get(VOLCANO_ROLE) or "").lower()
    if role in NON_RANK_ROLES:
        return None
    major = _int(get(JOBSET_GLOBAL_INDEX))
    if major is None:
        major = _int(get(JOBSET_JOB_INDEX))
    minor = _int(get(KUBEFLOW_INDEX) or get(VOLCANO_INDEX) or get(COMPLETION_INDEX))
    if minor is not None:
        return _RankParts(role, major, minor)
    if major is not None:
        return _RankParts(role, major, 0)
    m = _ORDINAL.search(pod.name)
    return _RankParts(role, None, int(m.group(1))) if m else None


def _ranks(parts: Sequence[_RankParts | None]) -> list[int]:
    """Ranks of one job's pods: leaders first, JobSet child jobs laid out end to end."""
    ranked = [p for p in parts if p is not None]
    width = 1 + max((p.minor for p in ranked if p.major is not None), default=0)
    leaders = 1 + max((p.minor for p in ranked if p.role in LEADER_ROLES), default=-1)
    out: list[int] = []
    for p in parts:
        if p is None:
            out.append(NO_INDEX)
            continue
        rank = p.minor if p.major is None else p.major * width + p.minor
        out.append(rank if p.role in LEADER_ROLES else leaders + rank)
    return out


@dataclass(frozen=True, slots=True)
class JobIdentity:
    """Groups pods into jobs by an ordered list of job-name label keys."""

    label_keys: tuple[str, ...] = field(default=DEFAULT_JOB_LABEL_KEYS)

    def job_of(self, pod: Pod) -> tuple[JobKey, str] | None:
        """(`namespace/name`, label key) of the pod's job, or None for a pod outside any job."""
        hit = self._job_of(pod)
        return None if hit is None else (hit[0], hit[1])

    def _job_of(self, pod: Pod) -> tuple[JobKey, str, bool] | None:
        """As `job_of`, plus whether the labels are in kube-state-metrics' sanitised form."""
        for key in self.label_keys:
            value = pod.labels.get(key)
            if value:
                return JobKey(f"{pod.namespace}/{value}"), key, False
        for key in self.label_keys:
            value = label_value(pod.labels, key)
            if value:
                return JobKey(f"{pod.namespace}/{value}"), key, True
        return None

    def assign(self, pods: Sequence[Pod]) -> tuple[tuple[Pod, ...], tuple[Job, ...]]:
        """Pods with `job_index` and `rank` filled in (same order), and the jobs sorted by key.

        A job's `pod_indices` are in rank order; pods without a rank (launchers, parameter
        servers, unlabelled) follow, by name. Two pods may share a rank while one is replaced;
        the Running one comes first.
        """
        members: dict[JobKey, list[int]] = {}
        kinds: dict[JobKey, str] = {}
        ksm: list[bool] = [False] * len(pods)
        for i, pod in enumerate(pods):
            hit = self._job_of(pod)
            if hit is not None:
                members.setdefault(hit[0], []).append(i)
                kinds.setdefault(hit[0], hit[1])
                ksm[i] = hit[2]
        out = [  # a record from an earlier snapshot may carry a stale job
            p
            if p.job_index == NO_INDEX and p.rank == NO_INDEX
            else _with_job(p, NO_INDEX, NO_INDEX)
            for p in pods
        ]
        jobs: list[Job] = []
        for job_index, key in enumerate(sorted(members)):
            idx = members[key]
            ranks = _ranks([_rank_parts(pods[i], ksm[i]) for i in idx])
            for i, rank in zip(idx, ranks, strict=True):
                p = pods[i]
                same = p.job_index == job_index and p.rank == rank  # reused across cycles
                out[i] = p if same else _with_job(p, job_index, rank)
            order = sorted(
                range(len(idx)),
                key=lambda j: (
                    ranks[j] == NO_INDEX,
                    ranks[j],
                    pods[idx[j]].phase != "Running",  # a replacement's live pod first
                    pods[idx[j]].name,
                ),
            )
            jobs.append(Job(key, kinds[key], tuple(idx[j] for j in order)))
        return tuple(out), tuple(jobs)


_POD_FIELDS = tuple(f.name for f in fields(Pod))
_JOB_INDEX_AT = _POD_FIELDS.index("job_index")
_RANK_AT = _POD_FIELDS.index("rank")


_POD_VALUES = attrgetter(*_POD_FIELDS)


def _with_job(pod: Pod, job_index: int, rank: int) -> Pod:
    """`dataclasses.replace(pod, job_index=..., rank=...)`, 5x cheaper (12.5k pods per build)."""
    values = list(_POD_VALUES(pod))
    values[_JOB_INDEX_AT] = job_index
    values[_RANK_AT] = rank
    return Pod(*values)
