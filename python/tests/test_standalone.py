"""The repository stands alone (issue 13): nothing it runs reads ../shared or any path beside
the checkout. Two checks: the sources that run (Python, shell, C++, CMake, the bench and CI
scripts) name no such path outside comments; and scripts/clone-alone, through which .ci/run runs
every test, gives a copy of the checkout in an otherwise empty folder."""

import os
import re
import subprocess

from conftest import REPO_ROOT

# a path into the project's shared folder beside the checkout (../shared, or its parts)
OUTSIDE = re.compile(r"\.\./shared|(?<![\w.])shared/(?:data|reference|GRAPH_FORMAT|DESIGN|hooks)"
                     r"|[\"']\.\.[\"']\s*,\s*[\"']shared[\"']")


# files that name ../shared to check that it is absent (this test, the copy script)
CHECKERS = {"python/tests/test_standalone.py", "scripts/clone-alone"}


def _tracked():
    out = subprocess.run(["git", "-C", REPO_ROOT, "ls-files", "-z"], capture_output=True,
                         check=True).stdout.decode()
    return [f for f in out.split("\0") if f]


def _runs(path):
    """Files whose contents are executed or compiled (not prose)."""
    base = os.path.basename(path)
    if path.endswith((".py", ".sh", ".cpp", ".cc", ".h", ".hpp", ".cmake")) or \
            base == "CMakeLists.txt":
        return True
    full = os.path.join(REPO_ROOT, path)
    if path.startswith(("scripts/", "bench/", ".ci/")) and os.path.isfile(full):
        with open(full, "rb") as f:
            return f.read(2) == b"#!"
    return False


def _code_lines(path):
    """Lines without their comment (# ... for Python and shell, // ... for C++)."""
    mark = "//" if path.endswith((".cpp", ".cc", ".h", ".hpp")) else "#"
    with open(os.path.join(REPO_ROOT, path), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            code = line.split(mark, 1)[0] if not line.startswith("#!") else ""
            yield n, code


def test_no_source_reads_outside_the_checkout():
    files = [f for f in _tracked() if _runs(f) and f not in CHECKERS
             and os.path.exists(os.path.join(REPO_ROOT, f))]
    assert len(files) > 50  # the scan sees the sources
    found = [f"{f}:{n}: {code.strip()}" for f in files for n, code in _code_lines(f)
             if OUTSIDE.search(code)]
    assert not found, "paths outside the repository:\n" + "\n".join(found)
    # the pattern catches what it is meant to
    assert OUTSIDE.search('ROAM_FIXTURES + "/../../bench/graphs/"') is None  # inside
    assert OUTSIDE.search('PUBLISHED = "../shared/reference/roam_published.csv"')
    assert OUTSIDE.search("path = ROOT / 'shared/data/minimalloc'")
    assert OUTSIDE.search('os.path.join(REPO, "..", "shared", "reference")')


def test_clone_alone_copies_the_checkout_into_an_empty_folder():
    script = os.path.join(REPO_ROOT, "scripts", "clone-alone")
    r = subprocess.run(["bash", script, "bash", "-c",
                        "echo \"beside: $(ls -A ..)\"; test ! -e ../shared && echo no-shared; "
                        "git ls-files | wc -l; ls -d .git build 2>&1 | sort"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "beside: roam" and lines[1] == "no-shared"
    assert int(lines[2]) == len(_tracked())  # the same checkout (its .git copied)
    assert ".git" in lines[3:] and not any(ln == "build" for ln in lines[3:])
    with open(os.path.join(REPO_ROOT, ".ci", "run")) as f:
        assert "bash scripts/clone-alone" in f.read()
