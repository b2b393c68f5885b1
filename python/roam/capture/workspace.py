"""Kernel workspaces of a captured step (GRAPH_FORMAT.md op field ``workspace``).

Real mode (:func:`measure_workspaces`): the captured step runs once in program order under a
recording pass-through session of the executor's CPU allocator (``roam._native.Session``:
every CPU allocation and free, tagged with the op that was running). For each op the bytes
allocated during the op and still live are replayed in event order; the op's workspace is the
most of them live at once minus the op's output storages (GRAPH_FORMAT.md: "over and above
its outputs"), at least 0. Bytes are counted as the allocator costs them, rounded up to 64
per allocation (c10's CPU alignment), so the same run's peak -- the measured eager peak --
equals ``Tp(program order)`` of the graph with these workspaces at alignment 64: at op k's
step both hold what was live before the op plus the op's most bytes at once.

A kernel whose scratch peaks before its outputs exist (an MKL-DNN convolution: input and
weight reorders, the result in a temporary of the output's size, then the output; a
convolution backward: the grad-input pass's reorders freed before its outputs) thus gets a
workspace smaller than its scratch: the planned outputs' slots hold that scratch while the
outputs are still to come. The executor serves such scratch there (the calibration run's
*loans*, ``roam.executor.program.loans_from_events``). Counting the scratch beside the outputs
instead overstated Tp by up to 1.9 % (squeezenet1_0 b2 64 px: features.10.expand3x3's
convolution backward, 6,525,568 B against 6,400,128 measured).

A layout that puts the workspace block anywhere, not next to the output slots, can serve
that only where each such scratch fits in one slot: :func:`servable_workspaces` is the block
an op needs then (at least its workspace, at most its scratch alone at its peak), written
to ``meta.capture.workspace.servable`` for the ops where it is larger; ``roam.optimize``
plans with it (vit_b_16's patch-embedding backward: a 10,039,552 B column buffer freed
before outputs of 2,362,368 B).

Workspaces are what the kernels of *this* machine allocate (MKL-DNN reorders, im2col columns,
per-thread buffers differ between CPUs and thread counts).

Fake mode (:func:`estimate_workspaces`): nothing runs; an op gets an estimate where the rule
of its CPU kernel is known from the shapes, and ``meta.capture.workspace.estimated`` lists
those ops. Rules (x86 CPU kernels with oneDNN / MKL-DNN):

* ``aten.convolution_backward``: the grad-output reorder (``grad_output`` bytes) plus, when
  the weight gradient is asked for, a second weight-sized buffer (the weight gradient is
  computed into one buffer and reordered into the output), i.e. ``grad_output + weight``.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree

from .kernels import call_with_grad_mode, needs_grad_mode
from .rng import preserved_rng_state

COUNT_ALIGN = 64  # c10's CPU allocator alignment: what a block costs


def _up(n: int, a: int = COUNT_ALIGN) -> int:
    return -(-int(n) // a) * a


def output_bytes(tensors: Dict[str, Dict[str, Any]], op: Dict[str, Any],
                 align: int = COUNT_ALIGN, inplace=()) -> int:
    """Bytes (rounded to ``align`` each) of the storages ``op`` creates: its outputs that are
    roots (no ``alias_of``), not resident, of non-zero size, not written in place over an
    input (ids in ``inplace``). ``tensors``: id -> tensor."""
    total = 0
    for tid in op["outputs"]:
        t = tensors[tid]
        if "alias_of" in t or "role" in t or int(t["size"]) == 0 or tid in inplace:
            continue
        total += _up(t["size"], align)
    return total


def workspaces_from_events(events, n_steps: int, out_bytes: Sequence[int]
                           ) -> Tuple[List[int], List[int]]:
    """Per step ``k``: the highest bytes (rounded to 64 each) allocated during step ``k`` and
    live at once (``peak[k]``), and the workspace ``max(0, peak[k] - out_bytes[k])`` (the
    module docstring: what the op holds at its worst moment over and above its outputs, which
    may peak before the outputs exist). ``out_bytes[k]``: the bytes of step ``k``'s output
    storages (:func:`output_bytes`).

    ``events``: a recording session's ``(step, size, offset, +1 alloc / -1 free, address)``
    in the order they happened (frees carry the counted size)."""
    peak = [0] * n_steps
    cur = [0] * n_steps
    live: Dict[int, Tuple[int, int]] = {}  # address -> (step, counted bytes)
    for step, size, _off, sign, addr in events:
        if sign > 0:
            if size == 0:
                continue
            b = _up(size)
            live[addr] = (step, b)
            if 0 <= step < n_steps:
                cur[step] += b
                peak[step] = max(peak[step], cur[step])
        else:
            rec = live.pop(addr, None)
            if rec is None:
                continue
            s, b = rec
            if 0 <= s < n_steps and s == step:
                cur[s] -= b  # freed inside the op that made it: scratch
    ws = [max(0, p - o) for p, o in zip(peak, out_bytes)]
    return ws, peak


def _output_events(evs, out_addrs: Sequence[int]) -> Dict[int, int]:
    """Event index -> address of the op's allocations that are its outputs: the last
    allocation during the op at each output address."""
    outs = set(out_addrs)
    last: Dict[int, int] = {}
    for j, (_s, size, _o, sign, addr) in enumerate(evs):
        if sign > 0 and size > 0 and addr in outs:
            last[addr] = j
    return {j: a for a, j in last.items()}


def servable_workspaces(events, n_steps: int, out_addrs: Dict[int, Sequence[int]]
                        ) -> List[int]:
    """Per step ``k``: the workspace block the op needs when its output slots are not next
    to it. The op's allocations are replayed in event order (``events`` as for
    :func:`workspaces_from_events`; an output is the last allocation during the op at one of
    ``out_addrs[k]``); an allocation that is freed during the op before some output is
    requested may sit in the slot of a pending such output with room for all of it (the
    fullest one that fits: best fit, by bytes); every other non-output allocation takes bytes
    of the block. The result is the most bytes the block holds at once (rounded to 64 per
    allocation): at least ``max(0, peak - outputs)`` and at most the op's scratch peak."""
    by_step: Dict[int, list] = {}
    for ev in events:
        if 0 <= ev[0] < n_steps:
            by_step.setdefault(ev[0], []).append(ev)
    ws = [0] * n_steps
    for k, evs in by_step.items():
        out_at = _output_events(evs, out_addrs.get(k, ()))
        freed_at: Dict[int, int] = {}   # allocation index -> index of its free in the op
        opened: Dict[int, int] = {}
        for j, (_s, size, _o, sign, addr) in enumerate(evs):
            if sign > 0:
                if size > 0:
                    opened[addr] = j
            elif addr in opened:
                freed_at[opened.pop(addr)] = j
        room = {j: _up(evs[j][1]) for j in out_at}  # pending output (its index) -> free bytes
        where: Dict[int, Tuple[int, int]] = {}       # address -> (slot index or -1, bytes)
        cur = peak = 0
        for j, (_s, size, _o, sign, addr) in enumerate(evs):
            if sign > 0:
                if size == 0:
                    continue
                b = _up(size)
                if j in out_at:
                    room.pop(j, None)  # requested: its slot lends nothing from now on
                    where.pop(addr, None)
                    continue
                f = freed_at.get(j)
                slot = None
                if f is not None:
                    fits = [o for o, r in room.items() if o > f and r >= b]
                    if fits:
                        slot = min(fits, key=lambda o: (room[o], o))
                if slot is not None:
                    room[slot] -= b
                    where[addr] = (slot, b)
                else:
                    where[addr] = (-1, b)
                    cur += b
                    peak = max(peak, cur)
            else:
                rec = where.pop(addr, None)
                if rec is None:
                    continue
                slot, b = rec
                if slot < 0:
                    cur -= b
                elif slot in room:
                    room[slot] += b
        ws[k] = peak
    return ws


def native_available() -> bool:
    try:
        from ..executor.native import native
        native()
        return True
    except Exception:
        return False


class _Run(torch.fx.Interpreter):
    """Runs a GraphModule node by node (values freed after their last use, as the generated
    code frees them), the operators of :mod:`roam.capture.kernels` in grad mode."""

    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=True)

    def call_function(self, target, args, kwargs):
        if needs_grad_mode(target):
            return call_with_grad_mode(target, args, kwargs)
        return target(*args, **kwargs)


def measure_peak(gm: torch.fx.GraphModule, make_args: Callable[[], Sequence[Any]],
                 seed: int = 0) -> int:
    """The peak of the bytes allocated while ``gm(*make_args())`` runs once, above what existed
    before it (each allocation rounded up to 64), counted by a pass-through session of the
    executor's CPU allocator. On pass 1's trace (:mod:`roam.capture.trace`) this is the eager
    step's peak: the kernels eager PyTorch runs, in place where it ran them. Raises
    ``roam.executor.native.NativeMissing`` when the extension is not built."""
    from ..executor.native import native
    N = native()
    args = make_args()
    s = N.Session()
    s.configure(0, COUNT_ALIGN, [])
    s.set_pass_through(True)
    with preserved_rng_state():
        torch.manual_seed(seed)
        s.install(100)
        try:
            with torch.no_grad():
                out = _Run(gm).run(*pytree.tree_flatten(args)[0])
            del out
        finally:
            s.uninstall()
    return int(s.stats()["fallback_peak"])


def measure_workspaces(gm: torch.fx.GraphModule, graph: Dict[str, Any],
                       op_nodes: Dict[str, str], make_args: Callable[[], Sequence[Any]],
                       seed: int = 0, inplace: Optional[Dict[str, str]] = None
                       ) -> Tuple[Dict[str, int], int, Dict[str, int]]:
    """Run the step once in program order under a recording pass-through session, each op
    in ``inplace`` (output id -> input id, :func:`roam.capture.check.inplace_in_order`) run
    as the in-place operator eager PyTorch ran.

    Returns ``(workspaces, eager_peak, servable)``: op id -> workspace bytes (only ops with a
    non-zero one); the peak of the bytes allocated during the run above what existed before
    it (each allocation rounded up to 64); op id -> :func:`servable_workspaces` bytes for the
    ops where that is above the workspace. Raises ``roam.executor.native.NativeMissing`` when
    the extension is not built."""
    import torch.utils._pytree as pytree
    from ..executor.native import native
    from ..executor.program import Program
    N = native()
    # every created storage "planned" at 0 (ignored in pass-through) so that the run reports
    # the address of each op's outputs
    roots = {tid for op in graph["ops"] for tid in op["outputs"]}
    offsets = {t["id"]: 0 for t in graph["tensors"] if t["id"] in roots}
    prog = Program.build(gm, graph, op_nodes, None, offsets, 0, COUNT_ALIGN,
                         {op["id"]: [0] for op in graph["ops"]}, inplace=inplace)
    flat, _ = pytree.tree_flatten(make_args())
    s = N.Session()
    s.configure(0, COUNT_ALIGN, [])
    s.set_pass_through(True)
    s.record = True
    observed: Dict[int, List[int]] = {}
    with preserved_rng_state():
        torch.manual_seed(seed)
        s.install(100)
        try:
            out = prog.run(flat, s, observe=lambda k, p: observed.__setitem__(k, list(p)))
            del out
        finally:
            s.uninstall()
    del flat
    by_id = {t["id"]: t for t in graph["tensors"]}
    ops = {op["id"]: op for op in graph["ops"]}
    outs = [output_bytes(by_id, ops[st.op_id], inplace=inplace or {}) for st in prog.steps]
    events = s.events()
    ws, _peak = workspaces_from_events(events, len(prog.steps), outs)
    sv = servable_workspaces(events, len(prog.steps), observed)
    result = {st.op_id: w for st, w in zip(prog.steps, ws) if w > 0}
    servable = {st.op_id: v for st, w, v in zip(prog.steps, ws, sv) if v > w}
    return result, int(s.stats()["fallback_peak"]), servable


def conv_backward_workspace(grad_output_bytes: int, weight_bytes: int,
                            weight_grad: bool) -> int:
    """The estimate of ``aten.convolution_backward``'s workspace from its shapes (module
    docstring): ``grad_output`` bytes, plus ``weight`` bytes when the weight gradient is
    computed, each rounded up to 64."""
    return _up(grad_output_bytes) + (_up(weight_bytes) if weight_grad else 0)


ESTIMATED_TARGETS = ("aten.convolution_backward.default",)


def estimate_workspaces(graph: Dict[str, Any], gm: Optional[torch.fx.GraphModule] = None,
                        op_nodes: Optional[Dict[str, str]] = None) -> Dict[str, int]:
    """Op id -> estimated workspace bytes for the ops whose kernel rule is known
    (:data:`ESTIMATED_TARGETS`; module docstring)."""
    by_id = {t["id"]: t for t in graph["tensors"]}
    nodes = {n.name: n for n in gm.graph.nodes} if gm is not None else {}
    out: Dict[str, int] = {}
    for op in graph["ops"]:
        if op["target"] != "aten.convolution_backward.default" or len(op["inputs"]) < 3:
            continue
        go, _x, w = (by_id[i] for i in op["inputs"][:3])
        mask = None
        if op_nodes and op["id"] in op_nodes and op_nodes[op["id"]] in nodes:
            node = nodes[op_nodes[op["id"]]]
            if len(node.args) >= 11:
                mask = list(node.args[10])
        weight_grad = bool(mask[1]) if mask is not None else True
        out[op["id"]] = conv_backward_workspace(int(go["size"]), int(w["size"]), weight_grad)
    return out
