"""python -m roam.run --model NAME --batch-size B --steps N: train a model for N steps with
roam.optimize and, side by side, with the ordinary eager loop; print per step the loss and the
measured peak of both, and the reduction. CPU only (PyTorch 2.x).

First the plan: its headline (as roam plan prints it: peak = resident + arena; program order
on a CPU allocator = resident + Tp of the graph's own order; lower bound) and what is live at its
peak (op index, op, module, the largest storages with the module that made them). Then one row
per step, measured on this CPU, every figure what the process holds during the step with the
resident tensors (parameters, buffers, optimizer state, the batch) included, the bases of the
headline; the bytes above the resident ones are counted by the executor's CPU allocator, each
allocation rounded up to 64 bytes:
  eager  the ordinary model(x) / loss.backward() / optimizer.step() loop on a copy of the
         model and optimizer (PyTorch's default allocator, counted in pass-through mode);
  graph  the captured step in program order with the default allocator (what the plan is
         compared with: same ops, same workspaces);
  roam   resident + the arena of the plan (reserved for the whole step) + the fallback heap's
         peak; arena and fallback are those two parts;
  vs eager, vs graph  100 * (roam / eager - 1) and 100 * (roam / graph - 1), as the headline.
Last, the measured line for the last step, what it saved in plain words, and "met" or
"not met: why" (met: no more than the eager loop and at least 95% of the planned saving).

Models: the same list as python -m roam.capture (python -m roam.capture --list-models): the
roam.zoo models (bert-base, gpt2, ...), the BERT presets bert-tiny (2 layers, hidden 128),
bert-mini (4, 256) and bert-small (4, 512), and every torchvision classification model (images
of --image-size pixels).

--check also runs the captured graph in program order on a third copy and reports, after the
last step, whether the roam model is bit-identical to it and the largest relative difference
to the eager loop.

--budget SIZE (bytes, or KiB/MiB/GiB, e.g. 2GiB): the whole step, resident tensors included,
must fit in SIZE; roam recomputes forward activations in the backward pass where needed (plan
version 2, op costs measured on this CPU at capture) so that resident + arena + the generator
states kept for recomputed random ops fit; the report says whether the measured step did. The
report then adds the recomputations per step and the measured time: median seconds of a roam
step and of an eager step and the time overhead 100 * (roam / eager - 1). A budget roam cannot
meet stops before the first step with one line naming the smallest budget roam meets (exit 3).

Exit status: 0 ok, 2 bad arguments (e.g. an unknown model: the valid names are listed; a
budget that is not a size), 3 a budget roam cannot meet.
"""

import argparse
import os
import copy
import json
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch

from roam.headline import KEY, percent_change, plan_lower_bound

MiB = float(1 << 20)

def _mib(v: Optional[int]) -> str:
    return "-" if v is None else f"{v / MiB:.3f}"


def build(name: str, batch_size: int, image_size: int, num_classes: int,
          seq_len: Optional[int], optimizer: str, seed: int):
    """``(model, optimizer, loss_fn, batch_fn)``; ``batch_fn(i)`` is the i-th batch (a
    deterministic random one)."""
    from . import zoo
    from .capture.models import (BERT_PRESETS, build_model, classification_model_names,
                                 make_optimizer, model_names)
    from .capture.errors import UnknownModelError
    from .capture.state import cross_entropy_loss
    torch.manual_seed(seed)
    if ":" in name:
        model, loss_fn, batch_fn = user_model(name, batch_size, image_size, num_classes, seed)
    elif name in BERT_PRESETS or name in zoo.MODELS:
        base = "bert-base" if name in BERT_PRESETS else name
        cfg = None
        if name in BERT_PRESETS:
            cfg = zoo.BertConfig(**BERT_PRESETS[name])
        model = zoo.build(base, cfg)
        s = seq_len or (128 if name in BERT_PRESETS else zoo.MODELS[name].seq_len)

        def batch_fn(i):
            g = torch.Generator().manual_seed(seed * 1000 + i)
            return zoo.example_batch(base, batch_size, s, generator=g, config=cfg)
        loss_fn = zoo.lm_loss
    elif name in classification_model_names():
        model = build_model(name, num_classes=num_classes)

        def batch_fn(i):
            g = torch.Generator().manual_seed(seed * 1000 + i)
            return (torch.randn(batch_size, 3, image_size, image_size, generator=g),
                    torch.randint(0, num_classes, (batch_size,), generator=g))
        loss_fn = cross_entropy_loss
    else:
        raise UnknownModelError(name, model_names())
    model.train()
    return model, make_optimizer(optimizer, model.parameters()), loss_fn, batch_fn


def user_model(spec: str, batch_size: int, image_size: int, num_classes: int, seed: int):
    """``(model, loss_fn, batch_fn)`` of ``--model package.module:Name``: ``Name`` is an
    ``nn.Module`` class built with no arguments, or a function returning a module. Its batch:
    the module (or the class) may define ``example_batch(batch_size, generator)`` returning
    ``(inputs..., target)``; otherwise images ``(batch, 3, image_size, image_size)`` and
    labels in ``[0, num_classes)``. Its loss: ``loss_fn(output, target)`` defined beside it,
    else cross-entropy of the primary output (token-level when the output has 3 dims).

    Raises:
        UnknownModelError: the module cannot be imported, has no ``Name``, or ``Name`` gives
            no ``nn.Module`` (the message says which)."""
    import importlib
    from .capture.errors import UnknownModelError
    from .capture.state import cross_entropy_loss
    modname, _, attr = spec.partition(":")
    try:
        mod = importlib.import_module(modname)
    except Exception as e:  # ImportError and whatever the module raises on import
        raise UnknownModelError(spec, [], f"cannot import {modname!r} "
                                          f"({type(e).__name__}: {e})") from None
    obj = getattr(mod, attr, None)
    if obj is None:
        raise UnknownModelError(spec, [], f"module {modname!r} has no {attr!r}")
    try:
        model = obj()
    except Exception as e:
        raise UnknownModelError(spec, [], f"{spec}() failed ({type(e).__name__}: {e})") from None
    if not isinstance(model, torch.nn.Module):
        raise UnknownModelError(spec, [], f"{spec}() returned {type(model).__name__}, not an "
                                          f"nn.Module")
    make = getattr(model, "example_batch", None) or getattr(mod, "example_batch", None)

    def batch_fn(i):
        g = torch.Generator().manual_seed(seed * 1000 + i)
        if make is not None:
            return tuple(make(batch_size, g))
        return (torch.randn(batch_size, 3, image_size, image_size, generator=g),
                torch.randint(0, num_classes, (batch_size,), generator=g))

    user_loss = getattr(mod, "loss_fn", None)

    def default_loss(out, target):
        if out.dim() == 3 and target.dim() == 2:
            return cross_entropy_loss(out.reshape(-1, out.shape[-1]), target.reshape(-1))
        return cross_entropy_loss(out, target)
    return model, (user_loss if callable(user_loss) else default_loss), batch_fn


def eager_step(model, opt, loss_fn, batch) -> torch.Tensor:
    """The ordinary training step (primary output of a tuple, as the capture does)."""
    from .capture.state import primary_output
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(primary_output(model(*batch[:-1])), batch[-1])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def measured(fn, priority: int = 100) -> Tuple[Any, int]:
    """``(fn(), peak bytes allocated during it)`` counted by a pass-through session."""
    from .executor.native import pass_through_peak
    return pass_through_peak(fn, priority=priority)


def max_rel_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    worst = 0.0
    for (_, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        d = (p.detach().double() - q.detach().double()).abs().max().item()
        s = q.detach().double().abs().max().item()
        worst = max(worst, d / s if s > 0 else d)
    return worst


def bit_identical(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for (_, p), (_, q) in zip(a.named_parameters(),
                                                          b.named_parameters()))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}")
    if not (0 < value <= 1e6):  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds up to 1e6, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m roam.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True,
                   help="model to train: a name of python -m roam.capture --list-models, or "
                        "package.module:Name, your nn.Module class (or a function returning "
                        "one; the module may define example_batch(batch_size, generator) and "
                        "loss_fn(output, target))")
    p.add_argument("--batch-size", type=_positive_int, default=1, help="samples per batch (default 1)")
    p.add_argument("--steps", type=_positive_int, default=3,
                   help="training steps measured after the planned one (default 3)")
    p.add_argument("--image-size", type=_positive_int, default=224,
                   help="image height and width in pixels, torchvision models (default 224)")
    p.add_argument("--num-classes", type=_positive_int, default=1000,
                   help="classes of a torchvision model's output (default 1000)")
    p.add_argument("--seq-len", type=_positive_int, default=None,
                   help="tokens per sample, zoo and BERT models (default: 128 for BERT, 1024 "
                        "for gpt2*)")
    p.add_argument("--optimizer", default="adam", choices=("adam", "adamw", "sgd"),
                   help="adam (default), adamw (weight decay 0.01) or sgd (lr 0.01, momentum "
                        "0.9)")
    p.add_argument("--order", default="roam",
                   choices=("auto", "roam", "program", "lescea", "lpmf", "bfs", "dfs"),
                   help="operator order of the plan, as roam plan --order (default roam)")
    p.add_argument("--layout", default="roam",
                   choices=("auto", "roam", "pytorch", "llfb", "greedy_by_size", "best_fit"),
                   help="arena layout of the plan, as roam plan --layout (default roam)")
    p.add_argument("--time-limit", type=_seconds, default=60.0,
                   help="seconds the planner may spend (default 60)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the model's initial weights and of the random batches")
    p.add_argument("--debug", action="store_true",
                   help="check every allocation against every live block (slow)")
    p.add_argument("--check", action="store_true",
                   help="also compare parameters with the captured graph in program order "
                        "(bit-identical) and with the eager loop (relative difference)")
    p.add_argument("--no-eager", action="store_true",
                   help="skip the eager loop (no eager column)")
    p.add_argument("--workspaces", default="arena", choices=("arena", "heap"),
                   help="operator workspaces: from free arena bytes when they fit (arena) or "
                        "always from the fallback heap (heap)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress messages on stderr (the report on stdout stays)")
    p.add_argument("--budget", default=None, metavar="SIZE",
                   help="memory budget of the whole step, resident included (bytes, or KiB, "
                        "MiB, GiB: 2GiB); roam recomputes activations to meet it; exit 3 with "
                        "the smallest budget roam meets when it cannot")
    p.add_argument("--cost", default=None, choices=("measured", "estimate", "none"),
                   help="op seconds that choose what to recompute: measured on this CPU at "
                        "capture (default with --budget), estimate (roofline model, "
                        "deterministic) or none")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write the per-step reports to FILE (JSON)")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        parser.error(f"--json {args.json}: its folder does not exist")
    from .executor import BudgetInfeasible, optimize, parse_size
    from .capture.errors import CaptureError, UnknownModelError

    def say(msg):
        if args.quiet:
            return
        print(f"[roam.run] {msg}", file=sys.stderr, flush=True)

    try:
        model, opt, loss_fn, batch_fn = build(args.model, args.batch_size, args.image_size,
                                              args.num_classes, args.seq_len, args.optimizer,
                                              args.seed)
    except UnknownModelError as e:
        print(f"roam.run: {e}", file=sys.stderr)
        return 2
    budget = None
    if args.budget is not None:
        try:
            budget = parse_size(args.budget)
        except ValueError as e:
            print(f"roam.run: --budget: {e}", file=sys.stderr)
            return 2
    # steady state: one ordinary warm-up step creates the optimizer state
    try:
        eager_step(model, opt, loss_fn, batch_fn(0))
    except Exception as e:  # the user's model on the example batch: bad input, one line
        hint = ""
        if ":" in args.model:
            hint = (f"; without example_batch(batch_size, generator) in its module the batch is "
                    f"images ({args.batch_size}, 3, {args.image_size}, {args.image_size}) and "
                    f"labels in [0, {args.num_classes}) (--image-size, --num-classes), the "
                    f"loss cross-entropy unless the module defines loss_fn(output, target)")
        print(f"roam.run: --model {args.model}: the ordinary warm-up step on the example batch "
              f"failed ({type(e).__name__}: {e}){hint}", file=sys.stderr)
        return 2
    models = {"eager": copy.deepcopy((model, opt))} if not args.no_eager else {}
    if args.check:
        models["graph"] = copy.deepcopy((model, opt))
    t0 = time.perf_counter()
    try:
        step = optimize(model, opt, loss_fn, batch_fn(1), order=args.order, layout=args.layout,
                        time_limit_seconds=args.time_limit, debug=args.debug,
                        workspaces=args.workspaces, progress=say, budget=budget,
                        cost=args.cost)
    except BudgetInfeasible as e:
        print(str(e), file=sys.stderr)  # one line, before any step: the smallest budget met
        return 3
    except CaptureError as e:  # what the model's step does that a graph cannot hold
        print(f"roam.run: --model {args.model}: {e}", file=sys.stderr)
        return 2
    plan = step.plan
    st = plan["stats"]
    say(f"captured {len(step.graph['ops'])} ops; plan order {plan['method']['order']}, layout "
        f"{plan['method']['layout']}: Tp {st['theoretical_peak_bytes'] / MiB:.2f} MiB, arena "
        f"{st['arena_bytes'] / MiB:.2f} MiB, lower bound {plan_lower_bound(plan) / MiB:.2f} "
        f"MiB; Tp(program order) {step.tp_program / MiB:.2f} MiB; resident "
        f"{st['resident_bytes'] / MiB:.2f} MiB ({time.perf_counter() - t0:.1f} s)")
    res = st["resident_bytes"]
    print(f"{args.model} batch {args.batch_size}, {args.optimizer}: plan order "
          f"{plan['method']['order']}, layout {plan['method']['layout']}; resident "
          f"{res / MiB:.2f} MiB (parameters, buffers, optimizer state, batch)")
    # the plan's headline and what is live at its peak: the first screen of roam plan
    # (or, when the plan was refused or is off, that it is not in force: RoamStep.summary)
    for line in step.summary():
        print(line)
    # the table: every figure is what the process holds during the step, resident included
    # (the bases of the headline); vs eager / vs graph are the headline's percentage
    print(f"measured on this CPU, MiB held during the step (resident {res / MiB:.2f} MiB "
          f"included); roam = resident + arena + fallback heap peak:")
    print(f"{'step':>4} {'loss eager':>11} {'loss roam':>11} {'eager':>9} {'graph':>9} "
          f"{'roam':>9} {'arena':>8} {'fallback':>9} {'vs eager':>9} {'vs graph':>9}  mode")
    rows = []
    eager_seconds: List[float] = []
    roam_seconds: List[float] = []
    rng_seed = args.seed + 12345
    for i in range(args.steps):
        batch = batch_fn(2 + i)
        le, eager_peak = None, None
        if "eager" in models:
            m, o = models["eager"]
            torch.manual_seed(rng_seed + i)
            t_e = time.perf_counter()
            le, eager_peak = measured(lambda: eager_step(m, o, loss_fn, batch))
            eager_seconds.append(time.perf_counter() - t_e)
        if "graph" in models:
            m, o = models["graph"]
            torch.manual_seed(rng_seed + i)
            step.reference_step(*batch, model=m, optimizer=o)
        torch.manual_seed(rng_seed + i)
        t_r = time.perf_counter()
        loss = step(*batch)
        roam_seconds.append(time.perf_counter() - t_r)
        r = step.last_report
        gp = r.eager_peak_bytes
        total = res + r.total_peak_bytes
        vs_e = percent_change(total, res + eager_peak) if eager_peak is not None else "-"
        vs_g = percent_change(total, res + gp) if gp is not None else "-"
        print(f"{i + 1:>4} {('%.6f' % float(le)) if le is not None else '-':>11} "
              f"{float(loss):>11.6f} {_mib(None if eager_peak is None else res + eager_peak):>9} "
              f"{_mib(None if gp is None else res + gp):>9} {_mib(total):>9} "
              f"{r.arena_used_bytes / MiB:>8.3f} {r.fallback_peak_bytes / MiB:>9.3f} "
              f"{vs_e:>9} {vs_g:>9}  {r.mode}"
              + (f" ({r.mismatch or r.reason})" if (r.mismatch or r.reason) else ""),
              flush=True)
        d = r.as_dict()
        d["eager_loop_peak_bytes"] = eager_peak
        d["eager_loop_loss"] = float(le) if le is not None else None
        rows.append(d)
    if step.last_report is not None:
        r = step.last_report
        total = res + r.total_peak_bytes
        # measured, on the table's bases: the last step against the ordinary eager loop and
        # against the same graph run in program order with PyTorch's allocator
        line = f"measured (last step, this CPU run): peak {total / MiB:.2f} MiB"
        eager_peak = rows[-1]["eager_loop_peak_bytes"]
        if eager_peak is not None:
            line += (f"; the ordinary eager loop {(res + eager_peak) / MiB:.2f} MiB "
                     f"({percent_change(total, res + eager_peak)})")
        if r.eager_peak_bytes is not None:
            line += (f"; the same graph in program order on PyTorch's CPU allocator "
                     f"{(res + r.eager_peak_bytes) / MiB:.2f} MiB "
                     f"({percent_change(total, res + r.eager_peak_bytes)})")
        print(line)
        print(r.describe())  # what the last step saved, in plain words
        why = r.why_not_met()
        if eager_peak is not None and r.total_peak_bytes > eager_peak:
            extra = (f"the step held {(r.total_peak_bytes - eager_peak) / MiB:.2f} MiB more than "
                     f"the ordinary eager loop")
            why = f"{why}; {extra}" if why else extra
        print(("not met: " + why) if why else
              "met: the step held no more than eager and realised at least 95% of the planned "
              "saving")
        if budget is not None:
            # the budget's figures: planned and measured peak, recomputations, measured time
            held = res + r.total_peak_bytes
            print(f"budget {budget / MiB:.2f} MiB: planned peak "
                  f"{(res + step.planned_arena_bytes) / MiB:.2f} MiB, measured "
                  f"{held / MiB:.2f} MiB ({'within' if held <= budget else 'ABOVE'} the "
                  f"budget); {r.recomputations} recomputations per step")
        if roam_seconds:
            med_r = statistics.median(roam_seconds)
            line = f"time: median roam step {med_r:.3f} s"
            if eager_seconds:
                med_e = statistics.median(eager_seconds)
                line += (f", eager step {med_e:.3f} s, time overhead "
                         f"{100.0 * (med_r / med_e - 1):+.1f}% (over {len(roam_seconds)} steps)")
            print(line)
        if not args.quiet:
            print("  " + KEY)
    summary: Dict[str, Any] = {"model": args.model, "batch_size": args.batch_size,
                               "plan_method": plan["method"], "plan_stats": st,
                               "tp_program_order_bytes": step.tp_program,
                               "budget_bytes": budget, "plan_order": plan["order"],
                               "roam_step_seconds": roam_seconds,
                               "eager_step_seconds": eager_seconds,
                               "at_peak": {k: v for k, v in (step.at_peak or {}).items()
                                           if k != "per_step"} or None, "steps": rows}
    if args.check:
        same = bit_identical(model, models["graph"][0])
        rel = max_rel_diff(model, models["eager"][0]) if "eager" in models else None
        summary["bit_identical_to_graph"] = same
        summary["max_rel_diff_to_eager"] = rel
        print(f"after {args.steps} steps: parameters bit-identical to the captured graph in "
              f"program order: {'yes' if same else 'NO'}; largest relative difference to the "
              f"eager loop: {rel:.3g}" if rel is not None else "")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
