"""Shared fixtures for the roam Python tests (run: bash scripts/test, or .venv/bin/python -m pytest python/tests -q)."""

import os
import sys

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO_ROOT = os.path.dirname(PYTHON_DIR)
if PYTHON_DIR not in sys.path:
    sys.path.insert(0, PYTHON_DIR)

import torch  # noqa: E402
import torch.fx  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

from roam.capture import capture_model, capture_torchvision  # noqa: E402


class TinyCNN(nn.Module):
    """conv + BatchNorm + ReLU(inplace) + max-pool + linear; input (B, 3, 8, 8), 5 classes."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.bn(self.conv(x)))), 1))


def tiny_batch(seed, batch=2):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 8, 8, generator=g), torch.randint(0, 5, (batch,), generator=g)


def capture_small(model, data, labels, warmup, name="test"):
    torch.manual_seed(0)
    return capture_model(model, data, labels, name=name, warmup_batch=warmup)


@pytest.fixture(scope="session")
def tiny_capture():
    torch.manual_seed(0)
    model = TinyCNN()
    return capture_small(model, *tiny_batch(1), warmup=tiny_batch(2), name="tiny-b2-adam")


@pytest.fixture(scope="session")
def alexnet_small_capture():
    """alexnet, batch 2, 64x64 images, 10 classes (61M parameters, still a few seconds)."""
    return capture_torchvision("alexnet", batch_size=2, image_size=64, num_classes=10)


class KeepAll(torch.fx.Interpreter):
    """Runs a GraphModule keeping every node's value (no garbage collection)."""

    def __init__(self, gm):
        super().__init__(gm, garbage_collect_values=False)


def eager_values(res):
    """Run the traced step of a CaptureResult on fresh inputs, keeping every value.
    Returns ({fx node name: value}, inputs)."""
    inputs = res.state.step_inputs()
    interp = KeepAll(res.traced.gm)
    torch.manual_seed(0)
    with torch.no_grad():
        interp.run(*inputs.as_args())
    return {n.name: v for n, v in interp.env.items()}, inputs


def real_tensor_of_every_graph_tensor(res):
    """{tensor id: real tensor} from an independent eager run of the traced GraphModule:
    resident tensors from placeholders / get_attr nodes in order, op results from the
    op's fx node value (non-None tensor elements in order)."""
    values, _ = eager_values(res)
    gm = res.traced.gm
    graph = res.graph
    by_id = {t["id"]: t for t in graph["tensors"]}
    real = {}
    resident_nodes = [n for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")]
    resident_ids = [t["id"] for t in graph["tensors"] if "role" in t]
    assert len(resident_nodes) == len(resident_ids)
    for n, tid in zip(resident_nodes, resident_ids):
        real[tid] = values[n.name]
    for op in graph["ops"]:
        v = values[res.op_nodes[op["id"]]]
        flat = [e for e in pytree.tree_flatten(v)[0] if isinstance(e, torch.Tensor)]
        assert len(flat) == len(op["outputs"]), op
        for tid, e in zip(op["outputs"], flat):
            real[tid] = e
    assert set(real) == set(by_id)
    return real


def storage_ptr(t):
    return t.storage().data_ptr()


def roam_binary():
    return os.environ.get("ROAM_BIN", os.path.join(REPO_ROOT, "build", "roam"))


def eager_step(model, opt, loss_fn, batch):
    """One ordinary PyTorch training step on ``batch = (inputs, labels)``; returns the loss."""
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


def same_params(a, b):
    """Every parameter of module ``a`` equal, bit for bit, to ``b``'s (in order)."""
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
