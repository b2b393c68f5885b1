"""``roam.optimize``: capture a training step, plan it, and return the
:class:`~roam.executor.api.RoamStep` that runs it (DESIGN.md "Executor").

:func:`optimize` plans the graph as captured (each op's workspace: its peak minus its
outputs), as ``roam plan`` does on the saved file; only where that plan's trial step holds
more than the graph run eagerly, because some kernel's scratch that peaks before the op's
outputs exist does not fit beside them, it plans again with the capture's servable
workspaces (:func:`~roam.executor.planning.servable_workspaces`: the block such an op needs
wherever the layout puts it) and keeps that plan if its trial passes
(``RoamStep.replanned_reason`` says so). Under a budget, :func:`plan_within_budget` also
counts the generator states the executor saves for recomputed random ops, and a budget that
cannot be met is refused before the first step, naming a budget that is met.
"""

import copy
import warnings
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch

from ..capture.rng import preserved_rng_state
from .api import RoamStep
from .ranks import any_rank, rank_group_of, refuse_together
from .planning import (ALIGNMENT, BudgetInfeasible, add_rng_order_edges, load_plan, parse_size,
                       plan_graph, servable_workspaces)

__all__ = ["optimize", "plan_within_budget"]


def plan_within_budget(graph: Dict[str, Any], captured, budget_bytes: int, order: str = "roam",
                       layout: str = "roam", alignment: int = ALIGNMENT,
                       time_limit_seconds: float = 60.0, threads: int = 1,
                       progress: Optional[Callable[[str], None]] = None,
                       reserve_bytes: int = 0) -> Dict[str, Any]:
    """A plan of ``graph`` (the planned graph of ``captured``, a :class:`roam.capture.Graph`)
    whose step fits ``budget_bytes`` (bytes) with the executor's own bytes for generator
    states and ``reserve_bytes`` held outside the plan (a rank's process-group buffers on the
    fallback heap, :attr:`RoamStep.RANK_NOISE_BYTES`): resident + arena +
    :func:`~roam.executor.program.held_rng_state_bytes` of the random ops the plan recomputes
    (:func:`~roam.executor.program.replayed_random_ops`) + ``reserve_bytes`` <=
    ``budget_bytes``. libroam plans resident + arena within a budget (:func:`plan_graph`);
    when the generator states do not fit beside that plan's arena, it plans again with the
    budget lowered by them, until a plan fits (each round that does not fit lowers the budget
    and recomputes more random ops than the one before, so there are at most as many such
    rounds as random ops in the graph); when libroam finds no plan at a lowered budget, the
    plan at the smallest budget libroam meets is taken if it fits with its generator states.
    ``progress`` is called with a line for each round planned again.

    Raises:
        BudgetInfeasible: no plan fits; ``smallest_budget_bytes`` is resident + arena +
            generator-state bytes (+ ``reserve_bytes``) of libroam's plan at the smallest
            budget libroam meets, a
            budget this function meets (a plan that recomputes fewer random ops may meet a
            lower one; with no random op recomputed there it is libroam's own error,
            unchanged); ``lower_bound_bytes`` is libroam's lower bound of resident + arena.
    """
    from .program import held_rng_state_bytes, replayed_random_ops
    say = progress or (lambda s: None)
    gm, op_nodes = captured.traced.gm, captured.op_nodes
    mib = 1 << 20

    reserve = int(reserve_bytes)

    def held(p) -> Tuple[int, int, int]:
        """(resident + arena + generator states + reserve, generator-state bytes, random
        ops the plan recomputes)."""
        n = len(replayed_random_ops(gm, op_nodes, p["order"]))
        rng = held_rng_state_bytes(n)
        st = p["stats"]
        return int(st["resident_bytes"]) + int(st["arena_bytes"]) + rng + reserve, rng, n

    def plan_at(b: int) -> Dict[str, Any]:
        return plan_graph(graph, order, layout, alignment, time_limit_seconds, threads,
                          budget_bytes=b)

    b = int(budget_bytes)
    while True:
        try:
            plan = plan_at(b)
        except BudgetInfeasible as e:
            if e.smallest_budget_bytes <= 0 or (e.smallest_budget_bytes == b and not reserve):
                raise
            smallest = plan_at(e.smallest_budget_bytes)
            total, rng, n = held(smallest)
            if total <= budget_bytes:
                return smallest
            if rng == 0 and not reserve and b == budget_bytes:
                raise  # libroam's own verdict: nothing of the executor's to add
            parts = [f"resident + arena {total - rng - reserve} B"]
            if rng:
                parts.append(f"{rng} B of CPU generator states the executor holds for the {n} "
                             f"random ops that plan recomputes")
            if reserve:
                parts.append(f"{reserve} B kept for the process group's own buffers")
            what = " and ".join(parts) if len(parts) > 1 else "resident + arena"
            raise BudgetInfeasible(
                f"roam: budget {budget_bytes} B ({budget_bytes / mib:.2f} MiB) cannot be met: "
                f"the smallest budget roam meets is {total} B ({total / mib:.2f} MiB: {what}); "
                f"no schedule, recomputation included, fits below {e.lower_bound_bytes} B "
                f"({e.lower_bound_bytes / mib:.2f} MiB of resident + arena)",
                budget_bytes, total, e.lower_bound_bytes) from None
        total, rng, n = held(plan)
        if total <= budget_bytes:
            return plan
        # rng + reserve > budget_bytes - b here (resident + arena <= b): the next budget is
        # below b
        b = max(1, budget_bytes - rng - reserve)
        say(f"the plan recomputes {n} random ops, whose generator states ({rng} B) and the "
            f"{reserve} B kept for the process group do not fit beside its arena: planning "
            f"again with the budget lowered to {b} B" if reserve else
            f"the plan recomputes {n} random ops, whose generator states ({rng} B) do not fit "
            f"beside its arena: planning again with the budget lowered to {b} B")


def optimize(model_or_step, optimizer=None, loss_fn: Optional[Callable] = None,
             example_inputs=None, plan: Union[None, str, Dict[str, Any]] = None,
             order: str = "roam", layout: str = "roam", *,
             model: Optional[torch.nn.Module] = None, schedulers=None,
             n_loss_inputs: int = 1,
             alignment: int = ALIGNMENT, time_limit_seconds: float = 60.0, threads: int = 1,
             debug: bool = False, measure_eager: str = "once", trust_plan: bool = False,
             workspaces: str = "arena", captured=None,
             progress: Optional[Callable[[str], None]] = None,
             budget: Union[None, int, str] = None, cost: Optional[str] = None,
             process_group=None) -> RoamStep:
    """Capture one training step, plan it (``order`` / ``layout`` methods of libroam, or the
    given ``plan``: a roam-plan dict or file path), and return the :class:`RoamStep`.

    Two forms, as :func:`roam.capture`: ``optimize(model, optimizer, loss_fn,
    example_inputs)`` (the model's inputs, then the last ``n_loss_inputs`` for ``loss_fn(output,
    *targets)``; ``step(*inputs)`` returns the loss), or ``optimize(train_step,
    example_inputs)``, the user's whole step function (forward, losses, ``backward()``,
    clipping, ``optimizer.step()``, ``scheduler.step()``; the model, optimizer and schedulers
    are found from what it refers to, or given as ``model=``, ``optimizer=``,
    ``schedulers=``): ``step(*args)`` then does what ``train_step(*args)`` does and returns what
    it returns, with the LR schedulers' ``step()`` calls run after the graph. What the capture
    cannot take (``.item()`` steering the step, data-dependent shapes) raises
    :class:`roam.capture.CaptureError` here, before the first step.

    A given ``plan`` is validated against this capture of the step: its order, offsets,
    recomputations and bytes must match, or it is refused (warned; every step then runs in
    program order with ordinary allocation, and :meth:`RoamStep.summary` says so first). Its
    cost-derived seconds (``stats.compute_seconds``, ``stats.recompute_seconds``: the op
    seconds of the capture it was planned on, e.g. by ``roam plan --budget`` on a saved graph)
    are not compared with this capture's, which measures them again or not at all: they do
    not change what the plan does (:func:`with_graph_costs`). The headline's recompute overhead
    is the plan's own figure.

    Nothing of ``model`` or ``optimizer`` is modified here (the capture runs on copies; the
    global RNG state is restored). ``debug``: the allocator checks every allocation against
    every live block. ``measure_eager``: ``"once"`` (the eager peak of the calibration run is
    reported with every step) or ``"every"`` (measured again before each step, on copies).
    ``trust_plan``: skip the validator, the check that the plan's arena is not above the
    same graph run eagerly and the planned trial step on copies (whose measured total, arena
    + fallback heap peak, must not be above it either) (tests of the run-time checks). ``workspaces``:
    ``"arena"`` (default) serves each op's internal allocations from its planned workspace
    block (plan ``workspace_offsets``, sub-allocated in request order), then those of at least
    4 KiB from arena bytes free at that moment; ``"heap"`` sends every unplanned allocation
    to the fallback heap.
    ``captured``: reuse a :class:`roam.capture.Graph` of this model and optimizer (traced
    under :func:`eager_kernels_while_tracing`).

    ``budget``: a memory budget for the whole step, resident tensors included (bytes, or a
    string such as ``"2GiB"``, see :func:`parse_size`): the plan keeps resident + arena + the
    executor's CPU generator states within it, recomputing forward activations in the
    backward pass where needed (a roam-plan v2, run op by op: each recomputation re-runs its
    fx node on the values bound at that step, its outputs at their planned instance offsets).
    A random op (dropout) that the plan recomputes replays the generator state of its first
    run, which the executor saves (``torch.get_rng_state()``, 5056 B on torch 2.14's CPU generator) and keeps
    to the end of the step, outside the plan, plus one more state while a replay runs:
    :func:`plan_within_budget` counts ``(n + 1)`` states for ``n`` recomputed random ops and,
    where they do not fit beside the arena, plans again with the budget lowered by them
    (:attr:`RoamStep.rng_state_bytes` has the figure of the plan in force). What else
    the step allocates outside the plan (kernel scratch larger than the capture measured, in
    the fallback heap) is not known before it runs: each report has the measured figure, and
    a step whose resident + measured peak is above the budget is warned once and said by
    :meth:`StepReport.why_not_met`. A plan given with ``plan=`` is run as it is (its own
    recorded budget is the one reported). ``cost``: how the capture gets each op's seconds,
    which choose what to recompute: ``"measured"`` (default with a budget: median CPU seconds
    over 3 runs), ``"estimate"`` (a roofline model, deterministic) or ``"none"`` (default
    without a budget).

    ``process_group``: run one rank of a data-parallel step on ``torch.distributed`` (a
    ``ProcessGroup``, e.g. ``torch.distributed.group.WORLD``, or a
    :class:`roam.capture.collectives.DataParallel`): the capture adds the gradient
    all-reduces that ``DistributedDataParallel`` would make (same buckets, same averaging;
    :func:`roam.capture.capture`), the planners keep them in program order (every rank issues
    the same collectives in the same order) and every step runs them on the group. Every
    rank calls ``optimize`` with its own batch of the same shape; the ranks check at the
    start that their plans issue the same collectives (RuntimeError if not). With a budget,
    op costs default to ``"estimate"`` (the same on every rank; also for a
    :class:`roam.capture.sharded.ShardedModel`), a rank's plan keeps
    :attr:`RoamStep.RANK_NOISE_BYTES` of the budget free for the process group's own buffers
    (the smallest budget named includes them), and a budget one rank cannot meet is refused
    on every rank (BudgetInfeasible naming that rank). The model is used as it is: not
    wrapped in DDP.

    Raises:
        BudgetInfeasible: no schedule roam finds meets ``budget`` with those generator
            states; raised here, before any step, naming the smallest budget roam meets, in
            bytes, generator states included (``smallest_budget_bytes``).
        ValueError: ``budget`` is not a memory size.
    """
    from .. import capture as roam_capture
    say = progress or (lambda s: None)
    sharded = hasattr(model_or_step, "roam_distributed_meta")  # a ShardedModel: its own group
    if process_group is None and not sharded and _launched_with_ranks():
        warnings.warn("roam.optimize: this process is one of several ranks (WORLD_SIZE > 1) but "
                      "no process_group was given (or torch.distributed.group.WORLD was read "
                      "before init_process_group): each rank trains alone, its gradients not "
                      "averaged with the others'; pass process_group=torch.distributed.group."
                      "WORLD after init_process_group", stacklevel=2)
    _check_arguments(plan, measure_eager, workspaces, alignment, time_limit_seconds, threads)
    budget_bytes = None if budget is None else parse_size(budget)
    if cost is None:
        cost = "none" if budget_bytes is None or plan is not None else (
            "measured" if process_group is None and not sharded else "estimate")
    with preserved_rng_state():
        if captured is None:
            say("capturing the training step")
            if isinstance(model_or_step, torch.nn.Module):
                example_inputs = tuple(example_inputs)
            captured = roam_capture.capture(model_or_step, optimizer, loss_fn,
                                            example_inputs, model=model,
                                            schedulers=schedulers,
                                            n_loss_inputs=n_loss_inputs, cost=cost,
                                            check_peak=False, progress=progress,
                                            process_group=process_group)
        graph = copy.deepcopy(captured.graph)
        add_rng_order_edges(graph)  # the capture added them: a graph of another tool may not
        st = captured.state
        if isinstance(model_or_step, torch.nn.Module):  # the given ones (captured may be of
            st_model, st_opt, st_loss = model_or_step, optimizer, loss_fn  # a copy of them)
        else:
            st_model, st_opt, st_loss = st.model, st.optimizer, st.loss_fn
        kw = dict(n_loss_inputs=n_loss_inputs, debug=debug, measure_eager=measure_eager,
                  trust_plan=trust_plan, workspaces=workspaces)

        def build(g, p, b):
            say("calibrating (one step in program order and one planned step, on copies)")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                s = RoamStep(st_model, st_opt, st_loss, captured, g, p, budget_bytes=b, **kw)
            return s, list(caught)

        def plan_of(g, b):
            if b is None:
                return plan_graph(g, order, layout, alignment, time_limit_seconds, threads)
            # the ranks of a distributed step refuse a budget together (ranks.refuse_together)
            plan_b, refused = None, None
            try:
                plan_b = plan_within_budget(
                    g, captured, b, order, layout, alignment, time_limit_seconds, threads,
                    progress, RoamStep.RANK_NOISE_BYTES if rank_group_of(st) is not None else 0)
            except BudgetInfeasible as e:
                refused = e
            refuse_together(refused, rank_group_of(st))
            return plan_b

        def needs_more(step, b) -> bool:
            """The planned trial step held more than the graph run eagerly (the step then
            runs the program order), or, under budget ``b``, resident + its arena + fallback
            heap peak + generator states came above ``b``."""
            if step.program is None or step.trial_total_bytes is None:
                more = False
            elif step.program_order_reason:
                more = True
            else:
                more = b is not None and (step.resident_bytes + step.trial_total_bytes
                                          + step.rng_state_bytes) > b
            # every rank of a data-parallel or sharded step builds (and calibrates,
            # collectives included) the same number of steps: one rank's need is all ranks'
            return any_rank(more, rank_group_of(st))

        def attempt(b):
            """The step planned at budget ``b`` (None: no budget) and calibrated. The plan of
            the graph as captured (the plan ``roam plan`` makes of it) may not serve some
            kernel's scratch, which peaks before the op's outputs exist and fits in the op's
            output slots and workspace block only where they are adjacent: then plan again
            with the blocks those ops need wherever the layout puts them (the capture's
            servable workspaces), and keep that plan if its trial step holds no more than the
            graph run eagerly (and, under a budget, fits it with its fallback heap). Raises
            BudgetInfeasible where either plan misses ``b``."""
            say(f"planning (order {order}, layout {layout}"
                + (f", budget {b} B)" if b is not None else ")"))
            step, caught = build(graph, plan_of(graph, b), b)
            if not needs_more(step, b):
                return step, caught
            wider = copy.deepcopy(graph)
            n_wider = servable_workspaces(wider)
            if not n_wider:
                return step, caught
            say("planning again with the servable workspaces (scratch that does not fit "
                "beside its op's outputs in the first plan)")
            try:
                plan2 = plan_of(wider, b)
            except BudgetInfeasible as e:
                mib = 1 << 20
                raise BudgetInfeasible(
                    f"{e}; with the servable workspaces of {n_wider} ops (kernel scratch "
                    f"that does not fit beside its op's outputs in the plan at "
                    f"{b} B ({b / mib:.2f} MiB), whose trial step needed "
                    f"{step.trial_total_bytes} B)", e.budget_bytes, e.smallest_budget_bytes,
                    e.lower_bound_bytes) from None
            step2, caught2 = build(wider, plan2, b)
            if step2.program is not None and not needs_more(step2, b):
                step2.replanned_reason = (
                    f"the plan of the graph as captured ({step.program_order_reason}) was "
                    f"planned again with the servable workspaces of {n_wider} ops")
                return step2, caught2
            return step, caught

        if plan is not None:
            if isinstance(plan, str):
                plan = load_plan(plan)
            step, caught = build(graph, plan, None)
        elif budget_bytes is None:
            step, caught = attempt(None)
        else:
            step, caught = attempt_budget(attempt, budget_bytes)
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return step


def _launched_with_ranks() -> bool:
    """True when torch.distributed runs with more than one rank, or a launcher (torchrun)
    says so in ``WORLD_SIZE``."""
    import os
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size() > 1
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def _check_arguments(plan, measure_eager, workspaces, alignment, time_limit_seconds,
                     threads) -> None:
    """:func:`optimize`'s options, as the CLI checks its own (TypeError / ValueError naming
    the argument)."""
    import math
    if plan is not None and not isinstance(plan, (str, dict)):
        raise TypeError(f"roam.optimize: plan: {type(plan).__name__} given; a roam-plan dict or "
                        f"a file path is needed")
    if measure_eager not in ("once", "every"):
        raise ValueError(f"roam.optimize: measure_eager: {measure_eager!r} is not 'once' or "
                         f"'every'")
    if workspaces not in ("arena", "heap"):
        raise ValueError(f"roam.optimize: workspaces: {workspaces!r} is not 'arena' or 'heap'")
    if not isinstance(alignment, int) or alignment < 1 or alignment > (1 << 20) or \
            alignment & (alignment - 1):
        raise ValueError(f"roam.optimize: alignment: {alignment!r} is not a power of two "
                         f"between 1 and 1048576 bytes")
    if not isinstance(time_limit_seconds, (int, float)) or not time_limit_seconds > 0 or \
            not math.isfinite(time_limit_seconds):
        raise ValueError(f"roam.optimize: time_limit_seconds: {time_limit_seconds!r} is not a "
                         f"positive number of seconds")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"roam.optimize: threads: {threads!r} is not a whole number >= 1")


def attempt_budget(attempt: Callable[[int], Any], budget_bytes: int):
    """``attempt(budget_bytes)``; where it raises BudgetInfeasible, the error names a budget
    that :func:`optimize` meets: the smallest budget libroam meets is tried as ``attempt``
    would run it (its trial step may need the servable workspaces, which can raise it; at
    most two such rounds), and the error raised names the first that passes."""
    mib = 1 << 20
    try:
        return attempt(budget_bytes)
    except BudgetInfeasible as first:
        err = first
    b = err.smallest_budget_bytes
    for _ in range(2):
        if b <= budget_bytes or b <= 0:
            break
        try:
            attempt(b)
        except BudgetInfeasible as e:
            if e.smallest_budget_bytes <= b:
                break
            b = e.smallest_budget_bytes
            continue
        if b == err.smallest_budget_bytes:
            raise err
        raise BudgetInfeasible(
            f"roam: budget {budget_bytes} B ({budget_bytes / mib:.2f} MiB) cannot be met: the "
            f"smallest budget roam meets is {b} B ({b / mib:.2f} MiB, with the servable "
            f"workspaces of the kernels whose scratch does not fit beside their outputs); no "
            f"schedule, recomputation included, fits below {err.lower_bound_bytes} B "
            f"({err.lower_bound_bytes / mib:.2f} MiB of resident + arena)",
            budget_bytes, b, err.lower_bound_bytes) from None
    raise err
