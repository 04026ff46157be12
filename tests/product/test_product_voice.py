"""The product speaks to users: no run ids, issue numbers, talk of which
machines were available, or per-run result folders in the tracked files;
the README stays a page (at most 200 lines); the rendered results match
bench/baselines/. bench/baselines/ itself is data and is not read."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Written in pieces so that this file does not match itself.
ANYWHERE = re.compile("issue #?[0-9]|not" + " lent|with" + "held", re.I)
RUN_ID_MD = re.compile(r"\br[0-9]{1,3}\b")
RUN_ID_CODE = re.compile(r"\br[0-9]{2,3}\b")
RESULTS_DIR = "bench/" + "results"
CODE = re.compile(r"(\.(c|cc|cpp|cxx|h|hpp|cu|cuh|py|pyi|sh|cmake|toml|cfg|ini|yml|yaml|in|json)|CMakeLists\.txt|"
                  r"Makefile|\.ci/run)$")


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return [f for f in out.stdout.decode().split("\0") if f and not f.startswith("bench/baselines/")]


def text_of(rel):
    path = os.path.join(ROOT, rel)
    if not os.path.isfile(path):  # deleted in the work tree, not yet committed
        return None
    with open(path, "rb") as f:
        data = f.read()
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def offences():
    found = []
    for rel in tracked_files():
        if rel.startswith(RESULTS_DIR + "/"):
            found.append(f"{rel}: a per-run result file ({RESULTS_DIR}/ is gone; results live in bench/baselines/)")
            continue
        text = text_of(rel)
        if text is None:
            continue
        markdown = rel.endswith(".md")
        code = CODE.search(rel) is not None or (not markdown and text.startswith("#!"))
        for n, line in enumerate(text.splitlines(), 1):
            if ANYWHERE.search(line):
                found.append(f"{rel}:{n}: issue number or machine availability: {line.strip()[:120]}")
            if markdown and RUN_ID_MD.search(line):
                found.append(f"{rel}:{n}: run id: {line.strip()[:120]}")
            if code and RUN_ID_CODE.search(line):
                found.append(f"{rel}:{n}: run id: {line.strip()[:120]}")
            if RESULTS_DIR in line:
                found.append(f"{rel}:{n}: refers to {RESULTS_DIR}/: {line.strip()[:120]}")
    return found


def test_no_run_ids_issue_numbers_or_lab_notes():
    found = offences()
    assert not found, f"{len(found)} line(s) break the product voice:\n" + "\n".join(found[:60])


def test_no_per_run_results_folder():
    assert not os.path.exists(os.path.join(ROOT, RESULTS_DIR)), f"{RESULTS_DIR}/ exists; use bench/baselines/"


def test_readme_is_a_page():
    with open(os.path.join(ROOT, "README.md")) as f:
        lines = f.read().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; keep it at 200 or fewer"


def test_rendered_results_match_baselines():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "render_results.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
