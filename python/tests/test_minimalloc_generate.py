"""bench/minimalloc_generate: its pieces tile the square (so every instance fits at capacity
1048576 by construction), the `split` family keeps MiniMalloc's piece-area statistics, and the
shipped sets are exactly what the script writes."""

import csv
import filecmp
import importlib.machinery
import importlib.util
import os
import random
import statistics
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "bench", "minimalloc_generate")


def load_generator():
    loader = importlib.machinery.SourceFileLoader("minimalloc_generate", SCRIPT)
    spec = importlib.util.spec_from_loader("minimalloc_generate", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def overlapping_pair(pieces):
    """Two pieces (x0, x1, y0, y1) sharing area, or None (sweep over x, pairs among the open)."""
    events = sorted(pieces)
    for i, a in enumerate(events):
        for b in events[i + 1:]:
            if b[0] >= a[1]:
                break
            if b[2] < a[3] and a[2] < b[3]:
                return a, b
    return None


@pytest.mark.parametrize("family", ["split", "cut"])
def test_pieces_tile_the_square(family):
    gen = load_generator()
    side = gen.SIDE
    for seed in range(3):
        rng = random.Random(seed)
        n = 300 + 60 * seed
        pieces = (gen.split_family(rng, n, 0.0, 0.5) if family == "split"
                  else gen.cut_family(rng, n, 0.0))
        assert len(pieces) == n
        assert all(0 <= x0 < x1 <= side and 0 <= y0 < y1 <= side for x0, x1, y0, y1 in pieces)
        # Disjoint pieces inside the square whose areas add up to the square: a tiling.
        assert overlapping_pair(pieces) is None
        assert sum((x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in pieces) == side * side


def test_split_keeps_minimalloc_area_spread():
    """A-E and I-K of MiniMalloc's suite: largest piece 1.9-2.4x the median area; the `cut`
    family's is 8.6-10.6x. Cutting the largest piece keeps the spread MiniMalloc's."""
    gen = load_generator()
    for seed in range(5):
        rng = random.Random(100 + seed)
        pieces = gen.split_family(rng, 400, 0.0, 0.4 + 0.05 * seed)
        areas = [(x1 - x0) * (y1 - y0) for x0, x1, y0, y1 in pieces]
        ratio = max(areas) / statistics.median(areas)
        assert 1.5 <= ratio <= 3.0, (seed, ratio)


def peak_live(path):
    deltas = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            lower, upper, size = int(row["lower"]), int(row["upper"]), int(row["size"])
            assert 0 <= lower < upper <= 1048576 and size > 0
            deltas[lower] = deltas.get(lower, 0) + size
            deltas[upper] = deltas.get(upper, 0) - size
    live = peak = 0
    for t in sorted(deltas):
        live += deltas[t]
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("family,folder,count", [("split", "minimalloc_split", 30),
                                                 ("mixed", "minimalloc_generated", 40)])
def test_shipped_sets_are_the_scripts_output(tmp_path, family, folder, count):
    r = subprocess.run([sys.executable, SCRIPT, "--family", family, "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    shipped_dir = os.path.join(REPO_ROOT, "bench", folder)
    shipped = sorted(f for f in os.listdir(shipped_dir) if f.endswith(".csv"))
    written = sorted(f for f in os.listdir(tmp_path) if f.endswith(".csv"))
    assert len(written) == count and shipped == written
    for f in written:
        assert filecmp.cmp(os.path.join(shipped_dir, f), tmp_path / f, shallow=False), f
        with open(tmp_path / f) as fh:
            n = sum(1 for _ in fh) - 1
        assert 300 <= n <= 500, (f, n)
        # Pieces of a tiling of the 1024 x 1024-cell square: no time has more live than it.
        assert peak_live(tmp_path / f) <= 1048576, f
