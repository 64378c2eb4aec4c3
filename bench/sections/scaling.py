"""Scaling on your machine: one event on P = 1 … N ranks, measured beside the scaling model's prediction.

What a user runs to decide how many GPUs to ask for (from the repository root)::

    torchrun --nproc-per-node N -m bench --only scaling --device cuda      # N GPUs of one node, NCCL
    torchrun --nproc-per-node 2 -m bench --only scaling                    # 2 CPU ranks, gloo
    python -m bench --only scaling                                         # spawns 2 local gloo ranks

(``--graph FILE`` takes another event graph than the real full event 21000,
``--hidden``/``--iterations`` another model; on several nodes pass ``--cache``
on a shared file system, where rank 0 builds the graph every rank reads.)

For every P from 1 to the job's N ranks, ranks 0 … P-1 form a domain group
on the event's METIS P-way plan (P = 1: rank 0 alone on the whole event)
and run real training steps — forward, backward, the gradient all-reduce
over the group, the AdamW step — as the trainer does, while the other ranks
wait. Per P it measures (medians over alternating rounds; a step starts
and ends at a barrier of the group, so it is the slowest rank's):

* **step time** with and without overlap, and the **overlap benefit** (their ratio);
* **halo exchange time** per step: every exchange (forward and backward) of
  one extra step timed on each rank, with the device synchronised around it,
  without overlap; the slowest rank's — as the step pays it (waiting for a
  slower peer included) and the transfer alone (the group meets at a barrier
  before each exchange);
* **halo bytes** per step, all ranks: the exchanges each rank made × the rows its
  plan sends × H × 4 bytes, forward and backward;
* **memory per rank**: the step's peak above what the rank held before it
  (``max_memory_allocated`` on CUDA, the resident-set high-water mark on CPU),
  the largest rank's;
* **speed-up** over P = 1, and parallel efficiency; and, since a shared
  machine's load inflates wall time, the busiest rank's CPU seconds per step
  and the speed-up they give.

Beside each measurement stands the prediction of :mod:`bench.scaling_model`
for the same P, from the event's own plans (halo rows per rank) and traced
memory and FLOPs of the largest part, with this machine's constants: its
compute rate calibrated on the measured P = 1 step, its link latency and
bandwidth from a ping-pong between ranks 0 and 1 of the same job. On a GPU
the model names (H100, A100) the paper model's own prediction is shown too.
The backend follows the device: gloo on CPU, NCCL on CUDA; the code is the
same (nothing here is CPU-specific).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from bench import scaling_model
from bench.common.plans import graph_at, plan_for
from bench.common.report import Column, Section
from bench.common.timing import load_average
from bench.common.workloads import missing_full_event
from bench.sections.scaling_inputs import add_traced_step, plan_traffic
from domainpar.comm.reduce import all_reduce_gradients
from domainpar.launch.env import detect
from domainpar.launch.ranks import init_from_env, spawn
from domainpar.model.config import ModelConfig
from domainpar.model.registry import build_model
from domainpar.parallel.part import rank_part
from domainpar.train.memory import current_rss_bytes, peak_rss_bytes, reset_peak_rss

#: ``--device`` values this section runs for.
DEVICES = ("cpu", "cuda")
#: Model of the measured steps when none is given: small enough on a CPU to finish in minutes, the paper model's on GPUs.
DEFAULT_MODEL = {"cpu": (16, 4), "cuda": (64, 8)}


@dataclasses.dataclass(frozen=True)
class Settings:
    """What every rank measures with."""

    graph: str
    """The event graph file."""
    hidden: int
    """Model width H."""
    iterations: int
    """Message-passing iterations."""
    rounds: int
    """Timed rounds per P (each times both overlap settings, alternating which goes first)."""
    method: str = "metis"
    """Partitioner of the P-way plans."""
    threads: int = 1
    """Intra-op threads per rank on CPU."""


# ------------------------------------------------------------------------------------------- timing pieces


def _synchroniser(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


class TimedExchange:
    """The exchange protocol around a real exchange, adding the seconds spent in it (forward and backward).

    The device is synchronised around every exchange, so the time is the exchange's own (on CUDA, NCCL
    calls return before the transfer is done); use it for a step timed apart from the others.
    """

    def __init__(self, exchange: Any, sync: Callable[[], None], meet: Callable[[], None] | None = None) -> None:
        self.inner, self.sync = exchange, sync
        # ``meet``: a barrier of the group before each exchange, so the time is the transfer's alone, not the
        # wait for a slower peer.
        self.meet = meet or (lambda: None)
        self.num_halo = exchange.num_halo
        self.seconds = 0.0
        backward = getattr(exchange, "_backward", None)
        if backward is not None:
            def timed_backward(grad: torch.Tensor) -> torch.Tensor:
                self.sync()
                self.meet()
                start = time.perf_counter()
                out = backward(grad)
                self.sync()
                self.seconds += time.perf_counter() - start
                return out

            # The autograd function calls the exchange's own _backward: an instance attribute shadows the method.
            exchange._backward = timed_backward
            self._restore = lambda: delattr(exchange, "_backward")
        else:
            self._restore = lambda: None

    def __call__(self, x_owned: torch.Tensor) -> torch.Tensor:
        return self.start(x_owned).wait()

    def start(self, x_owned: torch.Tensor) -> Any:
        self.sync()
        self.meet()
        start = time.perf_counter()
        pending = self.inner.start(x_owned)
        owner = self

        class _Pending:
            def wait(self) -> torch.Tensor:
                out = pending.wait()
                owner.sync()
                owner.seconds += time.perf_counter() - start
                return out

        return _Pending()

    def close(self) -> None:
        """Give the exchange back its own backward."""
        self._restore()


def _link_probe(rank: int, world: int, device: torch.device, large_bytes: int, repeats: int = 20) -> dict | None:
    """Latency and bandwidth of one point-to-point round between ranks 0 and 1 (a ping-pong, medians), on the device."""
    if world < 2:
        return None
    sync = _synchroniser(device)
    results = {}
    # The bandwidth from a message large enough that the transfer outweighs the latency (at least 8 MiB).
    for label, nbytes in (("small", 4), ("large", max(large_bytes, 8 << 20))):
        buffer = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
        times = []
        for _ in range(repeats + 2):
            dist.barrier()
            sync()
            start = time.perf_counter()
            if rank == 0:
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, buffer, 1)]):
                    work.wait()
                for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buffer, 1)]):
                    work.wait()
            elif rank == 1:
                for work in dist.batch_isend_irecv([dist.P2POp(dist.irecv, buffer, 0)]):
                    work.wait()
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, buffer, 0)]):
                    work.wait()
            sync()
            times.append((time.perf_counter() - start) / 2)  # one direction
        results[label] = (statistics.median(times[2:]), nbytes)
    (t_small, _), (t_large, n_large) = results["small"], results["large"]
    # Net of the latency when the large message took longer (it should); else its whole time (a lower bound).
    bandwidth = (n_large - 4) / (t_large - t_small) if t_large > 2 * t_small else n_large / t_large
    return {"latency_s": t_small, "bandwidth_bytes_s": bandwidth, "large_bytes": n_large, "large_seconds": t_large}


def _step_peak(step: Callable[[], float], device: torch.device) -> tuple[float, int | None]:
    """One step's seconds and its memory peak above what was held before it (None where it cannot be read)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        seconds = step()
        return seconds, int(torch.cuda.max_memory_allocated(device) - before)
    baseline = current_rss_bytes()
    if not reset_peak_rss():
        return step(), None
    seconds = step()
    return seconds, int(peak_rss_bytes() - baseline)


# ------------------------------------------------------------------------------------------- one P


def _measure(rank: int, num_parts: int, group: Any, device: torch.device, settings: Settings) -> dict:
    """Ranks 0 … P-1: real training steps of their parts, with and without overlap, and one timed-exchange step."""
    path = Path(settings.graph)
    graph = graph_at(path)
    plan = plan_for(path, num_parts, settings.method)
    rp = rank_part(graph, rank, group if num_parts > 1 else None, device, plan=plan)
    sync = _synchroniser(device)
    weights = torch.linspace(-1.0, 1.0, graph.num_edges, device=device)
    mask = rp.graph.edge_owned.to(torch.float32) * weights[rp.graph.edge_ids]
    base = ModelConfig(node_features=int(rp.graph.x.shape[1]), edge_features=int(rp.graph.edge_attr.shape[1]),
                       hidden=settings.hidden, num_iterations=settings.iterations)
    # One rank has no exchange to overlap: both settings would be the same step, so P = 1 times one, twice as often.
    settings_of_p = (False, True) if num_parts > 1 else (False,)
    models, optimizers = {}, {}
    for overlap in settings_of_p:
        torch.manual_seed(0)
        models[overlap] = build_model(dataclasses.replace(base, overlap=overlap)).to(device)
        optimizers[overlap] = torch.optim.AdamW(models[overlap].parameters(), lr=1e-4)

    cpu_seconds: list[float] = []

    def step(overlap: bool, exchange: Any = None) -> float:
        model, optimizer = models[overlap], optimizers[overlap]
        if num_parts > 1:
            dist.barrier(group=group)
        sync()
        start, cpu_start = time.perf_counter(), time.process_time()
        # Each global edge counted once (on its owner), normalised by the event's edges, as in training.
        loss = (model(rp.graph, exchange or rp.exchange) * mask).sum() / rp.graph.num_edges_global
        loss.backward()
        if num_parts > 1:
            all_reduce_gradients(model, group)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        cpu_seconds.append(time.process_time() - cpu_start)
        if num_parts > 1:
            dist.barrier(group=group)  # the step ends when the slowest rank is done
        return time.perf_counter() - start

    for overlap in settings_of_p:
        step(overlap)  # warm-up: allocator, thread pools, exchange buffers
    times: dict[bool, list[float]] = {False: [], True: []}
    peaks: list[int] = []
    for round_index in range(settings.rounds):
        order = settings_of_p if round_index % 2 == 0 else settings_of_p[::-1]
        for overlap in order if num_parts > 1 else (False, False):
            seconds, peak = _step_peak(lambda: step(overlap), device)
            times[overlap].append(seconds)
            if peak is not None and not overlap:
                peaks.append(peak)
    if num_parts == 1:
        times[True] = times[False]
    timed_cpu = list(cpu_seconds[len(settings_of_p):])  # the rounds' steps, not the warm-up
    exchanges_before = getattr(rp.exchange, "num_exchanges", 0)
    seconds_in_exchanges = {}
    for kind, meet in (("exposed", None), ("transfer", lambda: dist.barrier(group=group) if num_parts > 1 else None)):
        timed = TimedExchange(rp.exchange, sync, meet)
        try:
            step(False, timed)
        finally:
            timed.close()
        seconds_in_exchanges[kind] = timed.seconds
    exchanges = (getattr(rp.exchange, "num_exchanges", 0) - exchanges_before) // 2
    bytes_per_exchange = rp.exchange.bytes_per_exchange(settings.hidden) if num_parts > 1 else 0
    record = {
        "step_s": statistics.median(times[False]),
        "step_overlap_s": statistics.median(times[True]),
        "exchange_s": seconds_in_exchanges["exposed"],
        "transfer_s": seconds_in_exchanges["transfer"],
        # This process's CPU seconds per step (what a shared machine's load does not inflate as it does wall time).
        "cpu_s": statistics.median(timed_cpu),
        "exchanges": exchanges,
        # Forward rows out and as many gradient rows back.
        "halo_bytes": 2 * exchanges * bytes_per_exchange,
        "peak_bytes": max(peaks) if peaks else None,
        "local_edges": rp.graph.num_edges,
    }
    return record


def rank_body(rank: int, world: int, settings: Settings, device_kind: str) -> list[dict]:
    """Every rank of the job: the link probe, then P = 1 … world; returns this rank's records (all ranks, every P)."""
    device = torch.device("cpu")
    if device_kind == "cuda":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    elif settings.threads:
        torch.set_num_threads(settings.threads)
    largest = plan_for(Path(settings.graph), world, settings.method)
    probe_bytes = max(p.num_halo for p in largest.parts) * settings.hidden * 4 if world > 1 else 0
    link = _link_probe(rank, world, device, probe_bytes)
    records = []
    for num_parts in range(1, world + 1):
        group = dist.new_group(list(range(num_parts))) if num_parts > 1 else None
        if rank < num_parts:
            records.append({"num_parts": num_parts, "rank": rank, **_measure(rank, num_parts, group, device, settings)})
            gc.collect()  # the part, models and optimisers of this P are gone before the next P allocates its own
            if device.type == "cuda":
                torch.cuda.empty_cache()
        dist.barrier()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, {"records": records, "link": link})
    return gathered


# ------------------------------------------------------------------------------------------- prediction


def model_inputs(settings: Settings, world: int, gpus_per_node: int) -> tuple[list[dict], dict]:
    """The scaling model's inputs for P = 1 … world: plans' halo traffic and the traced largest part of each."""
    path = Path(settings.graph)
    graph = graph_at(path)
    rows = []
    for num_parts in range(1, world + 1):
        record = plan_traffic(path, num_parts, settings.method, gpus_per_node)
        add_traced_step(record, path, settings.method, settings.hidden, settings.iterations)
        rows.append(record)
    extra = {"graph": path.name, "num_nodes": graph.num_nodes, "num_edges": graph.num_edges, "hidden": settings.hidden,
             "iterations": settings.iterations, "gpus_per_node": gpus_per_node}
    return rows, extra


def calibrated_hardware(measured_step_s: float, flops: float, link: dict | None, gpus_per_node: int) -> scaling_model.Hardware:
    """This machine as the model sees it: compute rate from the measured one-rank step, links from the ping-pong."""
    bandwidth = (link["bandwidth_bytes_s"] if link else 1e12) / 1e9
    return scaling_model.Hardware(
        name="this machine (calibrated)", fp32_tflops=flops / measured_step_s / 1e12,
        hbm_tb_s=1e9,  # the calibrated compute rate already includes memory traffic: only the FLOP term counts
        memory_gb=1e9, nvlink_gb_s=bandwidth, ib_gb_s=bandwidth, gpus_per_node=gpus_per_node,
        source="compute rate from the measured P = 1 step, latency and bandwidth from a ping-pong of ranks 0 and 1",
    )


def _paper_hardware(device: torch.device, gpus_per_node: int) -> scaling_model.Hardware | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for hardware in scaling_model.HARDWARE:
        if hardware.name.split("-")[0] in name:
            return dataclasses.replace(hardware, gpus_per_node=gpus_per_node)
    return None


def combine(gathered: list[dict], settings: Settings, device: torch.device, gpus_per_node: int) -> tuple[list[dict], dict]:
    """Rank 0: per-P rows of measurements (slowest / largest rank) beside the model's predictions."""
    records = [r for rank in gathered for r in rank["records"]]
    link = gathered[0]["link"]
    world = max(r["num_parts"] for r in records)
    inputs, extra = model_inputs(settings, world, gpus_per_node)
    by_p = {p: [r for r in records if r["num_parts"] == p] for p in range(1, world + 1)}
    measured = {
        p: {
            "step_s": max(r["step_s"] for r in rs), "step_overlap_s": max(r["step_overlap_s"] for r in rs),
            "exchange_s": max(r["exchange_s"] for r in rs), "transfer_s": max(r["transfer_s"] for r in rs),
            "cpu_s": max(r["cpu_s"] for r in rs),
            "halo_bytes": sum(r["halo_bytes"] for r in rs),
            "exchanges": max(r["exchanges"] for r in rs),
            "peak_bytes": max((r["peak_bytes"] for r in rs if r["peak_bytes"] is not None), default=None),
            "max_local_edges": max(r["local_edges"] for r in rs),
        }
        for p, rs in by_p.items()
    }
    hardware = calibrated_hardware(measured[1]["step_s"], inputs[0]["flops"], link, gpus_per_node)
    assumptions = scaling_model.Assumptions(eta_flops=1.0, eta_hbm=1.0, latency_us=(link["latency_s"] * 1e6) if link else 0.0)
    predicted = {p["gpus"]: p for p in scaling_model.predict(inputs, extra, hardware, assumptions)}
    paper_hw = _paper_hardware(device, gpus_per_node)
    paper = {p["gpus"]: p for p in scaling_model.predict(inputs, extra, paper_hw)} if paper_hw else {}
    rows = []
    one = measured[1]
    for p in range(1, world + 1):
        m, pred, inp = measured[p], predicted[p], inputs[p - 1]
        exchanges_per_step = 2 * (settings.iterations + 1)
        rows.append({
            "num_parts": p,
            "max_local_edges": m["max_local_edges"],
            "step_ms": m["step_s"] * 1e3, "step_ms_model": pred["step_ms"],
            "step_overlap_ms": m["step_overlap_s"] * 1e3, "step_overlap_ms_model": pred["step_overlap_ms"],
            "overlap_benefit": m["step_s"] / m["step_overlap_s"],
            "overlap_benefit_model": pred["step_ms"] / pred["step_overlap_ms"],
            "exchange_ms": m["exchange_s"] * 1e3, "transfer_ms": m["transfer_s"] * 1e3, "exchange_ms_model": pred["exchange_ms"],
            "halo_mb": m["halo_bytes"] / 1e6,
            # The model: every rank sends its plan's rows at each of 2 (I + 1) exchanges (forward and backward).
            "halo_mb_model": exchanges_per_step * sum(inp["send_on_node"] + inp["send_off_node"]) * settings.hidden * 4 / 1e6,
            "exchanges_per_step": 2 * m["exchanges"], "exchanges_per_step_model": exchanges_per_step if p > 1 else 0,
            "peak_mib": None if m["peak_bytes"] is None else m["peak_bytes"] / 2**20,
            # The step's peak above what a rank holds before it: everything traced but the parameters.
            "peak_mib_model": (inp["peak_bytes"] - inp["parameter_bytes"]) / 2**20,
            "speedup": one["step_overlap_s"] / m["step_overlap_s"], "speedup_model": pred["speedup"],
            "efficiency": one["step_overlap_s"] / m["step_overlap_s"] / p,
            "busiest_cpu_s": m["cpu_s"], "speedup_cpu": one["cpu_s"] / m["cpu_s"],
            "paper_step_overlap_ms": paper[p]["step_overlap_ms"] if paper else None,
            "paper_speedup": paper[p]["speedup"] if paper else None,
        })
    summary = {"link": link, "calibrated_hardware": dataclasses.asdict(hardware),
               "assumptions": dataclasses.asdict(assumptions), "paper_hardware": paper_hw.name if paper_hw else None,
               "inputs": inputs, **extra}
    return rows, summary


# ------------------------------------------------------------------------------------------- the section


_COLUMNS = [
    Column("num_parts", "P"),
    Column("max_local_edges", "largest part edges", "{:,}"),
    Column("step_ms", "step ms", "{:.1f}"),
    Column("step_ms_model", "model", "{:.1f}"),
    Column("step_overlap_ms", "step ms (overlap)", "{:.1f}"),
    Column("step_overlap_ms_model", "model", "{:.1f}"),
    Column("overlap_benefit", "overlap benefit", "{:.2f}×"),
    Column("overlap_benefit_model", "model", "{:.2f}×"),
    Column("exchange_ms", "halo exchange ms/step", "{:.1f}"),
    Column("transfer_ms", "of which transfer", "{:.1f}"),
    Column("exchange_ms_model", "model", "{:.1f}"),
    Column("halo_mb", "halo MB/step", "{:.2f}"),
    Column("halo_mb_model", "model", "{:.2f}"),
    Column("peak_mib", "step peak MiB/rank", "{:,.0f}"),
    Column("peak_mib_model", "model", "{:,.0f}"),
    Column("speedup", "speed-up", "{:.2f}"),
    Column("speedup_model", "model", "{:.2f}"),
    Column("efficiency", "efficiency", "{:.0%}"),
    Column("busiest_cpu_s", "busiest rank CPU s/step", "{:.2f}"),
    Column("speedup_cpu", "speed-up in CPU time", "{:.2f}"),
]


def _threads_per_rank(local_world: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(local_world, 1))


def _graph_for(ctx: Any) -> tuple[str | None, str]:
    """The event to measure: ``--graph``, else the real full event (built by this process)."""
    if getattr(ctx, "graph", None):
        return str(ctx.graph), Path(ctx.graph).name
    full = ctx.real_full()
    if full is None:
        return None, missing_full_event()
    return str(full.path), full.name


def run(ctx: Any, world: int | None = None) -> Section:
    """Measure and predict (see the module docstring); under torchrun every rank calls this, rank 0 gets the table."""
    launcher = detect()
    device_kind = ctx.device
    default_hidden, default_iterations = DEFAULT_MODEL[device_kind]
    hidden = getattr(ctx, "hidden", None) or default_hidden
    iterations = getattr(ctx, "iterations", None) or default_iterations
    rounds = ctx.size(2, 5)
    start = time.perf_counter()
    load_before = load_average()
    if launcher.joins:
        env = init_from_env(1800.0, device=device_kind, watchdog=None)
        rank, world = env.rank, env.world_size
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        # Rank 0 builds (or finds) the event's graph; the others read the file it names.
        chosen = [_graph_for(ctx) if rank == 0 else None]
        dist.broadcast_object_list(chosen, src=0)
        graph, label = chosen[0]
        if graph is None:
            return Section(name="scaling", title="Scaling on this machine", skipped=label)
        settings = Settings(graph, hidden, iterations, rounds, threads=_threads_per_rank(local_world))
        gathered = rank_body(rank, world, settings, device_kind)
        device = env.device
        how = f"torchrun, {world} ranks ({local_world} per node), backend {env.backend}"
    else:
        graph, label = _graph_for(ctx)
        if graph is None:
            return Section(name="scaling", title="Scaling on this machine", skipped=label)
        world = world or 2
        local_world = world
        if device_kind == "cuda" and torch.cuda.device_count() < world:
            return Section(name="scaling", title="Scaling on this machine",
                           skipped=f"{world} local ranks need {world} GPUs (found {torch.cuda.device_count()}); use torchrun")
        settings = Settings(graph, hidden, iterations, rounds, threads=_threads_per_rank(world))
        per_rank = spawn(rank_body, world, (settings, device_kind), timeout_s=4 * 3600.0,
                         backend="gloo" if device_kind == "cpu" else None, num_threads=settings.threads)
        gathered, rank = per_rank[0], 0
        device = torch.device(device_kind)
        how = f"{world} spawned local ranks, backend {'gloo' if device_kind == 'cpu' else 'nccl'}"
    if rank != 0:
        return Section(name="scaling", title="Scaling on this machine (rank > 0: rank 0 reports)")
    rows, summary = combine(gathered, settings, device, local_world)
    load_after = load_average()
    section = Section(name="scaling", title=f"Scaling on this machine: {label}, P = 1 … {world} ranks", columns=_COLUMNS,
                      rows=rows, extra={**summary, "load_average_before": load_before, "load_average_after": load_after,
                                        "threads_per_rank": settings.threads if device_kind == "cpu" else None,
                                        "launch": how})  # fmt: skip
    link = summary["link"]
    section.notes += [
        f"{label}: {summary['num_nodes']:,} nodes, {summary['num_edges']:,} edges; Interaction Network hidden {hidden}, "
        f"{iterations} iterations, fp32; METIS plans; {how}"
        + (f", {settings.threads} intra-op thread(s) per rank" if device_kind == "cpu" else "") + ".",
        f"Medians of {rounds} alternating rounds after one warm-up step each; a step is forward, backward, the gradient "
        "all-reduce over the group and the AdamW step, between two barriers of the group (the slowest rank's time).",
        "'model' columns: bench.scaling_model for the same P on this event's plans and traced largest part, with this "
        "machine's constants — compute rate calibrated on the measured P = 1 step (so P = 1 agrees by construction), "
        + (f"one exchange round {link['latency_s'] * 1e6:.0f} µs and {link['bandwidth_bytes_s'] / 1e9:.2f} GB/s measured "
           "by a ping-pong of ranks 0 and 1." if link else "no link (one rank)."),
        "Halo exchange ms/step: the time spent in every exchange (forward and backward) of one further step without "
        "overlap, the device synchronised around each, slowest rank — it includes waiting for a slower peer; 'of which "
        "transfer': the same with the group meeting at a barrier before each exchange (the model's quantity). "
        "P = 1 has nothing to overlap: its steps are one setting timed twice as often. "
        "Step peak: the step's memory high-water mark above what the rank held before it "
        + ("(max_memory_allocated)." if device.type == "cuda" else "(resident set, VmHWM)."),
        f"Load average {load_before} before, {load_after} after.",
    ]
    if device.type != "cuda":
        section.notes.append("CPU ranks with gloo: NCCL between GPUs is not measured here; run "
                             "`torchrun --nproc-per-node N -m bench --only scaling --device cuda` on a GPU node.")
    if summary["paper_hardware"]:
        section.notes.append(f"Paper model for {summary['paper_hardware']} (datasheet constants): step (overlap) "
                             + ", ".join(f"P={r['num_parts']}: {r['paper_step_overlap_ms']:.1f} ms" for r in rows) + ".")
    section.seconds = time.perf_counter() - start
    return section


def section(ctx: Any) -> Section:
    """Entry point (see :mod:`bench.sections`)."""
    return run(ctx)
