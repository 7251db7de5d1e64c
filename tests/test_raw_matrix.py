"""observer.prometheus.replay.matrix: the fast matrix parser gives what `json` gives, whatever the
labels hold."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from observer.prometheus.client import PARTIAL_WARNING
from observer.prometheus.replay.matrix import MalformedAnswer, carry, label_keys, parse_matrix


def body(result: list[dict[str, Any]], **extra: Any) -> bytes:
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}, **extra}
    return json.dumps(doc, separators=(",", ":")).encode()


def test_values_labels_and_warnings_as_json_says() -> None:
    tricky = 'a "quoted" {"metric":x},"values":[[1,"2"]] ]] value'
    result = [
        {"metric": {"__name__": "m", "pod": tricky}, "values": [[1700000000, "NaN"],
                                                                [1700000030.5, "+Inf"]]},
        {"metric": {"__name__": "m", "pod": "b"}, "values": [[1700000000.123, "-Inf"],
                                                             [1700000030, "1e+06"],
                                                             [1700000060, "299660768669895"]]},
    ]  # fmt: skip
    block, warnings = parse_matrix(body(result, warnings=["partial response"]))
    assert block.labels == [r["metric"] for r in result]
    assert block.starts.tolist() == [0, 2, 5]
    assert block.t_ms.tolist() == [1700000000000, 1700000030500, 1700000000123, 1700000030000,
                                   1700000060000]  # fmt: skip
    np.testing.assert_array_equal(block.values, [np.nan, np.inf, -np.inf, 1e6, 299660768669895.0])
    assert warnings == ("partial response",)


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")])
def test_victoriametrics_is_partial_is_a_warning(separators: tuple[str, str]) -> None:
    """vmselect with a vmstorage node down answers `"isPartial": true` before `data` and no
    `warnings`; the fast parser (compact JSON) and the fallback (spaced JSON) both flag it,
    also after `data` (a proxy that re-serialises the answer may move the key)."""
    result = [{"metric": {"__name__": "m"}, "values": [[1700000000, "1"]]}]
    data = {"resultType": "matrix", "result": result}
    for partial, expected in ((True, (PARTIAL_WARNING,)), (False, ())):
        for doc in ({"status": "success", "isPartial": partial, "data": data},
                    {"status": "success", "data": data, "isPartial": partial}):  # fmt: skip
            block, warnings = parse_matrix(json.dumps(doc, separators=separators).encode())
            assert block.values.tolist() == [1.0] and warnings == expected, doc


def test_empty_and_failed_answers() -> None:
    block, warnings = parse_matrix(body([]))
    assert len(block) == 0 and block.samples == 0 and warnings == ()
    vector = {"status": "success", "data": {"resultType": "vector", "result": []}}
    with pytest.raises(MalformedAnswer):
        parse_matrix(json.dumps(vector).encode())
    with pytest.raises(MalformedAnswer):
        parse_matrix(b"<html>proxy error</html>")


def test_carry_puts_the_previous_tail_before_each_series() -> None:
    a = {"__name__": "m", "gpu": "0"}
    b = {"__name__": "m", "gpu": "1"}
    gone = {"__name__": "m", "gpu": "2"}
    prev, _ = parse_matrix(body([
        {"metric": a, "values": [[100, "1"], [130, "2"], [160, "3"]]},
        {"metric": gone, "values": [[100, "7"], [160, "8"]]},
        {"metric": {"__name__": "m", "gpu": "3"}, "values": [[100, "9"]]},
    ]))  # fmt: skip
    new, _ = parse_matrix(body([
        {"metric": b, "values": [[190, "5"]]},
        {"metric": dict(a), "values": [[190, "4"], [220, "5"]]},
    ]))  # fmt: skip
    out, keys = carry(prev, 130_000, new)
    assert out.labels == [b, a, gone]  # gpu 3 has nothing since 130 s: dropped
    assert keys == label_keys(out.labels)
    again, _ = carry(prev, 130_000, new, label_keys(prev.labels))  # the keys the last carry gave
    assert again.labels == out.labels and again.starts.tolist() == out.starts.tolist()
    assert again.t_ms.tolist() == out.t_ms.tolist()
    assert out.starts.tolist() == [0, 1, 5, 6]
    assert out.t_ms.tolist() == [190_000, 130_000, 160_000, 190_000, 220_000, 160_000]
    assert out.values.tolist() == [5, 2, 3, 4, 5, 8]
