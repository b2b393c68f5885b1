"""Exceptions raised by :mod:`roam.capture`."""


class CaptureError(RuntimeError):
    """The traced step cannot be turned into a faithful roam-graph (a capture bug or an
    unsupported program): an unmappable tensor argument, an alias the schema and the real
    storages disagree on, an unsupported fx node, ..."""


class GraphCheckError(CaptureError):
    """A roam-graph failed the structural check (:func:`roam.capture.check.check_graph`)."""


class UnknownModelError(ValueError):
    """The requested model name is neither a torchvision classification model nor a zoo
    model.

    Attributes:
        name: the name asked for.
        valid: sorted list of valid names.
    """

    def __init__(self, name, valid, why: str = ""):
        self.name = name
        self.valid = list(valid)
        if why:  # a package.module:Name model
            super().__init__(f"model {name!r}: {why}")
        else:
            super().__init__(
                f"unknown model {name!r} (or give package.module:Name, your own nn.Module); "
                f"valid models: " + ", ".join(self.valid))
