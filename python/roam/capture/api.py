"""The capture pipeline and its entry points (see the package docstring)."""

import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

from .check import check_graph, inplace_in_order, program_order_peak, summary
from .cost import DEFAULT_COST_MODEL, CostModel, op_seconds
from .errors import CaptureError, GraphCheckError
from .edges import add_order_edges, add_write_after_forward_edges, resolve_root
from .export import GraphBuilder, dtype_name, measure_costs
from .schema import RECOMPUTE_BLOCKERS
from .functional import functionalize_step
from .io import dumps_graph, write_graph
from .rng import preserved_rng_state
from .state import (AdamOptions, StepInputs, TrainingState, cross_entropy_loss,
                    eager_reference, make_state, optimizer_options, primary_output, raw_step,
                    warm_up)
from .trace import TracedStep, trace_training_step

COST_KINDS = ("auto", "measured", "estimate", "none")


class Graph:
    """A captured training step: the roam-graph v1 dict and what it was made from.

    Attributes:
        graph: the roam-graph v1 dict (``GRAPH_FORMAT.md``); also :attr:`data`.
        traced: the :class:`~roam.capture.trace.TracedStep` (its GraphModule ``gm`` runs
            the step: ``traced.gm(*state.step_inputs().as_args())``).
        state: the :class:`~roam.capture.trace.TrainingState` it was traced from.
        loss: the loss of the recording run (0-d tensor; None for a fake capture).
        op_nodes: op id -> fx node name. op_writes: op id -> ids of the tensors whose storage
            the op writes.
        eager_peak: measured bytes above resident at the eager peak (None if not checked).
    """

    def __init__(self, graph: Dict[str, Any], traced: TracedStep, state: TrainingState,
                 loss: Optional[torch.Tensor], op_nodes: Dict[str, str],
                 op_writes: Dict[str, List[str]], eager_peak: Optional[int] = None,
                 trace: Optional[TracedStep] = None):
        self.graph = graph
        self.traced = traced
        # pass 1's trace (not functional: what eager PyTorch ran, in place where it did)
        self.trace = trace
        self.state = state
        self.loss = loss
        self.op_nodes = op_nodes
        self.op_writes = op_writes
        self.eager_peak = eager_peak

    @property
    def data(self) -> Dict[str, Any]:
        return self.graph

    @property
    def name(self) -> str:
        return self.graph["name"]

    @property
    def meta(self) -> Dict[str, Any]:
        return self.graph["meta"]

    @property
    def ops(self) -> List[Dict[str, Any]]:
        return self.graph["ops"]

    @property
    def tensors(self) -> List[Dict[str, Any]]:
        return self.graph["tensors"]

    def summary(self) -> Dict[str, Any]:
        """Counts and byte totals (:func:`roam.capture.check.summary`)."""
        return summary(self.graph)

    def to_json(self) -> bytes:
        """Deterministic UTF-8 JSON of the graph (keys sorted, compact, final newline)."""
        return dumps_graph(self.graph)

    def save(self, path: str) -> None:
        """Write the graph to ``path`` (``.json``, or gzip for ``.json.gz``; atomic,
        byte-reproducible for equal graphs)."""
        write_graph(self.graph, str(path))

    def __repr__(self):
        s = self.summary()
        return (f"<roam Graph {self.name!r}: {s['ops']} ops, {s['tensors']} tensors, "
                f"resident {s['resident_bytes']} B, Tp {s['tp_program_order_bytes']} B>")


CaptureResult = Graph  # the name used by earlier versions


def _notes(traced: TracedStep, built, cost_note: str, state: TrainingState) -> List[str]:
    notes = []
    upd = [v for ph, v in traced.baked_items if ph == "update"]
    if upd:
        vals = sorted(set(upd))
        notes.append(
            f"optimizer step counter: the in-place increment of each step tensor is traced "
            f"(on its optimizer_state tensor), but {type(state.optimizer).__name__}.step() "
            f"reads it with Tensor.item(); the value ({', '.join(repr(v) for v in vals[:4])}) "
            f"was evaluated at trace time and what is derived from it (e.g. bias corrections) "
            f"is baked into the graph as constants: the graph is numerically exact for this "
            f"step only (its memory behaviour is the same for every step).")
    other = [(ph, v) for ph, v in traced.baked_items if ph != "update"]
    if other:
        notes.append(f"{len(other)} Tensor.item() calls outside the update were baked as "
                     f"constants: {other[:5]}")
    if built.unannotated_writes:
        notes.append("writes not annotated in the operator schema, detected with tensor version "
                     "counters, content comparison or the table of hidden writes and treated "
                     "as writes: "
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
        notes.append(f"{len(traced.unused_params)} parameters have no optimizer state (no "
                     f"gradient) and are not updated: {traced.unused_params[:8]}")
    if built.oversized_storages:
        notes.append(f"{len(built.oversized_storages)} op results own a storage larger than "
                     f"numel x element size (size uses numel x element size): "
                     f"{built.oversized_storages[:8]}")
    if traced.removed_detach:
        notes.append(f"{traced.removed_detach} aten.detach nodes of the trace (the identity "
                     f"in a step run under no_grad; autograd's internal detaches are recorded "
                     f"only on fake tensors) were removed; their users read the argument")
    if traced.functional_dropouts:
        notes.append(f"{traced.functional_dropouts} dropout masks drawn out of place "
                     f"(empty_like, bernoulli_ -> new_zeros, expand, bernoulli.p: the same "
                     f"bits, roam.capture.trace.functional_dropout_masks) so that they are "
                     f"recomputable")
    if traced.batch_norms:
        notes.append(f"{traced.batch_norms} BatchNorms in training: functional "
                     f"(_native_batch_norm_legit_functional returns the new running "
                     f"statistics, written back at the end of the step), so recomputable")
    if traced.scheduler_calls:
        notes.append(f"the step calls {len(traced.scheduler_calls)} LR scheduler step(s): "
                     f"not in the graph (Python); roam.optimize runs them after each step")
    if traced.fallbacks:
        notes.append("operators without a meta kernel run through FakeTensorMode's "
                     "real-kernel fallback: " + ", ".join(
                         f"{k} x{v}" for k, v in sorted(traced.fallbacks.items())))
    notes.append(cost_note)
    return notes


def _capture_checks(graph: Dict[str, Any], state: TrainingState, writes: Dict[str, List[str]]):
    """Checks that need capture knowledge: every parameter with optimizer state and every
    optimizer state tensor are written by update-phase ops; the loss op descends from every
    model input."""
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
    if missing and state.optimizer is not None:
        raise GraphCheckError(f"{len(missing)} parameters / optimizer states are not updated in "
                              f"the update phase: {missing[:5]}")
    if state.step_fn is not None or not graph["outputs"]:
        return  # a step function: which inputs feed which loss is its own business
    n_model = len(state.input_names) - state.n_loss_inputs
    model_inputs = set(state.input_names[:n_model]) if state.input_names else {"data"}
    producer = {o: op["id"] for op in graph["ops"] for o in op["outputs"]}
    loss = graph["outputs"][0]
    for t in graph["tensors"]:
        if t.get("role") != "input" or t["name"] not in model_inputs:
            continue
        reached = {t["id"]}
        for op in graph["ops"]:
            if any(x in reached for x in op["inputs"]):
                reached.update(op["outputs"])
        if loss not in reached:
            what = "the data input" if t["name"] == "data" else f"the input {t['name']}"
            raise GraphCheckError(f"the loss {loss} (op {producer.get(loss)}) does not depend on "
                                  f"{what}: the model ignores it, or computes on its values "
                                  f"outside torch (NumPy, Python numbers), which a trace sees "
                                  f"as constants")


# Accepted distance of the measured eager peak (arena part) from Tp(program order) when the
# graph carries the measured workspaces (both counted at 64 bytes per allocation): 0.5 %.
PEAK_TOLERANCE = 0.005
PEAK_SLACK_BYTES_MEASURED = 4096
# Below Tp, the graph holds more than the run did: conservative, not a missing storage. A
# workspace is the op's peak minus its outputs (roam.capture.workspace), so the measured peak
# equals Tp; the same tolerance as above.
PEAK_TOLERANCE_BELOW = PEAK_TOLERANCE
# Without measured workspaces (the extension roam._native is not built; the profiler
# measures): kernels' scratch is not in the graph (+0 to 15 % on torchvision CNNs).
PEAK_LOW = 0.99
PEAK_HIGH = 1.25
PEAK_SLACK_BYTES = 1 << 20


def deferred_writeback_bytes(graph: Dict[str, Any], writebacks: Sequence[str],
                             alignment: int = 64) -> int:
    """Bytes of the values that write-backs at the end of the step hold (each rounded up to
    ``alignment``): the new running statistics of BatchNorms, written back after the forward
    where eager PyTorch writes them in place during it. The graph in program order holds at
    most this much more than the eager step."""
    by_id = {t["id"]: t for t in graph["tensors"]}
    ops = {op["id"]: op for op in graph["ops"]}
    total = 0
    for oid in writebacks:
        op = ops.get(oid)
        if op is None or len(op["inputs"]) < 2:
            continue
        total += -(-int(by_id[op["inputs"][1]]["size"]) // alignment) * alignment
    return total


def check_eager_peak(graph: Dict[str, Any], measured: int, with_workspaces: bool = False,
                     deferred_bytes: int = 0) -> None:
    """Raise :class:`GraphCheckError` unless ``measured`` (bytes allocated above the resident
    tensors at the eager peak) matches Tp = Tp(program order) of ``graph``.

    ``with_workspaces`` (the graph carries the workspaces measured in the same run,
    :func:`roam.capture.workspace.measure_workspaces`, allocations counted at 64 bytes):
    ``Tp - PEAK_TOLERANCE_BELOW * Tp - 4 KiB <= measured <= Tp + 4 KiB`` with Tp at alignment 64
    (both count the op's peak: its workspace is that peak minus its outputs). Otherwise
    (profiler measurement, no workspaces): ``[PEAK_LOW * Tp, PEAK_HIGH * Tp + 1 MiB]``.
    Above means storages missing from the graph or live ranges cut short (a dropped edge);
    below means storage the graph invents (a missed alias). ``deferred_bytes``
    (:func:`deferred_writeback_bytes`) may be held above the eager peak by design: the graph
    writes resident tensors back after the forward, where eager PyTorch writes them during it."""
    if with_workspaces:
        tp = program_order_peak(graph, alignment=64)
        ok = (measured <= tp + PEAK_SLACK_BYTES_MEASURED
              and tp - measured <= PEAK_TOLERANCE_BELOW * tp + PEAK_SLACK_BYTES_MEASURED
              + deferred_bytes)
    else:
        tp = program_order_peak(graph)
        ok = PEAK_LOW * tp <= measured <= PEAK_HIGH * tp + PEAK_SLACK_BYTES
    if not ok:
        raise GraphCheckError(f"measured eager peak {measured} B (above resident) does not match "
                              f"Tp(program order) {tp} B of the graph"
                              + (" (workspaces included: at most 4 KiB above it, 0.5 % below)"
                                 if with_workspaces
                                 else ""))


def _loss_name(loss_fn) -> str:
    if loss_fn is cross_entropy_loss:
        return "cross_entropy"
    return getattr(loss_fn, "__name__", None) or type(loss_fn).__name__


@preserved_rng_state()
def capture_step(state: TrainingState, *, name: str, meta: Optional[Dict[str, Any]] = None,
                 measure_cost: bool = False, cost: Optional[str] = None, cost_repeats: int = 3,
                 cost_model: Optional[CostModel] = None, seed: int = 0,
                 check_peak: bool = True, workspaces: bool = True,
                 progress: Optional[Callable[[str], None]] = None) -> Graph:
    """Trace, record, convert and check one training step of ``state``.

    Args:
        state: a steady-state :class:`TrainingState` (optimizer state exists; not modified).
        name: the graph's ``name``.
        meta: extra ``meta`` fields (framework, optimizer, dtype, notes, resident and Tp bytes
            are filled in).
        cost: ``"measured"`` (median CPU seconds of each op over ``cost_repeats`` runs; real
            mode only), ``"estimate"`` (:mod:`roam.capture.cost`, ``cost_model``),
            ``"auto"`` (measured in real mode, estimated in fake mode) or ``"none"`` (no
            ``cost``; the output is then byte-for-byte reproducible, as it is with
            ``"estimate"``). Default: ``"measured"`` if ``measure_cost`` else ``"none"``.
            The choice is stated in ``meta.capture.notes``.
        seed: ``torch.manual_seed`` before tracing and before each run (the global random
            state is restored afterwards, also on an exception:
            :func:`roam.capture.rng.preserved_rng_state`).
        check_peak: (real mode) require the measured eager peak of the step to match
            ``Tp(program order)`` (:func:`check_eager_peak`).
        workspaces: real mode: measure each op's ``workspace`` (one more run of the step in
            program order under the executor's recording allocator,
            :func:`roam.capture.workspace.measure_workspaces`; needs ``roam._native``, else
            the profiler measures the peak and no workspace is written); fake mode: write
            the estimates of :func:`roam.capture.workspace.estimate_workspaces`.
        progress: called with short status strings.

    Returns:
        :class:`Graph`.

    Raises:
        ValueError: an unknown ``cost`` or measured costs in fake mode.
        CaptureError: unmappable tensor arguments, schema/storage alias mismatches, unsupported
            nodes; GraphCheckError: the structural check failed.
    """
    cost = cost or ("measured" if measure_cost else "none")
    if cost not in COST_KINDS:
        raise ValueError(f"cost must be one of {COST_KINDS}, not {cost!r}")
    fake = state.fake_mode is not None
    if cost == "auto":
        cost = "estimate" if fake else "measured"
    if cost == "measured" and fake:
        raise ValueError("cost='measured' needs real tensors; use 'estimate' in fake mode")
    cost_model = cost_model or DEFAULT_COST_MODEL
    say = progress or (lambda s: None)
    mode = "fake" if fake else "real"
    t0 = time.perf_counter()
    say(f"tracing the training step with make_fx ({mode} tensors)")
    trace = trace_training_step(state, seed=seed, progress=progress)
    traced = functionalize_step(trace, state, seed=seed, progress=progress)
    t_trace = time.perf_counter() - t0
    say(f"traced {len(traced.gm.graph.nodes)} fx nodes (functional) in {t_trace:.1f} s; "
        f"recording {mode} values")
    builder = GraphBuilder(traced.gm, traced.placeholders, fake_mode=state.fake_mode,
                           progress=progress)
    torch.manual_seed(seed)
    with torch.no_grad():  # the graph holds the backward ops explicitly
        builder.run(*state.step_inputs().as_args())
    built = builder.g
    if cost == "measured":
        say(f"measuring op costs ({cost_repeats} runs)")
        costs = measure_costs(traced.gm, lambda: state.step_inputs().as_args(),
                              repeats=cost_repeats, seed=seed)
        for op in built.ops:
            op["cost"] = float(costs[built.op_nodes[op["id"]]])
        cost_note = (f"cost: median seconds over {cost_repeats} CPU runs of the traced step "
                     f"(measured per op, torch {torch.__version__}, "
                     f"{torch.get_num_threads()} threads)")
    elif cost == "estimate":
        for op in built.ops:
            flops, nbytes = built.estimates[op["id"]]
            op["cost"] = op_seconds(flops, nbytes, cost_model)
        cost_note = cost_model.describe()
    else:
        for op in built.ops:
            op.pop("cost", None)
        cost_note = "cost: not measured"
    add_order_edges(built.tensors, built.ops, built.op_writes)
    from ..executor.planning import add_rng_order_edges
    rng_edges = add_rng_order_edges({"ops": built.ops})
    write_edges = add_write_after_forward_edges(
        built.tensors, built.ops, built.op_writes,
        list(built.losses) + [t for t in built.outputs if t not in built.losses])
    ws_meta: Dict[str, Any] = {"mode": "none"}
    ws_peak = None
    if workspaces:
        from . import workspace as wsmod
        g0 = {"tensors": built.tensors, "ops": built.ops, "outputs": built.outputs}
        if fake:
            est = wsmod.estimate_workspaces(g0, traced.gm, built.op_nodes)
            for op in built.ops:
                if est.get(op["id"], 0) > 0:
                    op["workspace"] = int(est[op["id"]])
            ws_meta = {"mode": "estimated", "estimated": sorted(
                           (o for o, w in est.items() if w > 0), key=lambda o: int(o[1:])),
                       "rule": "roam.capture.workspace.estimate_workspaces: "
                               "aten.convolution_backward = grad_output bytes + weight bytes "
                               "(weight gradient asked); other ops 0 (not known)"}
        elif wsmod.native_available():
            say("measuring kernel workspaces (one run in program order, recording allocator)")
            ws, _functional_peak, servable = wsmod.measure_workspaces(
                traced.gm, g0, built.op_nodes, lambda: state.step_inputs().as_args(), seed=seed,
                inplace=inplace_in_order(g0))
            say("measuring the eager peak (pass 1's trace: what eager PyTorch runs)")
            ws_peak = wsmod.measure_peak(trace.gm, lambda: state.step_inputs().as_args(),
                                         seed=seed)
            for op in built.ops:
                if ws.get(op["id"], 0) > 0:
                    op["workspace"] = int(ws[op["id"]])
            ws_meta = {"mode": "measured", "ops": len(ws),
                       "threads": torch.get_num_threads(),
                       "rule": "roam.capture.workspace.measure_workspaces: per op, the most "
                               "bytes allocated during the op and live at once (64 bytes per "
                               "allocation) minus its output storages; CPU allocator events of "
                               "one run on this machine",
                       "servable": servable,
                       "servable_rule": "roam.capture.workspace.servable_workspaces: the "
                                        "block the op would need if its scratch could not sit "
                                        "in its output slots (scratch freed before an output "
                                        "sits in that output's slot only where all of it "
                                        "fits); only ops where it is above workspace; "
                                        "informational: plans use workspace, and the executor "
                                        "serves such scratch in the output slots and the "
                                        "block where they are adjacent"}
        else:
            ws_meta = {"mode": "none", "why": "roam._native is not built: workspaces not "
                                              "measured"}
            warnings.warn("roam.capture: roam._native is not built, so the kernel workspaces "
                          "(scratch memory inside ops) are not measured and this graph has "
                          "none: its plans under-count memory and do not fit a capture made "
                          "with the extension (build it: README, first command)",
                          stacklevel=3)
    dtypes = sorted({dtype_name(p.dtype) for p in state.params})
    trace_desc = ("torch.fx.experimental.proxy_tensor.make_fx, tracing_mode='real', one "
                  "steady-state step; then make_fx over torch.func.functionalize(remove="
                  "'mutations') of that trace (roam.capture.functional)")
    if fake:
        trace_desc = ("torch.fx.experimental.proxy_tensor.make_fx over "
                      "torch._subclasses.FakeTensorMode (fake tensors: sizes from tensor "
                      "metadata, nothing allocated), one steady-state step; then make_fx over "
                      "torch.func.functionalize(remove='mutations') of that trace "
                      "(roam.capture.functional)")
    opt = state.optimizer
    full_meta = {"framework": f"torch {torch.__version__}",
                 "optimizer": type(opt).__name__ if opt is not None else None,
                 "optimizer_options": optimizer_options(opt),
                 "loss": (_loss_name(state.loss_fn) if state.step_fn is None
                          else f"step function {getattr(state.step_fn, '__qualname__', '?')}"),
                 "dtype": dtypes[0] if len(dtypes) == 1 else dtypes, "device": "cpu",
                 "capture": {"tool": "roam.capture", "mode": mode, "trace": trace_desc,
                             "seed": seed, "workspace": ws_meta}}
    if state.data_parallel is not None:
        full_meta["distributed"] = state.data_parallel.meta()
    elif callable(getattr(state.model, "roam_distributed_meta", None)):
        # a rank of a fully-sharded step (roam.capture.sharded.ShardedModel)
        full_meta["distributed"] = state.model.roam_distributed_meta()
    # every reason counted, 0 included; "collective" only in graphs that have collectives
    blockers = {k: 0 for k in RECOMPUTE_BLOCKERS if k != "collective"}
    for b in built.recompute_blockers.values():
        blockers[b] = blockers.get(b, 0) + 1
    full_meta["recomputable_ops"] = sum(1 for op in built.ops if op["recomputable"])
    full_meta["capture"]["recomputable"] = {
        "ops": full_meta["recomputable_ops"], "not_recomputable": blockers,
        "rule": "roam.capture.schema.recompute_blocker: not recomputable when the op writes "
                "an argument (schema is_mutable / write alias, version counter, hidden "
                "writes such as BatchNorm running statistics, optimizer update), an output "
                "aliases a resident tensor, the op is random and writes or draws from a "
                "generator of its own (the executor replays the default CPU generator's state "
                "for a recomputed random op) or its result is uninitialised (empty*); "
                "otherwise recomputable"}
    full_meta["capture"]["module"] = {
        "ops": sum(1 for op in built.ops if "module" in op),
        "rule": "roam.capture.trace.ModuleTracker: forward ops get the innermost submodule "
                "whose forward was running (module pre/post hooks); backward ops the module "
                "of the torch call that created the autograd node being applied; absent for "
                "the root module's own code, the loss, the update, autograd's own ops and "
                "ambiguous paths"}
    full_meta.update(meta or {})
    graph = {"format": "roam-graph", "version": 1, "name": name, "meta": full_meta,
             "tensors": built.tensors, "ops": built.ops, "outputs": built.outputs}
    say("checking the graph")
    full_meta["capture"]["functional"] = dict(
        traced.functional or {}, write_after_forward_edges=write_edges,
        random_order_edges=rng_edges,
        inplace_ops=sum(1 for op in built.ops if op.get("inplace")),
        rule="roam.capture.functional: what eager PyTorch ran in place on an intermediate "
             "tensor is a functional op with an `inplace` permission; the optimizer's "
             "in-place updates of parameters and state stay in place (restored); other writes "
             "to resident tensors (BatchNorm running statistics) are write-backs at the end; "
             "every write to a resident tensor follows the ops producing the losses and the step's outputs (after edges)")
    full_meta["capture"]["losses"] = list(built.losses)
    check_graph(graph, require_monotone_phases=state.step_fn is None,
                losses=built.losses or None)
    _capture_checks(graph, state, built.op_writes)
    full_meta["capture"]["notes"] = _notes(traced, built, cost_note, state)
    s = summary(graph)
    eager_peak = None
    if not fake and ws_peak is not None:
        eager_peak = ws_peak
    if check_peak and not fake:
        if eager_peak is None:
            from .peak import measure_eager_peak
            eager_peak, _ = measure_eager_peak(trace, state.step_inputs(), seed=seed)
        checked = graph
        tp_shown = (program_order_peak(checked, alignment=64) if ws_peak is not None
                    else s["tp_program_order_bytes"])
        say(f"measured eager peak {eager_peak} B above resident; Tp(program order) "
            f"{tp_shown} B" + (" (64-byte allocations, workspaces included)"
                               if ws_peak is not None else ""))
        deferred = deferred_writeback_bytes(graph, built.writebacks)
        full_meta["capture"]["functional"]["deferred_writeback_bytes"] = deferred
        check_eager_peak(checked, eager_peak, with_workspaces=ws_peak is not None,
                         deferred_bytes=deferred)
    full_meta["resident_bytes"] = s["resident_bytes"]
    full_meta["tp_program_order_bytes"] = s["tp_program_order_bytes"]
    return Graph(graph=graph, traced=traced, state=state,
                 loss=None if fake else built.loss_value,
                 op_nodes=dict(built.op_nodes), op_writes=dict(built.op_writes),
                 eager_peak=eager_peak, trace=trace)


def _to_fake_state(state: TrainingState, fake_mode) -> TrainingState:
    from .fake import to_fake
    state.fake_mode = fake_mode
    state.params = [to_fake(fake_mode, p) for p in state.params]
    state.buffers = [to_fake(fake_mode, b) for b in state.buffers]
    state.state_values = [{k: (to_fake(fake_mode, v, constant=v.numel() <= 1)
                               if isinstance(v, torch.Tensor) else v) for k, v in d.items()}
                          for d in state.state_values]
    state.inputs = tuple(to_fake(fake_mode, x) for x in state.inputs)
    return state


def data_parallel_of(process_group):
    """``process_group`` of :func:`capture` as a resolved
    :class:`~roam.capture.collectives.DataParallel`, or None.

    Raises:
        CaptureError: torch.distributed not initialized; TypeError: not a process group."""
    if process_group is None:
        return None
    from .collectives import DataParallel
    if isinstance(process_group, DataParallel):
        return process_group.resolve()
    import torch.distributed as dist
    if not isinstance(process_group, dist.ProcessGroup):
        raise TypeError(f"roam.capture: process_group: {type(process_group).__name__} is "
                        f"neither a torch.distributed ProcessGroup nor a "
                        f"roam.capture.collectives.DataParallel")
    return DataParallel(process_group).resolve()


def make_training_state(model_or_step, optimizer=None, loss_fn=None, example_inputs=None, *,
                        model: Optional[torch.nn.Module] = None, schedulers=None,
                        fake: bool = False, n_loss_inputs: int = 1,
                        input_names: Optional[Sequence[str]] = None,
                        warmup_inputs: Optional[Sequence[Any]] = None, seed: int = 0,
                        progress: Optional[Callable[[str], None]] = None,
                        process_group=None):
    """The steady-state :class:`TrainingState` of :func:`capture` (same arguments), and the
    notes it adds: ``(state, notes)``. A step function is the first argument when it is not
    an ``nn.Module``; then the second positional argument is ``example_inputs`` and
    ``model`` / ``optimizer`` / ``schedulers`` are found from it where not given
    (:func:`roam.capture.discover.discover`).

    Raises:
        CaptureError: see :func:`capture`; TypeError: missing arguments."""
    from .discover import discover
    from .fake import fake_mode_of, new_fake_mode
    if isinstance(model_or_step, torch.nn.Module):
        if optimizer is None or loss_fn is None or example_inputs is None:
            raise TypeError("capture(model, optimizer, loss_fn, example_inputs): all four are "
                            "needed (or pass a step function first)")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"roam.capture: optimizer: {type(optimizer).__name__} is not a "
                            f"torch.optim.Optimizer")
        if not callable(loss_fn):
            raise TypeError(f"roam.capture: loss_fn: {type(loss_fn).__name__} is not callable")
        if not isinstance(example_inputs, (tuple, list)):
            raise TypeError(f"roam.capture: example_inputs: {type(example_inputs).__name__} "
                            f"given; a tuple (the model's inputs..., then the loss's targets) "
                            f"is needed")
        state = make_state(model_or_step, optimizer, loss_fn, example_inputs,
                           n_loss_inputs=n_loss_inputs, input_names=input_names)
    else:
        if not callable(model_or_step):
            raise TypeError(f"roam.capture: model_or_step: {type(model_or_step).__name__} is "
                            f"neither an nn.Module nor a step function")
        if optimizer is not None and example_inputs is not None and \
                not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"roam.capture: optimizer: {type(optimizer).__name__} is not a "
                            f"torch.optim.Optimizer")
        if example_inputs is None and optimizer is not None and loss_fn is None and \
                not isinstance(optimizer, torch.optim.Optimizer):
            example_inputs, optimizer = optimizer, None  # capture(step_fn, example_inputs)
        if example_inputs is None:
            raise TypeError("capture(step_fn, example_inputs): the step's positional arguments "
                            "are needed")
        if loss_fn is not None:
            raise TypeError("a step function computes its own loss: loss_fn is not taken")
        m, opt, scheds = discover(model_or_step, model, optimizer, schedulers)
        if not isinstance(example_inputs, (tuple, list)):
            example_inputs = (example_inputs,)
        state = make_state(m, opt, None, example_inputs, input_names=input_names,
                           step_fn=model_or_step, schedulers=scheds)
    state.data_parallel = data_parallel_of(process_group)
    if state.data_parallel is not None and callable(
            getattr(state.model, "roam_distributed_meta", None)):
        raise CaptureError("roam.capture: process_group (data parallel: gradients all-reduced) "
                           "and a ShardedModel (gradients reduce-scattered inside the model) "
                           "do not combine: a ShardedModel needs no process_group")
    from .trace import refuse_closure_optimizer
    refuse_closure_optimizer(state.optimizer)
    for sch in state.schedulers:
        if isinstance(sch, torch.optim.lr_scheduler.ReduceLROnPlateau):
            raise CaptureError("ReduceLROnPlateau: its step(metrics) reads a value of the step "
                               "(the loss), which roam cannot replay after the graph: call it "
                               "outside the step function, on the loss the step returns")
    tensors = list(state.params) + list(state.buffers) + list(state.inputs) + [
        v for d in state.state_values for v in d.values() if isinstance(v, torch.Tensor)]
    fm = fake_mode_of(tensors)
    if fm is not None and not fake:
        raise CaptureError("the model or inputs hold fake tensors: capture with fake=True")
    if fake:
        _to_fake_state(state, fm or new_fake_mode())
    notes = []
    if state.optimizer is not None and not state.state_index:
        say = progress or (lambda s: None)
        say("the optimizer has no state yet: one warm-up step on copies creates it")
        state = warm_up(state, inputs=warmup_inputs, seed=seed)
        notes.append("optimizer state created by one warm-up training step on copies "
                     "of the model's tensors")
    return state, notes


@preserved_rng_state()
def capture(model_or_step, optimizer=None, loss_fn=None, example_inputs=None, *,
            model: Optional[torch.nn.Module] = None, schedulers=None, fake: bool = False,
            name: Optional[str] = None, n_loss_inputs: int = 1,
            input_names: Optional[Sequence[str]] = None, cost: str = "auto",
            cost_repeats: int = 3, cost_model: Optional[CostModel] = None,
            warmup_inputs: Optional[Sequence[Any]] = None, seed: int = 0,
            check_peak: bool = True, meta: Optional[Dict[str, Any]] = None,
            progress: Optional[Callable[[str], None]] = None, process_group=None) -> Graph:
    """Capture one steady-state training step as a roam-graph.

    Two forms:

    * ``capture(model, optimizer, loss_fn, example_inputs)``: the step is ``out =
      model(*example_inputs[:-n_loss_inputs])`` (the primary output of a tuple, see
      :func:`~roam.capture.state.primary_output`), ``loss = loss_fn(out,
      *example_inputs[-n_loss_inputs:])``, ``loss.backward()`` and ``optimizer.step()``;
    * ``capture(step_fn, example_inputs)``: the user's whole step, called as
      ``step_fn(*example_inputs)`` (any pytree of arguments; the tensors among them are the
      batch), doing whatever it does: several losses, ``backward()`` calls (gradient
      accumulation), ``clip_grad_norm_``, ``optimizer.step()``, ``scheduler.step()``; it
      returns tensors (a loss, a dict of them). ``model``, ``optimizer`` and ``schedulers``
      are found from what the function refers to where not given
      (:mod:`roam.capture.discover`).

    The optimizer's own step is traced with its state passed in as ``optimizer_state`` tensors
    that the step updates in place; BatchNorm statistics and other module buffers are
    ``buffer`` inputs, written back at the end of the step. The graph is functional
    (:mod:`roam.capture.functional`): what eager PyTorch ran in place on intermediate tensors
    is an ``inplace`` permission.

    Args:
        model_or_step: any ``nn.Module`` (its mode, train or eval, is used as is), or the
            step function.
        optimizer: any ``torch.optim`` optimizer over (a subset of) the model's parameters,
            needing no closure (plain, ``foreach`` or ``fused``). If it has no state yet, one
            warm-up step on copies (on ``warmup_inputs``, default ``example_inputs``) creates
            it; the model, the optimizer and the schedulers are never modified, nor is
            PyTorch's global random state (CPU, and CUDA's generators or queued seeding;
            restored also on an exception, the capture's own seeding and dropout draws
            included).
        loss_fn: ``loss_fn(output, *targets) -> 0-d tensor`` (model form only).
        example_inputs: tensors (model form: the last ``n_loss_inputs`` go to the loss, the
            others to the model), or the step function's arguments.
        model / schedulers: step form: the module and the LR schedulers the step trains
            with, where the function's references do not tell (a scheduler's ``step()`` is
            not in the graph: :func:`roam.optimize` runs it after each step).
        fake: trace on fake tensors (``FakeTensorMode``): nothing is allocated, sizes come
            from tensor metadata; a model whose tensors are already fake (built inside a
            ``FakeTensorMode``) needs ``fake=True``.
        name: graph name (default ``<model class>-b<batch>-<optimizer>``).
        input_names: names of the ``input`` tensors (default ``data``, ``labels`` for two
            inputs of the model form, else ``input0..``, ``target0..``).
        cost: ``"auto"`` (measured per op on the CPU in real mode, FLOP/bytes estimate in
            fake mode), ``"measured"``, ``"estimate"`` or ``"none"``; see
            :func:`capture_step`.
        check_peak: (real mode) check the measured eager peak against Tp(program order).
        meta: extra ``meta`` fields.
        progress: called with short status strings.
        process_group: capture one rank of a data-parallel step: a ``torch.distributed``
            process group (``torch.distributed.group.WORLD`` for the default one), or a
            :class:`roam.capture.collectives.DataParallel` (group and gradient bucket sizes).
            After every ``backward()`` the gradients are averaged over the group as
            ``DistributedDataParallel`` does (buckets of 25 MiB in reverse parameter order,
            each gradient x 1/world size, one all-reduce per bucket): the all-reduces are
            ops of the graph (``collective``), the buckets its storages. Every rank of the
            group must call ``capture`` the same way (the capture runs the step, all-reduces
            included, several times); ``meta.distributed`` records the rank.
            Fully-sharded data parallel (FSDP2 / ZeRO-3) needs no ``process_group``: wrap
            the model in :class:`roam.capture.sharded.ShardedModel` (its forward and
            backward all-gather and reduce-scatter; ``meta.distributed`` kind
            ``fully_sharded``); the two do not combine.

    Returns:
        :class:`Graph` (``.save(path)`` writes it).

    Raises:
        CaptureError: what cannot be captured, with the reason (a model that is not
            traceable, ``Tensor.item()`` or ``bool()`` of a tensor steering the step,
            data-dependent shapes, an optimizer over foreign tensors, several optimizers, a
            step returning non-tensors); GraphCheckError: the structural check failed;
            TypeError: missing arguments; ValueError (see :func:`capture_step`).
    """
    state, notes_extra = make_training_state(
        model_or_step, optimizer, loss_fn, example_inputs, model=model, schedulers=schedulers,
        fake=fake, n_loss_inputs=n_loss_inputs, input_names=input_names,
        warmup_inputs=warmup_inputs, seed=seed, progress=progress, process_group=process_group)
    if name is None:
        batch = state.inputs[0].shape[0] if state.inputs and state.inputs[0].dim() else 1
        what = type(state.model).__name__.lower()
        opt = type(state.optimizer).__name__.lower() if state.optimizer is not None else "step"
        name = f"{what}-b{batch}-{opt}"
    g = capture_step(state, name=name, meta=meta, cost=cost, cost_repeats=cost_repeats,
                     cost_model=cost_model, seed=seed, check_peak=check_peak,
                     progress=progress)
    if notes_extra:
        g.meta["capture"]["notes"] = notes_extra + g.meta["capture"]["notes"]
    return g


@preserved_rng_state()
def capture_model(model: torch.nn.Module, data: torch.Tensor, labels: torch.Tensor, *,
                  name: str, meta: Optional[Dict[str, Any]] = None,
                  adam: Optional[AdamOptions] = None, warmup_batch=None,
                  **kwargs) -> Graph:
    """Capture a classifier's training step (cross-entropy, ``torch.optim.Adam`` with
    ``adam``'s options, single-tensor implementation): the model is put in train mode and the
    Adam state created by one warm-up step on copies (on ``warmup_batch`` = ``(data,
    labels)``, default the captured batch); PyTorch's global random state is restored
    afterwards. Keyword arguments go to :func:`capture_step` (``measure_cost``, ``cost``,
    ``seed``, ``check_peak``, ``progress``, ...)."""
    adam = adam or AdamOptions()
    seed = kwargs.pop("seed", 0)
    model.train()
    state = make_state(model, adam.make(list(model.parameters())), cross_entropy_loss,
                       (data, labels), adam=adam)
    state = warm_up(state, inputs=warmup_batch, seed=seed)
    return capture_step(state, name=name, meta=meta, seed=seed, **kwargs)
