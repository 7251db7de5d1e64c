"""`gpufleet policy explain`: per rule, automatic / awaits approval / only notifies, and why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet.cli import main

POLICY = """
actuation: live
gates:
  blast_radius: {max_nodes: 3, max_percent_of_pool: 5}
  rate: {max_actions_per_hour: 7}
  maintenance:
    applies_to: [drain]
    windows: [{days: [sat], start: "01:00", end: "05:00"}]
rules:
  - {name: q, match: {kinds: [gpu_xid], severities: [critical]}, playbook: quarantine,
     mode: auto}
  - {name: d, match: {kinds: [gpu_xid]}, playbook: drain, mode: auto, actuation: shadow}
  - {name: r, match: {kinds: [nccl_hang]}, playbook: restart_job, mode: approval}
  - {name: idle, match: {kinds: [gpu_idle]}, playbook: cordon, mode: notify}
"""


def _explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], config: str, policy: str | None
) -> tuple[int, Any, str]:
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(policy)
        config += "policy: policy.yaml\n"
    cfg = tmp_path / "gpufleet.yaml"
    cfg.write_text(config)
    code = main(["policy", "explain", "--config", str(cfg), "--format", "json"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if code == 0 else None, out.err


def test_explain_says_per_rule_what_happens_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = _explain(tmp_path, capsys, "", POLICY)
    assert code == 0 and doc["actuation"] == "live" and doc["policy"].endswith("policy.yaml")
    rules = {r["rule"]: r for r in doc["rules"]}
    assert rules["q"]["outcome"] == "acts automatically" and rules["q"]["actuation"] == "live"
    assert rules["q"]["actuation_from"] == "the policy (actuation: live)"
    why_q = "\n".join(rules["q"]["why"])
    assert "mode: auto" in why_q and "at most 3 GPU nodes" in why_q and "5% of a pool" in why_q
    assert "at most 7 actions per hour" in why_q and "maintenance" not in why_q
    assert rules["d"]["outcome"] == "only notifies" and rules["d"]["live_outcome"] == (
        "acts automatically"
    )
    assert rules["d"]["actuation_from"] == "the rule (actuation: shadow)"
    assert any("maintenance window" in w for w in rules["d"]["why"])
    assert rules["r"]["outcome"] == "awaits approval"
    assert any("mode: approval" in w for w in rules["r"]["why"])
    assert not any("blast radius" in w for w in rules["r"]["why"])  # restart_job: not disruptive
    assert rules["idle"]["outcome"] == "only notifies" and rules["idle"]["why"] == [
        "mode: notify (reports the incident; no plan, no action)"
    ]


def test_explain_default_install_and_forced_shadow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "explain"]) == 0
    text = capsys.readouterr().out
    assert "(shipped default): actuation shadow at the top level; 0 of 8 rules live" in text
    assert "nothing is written to Kubernetes" in text
    assert (
        "quarantine-critical-hardware: ONLY NOTIFIES (shadow; live it acts automatically)" in text
    )
    assert "drain-critical-hardware: ONLY NOTIFIES (shadow; live it awaits approval)" in text
    code, doc, _ = _explain(tmp_path, capsys, "shadow: true\n", POLICY)
    assert code == 0 and doc["forced_shadow"] is True
    assert {r["outcome"] for r in doc["rules"]} == {"only notifies"}
    assert {r["actuation"] for r in doc["rules"]} == {"shadow"}


def test_the_old_dry_run_config_key_exits_2_naming_shadow(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _explain(tmp_path, capsys, "dry_run: true\n", POLICY)
    assert code == 2 and "gpufleet.yaml" in err, err
    assert "dry_run: renamed; expected `shadow: true|false` instead (got True)" in err, err


def test_explain_bad_policy_exits_2_naming_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _explain(tmp_path, capsys, "", POLICY.replace("mode: approval", "mode: maybe"))
    assert code == 2 and "policy.yaml" in err and "rules[2].mode:" in err and "'auto'" in err


SCHEDULE = """
service:
  schedule:
    - {name: mw, kind: maintenance_window, cron: "0 2 * * sat"}
    - {name: report, kind: daily_report, cron: "5 0 * * *"}
"""


def test_explain_scheduled_jobs_follow_the_top_level_actuation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = _explain(tmp_path, capsys, SCHEDULE, POLICY)  # top level live
    assert code == 0
    jobs = {s["schedule"]: s for s in doc["schedules"]}
    assert jobs["mw"]["actuation"] == "live" and "policy's top level" in jobs["mw"]["why"]
    assert jobs["report"]["actuation"] == "n/a"
    shadow_top = POLICY.replace("actuation: live", "actuation: shadow").replace(
        "mode: auto}", "mode: auto, actuation: live}"
    )
    code, doc, _ = _explain(tmp_path, capsys, SCHEDULE, shadow_top)
    assert code == 0 and doc["rules"][0]["actuation"] == "live"  # a live rule...
    assert doc["schedules"][0]["actuation"] == "shadow"  # ...leaves the scheduled job in shadow
    assert "shadow: would" in doc["schedules"][0]["why"]
    (tmp_path / "gpufleet.yaml").write_text(SCHEDULE + "policy: policy.yaml\n")
    assert main(["policy", "explain", "--config", str(tmp_path / "gpufleet.yaml")]) == 0
    text = capsys.readouterr().out
    assert "schedule mw (maintenance_window, `0 2 * * sat` UTC):" in text


def test_explain_names_the_reboot_lock_loop_guard_and_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = """
actuation: live
gates:
  maintenance:
    windows: [{days: [sat], start: "01:00", end: "05:00"}]
rules:
  - {name: boot, match: {kinds: [gpu_lost]}, playbook: reboot_node, mode: auto,
     params: {max_concurrent: 2, max_reboots: 3, reboot_window: 12h}}
  - {name: reset, match: {kinds: [gpu_xid]}, playbook: reset_gpu, mode: auto}
"""
    code, doc, _ = _explain(tmp_path, capsys, "", policy)
    assert code == 0
    why = {r["rule"]: "\n".join(r["why"]) for r in doc["rules"]}
    assert "at most 2 node(s) rebooting at once" in why["boot"]
    assert "after 3 gpufleet reboots of a node within 12h a person decides" in why["boot"]
    assert "maintenance window" in why["boot"]  # reboot_node is in the default applies_to
    assert "waits until no pod holds the GPU" in why["reset"]
    assert "maintenance window" not in why["reset"] and "blast radius" not in why["reset"]


def test_the_gpu_grain_example_says_which_grain_each_rule_repairs_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shipped = Path(__file__).parents[2] / "remediations/policies/gpu-grain.yaml"
    code, doc, _ = _explain(tmp_path, capsys, "", shipped.read_text())
    assert code == 0 and doc["actuation"] == "shadow"
    rules = {r["rule"]: r for r in doc["rules"]}
    assert all(r["actuation"] == "shadow" for r in rules.values())
    fence, pods = rules["fence-faulty-gpu"], rules["evict-pods-on-faulty-gpu"]
    assert (
        fence["playbook"] == "fence_gpu"
        and "nvidia.com/dra-kubelet-plugin=true" in (fence["matches"])
    )
    assert "DeviceTaintRule" in fence["grain"] and fence["live_outcome"] == "acts automatically"
    assert pods["playbook"] == "evict_gpu_pods" and "allocatable nvidia.com/gpu" in pods["grain"]
    assert pods["live_outcome"] == "awaits approval"
    assert rules["drain-node-level"]["matches"].startswith("gpu_lost")
    assert rules["drain-node-level"]["grain"].startswith("the whole node")
