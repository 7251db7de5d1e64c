"""The metric catalog: the DCGM fields gpufleet reads, named exactly as dcgm-exporter emits them.

Also the clock-event-reason bits and the XID table with NVIDIA's recommended action, so that a
detector, the simulator and a person reading a finding all use one vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntFlag, StrEnum


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str
    unit: str
    kind: Kind
    help: str
    aliases: tuple[str, ...] = ()
    default_on: bool = True
    """Whether dcgm-exporter's default-counters.csv enables it (users must enable the rest)."""
    typed: Kind | None = None
    """The TYPE dcgm-exporter writes when it is not what the value is (None: `kind`)."""

    @property
    def exposed_kind(self) -> Kind:
        """The TYPE line an exporter writes for this family."""
        return self.typed if self.typed is not None else self.kind


def _m(
    name: str,
    unit: str,
    kind: Kind,
    help_: str,
    *,
    aliases: tuple[str, ...] = (),
    default_on: bool = True,
    typed: Kind | None = None,
) -> MetricSpec:
    return MetricSpec(name, unit, kind, help_, aliases, default_on, typed)


G, C = Kind.GAUGE, Kind.COUNTER

METRICS: tuple[MetricSpec, ...] = (
    _m("DCGM_FI_DEV_GPU_UTIL", "percent", G, "GPU utilization (%)."),
    _m("DCGM_FI_DEV_SM_CLOCK", "MHz", G, "SM clock frequency (in MHz)."),
    _m("DCGM_FI_DEV_MEM_CLOCK", "MHz", G, "Memory clock frequency (in MHz)."),
    _m("DCGM_FI_DEV_GPU_TEMP", "celsius", G, "GPU temperature (in C)."),
    _m("DCGM_FI_DEV_MEMORY_TEMP", "celsius", G, "Memory temperature (in C)."),
    _m("DCGM_FI_DEV_POWER_USAGE", "watts", G, "Power draw (in W)."),
    _m("DCGM_FI_DEV_FB_USED", "MiB", G, "Framebuffer memory used (in MiB)."),
    _m("DCGM_FI_DEV_FB_FREE", "MiB", G, "Framebuffer memory free (in MiB)."),
    _m("DCGM_FI_DEV_XID_ERRORS", "xid", G, "Value of the last XID error encountered."),
    _m(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "errors",
        C,
        "Total number of double-bit volatile ECC errors.",
        default_on=False,
    ),
    _m(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "errors",
        C,
        "Total number of single-bit volatile ECC errors.",
        default_on=False,
    ),
    _m(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "rows",
        C,
        "Number of remapped rows for uncorrectable errors.",
    ),
    _m(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "rows",
        C,
        "Number of remapped rows for correctable errors.",
    ),
    _m("DCGM_FI_DEV_ROW_REMAP_FAILURE", "bool", G, "Whether remapping of rows has failed."),
    _m("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "replays", C, "Total number of PCIe retries."),
    _m(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "errors",
        C,
        "Total number of NVLink flow-control CRC errors.",
        default_on=False,
    ),
    # DCGM field 449 is the links' current throughput in MiB/s; dcgm-exporter's CSVs type it
    # `counter` (dcgm-exporter #472, PR #658). Read as the gauge it is: never increase() it.
    _m(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "MiB/s",
        G,
        "Total number of NVLink bandwidth counters for all lanes.",
        typed=C,
    ),
    _m(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "bitmask",
        G,
        "Current clock event (throttle) reasons.",
        aliases=("DCGM_FI_DEV_CLOCKS_EVENT_REASONS",),
        default_on=False,
    ),
    _m("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio", G, "Ratio of time the graphics engine is active."),
    _m("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", G, "Ratio of cycles the tensor pipe is active."),
    _m("DCGM_FI_PROF_DRAM_ACTIVE", "ratio", G, "Ratio of cycles the device memory is active."),
)

BY_NAME: dict[str, MetricSpec] = {m.name: m for m in METRICS}
ALIASES: dict[str, str] = {alias: m.name for m in METRICS for alias in m.aliases}
XID_COUNT_METRIC = "DCGM_EXP_XID_ERRORS_COUNT"
"""dcgm-exporter's optional XID counter (labelled by `xid`): repeats are visible only here.
The snapshot column of this name is the GPU's total over codes; each code has its own column
(`xid_count_column`)."""
LABEL_XID = "xid"
XID_COLUMN_PREFIX = XID_COUNT_METRIC + ":"
XID_FOLLOWERS: dict[int, frozenset[int]] = {
    43: frozenset({13, 94, 95, 48}),
    45: frozenset({13, 94, 95, 48}),
}
"""Codes the driver logs right after another XID (cleanup of the contexts the first one
killed: "preemptive cleanup, due to previous errors") -> the codes they follow."""


def xid_count_column(code: int | str) -> str:
    """The snapshot column of one XID code's count (`DCGM_EXP_XID_ERRORS_COUNT{xid="48"}`)."""
    return f"{XID_COLUMN_PREFIX}{code}"


def xid_column_code(name: str) -> int | None:
    """The XID code of a per-code count column, None for any other column."""
    if not name.startswith(XID_COLUMN_PREFIX):
        return None
    tail = name[len(XID_COLUMN_PREFIX) :]
    return int(tail) if tail.isdigit() else None


STEPS_METRIC = "training_steps_total"


def canonical_name(name: str) -> str:
    """The catalog name for a series name, folding aliases (CLOCKS_EVENT_REASONS -> THROTTLE)."""
    return ALIASES.get(name, name)


# Labels as dcgm-exporter writes them. `Hostname` was renamed `hostname` in newer releases.
LABEL_GPU = "gpu"
LABEL_UUID = "UUID"
LABEL_MODEL = "modelName"
LABEL_HOSTNAME = "Hostname"
LABEL_HOSTNAME_NEW = "hostname"
LABEL_PCI_BUS_ID = "pci_bus_id"
LABEL_DEVICE = "device"
LABEL_MIG_INSTANCE = "GPU_I_ID"
LABEL_MIG_PROFILE = "GPU_I_PROFILE"
LABEL_POD = "pod"
LABEL_NAMESPACE = "namespace"
LABEL_CONTAINER = "container"
HOSTNAME_LABELS = (LABEL_HOSTNAME, LABEL_HOSTNAME_NEW)


class ClockEventReason(IntFlag):
    """DCGM field 112 bits (DCGM_FI_DEV_CLOCKS_EVENT_REASONS)."""

    GPU_IDLE = 0x1
    CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8
    SYNC_BOOST = 0x10
    SW_THERMAL = 0x20
    HW_THERMAL = 0x40
    HW_POWER_BRAKE = 0x80
    DISPLAY_CLOCKS = 0x100


HARMFUL_CLOCK_EVENTS = (
    ClockEventReason.HW_SLOWDOWN
    | ClockEventReason.SW_THERMAL
    | ClockEventReason.HW_THERMAL
    | ClockEventReason.HW_POWER_BRAKE
)
"""The bits DCGM diagnostics fail on; the others are normal operation."""


class XidAction(StrEnum):
    """NVIDIA's recommended resolution for an XID (public XID catalog)."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESTART_FM = "RESTART_FM"
    RESET_GPU = "RESET_GPU"
    DRAIN_AND_RESET = "DRAIN_AND_RESET"
    RESTART_BM = "RESTART_BM"
    RESTART_VM = "RESTART_VM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    DECODE = "DECODE"
    """The code needs its message decoded (NVLink errors) to pick an action."""
    FOLLOW_MESSAGE = "FOLLOW_MESSAGE"


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    action: XidAction
    hardware: bool
    """The code points at the GPU or its links rather than at the application."""
    note: str = ""


def _x(code: int, name: str, action: XidAction, hardware: bool, note: str = "") -> XidInfo:
    return XidInfo(code, name, action, hardware, note)


A = XidAction
XIDS: dict[int, XidInfo] = {
    x.code: x
    for x in (
        _x(13, "Graphics engine exception", A.RESTART_APP, False, "repeats on one GPU -> diag"),
        _x(31, "GPU memory page fault", A.RESTART_APP, False, "repeats on one GPU -> diag"),
        _x(43, "GPU stopped processing (app fault)", A.IGNORE, False),
        _x(45, "Preemptive cleanup", A.IGNORE, False, "RESTART_FM when Fabric Manager is down"),
        _x(48, "Double-bit ECC error", A.RESET_GPU, True, "with 63/64: DRAIN_AND_RESET"),
        _x(61, "Internal micro-controller breakpoint", A.CONTACT_SUPPORT, True),
        _x(62, "Internal micro-controller halt", A.RESET_GPU, True),
        _x(63, "Row-remapping event", A.IGNORE, True, "page retired / row remap recorded"),
        _x(64, "Row-remapping failure", A.RESET_GPU, True),
        _x(68, "Video processor exception", A.RESTART_APP, False),
        _x(69, "Graphics engine class error", A.RESTART_APP, False),
        _x(74, "NVLink error", A.DECODE, True, "decode the message for the link and cause"),
        _x(79, "GPU has fallen off the bus", A.RESTART_BM, True, "reboot the node"),
        _x(92, "High single-bit ECC error rate", A.IGNORE, True),
        _x(94, "Contained memory error", A.RESTART_APP, True),
        _x(95, "Uncontained memory error", A.RESET_GPU, True),
        _x(109, "Context switch timeout", A.RESET_GPU, True),
        _x(119, "GSP RPC timeout", A.RESET_GPU, True),
        _x(120, "GSP error", A.RESET_GPU, True),
        _x(136, "Link training failure", A.RESET_GPU, True),
        _x(140, "Unrecovered ECC error", A.RESET_GPU, True),
        _x(143, "GPU initialization failure", A.RESET_GPU, True),
        _x(144, "NVLink SAW error", A.DECODE, True),
        _x(145, "NVLink RLW error", A.DECODE, True),
        _x(146, "NVLink TLW error", A.DECODE, True),
        _x(147, "NVLink TREX error", A.DECODE, True),
        _x(148, "NVLink NVLPW_CTRL error", A.DECODE, True),
        _x(149, "NVLink NETIR error", A.DECODE, True),
        _x(150, "NVLink MSE error", A.DECODE, True),
        _x(151, "Key rotation error", A.RESTART_VM, True),
        _x(154, "GPU recovery action changed", A.FOLLOW_MESSAGE, True),
        _x(155, "NVLink link down", A.RESET_GPU, True),
        _x(156, "Resource retirement event", A.RESET_GPU, True),
        _x(157, "Resource retirement failure", A.IGNORE, True),
        _x(158, "GPU fatal timeout", A.RESET_GPU, True),
    )
}


def xid_info(code: int) -> XidInfo:
    """Catalog entry for an XID; unknown codes count as hardware, for a person to look at."""
    return XIDS.get(code) or XidInfo(
        code, f"XID {code}", XidAction.CONTACT_SUPPORT, True, "unknown"
    )
