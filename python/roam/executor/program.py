"""Running a captured training step (fx GraphModule) in a plan's order, with its planned
allocations announced to the allocator op by op.

:class:`Program` compiles ``(GraphModule, roam-graph, order, offsets)`` into a list of steps:
the fx node to call, the values to drop after it (each value is dropped right after its last
use *in this order*, as eager PyTorch and fx's generated code do in program order), and the
planned allocations of the op: ``(size, offset)`` of every root storage it creates, in the
order of its results, and its planned workspace block ``(offset, size)``. :meth:`Program.run` executes it, optionally under a
:class:`roam._native.Session` (the planned CPU allocator), checking after each op that every
planned output landed at its offset.

Mapping fx nodes to graph ops (``roam.capture``): every ATen ``call_function`` node is one op
(``Graph.op_nodes``: op id -> node name); ``operator.getitem`` nodes pick tuple elements and are
not ops; an op's graph ``outputs`` are its tensor results in order, ``None`` and non-tensor
elements skipped; an output with ``alias_of`` allocates nothing, a root of size > 0 is planned.
"""

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.fx.node import map_arg

RESIDENT_ROLES = ("param", "buffer", "optimizer_state", "constant", "input")


class PlanMismatch(ValueError):
    """The plan does not fit the captured graph (unknown op ids, a missing op, an order that
    breaks a dependency, offsets missing): nothing of it can be run."""


def _storage_ptr(t: torch.Tensor) -> int:
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def _tensor_results(out) -> List[torch.Tensor]:
    """The tensor results of an op in the order roam.capture lists them as outputs."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [e for e in out if isinstance(e, torch.Tensor)]
    return []


@dataclass
class Step:
    node: torch.fx.Node
    op_id: str
    what: str                                  # "n12 aten.mm.default" for messages
    getitems: List[Tuple[torch.fx.Node, Any]]  # (getitem node, index) fed from this result
    keep_result: bool                          # the node value itself is used by other nodes
    free_after: List[torch.fx.Node]            # values dropped after this step
    planned: List[Tuple[int, int]]             # (size, offset) of the root storages it creates
    planned_pos: List[int]                     # index in the op's tensor results of each


@dataclass
class Program:
    """A captured step compiled for one execution order (see the module docstring).

    Build with :meth:`Program.build`. ``arena_bytes`` and ``alignment`` come from the plan
    (0 / unused for a program without offsets).
    """
    gm: torch.fx.GraphModule
    steps: List[Step]
    placeholders: List[torch.fx.Node]
    output_node: torch.fx.Node
    arena_bytes: int = 0
    alignment: int = 64
    schedule: List[List[Tuple[int, int]]] = field(default_factory=list)
    workspaces: List[Tuple[int, int]] = field(default_factory=list)  # per step (offset, size)

    def session_workspaces(self) -> List[Tuple[int, int]]:
        """``[(offset, size), ...]`` per step for ``Session.configure(workspaces=...)``: the
        op's planned workspace block (size 0: none); ``[]`` when no op has one."""
        if not any(size for _off, size in self.workspaces):
            return []
        return list(self.workspaces)

    def session_schedule(self, ranks: Optional[Dict[str, List[int]]] = None
                         ) -> List[List[Tuple[int, int, int]]]:
        """``[(size, offset, rank), ...]`` per step for ``Session.configure``; ``ranks``: op
        id -> rank of each planned output (from :func:`calibrate`), default 0."""
        out = []
        for st, planned in zip(self.steps, self.schedule):
            r = (ranks or {}).get(st.op_id) or [0] * len(planned)
            out.append([(size, off, int(rk)) for (size, off), rk in zip(planned, r)])
        return out

    # ---------------------------------------------------------------- compile
    @classmethod
    def build(cls, gm: torch.fx.GraphModule, graph: Dict[str, Any], op_nodes: Dict[str, str],
              order: Optional[Sequence[str]] = None, offsets: Optional[Dict[str, int]] = None,
              arena_bytes: int = 0, alignment: int = 64,
              workspace_offsets: Optional[Dict[str, Sequence[int]]] = None) -> "Program":
        """Compile ``gm`` for ``order`` (op ids; default: the graph's program order).

        ``offsets``: root tensor id -> arena offset (bytes) for every planned storage; None
        for a program that allocates normally. ``workspace_offsets``: op id -> [offset] of
        the op's planned workspace block (plan field ``workspace_offsets``; the op's
        ``workspace`` bytes); needed for every op with a workspace when ``offsets`` is given.

        Raises:
            PlanMismatch: the order is not a permutation of the graph's ops, an op has no fx
                node (or the reverse), an offset is missing, or the order runs an op before
                one it reads from.
        """
        nodes = {n.name: n for n in gm.graph.nodes}
        ops = {op["id"]: op for op in graph["ops"]}
        tensors = {t["id"]: t for t in graph["tensors"]}
        if order is None:
            order = [op["id"] for op in graph["ops"]]
        order = list(order)
        if len(order) != len(ops) or set(order) != set(ops):
            unknown = [o for o in order if o not in ops][:3]
            missing = [o for o in ops if o not in set(order)][:3]
            raise PlanMismatch(f"the order has {len(order)} ops, the graph {len(ops)} "
                               f"(unknown {unknown}, missing {missing}, or repeated ids)")
        op_of_node: Dict[torch.fx.Node, str] = {}
        for oid in order:
            name = op_nodes.get(oid)
            if name is None or name not in nodes:
                raise PlanMismatch(f"op {oid} has no fx node in the captured step")
            op_of_node[nodes[name]] = oid
        for n in gm.graph.nodes:
            if (n.op == "call_function" and n.target is not operator.getitem
                    and n not in op_of_node):
                raise PlanMismatch(f"fx node {n.name} ({n.target}) is not an op of the graph")
            if n.op not in ("placeholder", "get_attr", "call_function", "output"):
                raise PlanMismatch(f"fx node {n.name}: unsupported kind {n.op}")

        step_of = {nodes[op_nodes[oid]]: k for k, oid in enumerate(order)}
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        output_node = next(n for n in gm.graph.nodes if n.op == "output")

        # the step at which each value becomes available (getitems: their producer's step)
        avail: Dict[torch.fx.Node, int] = {}
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "get_attr"):
                avail[n] = -1
            elif n in step_of:
                avail[n] = step_of[n]
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target is operator.getitem:
                src = n.args[0]
                if src not in step_of:
                    raise PlanMismatch(f"getitem {n.name} of a value that is not an op result")
                avail[n] = step_of[src]

        # last use of every value in this order; dependencies respected
        last: Dict[torch.fx.Node, int] = {n: avail[n] for n in avail}
        end = len(order)
        for n in gm.graph.nodes:
            if n.op == "output":
                for a in n.all_input_nodes:
                    last[a] = end
                continue
            if n not in step_of:
                continue
            k = step_of[n]
            for a in n.all_input_nodes:
                if avail[a] >= k:
                    raise PlanMismatch(f"the order runs op {op_of_node[n]} ({n.target}) at step "
                                       f"{k} before op {op_of_node.get(a, a.name)} that "
                                       f"produces its input (step {avail[a]})")
                last[a] = max(last[a], k)
        # every `after` edge of the graph (mutation order) too
        pos = {oid: k for k, oid in enumerate(order)}
        for op in graph["ops"]:
            for a in op.get("after", []):
                if pos[a] >= pos[op["id"]]:
                    raise PlanMismatch(f"the order runs op {op['id']} before op {a}, which must "
                                       f"precede it (after edge)")

        free_after: List[List[torch.fx.Node]] = [[] for _ in order]
        for n, k in last.items():
            if n.op in ("placeholder", "get_attr") or k >= end:
                continue
            if n in step_of or (n.op == "call_function" and n.target is operator.getitem):
                free_after[max(k, avail[n])].append(n)

        steps: List[Step] = []
        schedule: List[List[Tuple[int, int]]] = []
        workspaces: List[Tuple[int, int]] = []
        for k, oid in enumerate(order):
            n = nodes[op_nodes[oid]]
            op = ops[oid]
            wsize = int(op.get("workspace", 0))
            if offsets is not None and wsize > 0:
                woff = (workspace_offsets or {}).get(oid)
                if not woff:
                    raise PlanMismatch(f"the plan has no workspace offset for op {oid} "
                                       f"({wsize} bytes)")
                workspaces.append((int(woff[0]), wsize))
            else:
                workspaces.append((0, 0))
            gets = [(u, u.args[1]) for u in n.users
                    if u.op == "call_function" and u.target is operator.getitem]
            keep = any(not (u.op == "call_function" and u.target is operator.getitem)
                       for u in n.users)
            planned, ppos = [], []
            for i, tid in enumerate(op["outputs"]):
                t = tensors[tid]
                if "alias_of" in t or t.get("role") or int(t["size"]) == 0:
                    continue
                if offsets is not None:
                    if tid not in offsets:
                        raise PlanMismatch(f"the plan has no offset for storage {tid} "
                                           f"(output of {oid})")
                    planned.append((int(t["size"]), int(offsets[tid])))
                    ppos.append(i)
            schedule.append(planned)
            steps.append(Step(node=n, op_id=oid, what=f"{oid} {n.target}", getitems=gets,
                              keep_result=keep, free_after=free_after[k], planned=planned,
                              planned_pos=ppos))
        return cls(gm=gm, steps=steps, placeholders=placeholders, output_node=output_node,
                   arena_bytes=int(arena_bytes), alignment=int(alignment), schedule=schedule,
                   workspaces=workspaces)

    # ---------------------------------------------------------------- run
    def run(self, flat_args: Sequence[torch.Tensor], session=None, observe=None):
        """Run the step on ``flat_args`` (one tensor per placeholder, updated in place) under
        ``torch.no_grad()``; with ``session`` (installed by the caller) announce each op's
        planned allocations and check where its outputs landed; ``observe(k, ptrs)`` (needs a
        session) gets the storage addresses of the planned outputs of step ``k``. Returns the
        graph's output structure (e.g. the loss)."""
        if len(flat_args) != len(self.placeholders):
            raise PlanMismatch(f"{len(flat_args)} arguments for {len(self.placeholders)} "
                               f"placeholders")
        env: Dict[torch.fx.Node, Any] = dict(zip(self.placeholders, flat_args))
        for n in self.gm.graph.nodes:
            if n.op == "get_attr":
                env[n] = _fetch_attr(self.gm, n.target)
        lookup = env.__getitem__
        with torch.no_grad():
            for k, st in enumerate(self.steps):
                node = st.node
                args = map_arg(node.args, lookup)
                kwargs = map_arg(node.kwargs, lookup)
                if session is not None:
                    session.begin_op(k)
                    out = node.target(*args, **kwargs)
                    if st.planned:
                        res = _tensor_results(out)
                        ptrs = [(_storage_ptr(res[i]) if i < len(res) else 0)
                                for i in st.planned_pos]
                        del res  # no reference may outlive the value's last use
                    else:
                        ptrs = []
                    session.end_op(k, ptrs, st.what)
                    if observe is not None:
                        observe(k, ptrs)
                else:
                    out = node.target(*args, **kwargs)
                del args, kwargs
                if st.keep_result:
                    env[node] = out
                for g, i in st.getitems:
                    env[g] = out[i]
                del out
                for v in st.free_after:
                    env.pop(v, None)
            result = map_arg(self.output_node.args[0], lookup)
        env.clear()
        return result


def ranks_from_events(program: "Program", events, observed: Dict[int, List[int]]
                      ) -> Dict[str, List[int]]:
    """Which request of its size each planned output was, per op: ``events`` are a recording
    session's ``(step, size, offset, +1/-1, address)`` and ``observed[k]`` the addresses of
    step ``k``'s planned outputs. The output is the last request during the op that returned
    its address (an address may be reused inside the op after a workspace was freed)."""
    by_step: Dict[int, List[Tuple[int, int]]] = {}
    for step, size, _off, sign, addr in events:
        if sign > 0 and step >= 0:
            by_step.setdefault(step, []).append((size, addr))
    ranks: Dict[str, List[int]] = {}
    for k, st in enumerate(program.steps):
        if not st.planned:
            continue
        allocs = by_step.get(k, [])
        r = []
        for (size, _off), addr in zip(st.planned, observed.get(k, [])):
            rank, seen = 0, 0
            for s_, a in allocs:
                if s_ != size:
                    continue
                if a == addr:
                    rank = seen
                seen += 1
            r.append(rank)
        ranks[st.op_id] = r
    return ranks


def _fetch_attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
