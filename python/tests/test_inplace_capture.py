"""A functional graph whose program-order Tp is the eager peak because of its `inplace`
permissions (GRAPH_FORMAT.md): counted by hand, measured, and recounted without them."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import roam
from roam.capture import inplace_in_order, program_order_peak


def test_foreach_adam_denominators_written_in_place_give_the_eager_peak():
    """torch.optim.Adam(foreach=True) computes each parameter's denominator as
    ``d = _foreach_sqrt(exp_avg_sq); _foreach_div_(d, bias); _foreach_add_(d, eps)``: two
    in-place updates of a list of parameter-sized intermediates. The functional graph has
    ``_foreach_div`` and ``_foreach_add`` with one permission per parameter. Program order
    with them holds what eager PyTorch holds (the capture measured it: the eager peak equals
    Tp, to the byte), and its peak is in the backward. Without them ``_foreach_div`` holds its
    input list and its output list at once, 2 x 4 bytes x every parameter, beside its
    measured 128-byte workspace and a 4-byte scalar (64 at this alignment): the peak."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256))
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    x, y = torch.randn(2, 256), torch.randint(0, 256, (2,))
    g = roam.capture(model, opt, F.cross_entropy, (x, y), cost="none")
    graph = g.graph
    adds = [op for op in graph["ops"] if op["target"] == "aten._foreach_add.Scalar"]
    divs = [op for op in graph["ops"] if op["target"] == "aten._foreach_div.ScalarList"]
    assert len(adds) == 1 and len(divs) == 1
    assert adds[0]["inplace"] == [[i, i] for i in range(4)]
    assert divs[0]["inplace"] == [[i, i] for i in range(4)]
    used = inplace_in_order(graph)
    assert all(o in used for o in adds[0]["outputs"] + divs[0]["outputs"])
    tp = program_order_peak(graph, 64)
    assert g.eager_peak == tp  # the capture's check, to the byte
    from roam.headline import live_at_peak
    order = [op["id"] for op in graph["ops"]]
    assert live_at_peak(graph, order, 64, used)["index"] < next(
        k for k, op in enumerate(graph["ops"]) if op["phase"] == "update")
    # without the permissions (every size here a multiple of 64 bytes)
    assert program_order_peak(graph, 64, inplace=False) == 2 * 4 * n_params + 128 + 64
    assert live_at_peak(graph, order, 64)["op"] == divs[0]["id"]
