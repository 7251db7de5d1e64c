"""The DRA adapter: GPUs from ResourceSlices, gpufleet's DeviceTaintRules at the version served.

The one module that reads ResourceSlices and ResourceClaims (`resource.k8s.io/v1`, GA since
1.34; the betas where only they are served, discovered like the rules) and writes
DeviceTaintRules. Those are GA (v1) only from 1.37; 1.34-1.36 serve them at
v1alpha3 or v1beta2 behind the `DRADeviceTaints` gate, or not at all. So the version is
discovered (`rule_version`) before any rule is read or written, and a cluster that serves none
answers "nothing fenced" to reads and `DeviceTaintsNotServed` to writes, never a 404 per fence.

A finding names a GPU by UUID; the NVIDIA DRA driver publishes each GPU as a device of a
ResourceSlice (driver `gpu.nvidia.com`, pool = node name) with a `uuid` attribute, so the UUID
maps to exactly one (driver, pool, device), and the ResourceClaims allocated that device say
which pods hold it. gpufleet's rules carry the `app.kubernetes.io/managed-by: gpufleet` label and
the action/incident annotations, and their names are derived from the GPU UUID, so re-creating
one after a crash finds the earlier one (409) and deleting one never touches a rule someone
else made.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from remediations.types import DEVICE_TAINTS_NOT_SERVED

NVIDIA_DRIVER = "gpu.nvidia.com"
MANAGED_BY = "app.kubernetes.io/managed-by"
EFFECTS = ("None", "NoSchedule", "NoExecute")
GROUP = "resource.k8s.io"
RULE_APIS: dict[str, Callable[[client.ApiClient], Any]] = {
    "v1": client.ResourceV1Api,
    "v1beta2": client.ResourceV1beta2Api,
    "v1alpha3": client.ResourceV1alpha3Api,
}
"""The versions that can serve DeviceTaintRule, most stable first (the order of preference)."""
SLICE_APIS: dict[str, Callable[[client.ApiClient], Any]] = {
    "v1": client.ResourceV1Api,
    "v1beta2": client.ResourceV1beta2Api,
    "v1beta1": client.ResourceV1beta1Api,
}
"""The versions that can serve ResourceSlices and ResourceClaims: v1 from 1.34 on by default,
the betas only where the API server's runtime-config enables them (or v1 is switched off)."""
REDISCOVER_SECONDS = 300.0
"""How long "no DeviceTaintRules here" is believed before discovery asks again (a gate turned
on, an upgrade)."""
NOT_SERVED = DEVICE_TAINTS_NOT_SERVED
log = logging.getLogger(__name__)


class DeviceTaintsNotServed(Exception):
    """The cluster serves DeviceTaintRule at no version gpufleet knows."""

    def __init__(self) -> None:
        super().__init__(NOT_SERVED)


def rule_version(api: client.ApiClient) -> str | None:
    """The preferred `resource.k8s.io` version that serves DeviceTaintRule, None when none does."""
    return served_version(api, "devicetaintrules", RULE_APIS)


def served_version(
    api: client.ApiClient, plural: str, apis: Mapping[str, Callable[[client.ApiClient], Any]]
) -> str | None:
    """The first version of `apis` (most stable first) that serves `plural` in
    `resource.k8s.io` (discovery: the group's versions, then each version's resource list)."""
    try:
        group = client.ResourceApi(api).get_api_group(_request_timeout=10)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    served = {v.version for v in group.versions or ()}
    for version, api_class in apis.items():
        if version not in served:
            continue
        found = api_class(api).get_api_resources(_request_timeout=10)
        if any(r.name == plural for r in found.resources or ()):
            return version
    return None


@dataclass(frozen=True, slots=True)
class DraDevice:
    driver: str
    pool: str
    device: str
    node: str | None


@dataclass(frozen=True, slots=True)
class TaintRuleView:
    name: str
    uid: str
    driver: str | None
    pool: str | None
    device: str | None
    key: str
    value: str
    effect: str
    ours: bool
    annotations: Mapping[str, str]
    labels: Mapping[str, str] = field(default_factory=dict)


def _view(r: Any) -> TaintRuleView:
    meta, spec = r.metadata, r.spec
    sel, taint = spec.device_selector, spec.taint
    labels = dict(meta.labels or {})
    return TaintRuleView(
        name=meta.name,
        uid=meta.uid or "",
        driver=sel.driver if sel else None,
        pool=sel.pool if sel else None,
        device=sel.device if sel else None,
        key=taint.key,
        value=taint.value or "",
        effect=taint.effect,
        ours=labels.get(MANAGED_BY) == "gpufleet",
        annotations=dict(meta.annotations or {}),
        labels=labels,
    )


def _attributes(device: Any) -> Mapping[str, Any]:
    """A published device's attributes: on the device from v1beta2, under `basic` in v1beta1."""
    basic = getattr(device, "basic", None)
    attrs = basic.attributes if basic is not None else getattr(device, "attributes", None)
    return attrs or {}


class DraClient:
    """ResourceSlice reads and DeviceTaintRule writes over a `kubernetes.client.ApiClient`.

    Raises the client's ApiException / urllib3 errors; the actuator maps them."""

    def __init__(
        self, api: client.ApiClient, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.api = api
        self.clock = clock
        self._version: str | None = None
        self._checked_at: float | None = None
        self._slice_version: str | None = None
        self._slice_checked_at: float | None = None

    def slice_version(self) -> str | None:
        """The ResourceSlice/ResourceClaim version this cluster serves (v1 where it can;
        a "none" is asked again after REDISCOVER_SECONDS); None: no DRA here."""
        now = self.clock()
        if self._slice_version is None and (
            self._slice_checked_at is None or now - self._slice_checked_at >= REDISCOVER_SECONDS
        ):
            self._slice_version = served_version(self.api, "resourceslices", SLICE_APIS)
            self._slice_checked_at = now
            if self._slice_version not in (None, "v1"):
                log.info("ResourceSlices read at %s/%s", GROUP, self._slice_version)
        return self._slice_version

    def _slices(self) -> Any:
        """The client API of the ResourceSlice version served (callers check `slice_version`
        first). Callers bind it as `api: client.ResourceV1Api`: every version has the same
        methods, and the RBAC check (tests/deploy/rbac_calls.py) reads that binding."""
        return SLICE_APIS[self.slice_version() or "v1"](self.api)

    def rule_version(self) -> str | None:
        """The DeviceTaintRule version this cluster serves (discovered once, a "none" again
        after REDISCOVER_SECONDS); None: single-GPU fencing is not possible here."""
        now = self.clock()
        if self._version is None and (
            self._checked_at is None or now - self._checked_at >= REDISCOVER_SECONDS
        ):
            self._version = rule_version(self.api)
            self._checked_at = now
            if self._version is None:
                log.warning("%s: fence_gpu falls back to the pods-on-GPU grain", NOT_SERVED)
            else:
                log.info("DeviceTaintRules served at %s/%s", GROUP, self._version)
        return self._version

    def _rules(self) -> Any:
        """The client API of the DeviceTaintRule version served (DeviceTaintsNotServed: none).
        Callers bind it as `rules: client.ResourceV1Api`: every version has the same methods
        and body shape, and the RBAC check (tests/deploy/rbac_calls.py) reads that binding."""
        version = self.rule_version()
        if version is None:
            raise DeviceTaintsNotServed()
        return RULE_APIS[version](self.api)

    def _forget_on_404(self, exc: ApiException) -> None:
        """A 404 for a whole rule collection: the version went away; discover again next time."""
        if exc.status == 404:
            self._version, self._checked_at = None, None

    def find_device(
        self, node: str, gpu_uuid: str, driver: str = NVIDIA_DRIVER
    ) -> DraDevice | None:
        """The DRA device whose `uuid` attribute is `gpu_uuid` on `node` (None: not a DRA GPU)."""
        if self.slice_version() is None:
            return None
        api: client.ResourceV1Api = self._slices()
        slices = api.list_resource_slice(
            field_selector=f"spec.nodeName={node},spec.driver={driver}"
        )
        for s in slices.items:
            spec = s.spec
            for d in spec.devices or ():
                attr = _attributes(d).get("uuid")
                if attr is not None and attr.string == gpu_uuid:
                    return DraDevice(spec.driver, spec.pool.name, d.name, spec.node_name)
        return None

    def our_rules(self) -> list[TaintRuleView]:
        """gpufleet's DeviceTaintRules (by the managed-by label); none where none are served."""
        if self.rule_version() is None:
            return []
        rules: client.ResourceV1Api = self._rules()
        try:
            found = rules.list_device_taint_rule(label_selector=f"{MANAGED_BY}=gpufleet")
        except ApiException as exc:
            self._forget_on_404(exc)
            raise
        return [_view(r) for r in found.items]

    def device_info(self, driver: str, pool: str, device: str) -> tuple[str, int, str] | None:
        """(node, `index`, `uuid`) of a published device, None when no slice publishes it."""
        if self.slice_version() is None:
            return None
        api: client.ResourceV1Api = self._slices()
        for s in api.list_resource_slice(field_selector=f"spec.driver={driver}").items:
            spec = s.spec
            if spec.pool.name != pool or not spec.node_name:
                continue
            for d in spec.devices or ():
                attrs = _attributes(d)
                idx, uuid = attrs.get("index"), attrs.get("uuid")
                if d.name != device or idx is None or idx.int is None or uuid is None:
                    continue
                return spec.node_name, int(idx.int), str(uuid.string)
        return None

    def device_holders(self) -> dict[tuple[str, str, str], tuple[str, ...]] | None:
        """(driver, pool, device) -> who holds it through a ResourceClaim: `namespace/pod` for
        each pod in `status.reservedFor`, `resourceclaim namespace/name` for a claim allocated but
        not (yet or any more) reserved. One list across namespaces (claims have no field selector
        for a node); None when the cluster serves no ResourceClaims (at the version discovered)."""
        if self.slice_version() is None:
            return None
        api: client.ResourceV1Api = self._slices()
        try:
            claims = api.list_resource_claim_for_all_namespaces()
        except ApiException as exc:
            if exc.status == 404:
                self._slice_version, self._slice_checked_at = None, None
                return None
            raise
        out: dict[tuple[str, str, str], tuple[str, ...]] = {}
        for c in claims.items:
            st, meta = c.status, c.metadata
            if st is None or meta is None or st.allocation is None or not st.allocation.devices:
                continue
            ns = meta.namespace
            who = tuple(
                f"{ns}/{r.name}"
                if r.resource == "pods" and not r.api_group
                else f"{r.resource} {r.name}"
                for r in st.reserved_for or ()
            ) or (f"resourceclaim {ns}/{meta.name}",)
            for r in st.allocation.devices.results or ():
                key = (r.driver, r.pool, r.device)
                out[key] = (*out.get(key, ()), *who)
        return out

    def set_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Merge labels into gpufleet's rule (None removes one); the taint is left as it is."""
        rules: client.ResourceV1Api = self._rules()
        body: Any = {"metadata": {"labels": dict(labels)}}
        rules.patch_device_taint_rule(name, body)

    def rule(self, name: str) -> TaintRuleView | None:
        """Rule `name`, None when absent (or when the cluster serves no DeviceTaintRules)."""
        if self.rule_version() is None:
            return None
        try:
            rules: client.ResourceV1Api = self._rules()
            return _view(rules.read_device_taint_rule(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_rule(
        self,
        name: str,
        dev: DraDevice,
        taint: tuple[str, str, str],
        labels: Mapping[str, str],
        annotations: Mapping[str, str],
    ) -> bool:
        """Create gpufleet's rule for `dev` at the version served; False when a rule of that
        name already exists (DeviceTaintsNotServed: the cluster serves none)."""
        key, value, effect = taint
        if effect not in EFFECTS:
            raise ValueError(f"device taint effect must be one of {EFFECTS}, not {effect!r}")
        rules: client.ResourceV1Api = self._rules()
        body: Any = {  # the same shape at v1alpha3, v1beta2 and v1
            "apiVersion": f"{GROUP}/{self._version}",
            "kind": "DeviceTaintRule",
            "metadata": {
                "name": name,
                "labels": {**labels, MANAGED_BY: "gpufleet"},
                "annotations": dict(annotations),
            },
            "spec": {
                "deviceSelector": {"driver": dev.driver, "pool": dev.pool, "device": dev.device},
                "taint": {"key": key, "value": value, "effect": effect},
            },
        }
        try:
            rules.create_device_taint_rule(body)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def set_taint(
        self, name: str, taint: tuple[str, str, str], annotations: Mapping[str, str]
    ) -> None:
        """Change the taint of gpufleet's existing rule (e.g. a `None` dry run becomes a fence);
        the API server restamps `timeAdded` when the effect changes."""
        key, value, effect = taint
        body = {
            "metadata": {"annotations": dict(annotations)},
            "spec": {"taint": {"key": key, "value": value, "effect": effect}},
        }
        rules: client.ResourceV1Api = self._rules()
        rules.patch_device_taint_rule(name, body)

    def delete_rule(self, name: str) -> str:
        """Delete rule `name` if gpufleet owns it; says what happened."""
        current = self.rule(name)
        if current is None:
            return f"device taint rule {name} already absent"
        if not current.ours:
            return f"device taint rule {name} is not gpufleet's: left alone"
        try:
            opts = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=current.uid))
            rules: client.ResourceV1Api = self._rules()
            rules.delete_device_taint_rule(name, body=opts)
        except ApiException as exc:
            if exc.status == 409:
                return f"device taint rule {name} was replaced meanwhile: left alone"
            if exc.status == 404:
                return f"device taint rule {name} already absent"
            raise
        return f"deleted device taint rule {name}"
