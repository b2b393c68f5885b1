"""roam: memory planning for deep-learning training (Python front end).

The C++ library and the ``roam`` command plan the execution order and the memory layout of a
training step (ROAM, arXiv 2310.19295). This package captures such a step from PyTorch and
writes it as a ``roam-graph`` v1 file (see ``GRAPH_FORMAT.md``):
``roam.capture(model, optimizer, loss_fn, example_inputs, fake=False).save("step.json.gz")``
(see :mod:`roam.capture`); :mod:`roam.zoo` has BERT and GPT-2 in plain PyTorch.
``roam.optimize(model, optimizer, loss_fn, example_inputs)`` returns a training step that runs
under a roam plan (see :mod:`roam.executor`); with ``budget="2GiB"`` it recomputes activations
where needed so that the planned bytes (resident + arena + the generator states kept for
recomputed random ops) fit that memory, and warns of a step that measures above it
(``roam.BudgetInfeasible`` names the smallest budget roam meets when it cannot).
"""

from . import capture  # noqa: F401  (a callable module: roam.capture(...))
from .capture import Graph  # noqa: F401
from .executor import BudgetInfeasible, optimize  # noqa: F401  (roam.optimize(...) -> RoamStep)

__all__ = ["BudgetInfeasible", "Graph", "capture", "optimize"]
