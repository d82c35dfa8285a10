"""The spectral-transform dwarf distributed over 1 to 4 ranks equals the one-rank transform to round-off.

Each rank transforms its wavenumbers' coefficients and its latitude band's points; both are compared with the
matching parts of the serial transform of the same global coefficients.
"""

from __future__ import annotations

import numpy as np
from harness import ON_GPU, assert_everywhere, ranks

from gridcomm import Communicator
from gridcomm.lab.apps.spectral import SpectralTransform, coefficient_count, dwarf, wavenumber_sets
from gridcomm.lab.apps.spectral.dwarf import DistributedTransform, random_coefficients, run_spectral


def _compare(got, want, what: str) -> str | None:
    error = float(np.max(np.abs(got - want), initial=0.0)) / float(np.max(np.abs(want)))
    return None if error < 1e-12 else f"{what}: relative error {error:.2e}"


def check_distributed_transform_equals_serial(comm):
    problems = []
    with Communicator(comm) as gc:
        for grid, truncation in (("O16", None), ("O24", 11)):
            with DistributedTransform(gc, grid, truncation, batch=3) as dist:
                serial = SpectralTransform(dist.grid, dist.truncation)
                t = dist.truncation
                whole = random_coefficients(t, np.arange(t + 1), 3)
                assert whole.shape[1] == coefficient_count(t)
                mine = random_coefficients(t, dist.wavenumbers, 3)  # drawn per m: this rank's part of `whole`
                if p := _compare(mine, dist.local_coefficients(whole), f"{grid}: this rank's coefficients"):
                    problems.append(p)
                values = dist.inverse(mine)
                points = dist.grid.points_of(dist.rows)  # this rank's rows need not be consecutive
                reference = serial.inverse(whole)
                if p := _compare(values, reference[:, points], f"{grid}: inverse on this rank's rows"):
                    problems.append(p)
                back = dist.direct(values)
                if p := _compare(back, dist.local_coefficients(serial.direct(reference)), f"{grid}: direct"):
                    problems.append(p)
    assert_everywhere(comm, "\n".join(problems) or None)


def check_run_spectral_round_trip(comm):
    """run_spectral's round trip and its split: the slowest rank's phases lie inside the steps they were timed
    in, so they add up to at most that step (on the GPU with several ranks, pipelined too: its overlapped steps
    once added their Legendre phase to the split a second time)."""
    runs = [{}]
    if ON_GPU and comm.Get_size() > 1:
        runs.append({"gpu": True, "pipeline": 2})
    problems = []
    with Communicator(comm) as gc:
        for options in runs:
            r = run_spectral(gc, "O20", levels=2, fields=2, steps=2, **options)
            if not r["round_trip_error"] < 1e-12:
                problems.append(f"{options}: round-trip error {r['round_trip_error']:.2e}")
            if set(r["split_s"]) != {"legendre", "fft", "transposition"} or r["time_per_step_s"] <= 0:
                problems.append(f"{options}: timings {r}")
            own = r["slowest_rank_split_s"]
            step = r["sequential_step_s"] or r["time_per_step_s"]
            if own["legendre"] + own["fft"] + own["transposition"] > step * (1 + 1e-9):
                problems.append(f"{options}: the slowest rank's phases add up to more than its step: {own}, {step}")
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_auto_pipeline(comm):
    """``pipeline="auto"``: several stages (AUTO_PIPELINE, or fewer where a rank has fewer Legendre products) where
    the transport is one a CUDA graph replays (GPU, graphs: ipc, nccl), one stage where it is not (staged, through the
    host) or where there are no graphs (the host); the round trip holds either way."""
    if ON_GPU:
        import cupy as xp

        cases = (("ipc", True), ("nccl", True), ("staged", False))
    else:
        xp, cases = np, (("auto", False),)
    problems = []
    with Communicator(comm) as gc:
        t, batch = 47, 3
        a = xp.asarray(random_coefficients(t, wavenumber_sets(t, gc.size)[gc.rank], batch))
        for transport, grouped in cases:
            with DistributedTransform(gc, "O48", batch=batch, xp=xp, graphs=ON_GPU, transport=transport) as dist:
                if (dist.pipeline > 1) != grouped:
                    problems.append(f"{transport}: auto gave {dist.pipeline} stage(s)")
                back = xp.asarray(dist.direct(dist.inverse(a)))
                error = float(abs(back - a).max()) / float(abs(a).max())
                if not error < 1e-10:
                    problems.append(f"{transport}: round trip {error:.1e}")
    assert_everywhere(comm, "\n".join(problems) or None)


@ranks(minimum=2)
def check_pipelined_transform_equals_one_transposition(comm):
    """Every rank's wavenumbers cut into stages (runs of its Legendre products) and its rows into groups
    (``row_groups``: rows that need not follow one another), each (stage, group) moved by a transposition of its
    own, give bit for bit what one transposition of everything gives: on the host the phases one after the other;
    on the GPU (GRIDCOMM_CHECK_DEVICE=gpu) with CUDA graphs, the transpositions overlapping the products and the
    FFTs and without the overlap, over the transports a CUDA graph replays (ipc kernel and copy engines, nccl), and
    with the inverse's later groups of rows moved stages late (``inverse_lag``); where ipc's kernel moves them (with
    ``one_way_bytes=0``: small messages go one way, another kernel), with the products unfolded and the FFTs'
    coefficients picked straight into the peers (``peer_writes``), against the first case, which unfolds and picks
    them into blocks that ipc copies. On the GPU the overlapped run's timeline holds a span per stage, group and
    transposition, none ending before it starts."""
    from gridcomm.arrays import to_host
    from gridcomm.transports import by_label

    if ON_GPU:
        import cupy as xp

        transports = ("ipc", "ipc/one_way_bytes=0", "ipc/copy-engine", "nccl")  # ipc: one way where messages are small
        cases = (((1, 1), True), ((3, 1), True), ((1, 3), True), ((3, 2), True), ((3, 2), False))  # all with graphs
        cases += (((3, 3), True),)  # groups 1 and 2 of the inverse moved 1 and 2 stages late (inverse_lag 1)
        cases = (((1, 1), True, False), *((shape, overlap, True) for shape, overlap in cases))  # unfolded apart
    else:
        xp, transports = np, ("auto", "mpi")
        cases = (((1, 1), False, False), ((3, 1), False, True), ((3, 2), False, True))
    problems = []
    with Communicator(comm) as gc:
        t, batch = 47, 5
        a = xp.asarray(random_coefficients(t, wavenumber_sets(t, gc.size)[gc.rank], batch))
        for label in transports:
            results = {}
            for k, (shape, overlap, into_peers) in enumerate(cases):
                options = {"batch": batch, "xp": xp, "graphs": ON_GPU, "pipeline": shape}
                dwarf.UNFOLD_INTO_PEERS = dwarf.PICK_INTO_PEERS = into_peers
                try:
                    dist = DistributedTransform(gc, "O48", **options, transport=by_label(label))
                finally:
                    dwarf.UNFOLD_INTO_PEERS = dwarf.PICK_INTO_PEERS = True
                with dist:
                    dist.overlap = overlap
                    if shape == (3, 3):  # else the default (INVERSE_LAG)
                        dist.inverse_lag = 1
                    if dist.pipeline_shape != shape:
                        problems.append(f"{label}: pipeline={shape} gave {dist.pipeline_shape}")
                    expected = into_peers and label == "ipc/one_way_bytes=0" and gc.size > 1  # ipc's kernel only
                    into = (dist.unfolds_into_peers, dist.picks_into_peers)
                    if label != "ipc" and into != (expected, expected):
                        problems.append(f"{label}, case {cases[k]}: (unfolds, picks) into the peers: {into}")
                    for _ in range(3):  # with graphs the first call captures them; the others replay them
                        values = xp.asarray(dist.inverse(a)).copy()
                        back = xp.asarray(dist.direct(values)).copy()
                    results[k] = [to_host(values), to_host(back)]
                    if ON_GPU and overlap and shape == (3, 2):
                        problems += timeline_problems(dist, a, label)
            for k, got in results.items():
                for what, x, y in zip(("inverse", "direct"), got, results[0], strict=True):
                    if not np.array_equal(x, y):
                        error = float(np.max(np.abs(x - y))) / float(np.max(np.abs(y)))
                        problems.append(f"{label}, case {cases[k]}: {what} differs ({error:.1e})")
    assert_everywhere(comm, "\n".join(problems) or None)


def timeline_problems(dist, a, label):
    """What is wrong with the timeline of one inverse of ``dist`` (3 stages x 2 groups, overlapped): a span per
    Legendre stage, transposition and FFT group, on its stream, none ending before it starts."""
    dist.timeline = []
    dist.inverse(a)
    spans, dist.timeline = dist.timeline_ms(), None
    want = {f"legendre {c}" for c in range(3)} | {f"fft {g}" for g in range(2)}
    want |= {f"to rows ({c}, {g})" for c in range(3) for g in range(2)}
    problems = []
    if sorted(s["label"] for s in spans) != sorted(want):
        problems.append(f"{label}: timeline spans {sorted(s['label'] for s in spans)}, expected {sorted(want)}")
    if any(s["end_ms"] < s["start_ms"] for s in spans):
        problems.append(f"{label}: a timeline span ends before it starts")
    if any((s["stream"] == "transposition") != s["label"].startswith("to rows") for s in spans):
        problems.append(f"{label}: a timeline span on the wrong stream")
    return problems
