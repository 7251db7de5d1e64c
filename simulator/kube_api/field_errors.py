"""field.Error of k8s.io/apimachinery: one cause of a 422 Invalid, as the real server words it.

Shared by the simulated API server's validators (simulator.kube_api.validation, pdb_spec).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class FieldError:
    """One cause: field.Error of k8s.io/apimachinery/pkg/util/validation/field."""

    field: str
    reason: str
    """FieldValueInvalid, FieldValueRequired, FieldValueNotSupported, FieldValueTooLong, ..."""
    detail: str = ""
    value: Any = None

    def message(self) -> str:
        """The cause's message (the error text without the field path)."""
        if self.reason == "FieldValueRequired":
            return "Required value" + (f": {self.detail}" if self.detail else "")
        if self.reason == "FieldValueNotSupported":
            return f"Unsupported value: {quote(self.value)}: {self.detail}"
        if self.reason == "FieldValueTooLong":
            return f"Too long: {self.detail}"
        if self.reason == "FieldValueForbidden":
            return f"Forbidden: {self.detail}"
        return f"Invalid value: {quote(self.value)}: {self.detail}"

    def cause(self) -> Obj:
        return {"reason": self.reason, "message": self.message(), "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message()}"


def quote(value: Any) -> str:
    """A value as Go's field errors print it."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)
