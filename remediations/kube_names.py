"""Names and label values gpufleet writes, valid for any node name a real cluster has.

Node names are DNS-1123 subdomains of up to 253 characters (EKS `ip-10-0-1-2.us-east-2.compute.
internal`, on-prem FQDNs), while a Job name is a label value too (the Job's pods are labelled with
it: 63 characters at most) and a label value holds 63. Cutting such a name anywhere can leave
`.-` or a trailing `.`, which the API server refuses (422), so names are built from a node name's
characters mapped into a DNS-1123 label, and whatever does not fit is replaced by a hash.
"""

from __future__ import annotations

import re

from remediations.types import stable_id

LABEL_VALUE_MAX = 63
JOB_NAME_MAX = 63
"""A Job's name also labels its pods (`batch.kubernetes.io/job-name`), so it is a label value."""

_NOT_LABEL = re.compile(r"[^a-z0-9-]+")


def label_part(text: str, limit: int) -> str:
    """`text` as a piece of a DNS-1123 label: lower case, any other character run a `-`, at most
    `limit` characters, never ending in `-` (a hash or suffix follows it)."""
    return _NOT_LABEL.sub("-", text.lower())[:limit].rstrip("-")


def job_name(prefix: str, subject: str, *key: object, suffix: str = "", limit: int = 33) -> str:
    """`<prefix>-<subject, cut>[suffix]-<hash of key>`: a DNS-1123 label of at most 63
    characters (`prefix` and `suffix` are label characters already)."""
    room = JOB_NAME_MAX - len(prefix) - len(suffix) - 10
    head = label_part(subject, min(limit, room))
    return (
        f"{prefix}-{head}{suffix}-{stable_id(*key)[:8]}"
        if head
        else (f"{prefix}{suffix}-{stable_id(*key)[:8]}")
    )


def label_value(value: str) -> str:
    """`value` when it is short enough for a label, else its first characters and a hash."""
    if len(value) <= LABEL_VALUE_MAX:
        return value
    keep = value[: LABEL_VALUE_MAX - 9].rstrip("-_.")
    return f"{keep}-{stable_id(value)[:8]}"
