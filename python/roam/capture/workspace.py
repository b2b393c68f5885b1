"""Kernel workspaces of a captured step (GRAPH_FORMAT.md op field ``workspace``).

Real mode (:func:`measure_workspaces`): the captured step runs once in program order under a
recording pass-through session of the executor's CPU allocator (``roam._native.Session``:
every CPU allocation and free, tagged with the op that was running). For each op the bytes
allocated during the op and still live are replayed in event order; the op's workspace is the
most bytes of the op's allocations other than its outputs (the last allocation at each
output's address) live at once: scratch that peaks before the outputs exist still needs
bytes of its own beside their planned slots. Bytes are counted as the allocator costs them,
rounded up to 64 per allocation (c10's CPU alignment), so the same run's peak -- the measured
eager peak -- is at most ``Tp(program order)`` of the graph with these workspaces at
alignment 64 and equals it where no op's scratch peaks before its outputs exist. Workspaces are what the kernels of *this* machine allocate (MKL-DNN
reorders, im2col columns, per-thread buffers differ between CPUs and thread counts).

Fake mode (:func:`estimate_workspaces`): nothing runs; an op gets an estimate where the rule
of its CPU kernel is known from the shapes, and ``meta.capture.workspace.estimated`` lists
those ops. Rules (Debian torch 1.13, x86 with MKL-DNN):

* ``aten.convolution_backward``: the grad-output reorder (``grad_output`` bytes) plus, when
  the weight gradient is asked for, a second weight-sized buffer (the weight gradient is
  computed into one buffer and reordered into the output), i.e. ``grad_output + weight``.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

COUNT_ALIGN = 64  # c10's CPU allocator alignment: what a block costs


def _up(n: int, a: int = COUNT_ALIGN) -> int:
    return -(-int(n) // a) * a


def output_bytes(tensors: Dict[str, Dict[str, Any]], op: Dict[str, Any],
                 align: int = COUNT_ALIGN) -> int:
    """Bytes (rounded to ``align`` each) of the storages ``op`` creates: its outputs that are
    roots (no ``alias_of``), not resident, of non-zero size. ``tensors``: id -> tensor."""
    total = 0
    for tid in op["outputs"]:
        t = tensors[tid]
        if "alias_of" in t or "role" in t or int(t["size"]) == 0:
            continue
        total += _up(t["size"], align)
    return total


def workspaces_from_events(events, n_steps: int, out_bytes: Sequence[int],
                           out_addrs: Optional[Dict[int, Sequence[int]]] = None
                           ) -> Tuple[List[int], List[int]]:
    """Per step ``k``: the highest bytes (rounded to 64 each) allocated during step ``k`` and
    live at once (``peak[k]``) and the workspace.

    Without ``out_addrs`` the workspace is ``max(0, peak[k] - out_bytes[k])``. With
    ``out_addrs[k]`` (the storage addresses of step ``k``'s planned outputs after it ran) the
    last allocation of each such address during the op is that output; the workspace is then
    the most bytes of the op's *other* allocations live at once (a kernel whose scratch
    peaks before it allocates its outputs needs all of it beside the outputs' planned slots).

    ``events``: a recording session's ``(step, size, offset, +1 alloc / -1 free, address)``
    in the order they happened (frees carry the counted size)."""
    peak = [0] * n_steps
    cur = [0] * n_steps
    scratch_peak = [0] * n_steps
    scratch = [0] * n_steps
    is_out = set()  # indices of the events that allocated an output
    if out_addrs:
        last: Dict[Tuple[int, int], int] = {}
        for i, (step, size, _off, sign, addr) in enumerate(events):
            if sign > 0 and size > 0 and addr in set(out_addrs.get(step, ())):
                last[(step, addr)] = i
        is_out = set(last.values())
    live: Dict[int, Tuple[int, int, bool]] = {}  # address -> (step, counted bytes, output)
    for i, (step, size, _off, sign, addr) in enumerate(events):
        if sign > 0:
            if size == 0:
                continue
            b = _up(size)
            out = i in is_out
            live[addr] = (step, b, out)
            if 0 <= step < n_steps:
                cur[step] += b
                peak[step] = max(peak[step], cur[step])
                if not out:
                    scratch[step] += b
                    scratch_peak[step] = max(scratch_peak[step], scratch[step])
        else:
            rec = live.pop(addr, None)
            if rec is None:
                continue
            s, b, out = rec
            if 0 <= s < n_steps and s == step:
                cur[s] -= b  # freed inside the op that made it: scratch
                if not out:
                    scratch[s] -= b
    if out_addrs:
        return scratch_peak, peak
    ws = [max(0, p - o) for p, o in zip(peak, out_bytes)]
    return ws, peak


def native_available() -> bool:
    try:
        from ..executor.native import native
        native()
        return True
    except Exception:
        return False


def measure_workspaces(gm: torch.fx.GraphModule, graph: Dict[str, Any],
                       op_nodes: Dict[str, str], make_args: Callable[[], Sequence[Any]],
                       seed: int = 0) -> Tuple[Dict[str, int], int]:
    """Run the step once in program order under a recording pass-through session.

    Returns ``(workspaces, eager_peak)``: op id -> workspace bytes (only ops with a non-zero
    one), and the peak of the bytes allocated during the run above what existed before it
    (each allocation rounded up to 64). Raises ``roam.executor.native.NativeMissing`` when
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
                         {op["id"]: [0] for op in graph["ops"]})
    flat, _ = pytree.tree_flatten(make_args())
    s = N.Session()
    s.configure(0, COUNT_ALIGN, [])
    s.set_pass_through(True)
    s.record = True
    observed: Dict[int, List[int]] = {}
    rng = torch.get_rng_state()
    torch.manual_seed(seed)
    try:
        s.install(100)
        try:
            out = prog.run(flat, s, observe=lambda k, p: observed.__setitem__(k, list(p)))
            del out
        finally:
            s.uninstall()
    finally:
        torch.set_rng_state(rng)
    del flat
    by_id = {t["id"]: t for t in graph["tensors"]}
    ops = {op["id"]: op for op in graph["ops"]}
    outs = [output_bytes(by_id, ops[st.op_id]) for st in prog.steps]
    ws, _peak = workspaces_from_events(s.events(), len(prog.steps), outs, observed)
    result = {st.op_id: w for st, w in zip(prog.steps, ws) if w > 0}
    return result, int(s.stats()["fallback_peak"])


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
