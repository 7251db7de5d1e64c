"""Object validation of the simulated API server: what a real one answers 422 Invalid to.

gpufleet once depended on the simulator's leniency (Job names cut after a `.`, node names as
label values, whole-second Lease times) and every such write failed on a real cluster. So each
object the product writes is checked as pkg/apis/*/validation does, and a refusal carries the
real shape: `<Kind>.<group> "<name>" is invalid: <field>: <what>` with `details.causes`.
Covered: names by kind (DNS-1123 subdomain, or label for namespaces), label keys and values,
annotation keys and total size, node taints, Job specs (what the Job strategy adds to the pod
template included), Lease fields and their MicroTime syntax, DeviceTaintRules, PDB specs
(simulator.kube_api.pdb_spec).
"""

from __future__ import annotations

import re
from typing import Any

from simulator import dra
from simulator.kube_api import names, pdb_spec
from simulator.kube_api.field_errors import FieldError, quote

Obj = dict[str, Any]

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
JOB_RESTART_POLICIES = ("OnFailure", "Never")
ANNOTATIONS_MAX_BYTES = 256 * 1024
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}(Z|[+-]\d\d:\d\d)$")
MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
LABEL_NAMED_RESOURCES = ("namespaces",)
"""Kinds whose names are DNS-1123 labels; every other kind here takes a DNS-1123 subdomain."""
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
"""Labels the Job strategy puts on the pod template, valued with the Job's name."""


class Undecodable(ValueError):
    """The body cannot be decoded into the kind (a malformed MicroTime): 400 BadRequest."""


def _bad(field: str, detail: str, value: Any) -> FieldError:
    return FieldError(field, "FieldValueInvalid", detail, value)


def _invalid(field: str, value: Any, errs: list[str]) -> list[FieldError]:
    return [FieldError(field, "FieldValueInvalid", "; ".join(errs), value)] if errs else []


def _nonnegative(spec: Obj, path: str, *keys: str) -> list[FieldError]:
    out = []
    for k in keys:
        v = spec.get(k)
        if isinstance(v, int) and v < 0:
            out.append(
                FieldError(
                    f"{path}.{k}", "FieldValueInvalid", "must be greater than or equal to 0", v
                )
            )
    return out


def metadata(meta: Obj, path: str = "metadata") -> list[FieldError]:
    """Label keys and values, annotation keys and total size."""
    out: list[FieldError] = []
    for k, v in (meta.get("labels") or {}).items():
        out += _invalid(f"{path}.labels", k, names.qualified_name(str(k)))
        out += _invalid(f"{path}.labels", v, names.label_value(str(v)))
    annotations = meta.get("annotations") or {}
    for k in annotations:
        out += _invalid(f"{path}.annotations", k, names.qualified_name(str(k)))
    size = sum(len(str(k)) + len(str(v)) for k, v in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        out.append(
            FieldError(f"{path}.annotations", "FieldValueTooLong",
                       f"must have at most {ANNOTATIONS_MAX_BYTES} bytes")
        )  # fmt: skip
    return out


def object_name(resource: str, meta: Obj) -> list[FieldError]:
    name = str(meta.get("name") or "")
    if not name:
        return []  # create reports the missing name itself
    check = names.dns1123_label if resource in LABEL_NAMED_RESOURCES else names.dns1123_subdomain
    return _invalid("metadata.name", name, check(name))


def node_taints(spec: Obj) -> list[FieldError]:
    out: list[FieldError] = []
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(spec.get("taints") or []):
        at = f"spec.taints[{i}]"
        key, effect = str(t.get("key") or ""), t.get("effect")
        out += _invalid(f"{at}.key", key, names.qualified_name(key))
        if "value" in t and t["value"] is not None:
            out += _invalid(f"{at}.value", t["value"], names.label_value(str(t["value"])))
        if not effect:
            out.append(FieldError(f"{at}.effect", "FieldValueRequired"))
        elif effect not in TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in TAINT_EFFECTS)
            out.append(
                FieldError(
                    f"{at}.effect",
                    "FieldValueNotSupported",
                    f"supported values: {supported}",
                    effect,
                )
            )
        if (key, str(effect)) in seen:
            out.append(
                FieldError(
                    f"{at}",
                    "FieldValueDuplicate",
                    "taints must be unique by key and effect pair",
                    t,
                )
            )
        seen.add((key, str(effect)))
    return out


def job(body: Obj) -> list[FieldError]:
    spec = body.get("spec") or {}
    name = str((body.get("metadata") or {}).get("name") or "")
    out = _nonnegative(
        spec, "spec", "parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"
    )
    ads = spec.get("activeDeadlineSeconds")
    if isinstance(ads, int) and ads <= 0:
        out.append(
            FieldError(
                "spec.activeDeadlineSeconds", "FieldValueInvalid", "must be greater than 0", ads
            )
        )
    template = spec.get("template") or {}
    tmeta = dict(template.get("metadata") or {})
    # the Job strategy labels the pod template with the Job's name before validating it
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **dict.fromkeys(JOB_NAME_LABELS, name)}
    out += metadata(tmeta, "spec.template.metadata")
    pod = template.get("spec") or {}
    policy = pod.get("restartPolicy") or "Always"  # the pod default
    if policy not in JOB_RESTART_POLICIES:
        supported = ", ".join(f'"{p}"' for p in JOB_RESTART_POLICIES)
        out.append(
            FieldError("spec.template.spec.restartPolicy", "FieldValueNotSupported",
                       f"supported values: {supported}", policy)
        )  # fmt: skip
    containers = pod.get("containers") or []
    if not containers:
        out.append(FieldError("spec.template.spec.containers", "FieldValueRequired"))
    for i, c in enumerate(containers):
        at = f"spec.template.spec.containers[{i}]"
        if not c.get("name"):
            out.append(FieldError(f"{at}.name", "FieldValueRequired"))
        else:
            out += _invalid(f"{at}.name", c["name"], names.dns1123_label(str(c["name"])))
        if not c.get("image"):
            out.append(FieldError(f"{at}.image", "FieldValueRequired"))
    return out


def lease(body: Obj) -> list[FieldError]:
    spec = body.get("spec") or {}
    out: list[FieldError] = []
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        out.append(
            FieldError(
                "spec.leaseDurationSeconds", "FieldValueInvalid", "must be greater than 0", duration
            )
        )
    return out + _nonnegative(spec, "spec", "leaseTransitions")


def decode_lease(body: Obj) -> None:
    """A Lease's MicroTime fields parse only with exactly 6 fractional digits
    (metav1.MicroTime.UnmarshalJSON, layout RFC3339Micro); anything else cannot be decoded."""
    spec = body.get("spec") or {}
    for k in ("acquireTime", "renewTime"):
        v = spec.get(k)
        if v is not None and not (isinstance(v, str) and MICRO_TIME.match(v)):
            raise Undecodable(
                f'Lease in version "v1" cannot be handled as a Lease: parsing time {quote(v)} '
                f'as "{MICRO_TIME_LAYOUT}": cannot parse {quote(v)} as "{MICRO_TIME_LAYOUT}"'
            )


def device_taint_rule(body: Obj) -> list[FieldError]:
    why = dra.check_rule(body)
    if why is None:
        return []
    field, _, detail = why.partition(": ")
    if detail.startswith("Required value"):
        return [FieldError(field, "FieldValueRequired")]
    if detail.startswith("Unsupported value"):
        value = (body.get("spec") or {}).get("taint", {}).get("effect")
        return [FieldError(field, "FieldValueNotSupported", detail.split(": ", 2)[-1], value)]
    return [FieldError(field, "FieldValueInvalid", detail.split(": ", 1)[-1], None)]


def validate(resource: str, body: Obj) -> list[FieldError]:
    """Every reason the real API server would refuse `body` as a `resource` (empty: valid)."""
    meta = body.get("metadata") or {}
    out = object_name(resource, meta) + metadata(meta)
    if resource == "nodes":
        out += node_taints(body.get("spec") or {})
    elif resource == "jobs":
        out += job(body)
    elif resource == "leases":
        out += lease(body)
    elif resource == dra.RULES:
        out += device_taint_rule(body)
    elif resource == "poddisruptionbudgets":
        out += pdb_spec.pdb(body.get("spec") or {})
    return out


def decode(resource: str, body: Obj) -> None:
    """Raise Undecodable for a body a real server cannot even decode into the kind."""
    if resource == "leases":
        decode_lease(body)


def invalid_message(kind: str, group: str, name: str, errors: list[FieldError]) -> str:
    """apierrors.NewInvalid's message: one error inline, several in brackets."""
    qualified = f"{kind}.{group}" if group else kind
    text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    return f'{qualified} "{name}" is invalid: {text}'
