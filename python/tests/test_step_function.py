"""The user's own step as a function (roam.capture(train_step, inputs), roam.optimize(train_step,
inputs)): gradient clipping, several losses, gradient accumulation, an LR scheduler, outputs as
the function returns them; what cannot be captured is refused before the first step; a step that
raises part-way leaves the model and the optimizer as they were."""

import copy
import signal

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import roam
from roam.capture import CaptureError


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.f = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 8, 3), nn.ReLU(),
                               nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        return self.f(x)


def _batches(n, batch=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, 12, 12, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(n)]


def _trainer(seed=1):
    """(model, SGD momentum, StepLR, step function): clipping inside the step, a dict out."""
    torch.manual_seed(seed)
    m = SmallCNN()
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)

    def train_step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
        opt.step()
        sched.step()
        return {"loss": loss, "norm": norm}
    return m, opt, sched, train_step


def _same_params(a, b):
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_step_with_clipping_and_scheduler_is_bit_identical_to_the_eager_loop():
    m, opt, sched, step_fn = _trainer()
    m2, opt2, sched2, step_fn2 = _trainer()
    batches = _batches(5)
    step = roam.optimize(step_fn, batches[0])
    assert step.schedulers == [sched] and step.scheduler_calls == [0]
    for k, (x, y) in enumerate(batches):
        out = step(x, y)
        ref = step_fn2(x, y)
        assert sorted(out) == ["loss", "norm"]
        assert torch.equal(out["loss"], ref["loss"].detach())
        assert torch.equal(out["norm"], ref["norm"])
        assert _same_params(m, m2), k
        # the scheduler ran once per step (halving lr), exactly as in the eager loop
        assert opt.param_groups[0]["lr"] == opt2.param_groups[0]["lr"] == 0.1 * 0.5 ** (k + 1)
    # the first step (no momentum buffers yet) ran eagerly; the others from the graph
    modes = [r.mode for r in step.reports]
    assert modes[0] == "eager" and all(md in ("planned", "program") for md in modes[1:])
    for p, q in zip(m.parameters(), m2.parameters()):
        assert torch.equal(opt.state[p]["momentum_buffer"], opt2.state[q]["momentum_buffer"])


def test_a_scheduler_made_after_the_warm_up_steps_from_the_graph_without_warning():
    """The graph does the optimizer's update, so optimizer.step() is not called: the first
    scheduler step after it must not warn that it ran before optimizer.step() (PyTorch skips
    nothing here; the learning rates stay those of the eager loop)."""
    import warnings
    runs = []
    for _ in range(2):
        torch.manual_seed(4)
        m = SmallCNN()
        opt = torch.optim.Adam(m.parameters(), lr=0.01)
        x, y = _batches(1)[0]
        F.cross_entropy(m(x), y).backward()
        opt.step()  # the optimizer's state exists: every roam step below is from the graph
        opt.zero_grad()
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, 0.5)

        def train_step(x, y, m=m, opt=opt, sched=sched):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            sched.step()
            return loss
        runs.append((m, opt, train_step))
    (m, opt, fn), (m2, opt2, fn2) = runs
    step = roam.optimize(fn, _batches(1)[0])
    for k, (x, y) in enumerate(_batches(3, seed=5)):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step(x, y)
        assert step.last_report.mode != "eager"
        assert not [w for w in caught if "lr_scheduler" in str(w.message)], caught
        fn2(x, y)
        assert opt.param_groups[0]["lr"] == opt2.param_groups[0]["lr"] == 0.01 * 0.5 ** (k + 1)
        assert _same_params(m, m2)


def test_clipping_is_in_the_graph_and_its_gradients_may_be_written_in_place():
    m, opt, sched, step_fn = _trainer()
    g = roam.capture(step_fn, _batches(1)[0], cost="none")
    norms = [op for op in g.ops if op["target"] == "aten._foreach_norm.Scalar"]
    assert len(norms) == 1 and norms[0]["phase"] == "update"
    (mul,) = [op for op in g.ops if op["target"] == "aten._foreach_mul.Tensor"]
    # clip_grad_norm_ multiplies the 6 gradients in place: 6 permissions, all used in
    # program order (each gradient is read last by the clip)
    assert mul["inplace"] == [[i, i] for i in range(6)] and mul["phase"] == "update"
    used = roam.capture.inplace_in_order(g.graph)
    assert all(o in used for o in mul["outputs"])
    # the scheduler is not in the graph: the capture recorded its one call
    assert g.traced.scheduler_calls == [0]
    assert opt.param_groups[0]["lr"] == 0.1  # the capture ran nothing of the real scheduler


def test_gradient_accumulation_and_two_losses():
    def make():
        torch.manual_seed(2)
        m = SmallCNN()
        opt = torch.optim.Adam(m.parameters())

        def step(xs, ys):
            opt.zero_grad()
            total = 0
            for x, y in zip(xs, ys):
                out = m(x)
                loss = F.cross_entropy(out, y) + 0.1 * out.pow(2).mean()
                (loss / len(xs)).backward()
                total = total + loss.detach()
            opt.step()
            return total
        return m, opt, step
    m, opt, step_fn = make()
    m2, opt2, step_fn2 = make()
    data = _batches(6, batch=2)
    micro = [([data[i][0], data[i + 1][0]], [data[i][1], data[i + 1][1]]) for i in (0, 2, 4)]
    step = roam.optimize(step_fn, micro[0])
    g = step.captured.graph
    # two forward passes, two backward passes, one update: phases as the function ran them
    phases = [op["phase"] for op in g["ops"]]
    runs = [p for i, p in enumerate(phases) if i == 0 or p != phases[i - 1]]
    assert runs[:4] == ["forward", "backward", "forward", "backward"] and runs[-1] == "update"
    assert len(g["meta"]["capture"]["losses"]) == 2
    # the second backward accumulates into .grad: add_ -> a functional add with a permission
    assert any(op["target"] == "aten.add.Tensor" and op["phase"] == "backward" and op.get("inplace")
               for op in g["ops"])
    for xs, ys in micro:
        out = step(xs, ys)
        ref = step_fn2(xs, ys)
        assert torch.equal(out, ref)
        assert _same_params(m, m2)


def test_what_cannot_be_captured_is_refused_before_the_first_step():
    torch.manual_seed(0)
    m = SmallCNN()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = _batches(1)[0]

    def steers(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        if loss > 1.0:  # bool() of a tensor: the Python code depends on the value
            loss = loss * 2
        loss.backward()
        opt.step()
        return loss

    with pytest.raises(CaptureError, match=r"Tensor\.item\(\).*forward phase"):
        roam.optimize(steers, (x, y))

    def logs(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    with pytest.raises(CaptureError, match=r"Tensor\.item\(\).* after optimizer\.step\(\)"):
        roam.capture(logs, (x, y))

    def masked(x, y):
        opt.zero_grad()
        out = m(x)
        loss = F.cross_entropy(out[y > 4], y[y > 4])  # as many rows as labels above 4
        loss.backward()
        opt.step()
        return loss

    with pytest.raises(CaptureError, match="depends on tensor values"):
        roam.capture(masked, (x, y))
    lbfgs = torch.optim.LBFGS(m.parameters())
    with pytest.raises(CaptureError, match="LBFGS.*closure"):
        roam.capture(m, lbfgs, F.cross_entropy, (x, y))
    with pytest.raises(CaptureError, match="no nn.Module"):
        roam.capture(lambda x: x * 2, (x,))
    # nothing of the model or the optimizer was touched by any of these
    torch.manual_seed(0)
    assert _same_params(m, SmallCNN()) and not opt.state


def test_model_optimizer_and_schedulers_found_in_a_bound_method():
    class Trainer:
        def __init__(self):
            torch.manual_seed(4)
            self.model = SmallCNN()
            self.opt = torch.optim.AdamW(self.model.parameters(), weight_decay=0.1)
            self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda e: 1.0 / (e + 1))

        def step(self, x, y):
            self.opt.zero_grad()
            loss = F.cross_entropy(self.model(x), y)
            loss.backward()
            self.opt.step()
            self.sched.step()
            return loss

    t = Trainer()
    g = roam.capture(t.step, _batches(1)[0], cost="none")
    assert g.state.model is t.model and g.state.optimizer is t.opt
    assert g.state.schedulers == [t.sched] and g.traced.scheduler_calls == [0]
    assert g.meta["optimizer"] == "AdamW"


def _failing_step_setup():
    torch.manual_seed(5)
    m = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.Adam(m.parameters())
    g = torch.Generator().manual_seed(6)
    batch = (torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g))
    m.train()
    opt.zero_grad()
    F.cross_entropy(m(batch[0]), batch[1]).backward()
    opt.step()
    return m, opt, batch


def _snapshot(m, opt):
    return ([t.detach().clone() for t in list(m.parameters()) + list(m.buffers())],
            [v.clone() for st in opt.state.values() for v in st.values()])


def _equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a[0] + a[1], b[0] + b[1]))


def test_a_step_that_raises_in_the_forward_changes_nothing():
    """Labels out of range raise in the loss (forward): every write to a resident tensor
    (the update, the BatchNorm write-backs) follows the loss, so nothing was written."""
    m, opt, batch = _failing_step_setup()
    step = roam.optimize(m, opt, F.cross_entropy, batch)
    step(*batch)  # a good step
    before = _snapshot(m, opt)
    bad = (batch[0], torch.full((8,), 7))
    with pytest.raises((IndexError, RuntimeError)):
        step(*bad)
    assert _equal(before, _snapshot(m, opt))
    step(*batch)  # and the next step runs
    assert not _equal(before, _snapshot(m, opt))


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_interrupt_leaves_the_step_whole_or_undone(where):
    """Ctrl-C before the step's first write to a resident tensor: KeyboardInterrupt at once,
    nothing written. After it: the step finishes, then KeyboardInterrupt; the model and the
    optimizer hold the whole step's result (the eager loop's, bit for bit)."""
    m, opt, batch = _failing_step_setup()
    m2, opt2 = copy.deepcopy((m, opt))
    step = roam.optimize(m, opt, F.cross_entropy, batch)
    step(*batch)
    for _ in range(2):  # the eager loop's two steps: the one above and the interrupted one
        opt2.zero_grad()
        F.cross_entropy(m2(batch[0]), batch[1]).backward()
        opt2.step()
    before = _snapshot(m, opt)
    prog = step.program if step.program_order_reason is None else step.eager_program
    first = step._first_write if prog is step.program else None
    assert first is not None or prog is step.eager_program
    k_write = first if first is not None else next(
        k for k, st in enumerate(prog.steps) if st.op_id in {
            o for o, ts in step.captured.op_writes.items() if ts})
    k = 0 if where == "before" else k_write + 1
    calls = []
    original = prog.run

    def run(flat, session=None, observe=None, **kw):
        def obs(i, ptrs):
            calls.append(i)
            if i == k:
                signal.raise_signal(signal.SIGINT)
        return original(flat, session, observe=obs, **kw)
    prog.run = run
    with pytest.raises(KeyboardInterrupt):
        step(*batch)
    prog.run = original
    if where == "before":
        assert calls == [0] and _equal(before, _snapshot(m, opt))
    else:
        assert calls == list(range(len(prog.steps)))  # the step ran to its end
        assert _same_params(m, m2)
        assert all(torch.equal(a, b) for a, b in zip(m.buffers(), m2.buffers()))
