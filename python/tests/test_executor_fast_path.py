"""The executor's fast paths: the interpreter's generated call functions (Program) and the
incremental refresh of the optimizer's constants (StepScalars).

Both only change how the same values reach the same ATen kernels; the tests compare against
an independent route: fx's own generated code (``GraphModule.forward``) and a fresh
StepScalars that rewrites the captured graph in one hop, bit for bit.
"""

import copy
import os
import struct
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

from roam.executor import available  # noqa: E402

pytestmark = pytest.mark.skipif(not available(), reason="roam._native is not built")

from roam.executor import optimize  # noqa: E402
from roam.executor.program import _call_expr, _storage_ptr  # noqa: E402
from roam.executor.scalars import PHASE_KEY, StepScalars  # noqa: E402


def _model_and_groups(opt):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    groups = [{"params": list(model[0].parameters()), "lr": 0.01},
              {"params": list(model[2].parameters()), "lr": 0.03}]
    if opt == "adam":
        o = torch.optim.Adam(groups, lr=0.01)
    else:
        o = torch.optim.SGD(groups, lr=0.01, momentum=0.9)
    return model, o


def _batch(i):
    g = torch.Generator().manual_seed(50 + i)
    return torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)


def _eager(model, o, b):
    o.zero_grad(set_to_none=True)
    F.cross_entropy(model(b[0]), b[1]).backward()
    o.step()
    o.zero_grad(set_to_none=True)


def _bits(args):
    """Node arguments with every float as its 64 bits (0.0 and -0.0 differ)."""
    if type(args) is float:
        return ("f", struct.pack("d", args))
    if isinstance(args, (tuple, list)):
        return (type(args).__name__, tuple(_bits(a) for a in args))
    if isinstance(args, dict):
        return ("d", tuple((k, _bits(v)) for k, v in args.items()))
    if isinstance(args, torch.fx.Node):
        return ("n", args.name)
    return ("v", repr(args))


def _update_args(gm):
    return {n.name: _bits((n.args, n.kwargs)) for n in gm.graph.nodes
            if n.op == "call_function" and n.meta.get(PHASE_KEY) == "update"}


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_incremental_refresh_equals_a_fresh_one_hop_rewrite(opt):
    """After each step (step count + 1), an LR change of one group and an LR change back to
    the captured value, the graph the step refreshed hop by hop holds exactly the constants
    that a fresh StepScalars writes into the captured graph in one hop."""
    model, o = _model_and_groups(opt)
    _eager(model, o, _batch(0))
    step = optimize(model, o, F.cross_entropy, _batch(1))
    cap = step.captured
    pristine = copy.deepcopy(cap.traced.gm)
    captured_state = copy.deepcopy(cap.state.state_values)  # the live state moves on
    assert step.scalars.position is not None  # single-tensor optimizers: positional mode
    captured_lr = o.param_groups[1]["lr"]
    rewritten = []
    for i in range(5):
        if i == 2:
            o.param_groups[1]["lr"] = captured_lr * 0.5
        if i == 3:
            o.param_groups[1]["lr"] = captured_lr  # back to the captured hyper-parameters
        step(*_batch(2 + i))
        assert step.last_report.mode == "planned"
        _flat, params, reason = step._bind(_batch(2 + i))
        assert reason is None
        assert step.scalars.refresh(params) is None
        fresh_gm = copy.deepcopy(pristine)
        st = cap.state
        now_lr = o.param_groups[1]["lr"]
        o.param_groups[1]["lr"] = captured_lr  # the fresh one's base: the captured situation
        fresh = StepScalars(fresh_gm, o, st.group_index, st.state_index, captured_state,
                            st.params)
        o.param_groups[1]["lr"] = now_lr
        assert fresh.refresh(params) is None
        assert _update_args(cap.traced.gm) == _update_args(fresh_gm), i
        assert step.scalars.substitutions == fresh.substitutions
        rewritten.append(step.scalars.substitutions)
    assert any(rewritten)  # the constants did change
    if opt == "sgd":
        # SGD's constants depend on lr only: a step at the captured lr holds the captured graph
        assert rewritten[3] == 0 and rewritten[4] == 0 and rewritten[2] > 0


def test_call_expression_by_hand():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.placeholder("y")
    n = g.call_function(torch.ops.aten.add.Tensor, (x, y), {"alpha": 0.5})
    c = g.call_function(torch.ops.aten.cat.default, ([x, n], 1))
    slot = {x: 0, y: 1, n: 2, c: 3}
    assert _call_expr(n.args, n.kwargs, slot) == ("V[0], V[1], alpha=C[0]", (0.5,))
    expr, consts = _call_expr(c.args, c.kwargs, slot)
    assert expr == "[V[0], V[2], ], C[0]" and consts == (1,)
    # a constant list (no node inside) is passed as it is
    v = g.call_function(torch.ops.aten.view.default, (c, [2, -1]))
    expr, consts = _call_expr(v.args, v.kwargs, {**slot, v: 4})
    assert expr == "V[3], C[0]" and consts[0] is v.args[1]


def test_compiled_program_equals_fx_generated_code():
    """Program.run (generated calls, slots) against GraphModule.forward (fx's own code) on
    the same captured step and state: loss and every updated tensor bit for bit."""
    model, o = _model_and_groups("adam")
    _eager(model, o, _batch(0))
    step = optimize(model, o, F.cross_entropy, _batch(1))
    flat, params, reason = step._bind(_batch(2))
    assert reason is None and step.scalars.refresh(params) is None
    a = [t.clone() for t in flat]
    b = [t.clone() for t in flat]
    out = step.program.run(a)
    import torch.utils._pytree as pytree
    ref = step.scalars.compiled_module()(*pytree.tree_unflatten(b, step._treespec))
    assert torch.equal(pytree.tree_flatten(out)[0][0], pytree.tree_flatten(ref)[0][0])
    assert all(torch.equal(p, q) for p, q in zip(a, b))


def test_storage_pointer_of_a_view():
    base = torch.arange(10.0)
    view = base[3:]
    assert _storage_ptr(view) == base.storage().data_ptr() == _storage_ptr(base)
    assert view.data_ptr() == base.data_ptr() + 3 * 4


OPTIMIZERS = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True, weight_decay=0.01),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                              weight_decay=1e-4),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.9, centered=True),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.01),
    "adamax": lambda p: torch.optim.Adamax(p),
    "nadam": lambda p: torch.optim.NAdam(p),
    "radam": lambda p: torch.optim.RAdam(p),
    "adadelta": lambda p: torch.optim.Adadelta(p),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_recorded_dummy_trace_equals_make_fx(name):
    """The dispatch-mode recording of the dummy step (what refresh uses first) has make_fx's
    operators, integers and floats, bit for bit, after two real steps of the optimizer."""
    from roam.executor.scalars import dummy_trace
    torch.manual_seed(1)
    p = nn.Parameter(torch.randn(4, 3))
    o = OPTIMIZERS[name]([p])
    for _ in range(2):
        p.grad = torch.randn(4, 3)
        o.step()
    st = o.state[p]
    a = dummy_trace(o, o.param_groups[0], st, p)
    b = dummy_trace(o, o.param_groups[0], st, p, record=True)
    assert a.targets == b.targets and len(a.targets) >= 4
    assert a.ints == b.ints
    assert _bits(a.node_floats) == _bits(b.node_floats)
    assert o.state[p] is st and o.param_groups[0]["params"] == [p]  # restored


def test_binding_reused_only_while_storages_are_unchanged():
    """_bind reuses the previous step's detached views of the model's and the optimizer's
    tensors (the same objects), detaches the new inputs, and binds a tensor again when its
    storage changed (``p.data = ...``); a changed shape is still refused with its message."""
    model, o = _model_and_groups("adam")
    _eager(model, o, _batch(0))
    step = optimize(model, o, F.cross_entropy, _batch(1))
    b2, b3 = _batch(2), _batch(3)
    first, _, reason = step._bind(b2)
    assert reason is None
    second, _, reason = step._bind(b3)
    assert reason is None
    n_own = len(first) - 2
    assert all(x is y for x, y in zip(first[:n_own], second[:n_own]))
    assert second[n_own].data_ptr() == b3[0].data_ptr()
    assert second[n_own + 1].data_ptr() == b3[1].data_ptr()
    w = model[0].weight
    w.data = w.data.clone() + 1.0          # same tensor object, new storage
    third, _, reason = step._bind(b3)
    assert reason is None
    i = next(i for i, t in enumerate(first) if t.data_ptr() != third[i].data_ptr())
    assert third[i].data_ptr() == w.data_ptr() and torch.equal(third[i], w.detach())
    assert sum(1 for x, y in zip(second[:n_own], third[:n_own]) if x is not y) == 1
    w.data = torch.zeros(8, 5)             # another shape: refused as before
    _, _, reason = step._bind(b3)
    assert reason is not None and "shape (8, 5) given, (8, 6) captured" in reason


def test_one_session_call_per_op_keeps_the_session_figures():
    """Program.run with end_begin_op (one call per op) against the same run with separate
    begin_op / end_op calls (observe forces them): same loss bits, same updated tensors,
    same session figures (arena / fallback allocations, peaks, no mismatch)."""
    from roam.executor.native import native
    model, o = _model_and_groups("adam")
    _eager(model, o, _batch(0))
    step = optimize(model, o, F.cross_entropy, _batch(1))
    flat, params, reason = step._bind(_batch(2))
    assert reason is None and step.scalars.refresh(params) is None
    results = []
    for observe in (None, lambda k, p: None):
        args = [t.clone() for t in flat]
        s = native().Session()
        s.configure(step.program.arena_bytes, step.alignment,
                    step.program.session_schedule(step.ranks),
                    step.program.session_workspaces())
        s.set_workspaces_in_arena(True)
        s.debug = True
        s.install(step.priority)
        try:
            out = step.program.run(args, s, observe=observe)
        finally:
            s.uninstall()
        loss = _first(out).clone()
        del out
        results.append((loss, args, s.stats()))
    (l1, a1, s1), (l2, a2, s2) = results
    assert torch.equal(l1, l2) and all(torch.equal(x, y) for x, y in zip(a1, a2))
    assert s1["mode"] == s2["mode"] == "planned" and s1["mismatches"] == 0
    assert s1["debug_violations"] == 0 and s1["debug_checks"] > 0
    for key in ("arena_allocs", "fallback_allocs", "fallback_peak", "total_peak",
                "arena_live_peak", "debug_checks", "outside_ops", "rearmed"):
        assert s1[key] == s2[key], key


def _first(out):
    import torch.utils._pytree as pytree
    return next(t for t in pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor))
