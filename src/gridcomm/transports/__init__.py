"""Transports: how per-peer messages move between ranks. ``get(name)`` and ``choose(...)`` pick one."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..comm import Communicator
from ..errors import ArgumentTypeError, TransportError
from .base import Channel, PackerKind, Transport
from .cma import CmaTransport
from .ipc import IpcTransport
from .mpi import MpiTransport
from .nccl import NcclTransport
from .nvshmem import NvshmemTransport
from .shm import ShmTransport
from .staged import StagedTransport

#: Every transport, by name, in the order tables show them (the baselines first, then the fastest ways).
_REGISTRY: dict[str, type[Transport]] = {
    cls.name: cls
    for cls in (
        MpiTransport,
        CmaTransport,
        ShmTransport,
        StagedTransport,
        NcclTransport,
        IpcTransport,
        NvshmemTransport,
    )
}

log = logging.getLogger(__name__)

__all__ = [
    "REACHES",
    "Channel",
    "CmaTransport",
    "IpcTransport",
    "Mixed",
    "MpiTransport",
    "NcclTransport",
    "NvshmemTransport",
    "ShmTransport",
    "StagedTransport",
    "Transport",
    "auto_choice_reason",
    "available",
    "by_label",
    "choose",
    "kind",
    "mixes",
    "names",
    "preference",
    "reasons_for",
    "requested",
    "runnable",
    "usable",
]


#: Configured transports that benchmarks and the command line name by a label of their own, beside the names.
LABELLED: dict[str, Transport] = {
    "ipc/copy-engine": IpcTransport(method="copy-engine"),
    "ipc/two-way": IpcTransport(one_way_bytes=0),  # small exchanges straight into the fields, not one way
    "staged/mpi": StagedTransport(node_memory=False),  # every chunk through MPI, peers on the node too
    "cma/threads": CmaTransport(threads=None),  # reads from several peers at once on the rank's share of the cores
}


def names(memory: str | None = None) -> list[str]:
    """Names of every transport gridcomm knows (that moves fields of ``memory``, "host" or "device", if given),
    in the order tables show them."""
    return [name for name, cls in _REGISTRY.items() if memory is None or memory in cls.memories]


def runnable(on_device: bool) -> list[str]:
    """The names of the transports that can move fields of that memory in this process, as far as it can tell
    without asking other ranks (``Transport.local_reason``), in the order tables show them."""
    memory = "device" if on_device else "host"
    return [name for name in names(memory) if _REGISTRY[name]().local_reason(on_device) is None]


def usable(comm: Communicator, on_device: bool) -> list[str]:
    """Collective the first time: the names of the transports that can move fields of that memory here, in the
    order tables show them."""
    reasons = available(comm, on_device)
    return [name for name in names("device" if on_device else "host") if reasons.get(name) is None]


def kind(name: str) -> type[Transport]:
    """The class of transport ``name`` (its declarations: memories, reach, graph_capturable)."""
    if name not in _REGISTRY:
        raise TransportError(f"transport={name!r} is unknown; use 'auto' or one of {names()}")
    return _REGISTRY[name]


def by_label(label: str) -> str | Transport | dict[str, str | Transport]:
    """What a constructor takes for ``label``: a transport's name or ``"auto"`` as it is, a label of LABELLED as
    its configured Transport (e.g. ``"ipc/copy-engine"``), and ``"NAME/OPTION=VALUE[/OPTION=VALUE...]"`` as that
    transport configured so (e.g. ``"ipc/blocks=32"``; whole numbers are read as such; no commas, which separate
    labels on the command line); ``"NODE+NETWORK"`` (two such labels) as the mapping of a transport per group of
    peers, ``{"node": ..., "network": ...}``. TransportError for an unknown name or option."""
    if "+" in label:
        node, _, network = label.partition("+")
        return {"node": _one_by_label(node), "network": _one_by_label(network)}
    return _one_by_label(label)


def _one_by_label(label: str) -> str | Transport:
    if label in LABELLED or "/" not in label or "=" not in label:
        return LABELLED.get(label, label)
    name, _, options = label.partition("/")
    cls = kind(name)
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    settings: dict[str, Any] = {}
    for option in options.split("/"):
        key, _, value = option.partition("=")
        if key not in fields or not value:
            raise TransportError(
                f"transport label {label!r}: {option!r} is not an option of {name}; give NAME/OPTION=VALUE with "
                f"OPTION one of {sorted(fields) or 'none'}"
            )
        settings[key] = int(value) if value.isdigit() else value
    return cls(**settings)


def available(comm: Communicator, on_device: bool) -> dict[str, str | None]:
    """For each transport, None when it can move fields here, else why not."""
    return {name: cls().unusable_reason(comm, on_device) for name, cls in _REGISTRY.items()}


#: The ways a peer is reached, for a transport per group of peers: ranks of this rank's node, and the others.
REACHES = ("node", "network")


def requested(transport: str | Transport | Mapping[str, Any]) -> str:
    """What ``transport`` asks for, checked here without communicating: ``"auto"``, a transport's name, a
    configured Transport's repr, or a mapping of REACHES to any of those (``{"node": "ipc", "network": "nccl"}``;
    a reach left out is ``"auto"``). ArgumentTypeError for another type, TransportError for an unknown name or
    reach.

    ``choose`` may be collective (a transport's first check of a communicator), so a constructor compares what
    every rank requested first: ranks asking for different transports must all raise, not wait for each other.
    """
    if isinstance(transport, Mapping):
        unknown = sorted(set(map(str, transport)) - set(REACHES))
        if unknown:
            raise TransportError(
                f"transport={dict(transport)!r} names {unknown}; a mapping gives the transport of the peers on this "
                f"rank's node ('node') and of the others ('network')"
            )
        return repr({reach: requested(transport.get(reach, "auto")) for reach in REACHES})
    if isinstance(transport, Transport):
        return repr(transport) if dataclasses.is_dataclass(transport) else type(transport).__qualname__
    if not isinstance(transport, str):
        raise ArgumentTypeError(
            f"transport={transport!r} ({type(transport).__name__}) names no transport; give 'auto', one of "
            f"{names()}, a configured Transport (e.g. MpiTransport(method='neighbor')), or a mapping such as "
            "{'node': 'ipc', 'network': 'nccl'}"
        )
    if transport != "auto" and transport not in _REGISTRY:
        raise TransportError(f"transport={transport!r} is unknown; use 'auto' or one of {names()}")
    return transport


def choose(transport: str | Transport, comm: Communicator, on_device: bool, exclude: tuple[str, ...] = ()) -> Transport:
    """The transport for ``transport`` (a name, ``"auto"``, or a configured Transport), checked usable here.

    ``"auto"`` takes the first usable transport in order of preference for where the fields live, leaving
    out the names in ``exclude``.
    """
    requested(transport)  # raises for what names no transport
    where = "GPU" if on_device else "host"
    if isinstance(transport, Transport):
        chosen, why = transport, f"the configured {requested(transport)}"
    elif transport == "auto":
        reasons = available(comm, on_device)
        for name in exclude:  # tried first and found unfit for these arrays
            reasons[name] = reasons.get(name) or "cannot move these arrays (fell back from it)"
        usable = [name for name in _preference(on_device) if reasons.get(name) is None]
        if not usable:
            detail = "; ".join(f"{name}: {why}" for name, why in reasons.items())
            raise TransportError(f"no transport can move these fields here ({detail})")
        chosen, why = _REGISTRY[usable[0]](), "auto picks " + auto_choice_reason(reasons, on_device)
    else:
        chosen, why = _REGISTRY[transport](), "as asked"
    reason = chosen.unusable_reason(comm, on_device)
    if reason is not None:
        raise TransportError(f"transport {chosen.name!r} cannot be used: {reason}")
    log.info("transport %s for %s arrays: %s", chosen.name, where, why)
    return chosen


def auto_choice_reason(reasons: dict[str, str | None], on_device: bool, measuring: bool | None = None) -> str:
    """What ``"auto"`` picks given ``available(...)``'s answer, and why: the fastest of the usable candidates
    measured on each plan (transports/auto.py, where two or more can and ``measuring``, by default unless
    GRIDCOMM_AUTO=order), and why each candidate left out was; else the first usable transport in order of
    preference, and why each one before it was passed over."""
    from . import auto

    measured = list(auto.usable_candidates(reasons, on_device))
    if len(measured) > 1 and (auto.auto_measurement() if measuring is None else measuring):
        candidates = dict.fromkeys(_name(t) for t in auto.candidates(on_device).values())  # names, in order
        return (
            f"the fastest of {', '.join(measured)} for each plan, measured on its own exchange when it is built "
            "(plans of one shape once; GRIDCOMM_AUTO=order takes the order of preference instead)"
        ) + "".join(f"; not {name}: {reasons[name]}" for name in candidates if reasons.get(name))
    skipped = []
    for name in _preference(on_device):
        if reasons.get(name) is None:
            why = f"{name}: the first usable of {' > '.join(_preference(on_device))} (fastest first)"
            return why + "".join(f"; not {s}: {reasons[s]}" for s in skipped)
        skipped.append(name)
    return "nothing: no transport is usable"


def _name(transport: str | Transport) -> str:
    return transport if isinstance(transport, str) else transport.name


def reasons_for(comm: Communicator, reach: str, on_device: bool) -> dict[str, str | None]:
    """Collective (over ``comm``, and over its node's ranks for transports of one node): for each transport, None
    when it can serve the peers of ``reach`` ("node": on this rank's node; "network": on other nodes; "all":
    every peer), else why not."""
    reasons = {}
    for name, cls in _REGISTRY.items():
        transport = cls()
        why = transport.local_reason(on_device)
        if why is None and cls.reach == "node":
            if reach == "network":
                why = f"{name} reaches the ranks of one node only"
            else:
                why = transport.ranks_reason(comm.node if reach == "node" else comm)
        elif why is None:
            why = transport.ranks_reason(comm)
        reasons[name] = why
    # What one rank finds holds for all (a library missing on one rank): every rank must choose alike.
    everyone = comm.mpi.allgather(reasons)
    return {name: next((r[name] for r in everyone if r[name]), None) for name in reasons}


def mixes(comm: Communicator, on_device: bool) -> dict[str, dict[str, str]]:
    """Collective: where the ranks are on several nodes, every transport mapping a benchmark can time beside the
    single transports: ``{"ipc+nccl": {"node": "ipc", "network": "nccl"}, ...}``, each transport of one node that
    serves the peers on this rank's node with each transport that serves the others. Empty on one node."""
    if len(set(comm.nodes)) < 2:
        return {}
    on_node, across = reasons_for(comm, "node", on_device), reasons_for(comm, "network", on_device)
    order = names("device" if on_device else "host")
    local = [n for n in order if on_node[n] is None and kind(n).reach == "node"]
    remote = [n for n in order if across[n] is None]
    return {f"{a}+{b}": {"node": a, "network": b} for a in local for b in remote}


def preference(on_device: bool) -> list[str]:
    """The order ``auto`` takes where it does not measure: fastest first (docs/transports.md)."""
    return _preference(on_device)


class Mixed(Transport):
    """The transports of an exchange whose groups of peers are served each by its own (one per way of reaching
    them): what the exchanger reports as its ``transport``, e.g. ``ipc+nccl``. It binds nothing itself."""

    def __init__(self, parts: Sequence[Transport]) -> None:
        self.parts = tuple(parts)
        self.name = "+".join(p.name for p in self.parts)  # type: ignore[misc]
        self.graph_capturable = all(p.graph_capturable for p in self.parts)  # type: ignore[misc]
        self.replayable = all(p.replayable for p in self.parts)  # type: ignore[misc]
        self.memories = frozenset.intersection(*(p.memories for p in self.parts))  # type: ignore[misc]

    def packer_kind(self, on_device: bool) -> PackerKind:
        raise TransportError("a mixed transport has no packer of its own: each of its parts has one")

    def bind(self, comm: Communicator, packer: Any, tag: int) -> Channel:
        raise TransportError("a mixed transport binds its parts, one per group of peers")

    def __repr__(self) -> str:
        return f"Mixed({', '.join(map(repr, self.parts))})"


def _preference(on_device: bool) -> list[str]:
    """Fastest first, as measured by ``gridcomm bench halo`` (docs/design.md). ``nvshmem`` is only taken when
    asked for: it starts a process-wide runtime with a symmetric heap of its own."""
    return ["ipc", "nccl", "mpi", "staged"] if on_device else ["cma", "shm", "mpi"]
