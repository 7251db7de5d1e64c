"""Job names and label values gpufleet writes are valid for any node name a real provider gives,
as the strict API server validates them (names up to 253 characters: EKS, GKE, AKS, OKE,
on-prem FQDNs). On the old names an EKS node produced `...compute.-afc1d6bc` (422 on a real
cluster) and a node name over 63 characters an invalid label value."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remediations.cluster_names import label_value
from remediations.playbooks.reboot import reboot_job_name
from remediations.scheduled.diagnose_targets import job_name
from simulator.kube_api import names, validation

octet = st.integers(0, 255).map(str)
region = st.sampled_from(["us-east-2", "us-west-2", "eu-central-1", "ap-south-1"])
label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)
eks = st.builds(lambda a, b, c, d, r: f"ip-{a}-{b}-{c}-{d}.{r}.compute.internal",
                octet, octet, octet, octet, region)  # fmt: skip
eks_plain = st.builds(
    lambda a, b, c, d: f"ip-{a}-{b}-{c}-{d}.ec2.internal", octet, octet, octet, octet
)


def rx(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


gke = st.builds(lambda c, p, h, s: f"gke-{c}-{p}-{h}-{s}", label, label, rx("[0-9a-f]{8}"),
                rx("[a-z0-9]{4}"))  # fmt: skip
aks = st.builds(lambda p, n, v: f"aks-{p}-{n}-vmss{v}", label, rx("[0-9]{8}"), rx("[0-9a-f]{6}"))
oke = st.builds(lambda a, b, c, d: f"{a}.{b}.{c}.{d}", octet, octet, octet, octet)
fqdn = st.lists(label, min_size=2, max_size=12).map(".".join).filter(lambda n: len(n) <= 253)
long_fqdn = (
    st.lists(st.from_regex(r"[a-z0-9]{20,63}", fullmatch=True), min_size=3, max_size=4)
    .map(".".join)
    .filter(lambda n: len(n) <= 253)
)
node_names = st.one_of(eks, eks_plain, gke, aks, oke, fqdn, long_fqdn).filter(
    lambda n: not names.dns1123_subdomain(n)  # a node name the API server accepts
)


def _job(name: str, node: str) -> dict[str, object]:
    labels = {"gpufleet.io/diagnose-node": label_value(node)}
    pod = {"restartPolicy": "Never", "containers": [{"name": "diag", "image": "dcgm"}]}
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"template": {"metadata": {"labels": labels}, "spec": pod}}}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(node=node_names, gpu=st.one_of(st.none(), st.integers(0, 15)), action=st.text(max_size=20))
def test_names_from_any_node_name_pass_the_api_servers_validation(
    node: str, gpu: int | None, action: str
) -> None:
    for name in (job_name(node, action, gpu), reboot_job_name(node, action, 1.0)):
        assert validation.validate("jobs", _job(name, node)) == [], name
        assert len(name) <= 63 and not names.dns1123_label(name), name


def test_the_eks_names_of_the_issue() -> None:
    node = "ip-10-0-101-202.us-east-2.compute.internal"
    assert job_name(node, "a") == job_name(node, "a")  # stable: a re-run reads the same Job
    assert job_name(node, "a") != job_name(node, "b")
    for name in (
        job_name(node, "a"),
        reboot_job_name("ip-10-0-1-2.us-west-2.compute.internal", "i", 1.0),
    ):
        assert ".-" not in name and not names.dns1123_label(name), name
    long = "n" * 40 + "." + "m" * 60
    assert len(label_value(long)) <= 63 and not names.label_value(label_value(long))
    assert label_value(long) != label_value(long[:-1] + "x")
