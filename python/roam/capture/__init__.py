"""Capture one PyTorch training step as a roam-graph v1 (see GRAPH_FORMAT.md).

Pipeline (:func:`capture_step`):

1. :func:`~roam.capture.trace.prepare_training_state`: model in train mode, a real
   ``torch.optim.Adam`` step so the Adam state exists (steady state);
2. :func:`~roam.capture.trace.trace_training_step`: ``make_fx(tracing_mode="real")`` of
   ``train_step(params, buffers, optimizer_state, data, labels)`` = forward through
   ``functional_call``, cross-entropy, ``torch.autograd.grad``, PyTorch's single-tensor Adam
   in place; phases stamped on the fx nodes while tracing;
3. :class:`~roam.capture.export.GraphBuilder`: run the GraphModule once with an
   ``fx.Interpreter``; tensors, sizes (bytes), aliases (from operator schemas, checked
   against real storages), writes; then ``after`` edges;
4. :func:`~roam.capture.check.check_graph` plus capture-specific checks (parameters and
   Adam state updated, loss depends on the data, measured eager peak matches
   Tp(program order)); write with :func:`~roam.capture.io.write_graph`.

The graph is what ROAM (arXiv 2310.19295) plans: the order of the ops and the offsets of
the non-resident tensors.

Command line: ``python -m roam.capture --model alexnet --batch-size 1 -o out.json.gz``.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch

from .check import check_graph, program_order_peak, resident_bytes, summary
from .errors import CaptureError, GraphCheckError, UnknownModelError
from .export import GraphBuilder, add_order_edges, dtype_name, measure_costs, resolve_root
from .io import read_graph, write_graph
from .models import build_model, classification_model_names
from .trace import (AdamOptions, StepInputs, TracedStep, TrainingState, make_train_step,
                    prepare_training_state, trace_training_step)

__all__ = [
    "AdamOptions", "CaptureError", "CaptureResult", "GraphCheckError", "StepInputs",
    "TracedStep", "TrainingState", "UnknownModelError", "build_model", "capture_model",
    "capture_step", "capture_torchvision", "check_eager_peak", "check_graph", "classification_model_names",
    "make_train_step", "prepare_training_state", "program_order_peak", "read_graph",
    "resident_bytes", "summary", "trace_training_step", "write_graph",
]


@dataclass
class CaptureResult:
    """``graph``: the roam-graph v1 dict. ``traced``: the :class:`TracedStep` (its
    GraphModule runs the step). ``state``: the :class:`TrainingState` it was traced from.
    ``loss``: the loss of the recording run (0-d tensor). ``op_nodes``: op id -> fx node name.
    ``op_writes``: op id -> ids of the tensors whose storage the op writes.
    ``eager_peak``: measured bytes above resident at the eager peak (None if not checked).
    """
    graph: Dict[str, Any]
    traced: TracedStep
    state: TrainingState
    loss: torch.Tensor
    op_nodes: Dict[str, str]
    op_writes: Dict[str, List[str]]
    eager_peak: Optional[int] = None


def _notes(traced: TracedStep, built, measure_cost: bool, cost_repeats: int) -> List[str]:
    notes = []
    upd = [v for ph, v in traced.baked_items if ph == "update"]
    if upd:
        vals = sorted(set(upd))
        notes.append(
            "Adam step counter: the in-place increment of each step tensor is traced "
            "(aten.add_ on the optimizer_state tensor), but PyTorch's single-tensor Adam calls "
            f"step.item(); that value ({', '.join(repr(v) for v in vals)}) was evaluated at "
            "trace time and the bias corrections derived from it are baked into the graph as "
            "constants: the graph is numerically exact for this step only (memory behaviour "
            "is identical for every step).")
    other = [(ph, v) for ph, v in traced.baked_items if ph != "update"]
    if other:
        notes.append(f"{len(other)} Tensor.item() calls outside the update were baked as "
                     f"constants: {other[:5]}")
    if built.unannotated_writes:
        notes.append("writes not annotated in the operator schema, detected with tensor version "
                     "counters or content comparison and treated as writes: "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(built.unannotated_writes.items())))
    if built.undeclared_aliases:
        notes.append("results sharing their argument's storage without a schema alias "
                     "annotation, exported as aliases: "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(built.undeclared_aliases.items())))
    if built.unobserved_writes:
        notes.append("schema-annotated writes whose version counter did not change (kept as "
                     "writes): " + ", ".join(f"{k} x{v}" for k, v in
                                             sorted(built.unobserved_writes.items())))
    if traced.unused_params:
        notes.append(f"{len(traced.unused_params)} parameters have no gradient and are not "
                     f"updated: {traced.unused_params[:8]}")
    if built.oversized_storages:
        notes.append(f"{len(built.oversized_storages)} op results own a storage larger than "
                     f"numel x element size (size uses numel x element size): "
                     f"{built.oversized_storages[:8]}")
    notes.append("cost: median seconds over %d CPU runs of the traced step" % cost_repeats
                 if measure_cost else "cost: not measured")
    return notes


def _capture_checks(graph: Dict[str, Any], state: TrainingState, writes: Dict[str, List[str]]):
    """Checks that need capture knowledge: every parameter with Adam state and its state
    tensors are written by update-phase ops; the loss op descends from the data input."""
    by_id = {t["id"]: t for t in graph["tensors"]}
    phase = {op["id"]: op["phase"] for op in graph["ops"]}
    written = set()
    for oid, tids in writes.items():
        if phase[oid] == "update":
            written.update(resolve_root(by_id, t) for t in tids)
    need = {}
    names_with_state = {state.param_names[i] for i in state.state_index}
    for t in graph["tensors"]:
        role = t.get("role")
        if (role == "param" and t["name"] in names_with_state) or role == "optimizer_state":
            need[t["id"]] = t["name"]
    missing = [n for tid, n in need.items() if tid not in written]
    if missing:
        raise GraphCheckError(f"{len(missing)} parameters / optimizer states are not updated in "
                              f"the update phase: {missing[:5]}")
    data = [t["id"] for t in graph["tensors"] if t.get("role") == "input" and t["name"] == "data"]
    producer = {o: op["id"] for op in graph["ops"] for o in op["outputs"]}
    reached = set(data)
    for op in graph["ops"]:
        if any(x in reached for x in op["inputs"]):
            reached.update(op["outputs"])
    loss = graph["outputs"][0]
    if loss not in reached:
        raise GraphCheckError(f"the loss {loss} (op {producer.get(loss)}) does not depend on "
                              f"the data input")


# Accepted range of the measured eager peak (arena part) around Tp(program order): kernels'
# internal workspaces are not in the graph (e.g. +15 % on convnext_tiny, +0 to 4 % on the
# other torchvision CNNs tried, +12 bytes on alexnet).
PEAK_LOW = 0.99
PEAK_HIGH = 1.25
PEAK_SLACK_BYTES = 1 << 20


def check_eager_peak(graph: Dict[str, Any], measured: int) -> None:
    """Raise :class:`GraphCheckError` unless ``measured`` (bytes allocated above the
    resident tensors at the eager peak, :func:`roam.capture.peak.measure_eager_peak`) lies in
    ``[PEAK_LOW * Tp, PEAK_HIGH * Tp + PEAK_SLACK_BYTES]`` with Tp = Tp(program order) of
    ``graph`` in bytes. Far above means storages missing from the graph or live ranges cut
    short (a dropped edge); below means storage the graph invents (a missed alias)."""
    tp = program_order_peak(graph)
    if not (PEAK_LOW * tp <= measured <= PEAK_HIGH * tp + PEAK_SLACK_BYTES):
        raise GraphCheckError(f"measured eager peak {measured} B (above resident) does not match "
                              f"Tp(program order) {tp} B of the graph")


def capture_step(state: TrainingState, *, name: str, meta: Optional[Dict[str, Any]] = None,
                 measure_cost: bool = False, cost_repeats: int = 3, seed: int = 0,
                 check_peak: bool = True,
                 progress: Optional[Callable[[str], None]] = None) -> CaptureResult:
    """Trace, record, convert and check one training step of ``state``.

    Args:
        state: from :func:`prepare_training_state` (not modified).
        name: the graph's ``name``.
        meta: extra ``meta`` fields (framework, optimizer, dtype, notes, resident and Tp bytes
            are filled in).
        measure_cost: add ``cost`` (median seconds over ``cost_repeats`` runs) to every op;
            without it the output is byte-for-byte reproducible.
        seed: ``torch.manual_seed`` before tracing and before each run.
        check_peak: run the step once more under the profiler and require its measured
            peak to match ``Tp(program order)`` (:func:`check_eager_peak`).
        progress: called with short status strings.

    Returns:
        :class:`CaptureResult`.

    Raises:
        CaptureError: unmappable tensor arguments, schema/storage alias mismatches, unsupported
            nodes; GraphCheckError: the structural check failed.
    """
    say = progress or (lambda s: None)
    say("tracing the training step with make_fx (tracing_mode='real')")
    traced = trace_training_step(state, seed=seed)
    say(f"traced {len(traced.gm.graph.nodes)} fx nodes; recording real values")
    builder = GraphBuilder(traced.gm, traced.placeholders)
    torch.manual_seed(seed)
    with torch.no_grad():  # the graph holds the backward ops explicitly
        builder.run(*state.step_inputs().as_args())
    built = builder.g
    if measure_cost:
        say(f"measuring op costs ({cost_repeats} runs)")
        costs = measure_costs(traced.gm, lambda: state.step_inputs().as_args(),
                              repeats=cost_repeats, seed=seed)
        for op in built.ops:
            op["cost"] = float(costs[built.op_nodes[op["id"]]])
    else:
        for op in built.ops:
            op.pop("cost", None)
    add_order_edges(built.tensors, built.ops, built.op_writes)
    dtypes = sorted({dtype_name(p.dtype) for p in state.model.parameters()})
    full_meta = {"framework": f"torch {torch.__version__}", "optimizer": "Adam",
                 "optimizer_options": state.adam.as_meta(), "loss": "cross_entropy",
                 "dtype": dtypes[0] if len(dtypes) == 1 else dtypes, "device": "cpu",
                 "capture": {"tool": "roam.capture",
                             "trace": "torch.fx.experimental.proxy_tensor.make_fx, "
                                      "tracing_mode='real', one steady-state step",
                             "seed": seed}}
    full_meta.update(meta or {})
    graph = {"format": "roam-graph", "version": 1, "name": name, "meta": full_meta,
             "tensors": built.tensors, "ops": built.ops, "outputs": built.outputs}
    say("checking the graph")
    check_graph(graph, require_monotone_phases=True)
    _capture_checks(graph, state, built.op_writes)
    full_meta["capture"]["notes"] = _notes(traced, built, measure_cost, cost_repeats)
    s = summary(graph)
    eager_peak = None
    if check_peak:
        from .peak import measure_eager_peak
        eager_peak, _ = measure_eager_peak(traced, state.step_inputs(), seed=seed)
        say(f"measured eager peak {eager_peak} B above resident; Tp(program order) "
            f"{s['tp_program_order_bytes']} B")
        check_eager_peak(graph, eager_peak)
    full_meta["resident_bytes"] = s["resident_bytes"]
    full_meta["tp_program_order_bytes"] = s["tp_program_order_bytes"]
    return CaptureResult(graph=graph, traced=traced, state=state, loss=built.loss_value,
                         op_nodes=dict(built.op_nodes), op_writes=dict(built.op_writes),
                         eager_peak=eager_peak)


def capture_model(model: torch.nn.Module, data: torch.Tensor, labels: torch.Tensor, *,
                  name: str, meta: Optional[Dict[str, Any]] = None,
                  adam: Optional[AdamOptions] = None, warmup_batch=None,
                  **kwargs) -> CaptureResult:
    """:func:`prepare_training_state` then :func:`capture_step` for any classifier ``model``
    (``data``: (B, ...) input batch, ``labels``: (B,) int64; ``warmup_batch``: optional
    ``(data, labels)`` for the warm-up Adam step). Keyword arguments go to
    :func:`capture_step`. Raises as :func:`capture_step`."""
    seed = kwargs.get("seed", 0)
    state = prepare_training_state(model, data, labels, adam=adam, seed=seed,
                                   warmup_batch=warmup_batch)
    return capture_step(state, name=name, meta=meta, **kwargs)


def capture_torchvision(model_name: str, batch_size: int = 1, image_size: int = 224,
                        num_classes: int = 1000, *, seed: int = 0, measure_cost: bool = False,
                        cost_repeats: int = 3, check_peak: bool = True,
                        progress: Optional[Callable[[str], None]] = None) -> CaptureResult:
    """Capture a training step (cross-entropy, Adam) of a torchvision classification model
    on a random batch of shape (batch_size, 3, image_size, image_size) float32 with labels in
    [0, num_classes). ``torch.manual_seed(seed)`` before building the model, so captures are
    deterministic. Graph name ``<model>-b<batch>-adam``.

    Raises:
        UnknownModelError: unknown model name; ValueError: batch_size or image_size < 1;
        CaptureError / GraphCheckError as :func:`capture_step`.
    """
    if batch_size < 1 or image_size < 1 or num_classes < 1:
        raise ValueError("batch_size, image_size and num_classes must be >= 1")
    say = progress or (lambda s: None)
    torch.manual_seed(seed)
    say(f"building torchvision.{model_name} (num_classes={num_classes})")
    model = build_model(model_name, num_classes=num_classes)
    data = torch.randn(batch_size, 3, image_size, image_size)
    labels = torch.randint(0, num_classes, (batch_size,))
    warmup = (torch.randn(batch_size, 3, image_size, image_size),
              torch.randint(0, num_classes, (batch_size,)))
    say("warm-up: one real torch.optim.Adam step (on another batch) to create the "
        "optimizer state")
    state = prepare_training_state(model, data, labels, seed=seed, warmup_batch=warmup)
    import torchvision
    meta = {"model": f"torchvision.{model_name}", "batch_size": batch_size,
            "image_size": image_size, "num_classes": num_classes,
            "torchvision": torchvision.__version__}
    return capture_step(state, name=f"{model_name}-b{batch_size}-adam", meta=meta,
                        measure_cost=measure_cost, cost_repeats=cost_repeats, seed=seed,
                        check_peak=check_peak, progress=progress)
