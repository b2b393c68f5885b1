"""Reading and writing roam-graph files (JSON, gzip-compressed when the name ends in .gz)."""

import gzip
import io
import json
import os
import tempfile
from typing import Any, Dict


def dumps_graph(graph: Dict[str, Any]) -> bytes:
    """Deterministic UTF-8 JSON: keys sorted, no insignificant whitespace, final newline."""
    return (json.dumps(graph, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                       allow_nan=False) + "\n").encode("utf-8")


def write_graph(graph: Dict[str, Any], path: str) -> None:
    """Write ``graph`` to ``path`` atomically (temporary file in the same folder, then
    rename). ``*.gz`` is gzip-compressed with ``mtime=0`` and no file name in the header, so
    equal graphs give byte-identical files.

    Raises:
        OSError: the folder is not writable (no partial file is left behind).
        ValueError: the graph holds NaN/inf (not JSON).
    """
    data = dumps_graph(graph)
    if path.endswith(".gz"):
        buf = io.BytesIO()
        with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
            gz.write(data)
        data = buf.getvalue()
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"roam: cannot write {path}: the folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".roam-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_graph(path: str) -> Dict[str, Any]:
    """Load a roam-graph file (``.json`` or ``.json.gz``)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))
