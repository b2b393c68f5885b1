"""roam: memory planning for deep-learning training (Python front end).

The C++ library and the ``roam`` command plan the execution order and the memory layout of a
training step (ROAM, arXiv 2310.19295). This package captures such a step from PyTorch and
writes it as a ``roam-graph`` v1 file (see ``GRAPH_FORMAT.md``); see :mod:`roam.capture`.
"""

__all__ = ["capture"]
