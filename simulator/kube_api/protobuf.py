"""Read the Kubernetes protobuf request bodies kubectl sends for the review kinds.

kubectl's typed clients post `application/vnd.kubernetes.protobuf` (the `k8s\\0` magic, then a
`runtime.Unknown` envelope around the object's message; k8s.io/apimachinery runtime/serializer/
protobuf). The simulator answers in JSON (kubectl accepts it) and decodes only the messages it
is sent this way: SelfSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i`) and
the fields of a Job that `kubectl create job` sets, field numbers from k8s.io/api/*/v1/
generated.proto. Any other protobuf body is 415, as a server that does not speak it for that
kind would answer.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

Fields = dict[int, list[Any]]


class Unsupported(ValueError):
    """A protobuf body of a kind the simulator does not decode."""


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7


def fields(buf: bytes) -> Fields:
    """One message's fields: number -> values (ints, or bytes for length-delimited)."""
    out: Fields = {}
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        elif wire == 1:
            value, i = buf[i : i + 8], i + 8
        elif wire == 5:
            value, i = buf[i : i + 4], i + 4
        else:
            raise Unsupported(f"protobuf wire type {wire}")
        out.setdefault(num, []).append(value)
    return out


def _str(f: Fields, num: int) -> str:
    return bytes(f.get(num, [b""])[-1]).decode()


def _msg(f: Fields, num: int) -> Fields | None:
    return fields(f[num][-1]) if num in f else None


_RESOURCE_ATTRS = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded review (apiVersion, kind, spec)."""
    if not body.startswith(MAGIC):
        raise Unsupported("not a Kubernetes protobuf body")
    unknown = fields(body[len(MAGIC) :])
    type_meta = _msg(unknown, 1) or {}
    api_version, kind = _str(type_meta, 1), _str(type_meta, 2)
    spec = _msg(fields(unknown.get(2, [b""])[-1]), 2) or {}
    out: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "spec": {}}
    if kind == "SelfSubjectAccessReview":
        res, nonres = _msg(spec, 1), _msg(spec, 2)
        if res is not None:
            out["spec"]["resourceAttributes"] = {
                k: _str(res, n) for n, k in enumerate(_RESOURCE_ATTRS, 1)
            }
        if nonres is not None:
            path, verb = _str(nonres, 1), _str(nonres, 2)
            out["spec"]["nonResourceAttributes"] = {"path": path, "verb": verb}
    elif kind == "Job":
        return {"apiVersion": api_version, "kind": kind, **_job(fields(unknown.get(2, [b""])[-1]))}
    elif kind == "SelfSubjectRulesReview":
        out["spec"]["namespace"] = _str(spec, 1)
    else:
        raise Unsupported(f"protobuf bodies of kind {kind!r} are not supported here")
    return out


def _int(f: Fields, num: int) -> int | None:
    return int(f[num][-1]) if num in f else None


def _map(f: Fields, num: int) -> dict[str, str]:
    return {_str(e, 1): _str(e, 2) for e in (fields(b) for b in f.get(num, []))}


def _meta(f: Fields | None) -> dict[str, Any]:
    f = f or {}
    out: dict[str, Any] = {k: _str(f, n) for n, k in ((1, "name"), (2, "generateName"),
                                                   (3, "namespace")) if _str(f, n)}  # fmt: skip
    for n, k in ((11, "labels"), (12, "annotations")):
        if _map(f, n):
            out[k] = _map(f, n)
    return out


def _container(f: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {"name": _str(f, 1), "image": _str(f, 2)}
    for n, k in ((3, "command"), (4, "args")):
        if n in f:
            out[k] = [bytes(v).decode() for v in f[n]]
    return out


def _job(f: Fields) -> dict[str, Any]:
    """A Job's metadata and the spec fields kubectl sets (batch/v1 Job: metadata 1, spec 2;
    JobSpec: parallelism 1, completions 2, activeDeadlineSeconds 3, template 6, backoffLimit 7,
    ttlSecondsAfterFinished 8; PodSpec: containers 2, restartPolicy 3)."""
    spec_f = _msg(f, 2) or {}
    template_f = _msg(spec_f, 6) or {}
    pod_f = _msg(template_f, 2) or {}
    pod: dict[str, Any] = {"containers": [_container(fields(c)) for c in pod_f.get(2, [])]}
    if _str(pod_f, 3):
        pod["restartPolicy"] = _str(pod_f, 3)
    spec: dict[str, Any] = {"template": {"metadata": _meta(_msg(template_f, 1)), "spec": pod}}
    for n, k in ((1, "parallelism"), (2, "completions"), (3, "activeDeadlineSeconds"),
                 (7, "backoffLimit"), (8, "ttlSecondsAfterFinished")):  # fmt: skip
        v = _int(spec_f, n)
        if v is not None:
            spec[k] = v if v < 2**63 else v - 2**64  # int32/int64 negatives are 10-byte varints
    return {"metadata": _meta(_msg(f, 1)), "spec": spec}
