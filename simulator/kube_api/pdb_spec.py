"""PodDisruptionBudget spec validation, as pkg/apis/policy/validation does it (422 Invalid).

gpufleet's drains read PDBs and tests create them through the API; a budget a real server would
refuse (both minAvailable and maxUnavailable, a negative count, a malformed or over-100 %
percentage, a selector operator that does not exist, an unknown unhealthyPodEvictionPolicy)
must be refused here too, or a test could rest on a budget no cluster can hold.
"""

from __future__ import annotations

import re
from typing import Any

from simulator.kube_api import names
from simulator.kube_api.field_errors import FieldError

Obj = dict[str, Any]
PERCENT = re.compile(r"^[0-9]+%$")
PERCENT_MSG = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)
EVICTION_POLICIES = ("IfHealthyBudget", "AlwaysAllow")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def int_or_percent(value: Any, path: str) -> list[FieldError]:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        if value < 0:
            return [FieldError(path, "FieldValueInvalid", "must be greater than or equal to 0",
                               value)]  # fmt: skip
        return []
    text = str(value)
    if not PERCENT.match(text):
        return [FieldError(path, "FieldValueInvalid", PERCENT_MSG, text)]
    if int(text[:-1]) > 100:
        return [FieldError(path, "FieldValueInvalid", "must not be greater than 100%", text)]
    return []


def label_selector(sel: Obj, path: str) -> list[FieldError]:
    """metav1validation.ValidateLabelSelector: label syntax and each requirement's operator."""
    out: list[FieldError] = []
    for k, v in (sel.get("matchLabels") or {}).items():
        for err in names.qualified_name(str(k)):
            out.append(FieldError(f"{path}.matchLabels", "FieldValueInvalid", err, k))
        for err in names.label_value(str(v)):
            out.append(FieldError(f"{path}.matchLabels", "FieldValueInvalid", err, v))
    for i, req in enumerate(sel.get("matchExpressions") or ()):
        at = f"{path}.matchExpressions[{i}]"
        op, values = req.get("operator"), req.get("values") or []
        if op not in OPERATORS:
            out.append(
                FieldError(f"{at}.operator", "FieldValueInvalid", "not a valid selector operator",
                           op)
            )  # fmt: skip
        elif op in ("In", "NotIn") and not values:
            out.append(
                FieldError(f"{at}.values", "FieldValueRequired",
                           "must be specified when `operator` is 'In' or 'NotIn'")
            )  # fmt: skip
        elif op in ("Exists", "DoesNotExist") and values:
            out.append(
                FieldError(f"{at}.values", "FieldValueForbidden",
                           "may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
            )  # fmt: skip
        for err in names.qualified_name(str(req.get("key") or "")):
            out.append(FieldError(f"{at}.key", "FieldValueInvalid", err, req.get("key")))
    return out


def pdb(spec: Obj) -> list[FieldError]:
    """ValidatePodDisruptionBudgetSpec."""
    out: list[FieldError] = []
    has_min, has_max = spec.get("minAvailable") is not None, spec.get("maxUnavailable") is not None
    if has_min and has_max:
        out.append(
            FieldError("spec", "FieldValueInvalid",
                       "minAvailable and maxUnavailable cannot be both set", spec)
        )  # fmt: skip
    out += int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
    out += int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
    sel = spec.get("selector")
    if isinstance(sel, dict):
        out += label_selector(sel, "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in EVICTION_POLICIES:
        supported = ", ".join(f'"{p}"' for p in EVICTION_POLICIES)
        out.append(
            FieldError("spec.unhealthyPodEvictionPolicy", "FieldValueNotSupported",
                       f"supported values: {supported}", policy)
        )  # fmt: skip
    return out
