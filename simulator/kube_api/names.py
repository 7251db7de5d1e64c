"""The API server's name and label syntax: k8s.io/apimachinery/pkg/util/validation.

What a real cluster refuses, with its messages, so a Job name cut at the wrong character or a node
name in a label value fails here as it fails there (IsDNS1123Subdomain, IsDNS1123Label,
IsQualifiedName, IsValidLabelValue).
"""

from __future__ import annotations

import re

DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = rf"{DNS1123_LABEL}(\.{DNS1123_LABEL})*"
QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE = rf"({QUALIFIED_NAME})?"

_LABEL_RX = re.compile(f"^{DNS1123_LABEL}$")
_SUBDOMAIN_RX = re.compile(f"^{DNS1123_SUBDOMAIN}$")
_QUALIFIED_RX = re.compile(f"^{QUALIFIED_NAME}$")
_LABEL_VALUE_RX = re.compile(f"^{LABEL_VALUE}$")

_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    f"for validation is '{DNS1123_SUBDOMAIN}')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    f"used for validation is '{DNS1123_LABEL}')"
)
_QUALIFIED_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used "
    f"for validation is '{QUALIFIED_NAME}')"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    f"'my_value',  or '12345', regex used for validation is '{LABEL_VALUE}')"
)


def dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _SUBDOMAIN_RX.match(value):
        errs.append(_SUBDOMAIN_MSG)
    return errs


def dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_RX.match(value):
        errs.append(_LABEL_MSG)
    return errs


def qualified_name(value: str) -> list[str]:
    """A label or annotation key: `[prefix/]name`, prefix a DNS subdomain, name <= 63."""
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
        errs = [f"prefix part {e}" for e in dns1123_subdomain(prefix)]
        if errs:
            return errs
    else:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            f"'123-abc', regex used for validation is '{QUALIFIED_NAME}') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        return ["name part must be non-empty"]
    errs = []
    if len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED_RX.match(name):
        errs.append(_QUALIFIED_MSG)
    return errs


def label_value(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE_RX.match(value):
        errs.append(_LABEL_VALUE_MSG)
    return errs
