"""torchvision classification models by name."""

from typing import List

import torch

from .errors import UnknownModelError


def classification_model_names() -> List[str]:
    """Sorted names of the classification models of ``torchvision.models``."""
    import torchvision.models as tvm
    if hasattr(tvm, "list_models"):
        return sorted(tvm.list_models(module=tvm))
    return sorted(n for n, f in vars(tvm).items()  # pragma: no cover - torchvision < 0.14
                  if callable(f) and n.islower() and not n.startswith("_")
                  and n not in ("get_weight", "get_model", "get_model_weights", "list_models"))


def build_model(name: str, num_classes: int = 1000) -> torch.nn.Module:
    """A freshly initialised (``weights=None``) torchvision classification model.

    Raises:
        UnknownModelError: ``name`` is not in :func:`classification_model_names`.
    """
    import torchvision.models as tvm
    valid = classification_model_names()
    if name not in valid:
        raise UnknownModelError(name, valid)
    if hasattr(tvm, "get_model"):
        return tvm.get_model(name, weights=None, num_classes=num_classes)
    return getattr(tvm, name)(weights=None, num_classes=num_classes)  # pragma: no cover
