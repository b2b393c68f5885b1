"""Bad input to the Python API gets one clear exception naming the argument or the cause,
before anything runs (and never a crash of the process): the cases found by trying to break
roam.capture and roam.optimize."""

import copy
import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import roam
from roam.capture import CaptureError
from roam.executor.native import native


def _mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return m, torch.optim.SGD(m.parameters(), lr=0.1), (torch.randn(2, 8), torch.tensor([0, 1]))


def test_planner_options_the_cli_refuses_are_refused_not_a_crash():
    m, opt, batch = _mlp()
    for kw, what in [({"alignment": 0}, "alignment"), ({"alignment": 48}, "alignment"),
                     ({"time_limit_seconds": 0}, "time_limit_seconds"),
                     ({"time_limit_seconds": -1.0}, "time_limit_seconds"),
                     ({"threads": 0}, "threads"), ({"measure_eager": "zz"}, "measure_eager"),
                     ({"workspaces": "gpu"}, "workspaces")]:
        with pytest.raises(ValueError, match=f"roam.optimize: {what}"):
            roam.optimize(m, opt, F.cross_entropy, batch, **kw)
    with pytest.raises(TypeError, match="roam.optimize: plan: int"):
        roam.optimize(m, opt, F.cross_entropy, batch, plan=5)
    # the extension itself: alignment 0 used to divide by zero in the process
    g = roam.capture(m, opt, F.cross_entropy, batch, cost="none").graph
    with pytest.raises(ValueError, match="alignment 0: must be a power of two"):
        native().plan(json.dumps(g), "auto", "auto", 0, 1, 10.0)
    with pytest.raises(ValueError, match="threads 0"):
        native().plan(json.dumps(g), "auto", "auto", 64, 0, 10.0)


def test_arguments_of_the_wrong_kind_name_the_argument():
    m, opt, (x, y) = _mlp()
    with pytest.raises(TypeError, match="optimizer: str is not a torch.optim.Optimizer"):
        roam.capture(m, "adam", F.cross_entropy, (x, y))
    with pytest.raises(TypeError, match="loss_fn: int is not callable"):
        roam.capture(m, opt, 5, (x, y))
    with pytest.raises(TypeError, match="example_inputs: Tensor given; a tuple"):
        roam.capture(m, opt, F.cross_entropy, x)
    with pytest.raises(TypeError, match="model_or_step: int is neither"):
        roam.capture(5, (x, y))
    g = roam.capture(m, opt, F.cross_entropy, (x, y), cost="none")
    with pytest.raises(FileNotFoundError, match="the folder .*/no-such-folder does not exist"):
        g.save("/tmp/no-such-folder/x.json")


class Counting(nn.Module):
    """A step counter kept in a Python attribute: the graph would freeze its value."""

    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 4)
        self.n = 1

    def forward(self, x):
        self.n += 1
        return self.l(x) * self.n


def test_python_state_the_step_changes_is_refused_and_left_as_it_was():
    torch.manual_seed(0)
    m = Counting()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    batch = (torch.randn(2, 8), torch.tensor([0, 1]))
    with pytest.raises(CaptureError, match=r"Python attribute 'n' of module Counting \(1 -> 2\)"):
        roam.capture(m, opt, F.cross_entropy, batch)
    assert m.n == 1  # the user's model as it was


def test_values_read_by_tolist_are_refused_like_item():
    torch.manual_seed(0)
    m = nn.Linear(8, 4)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    x, y = torch.randn(2, 8), torch.tensor([0, 1])

    def step(x, y):
        opt.zero_grad()
        out = m(x)
        scale = 2.0 if out.sum().tolist() > 0 else 1.0  # Python steered by the values
        loss = F.cross_entropy(out * scale, y)
        loss.backward()
        opt.step()
        return loss
    with pytest.raises(CaptureError, match=r"Tensor\.tolist\(\) in the forward phase"):
        roam.capture(step, (x, y))


def test_gradients_that_cross_steps_are_refused():
    m, opt, (x, y) = _mlp()

    def no_zero_grad(x, y):  # eager: each call adds to the .grad of the call before
        F.cross_entropy(m(x), y).backward()
        opt.step()

    def no_step(x, y):  # leaves .grad for after the step
        opt.zero_grad()
        F.cross_entropy(m(x), y).backward()

    def zero_at_the_end(x, y):  # a clean start in steady state: accepted
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss
    with pytest.raises(CaptureError, match="adds its gradients to those .grad held before"):
        roam.capture(no_zero_grad, (x, y))
    with pytest.raises(CaptureError, match="leaves gradients in .grad"):
        roam.capture(no_step, (x, y))
    m2, opt2 = copy.deepcopy((m, opt))
    step = roam.optimize(zero_at_the_end, (x, y))
    for _ in range(2):
        loss = step(x, y)
        opt2.zero_grad()
        ref = F.cross_entropy(m2(x), y)
        ref.backward()
        opt2.step()
        assert torch.equal(loss, ref.detach())
    assert all(torch.equal(p, q) for p, q in zip(m.parameters(), m2.parameters()))


def test_reduce_lr_on_plateau_is_refused_in_the_step():
    m, opt, (x, y) = _mlp()
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        sched.step(loss)
        return loss
    with pytest.raises(CaptureError, match="ReduceLROnPlateau: its step\\(metrics\\)"):
        roam.capture(step, (x, y))
