"""The pages' data layer: the store opened once per process, queries cached with a short TTL.

`st.cache_data` is global across sessions, so ten people watching one fleet cost one query per
TTL; anything that changes the journal (approve, reject, pause) clears the cache, so its author
sees the change at once.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import fields
from operator import attrgetter
from typing import Any

import pandas as pd  # type: ignore[import-untyped]
import streamlit as st

import metering
from dashboards import queries, repairs
from remediations.staleness import stale_reason
from remediations.store import Store
from remediations.validation import RETURN_PLAYBOOKS

TTL = 10.0
"""Seconds a query's answer is reused (the live cycle runs every 15-30 s)."""
ALL = "All clusters"


@st.cache_resource(show_spinner=False)
def store(url: str, cluster: str) -> Store:
    """One open store per (URL, cluster) per process (migrated to the current schema)."""
    return Store.open(url, cluster=cluster)


@st.cache_data(ttl=TTL, show_spinner=False)
def stale(url: str, cluster: str, action_id: str) -> str | None:
    """Why an action awaiting approval no longer fits the journal (approving it would expire
    it: `remediations.staleness`), or None."""
    s = store(url, cluster)
    a = s.get_action(action_id)
    return None if a is None else stale_reason(s, a)


def _engine(url: str) -> Any:
    return store(url, "default").engine


def scope(cluster: str) -> str | None:
    """The selector's value as a query filter (None: every cluster)."""
    return None if cluster == ALL else cluster


@st.cache_data(ttl=TTL, show_spinner=False)
def clusters(url: str) -> list[str]:
    return queries.clusters(_engine(url))


@st.cache_data(ttl=TTL, show_spinner=False)
def incidents(url: str, cluster: str, since: float, until: float | None = None) -> pd.DataFrame:
    return queries.incidents(_engine(url), scope(cluster), since, until)


@st.cache_data(ttl=TTL, show_spinner=False)
def incident_counts(url: str, cluster: str) -> dict[str, int]:
    return queries.incident_counts(_engine(url), scope(cluster))


@st.cache_data(ttl=TTL, show_spinner=False)
def evidence(url: str, incident_id: str) -> dict[str, Any]:
    return queries.incident_evidence(_engine(url), incident_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def actions(
    url: str,
    cluster: str,
    since: float | None = None,
    states: Sequence[str] | None = None,
    incident_id: str | None = None,
) -> pd.DataFrame:
    st_list = list(states) if states is not None else None
    return queries.actions(_engine(url), scope(cluster), since, st_list, incident_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def job_runs(url: str, cluster: str) -> pd.DataFrame:
    return queries.job_runs(_engine(url), scope(cluster))


@st.cache_data(ttl=TTL, show_spinner=False)
def audit(
    url: str,
    cluster: str,
    since: float | None = None,
    kinds: Sequence[str] | None = None,
    action_id: str | None = None,
    incident_id: str | None = None,
) -> pd.DataFrame:
    k = list(kinds) if kinds is not None else None
    return queries.audit(_engine(url), scope(cluster), since, k, action_id, incident_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def engine_states(url: str, cluster: str) -> pd.DataFrame:
    return queries.engine_states(_engine(url), scope(cluster))


@st.cache_data(ttl=TTL, show_spinner=False)
def out_of_service(url: str, cluster: str, since: float) -> pd.DataFrame:
    """What gpufleet holds out of service, and what it returned since `since`, with where each
    repair stands (dashboards.repairs)."""
    taken = queries.taken_out(
        _engine(url), scope(cluster), list(repairs.TAKE_OUT), sorted(RETURN_PLAYBOOKS), since
    )
    rows = []
    for c, group in taken.groupby("cluster", sort=True):
        for r in repairs.out_of_service(store(url, str(c)), list(group["target"])):
            rows.append({"cluster": c, **dataclasses.asdict(r)})
    cols = ["cluster", *(f.name for f in fields(repairs.OutOfService))]
    return pd.DataFrame(rows, columns=cols)


def away(out: pd.DataFrame) -> pd.DataFrame:
    """The rows of `out_of_service` still held (not returned): what the Out of service table
    counts and the Fleet page's out-of-service GPUs are read from."""
    return out[out["state"] != "returned"] if not out.empty else out


def changed() -> None:
    """The journal moved (approve, reject, pause): forget every cached answer."""
    st.cache_data.clear()


def now() -> float:
    """The wall clock to 10 s (the TTL): windows ending now keep their cache key that long."""
    return float(time.time() // TTL * TTL)


# ---- metering (the latest fleet state, GPU-hours) --------------------------------------------


def _mcluster(cluster: str) -> str:
    return metering.ALL_CLUSTERS if cluster == ALL else cluster


@st.cache_data(ttl=TTL, show_spinner=False)
def fleet(url: str, cluster: str) -> pd.DataFrame:
    """The latest state of every GPU (one row per GPU or MIG instance)."""
    rows = metering.fleet_state(store(url, "default"), _mcluster(cluster))
    cols = [f.name for f in fields(metering.GpuState)]
    get = attrgetter(*cols)
    return pd.DataFrame([get(r) for r in rows], columns=cols)


@st.cache_data(ttl=TTL, show_spinner=False)
def last_cycle(url: str, cluster: str) -> float | None:
    return metering.last_cycle(store(url, "default"), _mcluster(cluster))


@st.cache_data(ttl=TTL, show_spinner=False)
def usage(
    url: str, cluster: str, start: float, end: float, by: str, per_bucket: bool = False
) -> pd.DataFrame:
    """GPU-hours per key and model over [start, end) from the 5-minute rollups."""
    rows = metering.usage(
        store(url, "default"),
        start,
        end,
        by,  # type: ignore[arg-type]
        cluster=_mcluster(cluster),
        per_bucket=per_bucket,
    )
    cols = [*(f.name for f in fields(metering.Usage)), "idle_gpu_hours"]
    get = attrgetter(*cols)
    return pd.DataFrame([get(r) for r in rows], columns=cols)


@st.cache_data(ttl=TTL, show_spinner=False)
def usage_series(
    url: str,
    cluster: str,
    dimension: str,
    start: float,
    end: float,
    resolution: int = 300,
    key: str | None = None,
) -> pd.DataFrame:
    """GPU-hours per key per `resolution` seconds (summed in SQL); `t` as UTC datetimes."""
    df = queries.usage_series(_engine(url), scope(cluster), dimension, start, end, resolution, key)
    return df.assign(t=pd.to_datetime(df["t"], unit="s", utc=True))


def bucket_now() -> float:
    """Now rounded up to metering's 5-minute bucket: the end of a window that keeps the same
    cache key for five minutes (metering rounds windows to buckets anyway)."""
    t = time.time()
    return float(-(-t // 300) * 300)
