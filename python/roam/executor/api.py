"""The planned training step (:class:`RoamStep`) that ``roam.optimize`` returns.

``step = roam.optimize(model, optimizer, loss_fn, example_inputs)`` captures one training step
(:func:`roam.capture`), plans it with libroam (``roam._native.plan``, no subprocess), and
returns a :class:`RoamStep`. ``loss = step(*inputs)`` then runs one training step: the captured
fx graph in the plan's order, every planned storage served at its offset in one arena by the
planned CPU allocator (``roam._native.Session``), each op's internal allocations (kernel
workspaces, measured by the capture) from its planned workspace block, and only what still
does not fit from a counted fallback heap; the model's parameters, buffers and the optimizer's state are updated in place, as
``loss.backward(); optimizer.step()`` would. ``step.last_report`` (:class:`StepReport`) has the
measured bytes.

Operator workspaces: an op's requests that are not its planned outputs are served, in this
order: in the slots of its planned outputs still to come, where the calibration run saw that
request freed before those outputs were requested (a capture's ``workspace`` is the op's
peak minus its outputs, so scratch that peaks before the outputs exist needs their slots;
best fit, :func:`roam.executor.program.loans_from_events`); sub-allocated from its planned
workspace block in request order (first fit); from arena bytes free at that moment
(``workspaces="arena"``, the default, for all three); else from the fallback heap.
:func:`roam.executor.optimize.optimize` plans the graph as captured and, where a kernel's
scratch does not fit beside its outputs in that plan, plans again with the capture's servable
workspaces (see that module). Before
the first step a planned trial step on copies measures arena + fallback heap peak; a plan
whose trial (or any later planned step) holds more than the same graph run eagerly is warned
once and every step from then on runs the program order with ordinary allocation
(``mode="program"``). The first step of a fresh optimizer (no state yet) is planned too when
zeros of its state are exactly what its own first step starts from and the state + arena are
not above an estimate of an eager first step (its live bytes at the program order's peak with
the whole new state, counted like Tp), or under a budget when only the planned one fits it;
otherwise it is an ordinary eager step, so its peak is eager's (README.md, "A fresh
optimizer's first step").

Safety: the plan is validated against the graph first (its structure and bytes; a plan made
on another capture of the same step is not refused for its op seconds, :func:`with_graph_costs`);
a run that diverges from it (an output
not at its planned offset, a planned slot still occupied) switches to ordinary allocation for
the rest of the step (warned once, reported); inputs or optimizer state unlike the captured
ones (another batch shape, no optimizer state yet) run an ordinary eager step. Every arena
allocation is checked against the live blocks, so two live tensors never share bytes.

Determinism: random operators (dropout) must consume the generator in program order for the
step to equal eager PyTorch; :func:`add_rng_order_edges` orders them with ``after`` edges in the
graph that is planned where the data flow does not already order them, and a random op that the
plan recomputes replays the generator state of its first run.
"""

import json
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.utils._pytree as pytree

from ..capture.rng import preserved_rng_state
from .native import native
from .planning import ALIGNMENT, validate_plan, with_graph_costs
from .program import PlanMismatch, Program, loans_from_events, ranks_from_events
from .report import StepReport
from .ranks import check_ranks_agree, rank_group_of
from .scalars import StepScalars
from .stepping import (NO_STATE, _first_resident_write, _first_tensor, _flatten_state,
                       _InterruptGuard, _loss_value, _sig, zero_state_template)

__all__ = ["RoamStep", "zero_state_template"]


# ---------------------------------------------------------------- the step

class RoamStep:
    """One training step under a roam plan; call it as ``loss = step(*inputs)`` (inputs
    shaped like the ``example_inputs`` given to :func:`optimize`). See the module docstring.

    Attributes:
        captured: the :class:`roam.capture.Graph` of the step. graph: the planned graph dict
            (captured graph plus RNG order edges). plan: the roam-plan dict.
        program: the compiled plan-order program (None when the plan was unusable).
        eager_peak_bytes: measured peak of the step in program order with PyTorch's default
            allocator (from the calibration run). reports: one :class:`StepReport` per call.
        budget_bytes: the budget of the whole step, resident included (bytes; None without
            one); a step above it is warned once. rng_state_bytes: the most bytes the plan in
            force holds outside the plan for CPU generator states of recomputed random ops
            (:func:`~roam.executor.program.held_rng_state_bytes`).
    """

    def __init__(self, model, optimizer, loss_fn, captured, graph, plan, *, n_loss_inputs=1,
                 debug=False, measure_eager="once", trust_plan=False, priority=100,
                 record=False, workspaces="arena", budget_bytes=None):
        self.model = model
        # train/eval mode of every submodule when the step was captured (it fixes dropout and
        # BatchNorm's behaviour in the graph): a step called in another mode runs eagerly
        self._captured_modes = [m.training for m in model.modules()]
        self.optimizer = optimizer
        self.loss_fn = loss_fn
        # the user's step function (None: the default step of model, optimizer, loss_fn) and
        # the LR schedulers whose step() calls it makes, run after each step from the graph
        self.step_fn = captured.state.step_fn
        # a rank of a data-parallel step (roam.capture.collectives.DataParallel), else None
        self.data_parallel = getattr(captured.state, "data_parallel", None)
        # the ranks that decide together (data parallel or sharded; None: one process)
        self.rank_group = rank_group_of(captured.state)
        self.schedulers = list(captured.state.schedulers)
        self.scheduler_calls = list(getattr(captured.traced, "scheduler_calls", []))
        self._input_constants = list(captured.state.input_constants)
        self.captured = captured
        self.graph = graph
        self.plan = plan
        self.n_loss_inputs = n_loss_inputs
        self.debug = debug
        self.measure_eager = measure_eager
        self.priority = priority
        self.record = record
        if workspaces not in ("arena", "heap"):
            raise ValueError(f"workspaces must be 'arena' or 'heap', not {workspaces!r}")
        self.workspaces = workspaces
        self.reports: List[StepReport] = []
        # set by optimize when the plan of the graph as captured was replaced (why)
        self.replanned_reason: Optional[str] = None
        self.unplanned_reason: Optional[str] = None
        # set when a planned step measured more than the same graph run eagerly: every later
        # step runs in program order with ordinary allocation
        self.program_order_reason: Optional[str] = None
        self._warned = set()
        self._count = 0
        self._zero_state = None        # zero_state_template(optimizer), computed on first need
        self._first_estimate = None    # _first_step_estimate(), cached
        self._created_for: List[torch.Tensor] = []
        N = native()
        gm = captured.traced.gm
        state = captured.state
        self.alignment = int(plan.get("alignment", ALIGNMENT))
        self.planned_arena_bytes = int(plan.get("stats", {}).get("arena_bytes", 0))
        # Tp of the graph as captured, program order, in place where eager PyTorch ran in
        # place (every in-place write program order allows)
        from ..capture.check import program_order_peak
        self.tp_program = program_order_peak(getattr(captured, "graph", None) or graph,
                                             self.alignment)
        # the headline's GPU reference: PyTorch's CUDA caching allocator, simulated, same order
        self.cuda_program_bytes = N.program_cuda_reserved(json.dumps(graph), self.alignment)
        self.planned_saving_bytes = self.tp_program - self.planned_arena_bytes
        self.resident_bytes = int(plan.get("stats", {}).get("resident_bytes", 0))
        # what is live at the plan's peak (the line roam plan prints), recounted from the plan
        self.at_peak: Optional[Dict[str, Any]] = None
        try:
            from ..headline import live_at_peak
            self.at_peak = live_at_peak(graph, plan["order"], self.alignment,
                                        plan.get("inplace"))
        except (KeyError, ValueError, TypeError):
            pass  # a plan that does not fit the graph: said below
        self._signature = [_sig(t) for t in _flatten_state(state)]
        self._bind_cache = None  # (own tensors, their detached views) of the last binding
        # what each placeholder is, for a person (same order as _flatten_state)
        self._placeholder_names = (
            [f"parameter {n}" for n in state.param_names]
            + [f"buffer {n}" for n in state.buffer_names]
            + [f"optimizer state {state.param_names[i]}.{k}"
               for i, keys in zip(state.state_index, state.state_keys) for k in keys]
            + [f"input {j}" + (f" ({n})" if n else "")
               for j, n in enumerate(list(state.input_names)
                                     + [""] * (len(state.inputs) - len(state.input_names)))])
        # the argument structure of the GraphModule (StepInputs.as_args())
        self._treespec = pytree.tree_flatten(
            ([0] * len(state.params), [0] * len(state.buffers),
             [tuple(0 for _ in keys) for keys in state.state_keys],
             [0] * len(state.inputs)))[1]
        self._state_layout = (list(state.state_index), [tuple(k) for k in state.state_keys])
        self.scalars = StepScalars(gm, optimizer, state.group_index, state.state_index,
                                   state.state_values, state.params)

        # the plan: validated, compiled
        self.program: Optional[Program] = None
        if not trust_plan:
            try:
                # op seconds are measured again by each capture: a plan made on another
                # capture (roam plan --budget on a saved graph) is checked on its structure
                # and bytes, its cost-derived seconds recounted here (with_graph_costs)
                rep = validate_plan(graph, with_graph_costs(graph, plan))
            except (RuntimeError, ValueError, TypeError) as e:  # unreadable plan
                rep = {"valid": False, "problems": [str(e)]}
            if not rep["valid"]:
                self.unplanned_reason = ("the plan is not valid for the captured graph: "
                                         + "; ".join(rep["problems"][:2]))
                if any("workspace" in p for p in rep["problems"][:2]):
                    self.unplanned_reason += (
                        " (the plan was made from a graph with other kernel workspaces: "
                        "workspaces are measured by the capture on the machine it runs on, "
                        "and only when roam._native is built; plan the graph of this capture "
                        "again, e.g. optimize(..., budget=...) or `roam plan` on "
                        "optimize(...).graph saved with roam.capture)")
        if self.unplanned_reason is None:
            try:
                self.program = Program.build(gm, graph, captured.op_nodes, plan["order"],
                                             plan["offsets"], self.planned_arena_bytes,
                                             self.alignment, plan.get("workspace_offsets"),
                                             plan.get("recompute_offsets"),
                                             inplace=plan.get("inplace"))
            except (PlanMismatch, KeyError, TypeError, ValueError) as e:
                self.unplanned_reason = f"the plan does not fit the captured step: {e}"
        if self.unplanned_reason is not None:
            warnings.warn(f"roam: {self.unplanned_reason}; running the captured step in program "
                          f"order with ordinary allocation", stacklevel=3)
        # the ranks of a data-parallel step issue the same collectives in the same order
        check_ranks_agree(graph, plan["order"] if self.program is not None
                          else [op["id"] for op in graph["ops"]], self.rank_group)
        # plan version 2: ops run again in the backward pass; the budget it was planned for
        self.recomputations = self.program.recomputations if self.program is not None else 0
        # the budget of the whole step (resident included): optimize(budget=...)'s, else the
        # one the plan records (optimize may plan below a budget, plan_within_budget)
        budget = budget_bytes if budget_bytes is not None else \
            plan.get("method", {}).get("options", {}).get("budget_bytes")
        self.budget_bytes: Optional[int] = None if budget is None else int(budget)
        # the most bytes the program holds outside the plan for CPU generator states
        self.rng_state_bytes = self.program.rng_state_bytes if self.program is not None else 0
        # program order, planned outputs known (calibration and eager measurement), in place
        # where eager PyTorch ran in place (every write program order allows)
        from ..capture.check import inplace_in_order
        self.program_inplace = inplace_in_order(graph)
        offsets = None
        if self.program is not None:
            offsets = {t: 0 for op in graph["ops"] for t in op["outputs"]}
            offsets.update(plan.get("offsets") or {})
        wsoff = plan.get("workspace_offsets") if self.program is not None else None
        if self.program is not None:
            wsoff = {op["id"]: (wsoff or {}).get(op["id"], [0]) for op in graph["ops"]
                     if int(op.get("workspace", 0)) > 0}
        self.eager_program = Program.build(gm, graph, captured.op_nodes, None, offsets,
                                           self.planned_arena_bytes, self.alignment, wsoff,
                                           inplace=self.program_inplace)
        # the first step of the plan's order that writes a resident tensor: from there on an
        # interrupt (Ctrl-C) waits for the end of the step, so a step is done whole or not at
        # all (every write to a resident tensor follows the loss in the graph)
        self._first_write = _first_resident_write(graph, captured.op_writes,
                                                  plan.get("order") if self.program else None)
        self.session = N.Session()
        self.ranks: Dict[str, List[int]] = {}
        # op id -> (size, rank, output index): scratch that may sit in a pending output's slot
        self.loans: Dict[str, List[Tuple[int, int, int]]] = {}
        self.eager_peak_bytes: Optional[int] = None
        # calibration on copies of the captured tensors: which allocation of an op is its
        # output (kernels may allocate a workspace of the output's size first) + eager peak
        self.eager_peak_bytes = self._measure_eager(_flatten_state(state), calibrate=True)
        if self.program is not None and self.eager_peak_bytes is not None and \
                not trust_plan and self.planned_arena_bytes > self.eager_peak_bytes:
            # the arena is held for the whole step: a plan whose arena alone is above the same
            # graph run eagerly cannot save anything (a graph whose workspaces were measured on
            # another machine or with another thread count than this run's)
            self._run_program_order(
                f"the plan's arena ({self.planned_arena_bytes} B) is above the "
                f"{self.eager_peak_bytes} B of the same graph run eagerly, so a planned step "
                f"cannot hold less")
        if self.program is not None:
            self.session.configure(self.planned_arena_bytes, self.alignment,
                                   self.program.session_schedule(self.ranks),
                                   self.program.session_workspaces()
                                   if workspaces == "arena" else [],
                                   self.program.session_loans(self.loans)
                                   if workspaces == "arena" else [])
        self.session.debug = bool(debug)
        self.session.record = bool(record)
        self.session.set_workspaces_in_arena(workspaces == "arena")
        if self.rank_group is not None or "distributed" in graph.get("meta", {}):
            # the process group's worker thread drops its reference to a collective's
            # buffer just after the wait on it returns: a planned output whose slot that
            # buffer still holds waits for it (up to 1 s) instead of diverging
            self.session.set_release_wait(1.0)
        # a planned trial step on copies: what the arena cannot serve (scratch that no loan,
        # workspace block or free arena range takes) goes to the fallback heap; a plan whose
        # step would then hold more than the same graph run eagerly is not run at all
        self.trial_total_bytes: Optional[int] = None
        if self.program is not None and self.program_order_reason is None and \
                not trust_plan and self.eager_peak_bytes is not None:
            st = self._trial_step(_flatten_state(state))
            self.trial_total_bytes = int(st["total_peak"])
            if self._above_eager(self.trial_total_bytes, self.eager_peak_bytes):
                self._run_program_order(
                    f"a planned trial step on copies measured {self.trial_total_bytes} B (arena "
                    f"{self.planned_arena_bytes} B + fallback heap peak {st['fallback_peak']} "
                    f"B), above the {self.eager_peak_bytes} B of the same graph run eagerly")

    # -------------------------------------------------------------- helpers
    # A rank's process group allocates small buffers of its own (gloo: a few hundred bytes
    # per collective) on its worker thread, served by the fallback heap at moments that
    # differ from run to run, in the eager measurement as in a planned step: a rank's step
    # within this many bytes of the eager measurement is not counted above it.
    RANK_NOISE_BYTES = 4096

    def _above_eager(self, total_bytes: int, eager_bytes: int) -> bool:
        """A step that held ``total_bytes`` (arena + fallback heap peak) held more than the
        same graph run eagerly (``eager_bytes``, measured): by more than
        :attr:`RANK_NOISE_BYTES` on a rank of a distributed step, by any byte otherwise."""
        slack = self.RANK_NOISE_BYTES if self.rank_group is not None else 0
        return total_bytes > eager_bytes + slack

    def _run_program_order(self, reason: str) -> None:
        """Every step runs the program order with ordinary allocation, for ``reason`` (warned
        once, here, and kept in ``program_order_reason``)."""
        self.program_order_reason = reason
        warnings.warn(f"roam: {reason}; running the program order with ordinary allocation",
                      stacklevel=4)

    def _record(self, rep: StepReport) -> None:
        """Keep ``rep``; warn once when the step held more than the budget
        (:meth:`StepReport.over_budget`: the bytes over, the fallback heap peak)."""
        self.reports.append(rep)
        over = rep.over_budget()
        if over:
            self._warn_once("over-budget", f"roam: step {rep.step} ({rep.mode}): {over} (warned "
                                           f"once; step.last_report.why_not_met() says it for "
                                           f"each step)", stacklevel=4)

    def _warn_once(self, key: str, message: str, stacklevel: int = 3) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, stacklevel=stacklevel)

    def _measure_eager(self, tensors: Sequence[torch.Tensor], calibrate: bool = False) -> int:
        """Run the captured step in program order on clones of ``tensors`` under a
        pass-through session (PyTorch's default allocator, counted); the global RNG state is
        restored afterwards. With ``calibrate``, learn the ranks of the planned outputs and
        which scratch is freed before an output of its op is requested (loans)."""
        N = native()
        with torch.no_grad():
            flat = [t.detach().clone() for t in tensors]
        prog = self.eager_program
        s = N.Session()
        s.configure(0, self.alignment, [])
        s.set_pass_through(True)
        s.record = calibrate
        observed: Dict[int, List[int]] = {}
        with preserved_rng_state():
            s.install(self.priority)
            try:
                out = prog.run(flat, s, observe=(lambda k, p: observed.__setitem__(k, list(p)))
                               if calibrate else None)
                del out
            finally:
                s.uninstall()
        if calibrate and prog.steps and any(st.planned for st in prog.steps):
            events = s.events()
            self.ranks = ranks_from_events(prog, events, observed)
            self.loans = loans_from_events(prog, events, observed)
        return int(s.stats()["fallback_peak"])

    def _trial_step(self, tensors: Sequence[torch.Tensor]) -> Dict[str, Any]:
        """Run the planned program once on clones of ``tensors`` under the configured session
        (the global RNG state restored afterwards); returns the session's statistics."""
        with torch.no_grad():
            flat = [t.detach().clone() for t in tensors]
        with preserved_rng_state():
            self.session.install(self.priority)
            try:
                out = self.program.run(flat, self.session)
                del out
            finally:
                self.session.uninstall()
        del flat
        st = self.session.stats()
        if st["debug_violations"]:
            raise RuntimeError(f"roam executor bug: {st['first_violation']}")
        return st

    def _make_state(self, inputs):
        """The :class:`~roam.capture.state.TrainingState` of the live model and optimizer with
        ``inputs`` (the step's arguments). Raises CaptureError as ``make_state`` does."""
        from ..capture.state import make_state
        if self.step_fn is None:
            return make_state(self.model, self.optimizer, self.loss_fn, inputs,
                              n_loss_inputs=self.n_loss_inputs)
        return make_state(self.model, self.optimizer, None, inputs, step_fn=self.step_fn,
                          schedulers=self.schedulers)

    def _bind(self, inputs) -> Tuple[Optional[List[torch.Tensor]], Optional[List[torch.Tensor]],
                                     Optional[str]]:
        """The live tensors for the captured placeholders, or a reason why they differ."""
        from ..capture.errors import CaptureError
        try:
            st = self._make_state(inputs)
        except CaptureError as e:
            return None, None, str(e)
        if self.step_fn is not None:
            if len(st.input_constants) != len(self._input_constants):
                return None, None, ("the step's arguments have another structure than the "
                                    "captured ones")
            for k, (a, b) in enumerate(zip(st.input_constants, self._input_constants)):
                if (a is None) != (b is None) or (not isinstance(a, type(b)) and
                                                  not isinstance(b, type(a))):
                    return None, None, f"argument leaf {k} of the step differs in kind"
                if not isinstance(a, torch.Tensor) and a is not b and a != b:
                    return None, None, (f"argument leaf {k} of the step is {a!r}, the captured "
                                        f"step was traced with {b!r} (a Python value is a "
                                        f"constant of the graph)")
        if (list(st.state_index), [tuple(k) for k in st.state_keys]) != self._state_layout:
            if not st.state_index:
                return None, None, NO_STATE
            return None, None, "the optimizer state differs from the captured one"
        flat = _flatten_state(st)
        # The step's own tensors (all but the inputs) are bound again from the previous step's
        # binding where the same tensor still has the same storage, offset, sizes and strides
        # (``is_set_to``: then its signature is the one checked then and the detached view is
        # still the same view); the others (the new inputs) are checked and detached.
        n_own = len(flat) - len(st.inputs)
        raw, det = self._bind_cache if self._bind_cache is not None else ((), ())
        bound: List[torch.Tensor] = []
        if len(flat) == len(self._signature):
            for i, t in enumerate(flat):
                if i < len(raw) and t is raw[i] and t.is_set_to(det[i]):
                    bound.append(det[i])
                elif _sig(t) == self._signature[i]:
                    bound.append(t.detach())
                else:
                    break
        if len(bound) != len(flat) or len(flat) != len(self._signature):
            self._bind_cache = None
            sig = [_sig(t) for t in flat]
            if len(sig) != len(self._signature):
                return None, None, "the number of tensors differs from the captured step"
            return None, None, self._differs(sig)
        self._bind_cache = (flat[:n_own], bound[:n_own])  # the inputs are not kept
        return bound, list(st.params), None

    def _differs(self, sig) -> str:
        """Which placeholder differs from the captured step, and how: e.g. ``input 0 (data)
        differs from the captured step: shape (3, 3, 8, 8) given, (2, 3, 8, 8) captured``."""
        i = next(i for i, (a, b) in enumerate(zip(sig, self._signature)) if a != b)
        name = (self._placeholder_names[i] if i < len(self._placeholder_names)
                else f"tensor {i} of the step")
        (shape, dtype, stride, dev), (cshape, cdtype, cstride, cdev) = sig[i], self._signature[i]
        how = []
        if shape != cshape:
            how.append(f"shape {shape} given, {cshape} captured")
        if dtype != cdtype:
            how.append(f"dtype {dtype} given, {cdtype} captured")
        if dev != cdev:
            how.append(f"device {dev} given, {cdev} captured")
        if stride != cstride and shape == cshape:
            how.append(f"strides {stride} given, {cstride} captured")
        return f"{name} differs from the captured step: " + ", ".join(how)

    def _first_step_estimate(self) -> Tuple[int, int]:
        """``(state bytes, eager first-step bytes)`` from the graph: the optimizer state's
        bytes, and what an eager first step (``loss.backward(); optimizer.step();
        optimizer.zero_grad()``) holds above what existed before it, counted like Tp (the
        graph's live bytes at each step of the program order, kernel workspaces included) so
        that it compares with the planned figure (state + arena): the most, over the steps of
        the program order, of the live bytes plus the state created by then. torch's
        optimizers create the whole state of a parameter group at the start of that group's
        update, before any of its update ops runs, so a group's state is counted from the
        first op that uses any tensor of it (a peak in the update phase then holds its live
        bytes and the whole new state). At least every gradient of a parameter with state
        plus the whole state (all ``.grad`` are held while ``step()`` runs). The caller takes
        off the bytes by which the graph run eagerly measured below Tp."""
        if self._first_estimate is None:
            from ..headline import live_at_peak
            g = getattr(self.captured, "graph", None) or self.graph  # captured workspaces
            order = [op["id"] for op in g["ops"]]
            from ..capture.check import inplace_in_order
            curve = live_at_peak(g, order, self.alignment, inplace_in_order(g))["per_step"]
            tensors = {t["id"]: t for t in g["tensors"]}

            def root(tid):
                while tensors[tid].get("alias_of") is not None:
                    tid = tensors[tid]["alias_of"]
                return tid
            st = self.captured.state
            group_of_param = {}
            for gi, members in enumerate(st.group_index):
                for i in members:
                    group_of_param[i] = gi
            # state tensor name "<parameter>.<key>" -> its parameter group (unknown: one
            # group of its own, created at its own first use)
            group_of_name = {f"{st.param_names[i]}.{k}": group_of_param.get(i, 0)
                             for i, keys in zip(st.state_index, st.state_keys) for k in keys}
            state = {t["id"]: int(t["size"]) for t in g["tensors"]
                     if t.get("role") == "optimizer_state"}
            group = {tid: group_of_name.get(tensors[tid].get("name"), ("own", tid))
                     for tid in state}
            group_bytes: Dict[Any, int] = {}
            for tid, size in state.items():
                group_bytes[group[tid]] = group_bytes.get(group[tid], 0) + size
            at = [0] * (len(order) + 1)
            created = set()
            for k, op in enumerate(g["ops"]):
                for tid in list(op.get("inputs", [])) + list(op.get("outputs", [])):
                    r = root(tid)
                    if r in state and group[r] not in created:
                        created.add(group[r])
                        at[k] += group_bytes[group[r]]
            best, run = 0, 0
            for k, live in enumerate(curve):
                run += at[k]
                best = max(best, live + run)
            grads = sum(st.params[i].numel() * st.params[i].element_size()
                        for i in st.state_index)
            self._first_estimate = (sum(state.values()),
                                    max(best, sum(state.values()) + grads))
        return self._first_estimate

    def _create_first_state(self, inputs) -> Tuple[int, Optional[int], Optional[str]]:
        """For a fresh optimizer: create its state as its own first step starts from it
        (zeros; checked on a dummy to give the optimizer's first step bit for bit) when the
        planned step with that state (state + arena) holds no more than an eager first step
        (:meth:`_first_step_estimate`, less what the graph run eagerly measured below Tp), or,
        under the plan's budget, when the eager estimate with the resident bytes before the
        step is above the budget and the planned one is not. Returns ``(bytes created, eager
        first-step estimate, None)`` or ``(0, eager estimate or None, why not)``."""
        from ..capture.state import make_state
        mib = 1 << 20
        if self._zero_state is None:
            self._zero_state = zero_state_template(self.optimizer)
        template, why = self._zero_state
        if why is not None:
            return 0, None, why
        state_bytes, eager_first = self._first_step_estimate()
        below = max(0, self.tp_program - (self.eager_peak_bytes or self.tp_program))
        eager = eager_first - below
        planned = state_bytes + self.planned_arena_bytes
        # both above what existed before the step (resident less the state not yet created)
        before = self.resident_bytes - state_bytes
        words = (f"a planned first step would hold {planned / mib:.2f} MiB (the new state "
                 f"{state_bytes / mib:.2f} MiB beside the arena "
                 f"{self.planned_arena_bytes / mib:.2f} MiB), more than an eager first step "
                 f"(about {eager / mib:.2f} MiB: the live bytes at the program order's peak "
                 f"with the new state)")
        if planned > eager:
            budget = self.budget_bytes
            if budget is None or before + eager <= budget:
                return 0, eager, words
            if before + planned > budget:
                return 0, eager, (
                    f"neither first step fits the budget of {budget / mib:.2f} MiB: a planned "
                    f"one would hold {(before + planned) / mib:.2f} MiB, an eager one about "
                    f"{(before + eager) / mib:.2f} MiB (each with the {before / mib:.2f} MiB "
                    f"resident before the step; {words}); the lower, eager one runs")
            # the eager estimate is above the budget and the planned step fits: plan it
        st = self._make_state(inputs)
        idx, keys = self._state_layout
        group_of = {}
        for gi, members in enumerate(st.group_index):
            for i in members:
                group_of[i] = gi
        plan = []
        for i, ks in zip(idx, keys):
            kinds = template[group_of[i]]
            if set(kinds) != set(ks):
                return 0, None, (f"the optimizer's first step creates state {sorted(kinds)}, "
                                 f"the captured step holds {sorted(ks)}")
            plan.append((st.params[i], ks, kinds))
        created = 0
        self._created_for = []
        with torch.no_grad():
            for p, ks, kinds in plan:
                d = {}
                for k in ks:
                    kind, like = kinds[k]
                    t = (torch.zeros_like(p, memory_format=torch.preserve_format)
                         if kind == "param" else torch.zeros_like(like))
                    d[k] = t
                    created += t.numel() * t.element_size()
                self.optimizer.state[p] = d
                self._created_for.append(p)
        return created, eager, None

    def _drop_state(self) -> None:
        """Undo _create_first_state (the step then runs eagerly and creates its own)."""
        for p in getattr(self, "_created_for", []):
            self.optimizer.state.pop(p, None)
        self._created_for = []
        self._bind_cache = None  # it may hold the dropped state tensors

    def _eager_step(self, inputs):
        from ..capture.collectives import data_parallel_step
        from ..capture.state import primary_output
        # a rank of a data-parallel step takes rank 0's buffers and averages its gradients
        # as the graph does
        rank_step = data_parallel_step(self.data_parallel, self.model)
        if self.step_fn is not None:  # the user's own step, as they would run it
            with rank_step:
                out = self.step_fn(*inputs)
            # as after a planned step, no gradient outlives the step (its function may leave
            # them in .grad: the planned steps after it would never update them)
            for p in self.model.parameters():
                p.grad = None
            return pytree.tree_map(
                lambda t: t.detach() if isinstance(t, torch.Tensor) else t, out)
        n = len(inputs) - self.n_loss_inputs
        self.optimizer.zero_grad(set_to_none=True)
        with rank_step:
            loss = self.loss_fn(primary_output(self.model(*inputs[:n])), *inputs[n:])
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    # -------------------------------------------------------------- the step
    def __call__(self, *inputs) -> torch.Tensor:
        t0 = time.perf_counter()
        self._count += 1
        inputs = tuple(inputs)
        flat, params, reason = self._bind(inputs)
        created, first_estimate = 0, None
        if [m.training for m in self.model.modules()] != self._captured_modes:
            reason = ("the model's train/eval mode differs from the captured step's (dropout and "
                      "BatchNorm behave differently; call model.train() to run the plan again)")
        if reason == NO_STATE and self.program is not None and self.program_order_reason is None:
            # a fresh optimizer: create its state as its own first step would start from it
            # (zeros), when that is exact and the planned step then holds no more than an
            # eager first step; else an eager step
            created, first_estimate, why = self._create_first_state(inputs)
            if why is None:
                flat, params, reason = self._bind(inputs)
                if reason is not None:
                    self._drop_state()
                    created, first_estimate = 0, None
            else:
                reason = f"{NO_STATE}; {why}"
        if reason is None:
            reason = self.scalars.refresh(params)
            if reason is not None and created:
                self._drop_state()
                created, first_estimate = 0, None
        if reason is not None:
            # one warning per kind of reason; per input and way for another shape (counted:
            # eager_steps)
            self._warn_once("eager:" + (reason if "differs from the captured step:" in reason
                                        else reason.split(":")[0]),
                            f"roam: {reason}; running an ordinary eager step (warned once: "
                            f"step.summary() and step.eager_steps() count these steps)")
            # a fresh optimizer: its state did not exist before the step (the step creates it)
            fresh = not any(len(v) for v in self.optimizer.state.values())
            s = native().Session()
            s.configure(0, self.alignment, [])
            s.set_pass_through(True)
            s.install(self.priority)
            try:
                loss = self._eager_step(inputs)
            finally:
                s.uninstall()
            st = s.stats()
            rep = StepReport(step=self._count, loss=_loss_value(loss), mode="eager",
                             reason=reason,
                             planned_arena_bytes=self.planned_arena_bytes,
                             resident_bytes=self.resident_bytes
                             - (self._first_step_estimate()[0] if fresh else 0),
                             eager_first_step_bytes=first_estimate if fresh else None,
                             fallback_peak_bytes=int(st["fallback_peak"]),
                             total_peak_bytes=int(st["total_peak"]),
                             fallback_allocs=int(st["fallback_allocs"]),
                             seconds=time.perf_counter() - t0, budget_bytes=self.budget_bytes)
            self._record(rep)
            return loss

        eager_peak = self.eager_peak_bytes
        if created:
            eager_peak = None  # the calibrated figure is a steady step's; see first_estimate
        elif self.measure_eager == "every":
            eager_peak = self._measure_eager(flat)
        if self.program is None or self.program_order_reason is not None:
            prog, session = self.eager_program, native().Session()
            session.configure(0, self.alignment, [])
            session.set_pass_through(True)
            session.debug = bool(self.debug)
        else:
            prog, session = self.program, self.session
        guard = _InterruptGuard()
        session.install(self.priority)
        try:
            with guard:
                out = prog.run(flat, session, defer_interrupts_from=(
                    self._first_write if prog is self.program else
                    _first_resident_write(self.graph, self.captured.op_writes, None)),
                    guard=guard)
        finally:
            session.uninstall()
        # out of the arena: the step's outputs are the caller's (the program returns the
        # graph's flat outputs; the step's own structure is the traced one)
        spec = getattr(self.captured.traced, "output_spec", None)
        if spec is not None and isinstance(out, (list, tuple)) and \
                len(out) == spec.num_leaves:
            out = pytree.tree_unflatten(list(out), spec)
        result = pytree.tree_map(
            lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, out)
        loss = result if self.step_fn is not None else _first_tensor(result)
        del out, flat, params
        for j in self.scheduler_calls:  # the LR schedulers' step() calls of the step
            # The graph did the optimizer's update, so its step() was not called: mark it
            # called as the schedulers' wrapper of optimizer.step() would, or the first
            # scheduler step warns of a call before optimizer.step(). `_opt_called` is
            # private (torch.optim.lr_scheduler, LRScheduler.__init__'s
            # patch_track_step_called; checked on torch 2.13 and 2.14).
            self.schedulers[j].optimizer._opt_called = True
            self.schedulers[j].step()
        st = session.stats()
        planned_run = self.program is not None and self.program_order_reason is None
        escaped = session.arena_live_blocks if planned_run else 0
        if self.program is None:
            mode = "unplanned"
        elif not planned_run:
            mode = "program"
        else:
            mode = "planned" if st["mode"] == "planned" else "diverged"
        mismatch = st["first_mismatch"] or None
        if mismatch:
            self._warn_once("diverged", f"roam: the step diverged from the plan at step "
                                        f"{st['first_mismatch_step']}: {mismatch}; ordinary "
                                        f"allocation for the rest of the step")
        if st["debug_violations"]:
            raise RuntimeError(f"roam executor bug: {st['first_violation']}")
        rep = StepReport(
            step=self._count, loss=_loss_value(loss), mode=mode,
            planned_arena_bytes=self.planned_arena_bytes,
            arena_bytes=int(st["arena_bytes"]), arena_used_bytes=int(st["arena_high_water"]),
            fallback_peak_bytes=int(st["fallback_peak"]),
            total_peak_bytes=int(st["total_peak"]) + created,
            eager_peak_bytes=eager_peak, planned_saving_bytes=self.planned_saving_bytes,
            state_created_bytes=created, eager_first_step_bytes=first_estimate,
            arena_allocs=int(st["arena_allocs"]), fallback_allocs=int(st["fallback_allocs"]),
            arena_workspaces=int(st["arena_workspaces"]),
            block_workspaces=int(st.get("block_workspaces", 0)),
            loan_workspaces=int(st.get("loan_workspaces", 0)), mismatch=mismatch,
            reason=self.unplanned_reason if mode != "program" else self.program_order_reason,
            debug_checks=int(st["debug_checks"]), debug_violations=int(st["debug_violations"]),
            escaped_arena_blocks=int(escaped), seconds=time.perf_counter() - t0,
            resident_bytes=self.resident_bytes
            - (self._first_step_estimate()[0] if created else 0),
            at_peak=self.peak_line() if planned_run else None,
            recomputations=self.recomputations if planned_run else 0,
            budget_bytes=self.budget_bytes)
        self._record(rep)
        guard.reraise()
        if planned_run and eager_peak is not None and \
                self._above_eager(rep.total_peak_bytes, eager_peak):
            self.program_order_reason = (
                f"step {self._count} measured {rep.total_peak_bytes} B (arena "
                f"{rep.arena_bytes} B + fallback heap peak {rep.fallback_peak_bytes} B), above "
                f"the {eager_peak} B of the same graph run eagerly")
            self._warn_once("above-eager", f"roam: {self.program_order_reason}; running the "
                                           f"program order with ordinary allocation from now on")
        return loss

    def peak_line(self) -> Optional[str]:
        """What is live at the plan's peak, as ``roam plan`` prints it: op index, op, module,
        how many storages, the three largest with the module that made them."""
        if self.at_peak is None:
            return None
        from ..headline import peak_line
        return peak_line(self.at_peak)

    def headline(self) -> str:
        """The plan's headline, as ``roam plan`` prints it (resident included): peak = resident
        + arena; program order on a CPU allocator = resident + Tp(program order); on PyTorch's
        CUDA caching allocator (simulated) = resident + the segments it would reserve for the
        program order; lower bound. Planned figures, nothing measured."""
        from ..headline import headline, plan_lower_bound
        st = self.plan.get("stats", {})
        lb = plan_lower_bound(self.plan)
        overhead = None
        if st.get("compute_seconds"):
            overhead = float(st.get("recompute_seconds", 0.0)) / float(st["compute_seconds"])
        return headline(self.resident_bytes + self.planned_arena_bytes,
                        self.resident_bytes + self.tp_program,
                        cuda_bytes=self.resident_bytes + self.cuda_program_bytes,
                        lower_bound_bytes=None if lb is None else self.resident_bytes + int(lb),
                        budget_bytes=self.budget_bytes, recompute_overhead=overhead,
                        recomputations=int(st.get("recomputations", 0)))

    def summary(self, report: Optional[StepReport] = None) -> List[str]:
        """Lines for a person: the planned headline, what is live at the plan's peak, what
        ``report`` (default: the last step) measured and saved, and, when a saving was not
        met, why in plain words."""
        report = report if report is not None else self.last_report
        if self.program is None:
            # nothing of the plan is in force: say so before any planned figure
            lines = [f"plan refused: {self.unplanned_reason}; every step runs the captured step "
                     f"in program order with ordinary allocation (nothing planned is in force)"]
        elif self.program_order_reason is not None:
            lines = [f"plan off: {self.program_order_reason}; steps run in program order with "
                     f"ordinary allocation (the plan, not in force: {self.headline()})"]
        else:
            lines = ["planned: " + self.headline()]
            if self.peak_line():
                lines.append("at the plan's peak: " + self.peak_line())
        eager = self.eager_steps()
        if eager:
            n = sum(eager.values())
            lines.append(f"eager steps: {n} of {len(self.reports)} ran as ordinary eager steps, "
                         f"nothing planned in them: "
                         + "; ".join(f"{c} x {why}" for why, c in eager.items()))
        if report is not None:
            lines.append(report.describe())
            why = report.why_not_met()
            if why:
                lines.append("not met: " + why)
        return lines

    def eager_steps(self) -> Dict[str, int]:
        """How many steps so far ran as ordinary eager steps (``mode="eager"``), by reason
        (e.g. an input of another shape), in the order first seen. Python warns once per
        reason; this keeps the count."""
        out: Dict[str, int] = {}
        for r in self.reports:
            if r.mode == "eager":
                out[r.reason] = out.get(r.reason, 0) + 1
        return out

    @property
    def last_report(self) -> Optional[StepReport]:
        return self.reports[-1] if self.reports else None

    def reference_step(self, *inputs, model=None, optimizer=None) -> torch.Tensor:
        """Run the *same captured graph* in program order with PyTorch's default allocator
        on ``model`` / ``optimizer`` (default: this step's; pass deep copies to compare),
        updating them in place: the bit-identity reference of the tests."""
        from ..capture.state import make_state
        model = model if model is not None else self.model
        optimizer = optimizer if optimizer is not None else self.optimizer
        if self.step_fn is None:
            st = make_state(model, optimizer, self.loss_fn, tuple(inputs),
                            n_loss_inputs=self.n_loss_inputs)
        else:
            st = make_state(model, optimizer, None, tuple(inputs), step_fn=self.step_fn)
        flat = [t.detach() for t in _flatten_state(st)]
        saved = self.scalars.optimizer
        try:
            self.scalars.optimizer = optimizer
            reason = self.scalars.refresh(list(st.params))
        finally:
            self.scalars.optimizer = saved
        if reason is not None:
            raise RuntimeError(f"reference step impossible: {reason}")
        gm = self.scalars.compiled_module()
        args = pytree.tree_unflatten(flat, self._treespec)
        from ..capture.kernels import call_graph
        out = pytree.tree_map(lambda t: t.detach().clone()
                              if isinstance(t, torch.Tensor) else t, call_graph(gm, *args))
        return out if self.step_fn is not None else _first_tensor(out)
