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

import bisect
import keyword
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.fx.immutable_collections import immutable_list
from torch.fx.node import map_arg

from ..capture.collectives import collective_kind, waited_at_launch
from ..capture.kernels import grad_mode_wrapper, needs_grad_mode

RESIDENT_ROLES = ("param", "buffer", "optimizer_state", "constant", "input")


class PlanMismatch(ValueError):
    """The plan does not fit the captured graph (unknown op ids, a missing op, an order that
    breaks a dependency, offsets missing): nothing of it can be run."""


def _storage_ptr(t: torch.Tensor) -> int:
    """Address of the tensor's storage (its data pointer less the storage offset: the same
    number as ``t.storage().data_ptr()`` without a Python storage object per call)."""
    return t.data_ptr() - t.storage_offset() * t.element_size()


def _has_node(a) -> bool:
    found = []
    map_arg(a, lambda n: found.append(n) or n)
    return bool(found)


def _call_expr(args, kwargs, slot: Dict[torch.fx.Node, int]) -> Tuple[str, Tuple[Any, ...]]:
    """``(source, constants)`` of a call's argument list: each fx node read as ``V[slot]``,
    tuples and lists holding nodes rebuilt element by element, every other value a constant
    ``C[i]`` passed as it is (another structure holding nodes: resolved by ``R(C[i], V)``)."""
    consts: List[Any] = []

    def const(v) -> str:
        consts.append(v)
        return f"C[{len(consts) - 1}]"

    def expr(a) -> str:
        if isinstance(a, torch.fx.Node):
            return f"V[{slot[a]}]"
        if type(a) in (tuple, list, immutable_list) and _has_node(a):
            inner = "".join(expr(v) + ", " for v in a)
            return f"({inner})" if type(a) is tuple else f"[{inner}]"
        if isinstance(a, (tuple, list, dict, slice)) and _has_node(a):
            return f"R({const(a)}, V)"
        return const(a)

    parts = [expr(a) for a in args]
    for key, v in kwargs.items():
        if key.isidentifier() and not keyword.iskeyword(key):
            parts.append(f"{key}={expr(v)}")
        else:
            parts.append(f"**{{{const(key)}: {expr(v)}}}")
    return ", ".join(parts), tuple(consts)


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
    appearance: int = 0                        # 0: first run of the op; j > 0: recomputation j
    rng: Optional[str] = None                  # random op run more than once: "save" the CPU
                                               # generator state before its first run, "replay"
                                               # it around each recomputation
    # compiled at build (Program._compile_call): the node's value slot, the slots of its
    # getitem users and of the values dropped after it, and one generated function
    # ``call(V, C, F)`` = ``F(<args read from the slots V and constants C>)``, recompiled when
    # the node's args / kwargs objects change (StepScalars rewrites update-phase constants)
    slot: int = -1
    get_slots: List[Tuple[int, Any]] = field(default_factory=list)
    free_slots: List[int] = field(default_factory=list)
    fn: Any = None
    call: Any = None
    consts: Tuple[Any, ...] = ()
    expr: str = ""
    src_args: Any = None
    src_kwargs: Any = None
    # the next step's begin_op may go with this step's end_op (one session call per op): no
    # allocation between them (no generator state saved / restored by either step)
    chain_next: bool = False
    # run as the in-place operator (plan field inplace): (OpOverload, value expression of
    # the functional result rebuilt from the written arguments), else None
    inplace: Optional[Tuple[Any, Any]] = None


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
    slot_of: Dict[torch.fx.Node, int] = field(default_factory=dict)  # value slot per fx node

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

    def session_loans(self, loans: Optional[Dict[str, List[Tuple[int, int, int]]]]
                      ) -> List[List[Tuple[int, int, int]]]:
        """``[(size, rank, output index), ...]`` per step for ``Session.configure(loans=...)``
        (op id -> loans, from :func:`loans_from_events`; every appearance of an op gets its
        op's); ``[]`` when no op has one."""
        if not loans or not any(loans.values()):
            return []
        return [[(int(a), int(b), int(c)) for a, b, c in loans.get(st.op_id, ())]
                for st in self.steps]

    # ---------------------------------------------------------------- compile
    @classmethod
    def build(cls, gm: torch.fx.GraphModule, graph: Dict[str, Any], op_nodes: Dict[str, str],
              order: Optional[Sequence[str]] = None, offsets: Optional[Dict[str, int]] = None,
              arena_bytes: int = 0, alignment: int = 64,
              workspace_offsets: Optional[Dict[str, Sequence[int]]] = None,
              recompute_offsets: Optional[Dict[str, Sequence[int]]] = None,
              inplace: Optional[Dict[str, str]] = None) -> "Program":
        """Compile ``gm`` for ``order`` (op ids; default: the graph's program order).

        ``order`` may name an op more than once (plan version 2): its first appearance
        computes it, each later one is a **recomputation** (only for ops with
        ``recomputable: true``) that runs the fx node again on the values its inputs are bound
        to at that step (the latest appearance of each producer) and binds its results anew;
        an older value is dropped right after its last use in this order.

        ``inplace`` (plan field ``inplace``: output tensor id -> input tensor id): each such op
        runs, at every appearance, as the in-place operator eager PyTorch ran
        (``node.meta["roam_inplace_target"]`` of :mod:`roam.capture.functional`), so its
        result is its input's storage and nothing is allocated for it. Every permission of
        the op must be used (the capture grants them per in-place operator).

        ``offsets``: root tensor id -> arena offset (bytes) of instance 0 of every planned
        storage; ``recompute_offsets``: root id -> offsets (bytes) of its instances 1, 2, ...
        (plan v2); None for a program that allocates normally. ``workspace_offsets``: op id ->
        one offset per appearance of the op's planned workspace block (plan field
        ``workspace_offsets``; the op's ``workspace`` bytes); needed for every op with a
        workspace when ``offsets`` is given.

        A random operator that runs more than once replays, at each recomputation, the
        generator state it drew from at its first appearance (``Step.rng``).

        Raises:
            PlanMismatch: the order does not name every op of the graph, an op has no fx
                node (or the reverse), an op that is not recomputable runs twice, an offset
                is missing, the order runs an op before one it reads from or breaks an
                ``after`` edge, or an in-place write that the graph does not permit or that
                uses only some of an op's permissions.
        """
        inplace = dict(inplace or {})
        nodes = {n.name: n for n in gm.graph.nodes}
        ops = {op["id"]: op for op in graph["ops"]}
        tensors = {t["id"]: t for t in graph["tensors"]}
        if order is None:
            order = [op["id"] for op in graph["ops"]]
        order = list(order)
        if set(order) != set(ops):
            unknown = [o for o in order if o not in ops][:3]
            missing = [o for o in ops if o not in set(order)][:3]
            raise PlanMismatch(f"the order names {len(set(order))} distinct ops, the graph has "
                               f"{len(ops)} (unknown {unknown}, missing {missing})")
        count: Dict[str, int] = {}
        for oid in order:
            count[oid] = count.get(oid, 0) + 1
        for oid, c in count.items():
            if c > 1 and not ops[oid].get("recomputable", False):
                raise PlanMismatch(f"the order runs op {oid} ({ops[oid]['target']}) {c} times, "
                                   f"but it is not recomputable")
        op_of_node: Dict[torch.fx.Node, str] = {}
        for oid in count:
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

        # the steps at which each value is (re)bound: an op node at each of its appearances,
        # a getitem at its producer's; placeholders and attributes before the step (-1)
        apps: Dict[torch.fx.Node, List[int]] = {}
        for k, oid in enumerate(order):
            apps.setdefault(nodes[op_nodes[oid]], []).append(k)
        for n in gm.graph.nodes:
            if n.op in ("placeholder", "get_attr"):
                apps[n] = [-1]
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target is operator.getitem:
                src = n.args[0]
                if src not in op_of_node:
                    raise PlanMismatch(f"getitem {n.name} of a value that is not an op result")
                apps[n] = apps[src]
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        output_node = next(n for n in gm.graph.nodes if n.op == "output")

        def bound(a: torch.fx.Node, k: int) -> int:
            """Index of the appearance of ``a`` that step ``k`` reads (the latest before k)."""
            j = bisect.bisect_left(apps[a], k) - 1
            return j

        # last use of every instance (value, appearance index) in this order
        end = len(order)
        last: Dict[Tuple[torch.fx.Node, int], int] = {}
        for n, steps_of in apps.items():
            for j, k in enumerate(steps_of):
                last[(n, j)] = k
        for k, oid in enumerate(order):
            n = nodes[op_nodes[oid]]
            for a in n.all_input_nodes:
                j = bound(a, k)
                if j < 0:
                    raise PlanMismatch(f"the order runs op {oid} ({n.target}) at step {k} "
                                       f"before op {op_of_node.get(a, a.name)} that produces "
                                       f"its input (step {apps[a][0]})")
                last[(a, j)] = max(last[(a, j)], k)
        for a in output_node.all_input_nodes:
            last[(a, len(apps[a]) - 1)] = end
        # every `after` edge of the graph (mutation order) holds for every appearance
        first_pos: Dict[str, int] = {}
        last_pos: Dict[str, int] = {}
        for k, oid in enumerate(order):
            first_pos.setdefault(oid, k)
            last_pos[oid] = k
        for op in graph["ops"]:
            for a in op.get("after", []):
                if last_pos[a] >= first_pos[op["id"]]:
                    raise PlanMismatch(f"the order runs op {op['id']} before op {a}, which must "
                                       f"precede it (after edge)")

        replayed = set(replayed_random_ops(gm, op_nodes, order))
        free_after: List[List[torch.fx.Node]] = [[] for _ in order]
        for (n, _j), k in last.items():
            if n.op in ("placeholder", "get_attr") or k >= end:
                continue
            free_after[k].append(n)

        steps: List[Step] = []
        schedule: List[List[Tuple[int, int]]] = []
        workspaces: List[Tuple[int, int]] = []
        seen: Dict[str, int] = {}
        for k, oid in enumerate(order):
            n = nodes[op_nodes[oid]]
            op = ops[oid]
            j = seen.get(oid, 0)
            seen[oid] = j + 1
            wsize = int(op.get("workspace", 0))
            if offsets is not None and wsize > 0:
                woff = (workspace_offsets or {}).get(oid)
                if not woff or len(woff) <= j:
                    raise PlanMismatch(f"the plan has no workspace offset for op {oid} "
                                       f"({wsize} bytes, appearance {j})")
                workspaces.append((int(woff[j]), wsize))
            else:
                workspaces.append((0, 0))
            gets = [(u, u.args[1]) for u in n.users
                    if u.op == "call_function" and u.target is operator.getitem]
            keep = any(not (u.op == "call_function" and u.target is operator.getitem)
                       for u in n.users)
            planned, ppos = [], []
            written = _inplace_of(op, n, inplace)
            for i, tid in enumerate(op["outputs"]):
                t = tensors[tid]
                if "alias_of" in t or t.get("role") or int(t["size"]) == 0 or tid in inplace:
                    continue
                if offsets is not None:
                    if j == 0:
                        if tid not in offsets:
                            raise PlanMismatch(f"the plan has no offset for storage {tid} "
                                               f"(output of {oid})")
                        off = offsets[tid]
                    else:
                        later = (recompute_offsets or {}).get(tid) or []
                        if len(later) < j:
                            raise PlanMismatch(f"the plan has no offset for instance {j} of "
                                               f"storage {tid} (recompute_offsets, output of "
                                               f"{oid})")
                        off = later[j - 1]
                    planned.append((int(t["size"]), int(off)))
                    ppos.append(i)
            rng = None
            if oid in replayed:
                rng = "save" if j == 0 else "replay"
            what = f"{oid} {n.target}" + (f" (recomputation {j})" if j else "")
            schedule.append(planned)
            steps.append(Step(node=n, op_id=oid, what=what, getitems=gets,
                              keep_result=keep, free_after=free_after[k], planned=planned,
                              planned_pos=ppos, appearance=j, rng=rng, inplace=written))
        prog = cls(gm=gm, steps=steps, placeholders=placeholders, output_node=output_node,
                   arena_bytes=int(arena_bytes), alignment=int(alignment), schedule=schedule,
                   workspaces=workspaces,
                   slot_of={n: i for i, n in enumerate(gm.graph.nodes)})
        prog._compile_calls()
        return prog

    # ---------------------------------------------------------------- compiled calls
    def _compile_calls(self) -> None:
        """Per step: slots, and one generated call function (all compiled in one ``eval``).
        The interpreter loop then builds no argument structure of its own (fx's ``map_arg``
        cost ~10 us per op) and calls the ATen operator without OpOverload's Python frame."""
        slot = self.slot_of
        for st in self.steps:
            st.slot = slot[st.node]
            st.get_slots = [(slot[g], i) for g, i in st.getitems]
            st.free_slots = [slot[v] for v in st.free_after]
            target = st.inplace[0] if st.inplace is not None else st.node.target
            st.fn = target._op if isinstance(target, torch._ops.OpOverload) else target
            if needs_grad_mode(target):
                st.fn = grad_mode_wrapper(st.fn)
            if collective_kind(target) is not None:  # its scratch freed within the op
                st.fn = waited_at_launch(st.fn)
            st.src_args, st.src_kwargs = st.node.args, st.node.kwargs
            st.expr, st.consts = _call_expr(st.node.args, st.node.kwargs, slot)
        env = {"R": self._resolver()}
        fns = eval("[" + ",\n".join(f"lambda V, C, F: {self._body(st)}" for st in self.steps)
                   + "]", env) if self.steps else []
        for st, f in zip(self.steps, fns):
            st.call = f
        for st, nxt in zip(self.steps, self.steps[1:]):
            st.chain_next = st.rng != "replay" and nxt.rng is None

    def _body(self, st: Step) -> str:
        """The generated call of a step: ``F(args)``, or for an in-place step the in-place
        operator's call followed by the functional result rebuilt from the written inputs."""
        if st.inplace is None:
            return f"F({st.expr})"
        return f"(F({st.expr}), {_value_expr(st.inplace[1], self.slot_of)})[1]"

    def _resolver(self):
        slot = self.slot_of

        def resolve(obj, V):
            """An argument structure fx maps (other than tuples / lists) with its nodes read
            from the slots."""
            return map_arg(obj, lambda n: V[slot[n]])
        return resolve

    def _recompile(self, st: Step) -> None:
        """The node's args / kwargs objects changed since they were compiled: new constants
        (same structure: the function is kept) or a new function."""
        node = st.node
        expr, consts = _call_expr(node.args, node.kwargs, self.slot_of)
        if expr != st.expr:
            st.expr = expr
            st.call = eval(f"lambda V, C, F: {self._body(st)}", {"R": self._resolver()})
        st.consts = consts
        st.src_args, st.src_kwargs = node.args, node.kwargs

    @property
    def recomputations(self) -> int:
        """How many steps are recomputations (appearances after an op's first)."""
        return sum(1 for st in self.steps if st.appearance > 0)

    @property
    def rng_state_bytes(self) -> int:
        """The most bytes :meth:`run` holds outside the plan for CPU generator states
        (:func:`held_rng_state_bytes` of the random ops it recomputes; 0 when it recomputes
        none)."""
        return held_rng_state_bytes(sum(1 for st in self.steps if st.rng == "save"))

    # ---------------------------------------------------------------- run
    def run(self, flat_args: Sequence[torch.Tensor], session=None, observe=None,
            defer_interrupts_from: Optional[int] = None, guard=None):
        """Run the step on ``flat_args`` (one tensor per placeholder, updated in place) under
        ``torch.no_grad()``; with ``session`` (installed by the caller) announce each op's
        planned allocations and check where its outputs landed; ``observe(k, ptrs)`` (needs a
        session) gets the storage addresses of the planned outputs of step ``k``. Returns the
        graph's output structure (e.g. the loss). ``guard`` (an object with ``armed``) is
        armed before step ``defer_interrupts_from``: from there an interrupt waits for the end
        of the step (:class:`roam.executor.api._InterruptGuard`)."""
        if len(flat_args) != len(self.placeholders):
            raise PlanMismatch(f"{len(flat_args)} arguments for {len(self.placeholders)} "
                               f"placeholders")
        slot = self.slot_of
        V: List[Any] = [None] * len(slot)
        for n, t in zip(self.placeholders, flat_args):
            V[slot[n]] = t
        for n in self.gm.graph.nodes:
            if n.op == "get_attr":
                V[slot[n]] = _fetch_attr(self.gm, n.target)
        rng_states: Dict[str, torch.Tensor] = {}
        # one session call per op where nothing is allocated between two ops: end_op(k) and
        # begin_op(k + 1) together (not with observe, which runs between them)
        chain = session is not None and observe is None and hasattr(session, "end_begin_op")
        begun = -1  # the step whose begin_op went with the previous end_op
        with torch.no_grad():
            arm = defer_interrupts_from if guard is not None else None
            for k, st in enumerate(self.steps):
                if k == arm:
                    guard.armed = True
                node = st.node
                if node.args is not st.src_args or node.kwargs is not st.src_kwargs:
                    self._recompile(st)
                resume = None
                if st.rng is not None:
                    if st.rng == "save":
                        rng_states[st.op_id] = torch.get_rng_state()
                    elif st.rng == "replay":
                        # draw the numbers of the first run (torch.utils.checkpoint's
                        # preserve_rng_state), then continue the program's own sequence
                        resume = torch.get_rng_state()
                        torch.set_rng_state(rng_states[st.op_id])
                if session is not None:
                    if begun != k:
                        session.begin_op(k)
                    out = st.call(V, st.consts, st.fn)
                    if st.planned:
                        res = _tensor_results(out)
                        ptrs = [(_storage_ptr(res[i]) if i < len(res) else 0)
                                for i in st.planned_pos]
                        del res  # no reference may outlive the value's last use
                    else:
                        ptrs = []
                    if chain and st.chain_next:
                        session.end_begin_op(k, ptrs, st.what, k + 1)
                        begun = k + 1
                    else:
                        session.end_op(k, ptrs, st.what)
                    if observe is not None:
                        observe(k, ptrs)
                else:
                    out = st.call(V, st.consts, st.fn)
                if resume is not None:
                    torch.set_rng_state(resume)
                    del resume
                if st.keep_result:
                    V[st.slot] = out
                for g, i in st.get_slots:
                    V[g] = out[i]
                del out
                for v in st.free_slots:
                    V[v] = None
            result = map_arg(self.output_node.args[0], lambda n: V[slot[n]])
        V.clear()
        return result


def _inplace_of(op: Dict[str, Any], node: torch.fx.Node, inplace: Dict[str, str]
                ) -> Optional[Tuple[Any, Any]]:
    """``(in-place OpOverload, result structure)`` for an op whose outputs the plan writes
    over its inputs (``Step.inplace``), None when it writes none. The result structure says,
    per result of the functional operator, which argument holds it after the in-place call:
    a node, or a list of nodes."""
    pairs = {(i, j) for i, j in op.get("inplace", [])}
    used = {(op["inputs"].index(inplace[y]) if inplace[y] in op["inputs"] else -1, j)
            for j, y in enumerate(op["outputs"]) if y in inplace}
    if not used:
        return None
    if not used <= pairs:
        raise PlanMismatch(f"the plan writes an output of op {op['id']} over an input the graph "
                           f"does not permit ({sorted(used - pairs)})")
    outs = {j for _i, j in pairs}
    if {j for _i, j in used} != outs:
        raise PlanMismatch(f"the plan writes only some outputs of op {op['id']} "
                           f"({node.target}) in place; the executor runs an in-place operator "
                           f"as a whole")
    target = node.meta.get("roam_inplace_target")
    perms = node.meta.get("roam_inplace")
    if target is None or not perms:
        raise PlanMismatch(f"op {op['id']} ({node.target}) has no in-place operator recorded "
                           f"by the capture")
    schema = node.target._schema
    args = list(node.args) + [node.kwargs.get(a.name) for a in schema.arguments[len(node.args):]]
    results: Dict[int, Any] = {}
    for a, _kind, k in perms:
        v = args[a]
        results[k] = list(v) if isinstance(v, (list, tuple)) else v
    n_rets = len(schema.returns)
    if sorted(results) != list(range(n_rets)):
        raise PlanMismatch(f"op {op['id']} ({node.target}): its results are not all written "
                           f"arguments")
    value = results[0] if n_rets == 1 else tuple(results[k] for k in range(n_rets))
    return target, value


def _value_expr(value, slot: Dict[torch.fx.Node, int]) -> str:
    if isinstance(value, torch.fx.Node):
        return f"V[{slot[value]}]"
    if isinstance(value, tuple):
        return "(" + "".join(_value_expr(v, slot) + ", " for v in value) + ")"
    return "[" + ", ".join(_value_expr(v, slot) for v in value) + "]"


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


def loans_from_events(program: "Program", events, observed: Dict[int, List[int]]
                      ) -> Dict[str, List[Tuple[int, int, int]]]:
    """Which scratch requests of an op may sit in the slot of one of its planned outputs
    (``Session.configure(loans=...)``): op id -> ``(size, rank, i)`` for the ``rank``-th
    request of ``size`` bytes during the op (all of the op's requests counted, outputs
    included, as the allocator counts them) that is not an output and was freed, during the
    op, before the op requested its planned output ``i``. ``events`` / ``observed`` as for
    :func:`ranks_from_events` (the same run; an output is the last request of its size that
    returned its address). A scratch the op does not free, or frees after the output, lends
    nothing from that output."""
    by_step: Dict[int, List[Tuple[int, int, int]]] = {}
    for step, size, _off, sign, addr in events:
        if step >= 0:
            by_step.setdefault(step, []).append((sign, size, addr))
    loans: Dict[str, List[Tuple[int, int, int]]] = {}
    for k, st in enumerate(program.steps):
        if not st.planned:
            continue
        evs = by_step.get(k, [])
        out_pos: Dict[int, int] = {}  # output index -> position of its request
        for i, ((size, _o), addr) in enumerate(zip(st.planned, observed.get(k, []))):
            for j, (sign, s_, a) in enumerate(evs):
                if sign > 0 and s_ == size and a == addr:
                    out_pos[i] = j
        outs_at = set(out_pos.values())
        counts: Dict[int, int] = {}
        live: Dict[int, Tuple[int, int]] = {}  # address -> (size, rank) of a live scratch
        mine: List[Tuple[int, int, int]] = []
        for j, (sign, s_, a) in enumerate(evs):
            if sign > 0:
                if s_ == 0:
                    continue
                rank = counts.get(s_, 0)
                counts[s_] = rank + 1
                if j not in outs_at:
                    live[a] = (s_, rank)
                else:
                    live.pop(a, None)
            else:
                rec = live.pop(a, None)
                if rec is None:
                    continue
                for i, p in sorted(out_pos.items()):
                    if p > j:
                        mine.append((rec[0], rec[1], i))
        if mine:
            loans[st.op_id] = mine
    return loans


def replayed_random_ops(gm: torch.fx.GraphModule, op_nodes: Dict[str, str],
                        order: Sequence[str]) -> List[str]:
    """Ids of the random ops (ATen target of the op's fx node tagged
    ``nondeterministic_seeded``: dropout's mask, ``rand_like``, ...) that ``order`` runs more
    than once, in the order of their first run: :meth:`Program.run` saves the CPU generator
    state before the first run of each (``Step.rng == "save"``) and replays it around each of
    its recomputations (``"replay"``). ``op_nodes``: op id -> fx node name of ``gm``
    (``roam.capture.Graph.op_nodes``); an op without a node counts as not random."""
    nodes = {n.name: n for n in gm.graph.nodes}
    count: Dict[str, int] = {}
    for oid in order:
        count[oid] = count.get(oid, 0) + 1
    return [oid for oid, c in count.items()
            if c > 1 and op_nodes.get(oid) in nodes
            and _is_random_target(nodes[op_nodes[oid]].target)]


def rng_state_bytes() -> int:
    """Bytes of one saved CPU generator state: ``torch.get_rng_state()`` read now (numel x
    element size; 5056 for torch 2.14's CPU generator), rounded up to 64 bytes as the
    allocator counts an allocation."""
    t = torch.get_rng_state()
    return -(-t.numel() * t.element_size() // 64) * 64


def held_rng_state_bytes(n_replayed: int) -> int:
    """The most bytes :meth:`Program.run` holds outside the plan for CPU generator states
    when it recomputes ``n_replayed`` random ops (:func:`replayed_random_ops`): the
    ``n_replayed`` states saved at their first runs, all kept to the end of the step, plus the
    one a replay takes to resume the program's own sequence, so ``(n_replayed + 1) x``
    :func:`rng_state_bytes`; 0 when ``n_replayed`` is 0. These bytes are served from free
    arena bytes or the fallback heap, never from a planned block."""
    return (n_replayed + 1) * rng_state_bytes() if n_replayed > 0 else 0


def _is_random_target(target) -> bool:
    """An ATen operator that draws from a generator (tag ``nondeterministic_seeded``)."""
    tags = getattr(target, "tags", None) or ()
    return torch.Tag.nondeterministic_seeded in tags


def _fetch_attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
