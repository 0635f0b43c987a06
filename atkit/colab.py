"""Where the notebook runs without its repository (Colab): the Setup cell clones the
repository into at-repo/ (unless a restarted session left that clone on the disk), and
`runtime.setup(clone="at-repo")` calls `prepare`, which works there from then on,
brings a kept clone up to date where that is safe, and installs the packages that are
missing (never PyTorch).

Only the standard library here: `prepare` runs before torch loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec

from atkit.processes import end_with_parent

# what Colab lacks, pinned as in requirements.txt
WANTED = {"sentencepiece": "0.2.3", "sacrebleu": "2.6.0", "jupytext": "1.19.6"}
UPDATE_TIMEOUT_S = 30


SEEN = "at-prepared"  # in the clone's .git: a session prepared it before


def prepare(clone: str, kept: bool | None = None) -> None:
    """Work in `clone`; update it if it was `kept` from an earlier session (one line
    says how that went; None: a session that prepared it before left its mark in
    .git); install the missing packages."""
    mark = os.path.join(clone, ".git", SEEN)
    if kept is None:
        kept = os.path.exists(mark)
    if os.path.isdir(os.path.dirname(mark)):
        open(mark, "a").close()
    os.chdir(clone)
    if kept:
        print(update(clone))
    missing = [f"{m}=={v}" for m, v in WANTED.items() if not find_spec(m)]
    if missing:
        pip = [sys.executable, "-m", "pip", "install", "-q", *missing]
        subprocess.run(pip, check=True, preexec_fn=end_with_parent())


def _git(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},  # never ask for a password
        timeout=timeout,
        preexec_fn=end_with_parent(),
    )


def update(clone: str) -> str:
    """Fast-forward the clone in the working folder to its origin's newest commit
    (`git pull --ff-only`), and say in one line what happened. Nothing is forced: the
    checkpoints, never tracked, stay; a file edited here is kept, and a change that
    would overwrite it, a history that went another way or no network leaves the
    clone as it is."""
    kept = f"{clone}, kept from before the restart"
    try:
        before = _git("rev-parse", "--short", "HEAD").stdout.strip() or "?"
        pulled = _git("pull", "-q", "--ff-only", timeout=UPDATE_TIMEOUT_S)
        after = _git("rev-parse", "--short", "HEAD").stdout.strip() or "?"
    except subprocess.TimeoutExpired:
        why = f"no answer in {UPDATE_TIMEOUT_S} s"
        return f"{kept}: not updated ({why}); used as it is (commit {before})"
    except OSError as err:  # no git to run
        return f"{kept}: not updated ({err}); used as it is"
    if pulled.returncode != 0:
        lines = [s.strip() for s in pulled.stderr.splitlines() if s.strip()]
        said = [s for s in lines if s.startswith(("fatal:", "error:"))] or lines
        why = said[0][:160].rstrip(":") if said else f"git exit {pulled.returncode}"
        return f"{kept}: not updated ({why}); used as it is (commit {after})"
    if after == before:
        return f"{kept}: up to date (commit {after})"
    return f"{kept}: updated from commit {before} to {after}; your checkpoints stay"
