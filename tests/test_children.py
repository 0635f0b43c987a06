"""Issue 69, point 3: every process a tool starts ends when the tool ends, however it
ends: SIGTERM, SIGHUP, SIGKILL (which it cannot catch) and a `timeout`. Each child of
a test's program carries a mark in its environment (children inherit it), so that
an orphan is found wherever it went, whatever session it started (the load spinner
runs in a session of its own) and whoever adopted it.

The mechanisms (atkit/processes.py, tools/errors.run_main) are exercised through the
programs that use them, and a static check holds every `subprocess` call of atkit/,
pipeline/ and tools/ to `preexec_fn=end_with_parent(...)`.
"""

import ast
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, clean_env

MARK = "AT_CHILD_TEST_MARK"


def marked(mark: str, but=()) -> list[int]:
    """The running processes (zombies aside) whose environment holds `mark`."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in but:
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # ended meanwhile, or not ours
            continue
        if needle in env:
            found.append(int(entry.name))
    return found


def wait_for(condition, timeout_s: float, step_s: float = 0.05):
    give_up = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > give_up:
            return value
        time.sleep(step_s)


def describe(pids) -> str:
    lines = []
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            ppid = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except OSError:
            continue
        lines.append(f"pid {pid} (ppid {ppid}): {argv.decode(errors='replace')}")
    return "\n".join(lines)


def kill_all(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def ends_with_its_children(argv, how, children, *, settle_s=0.0, cwd=ROOT, env=None):
    """Start `argv` (a program that starts `children` processes or more), wait until
    they run, end the program `how` (a signal's name, or "timeout": the program runs
    under `timeout 1.5`, as `timeout 3 python -m tools.load_check ...` in the issue),
    and assert that no process of its is left within a few seconds."""
    mark = uuid.uuid4().hex
    env = {**(env or clean_env()), MARK: mark}
    if how == "timeout":
        argv = ["timeout", str(max(settle_s, 1.5)), *argv]
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a signal to the test's group never reaches it
    )
    try:
        started = wait_for(lambda: len(marked(mark, but={proc.pid})) >= children, 60)
        assert started, f"the children never started: {proc.stderr.read()[-2000:]}"
        time.sleep(settle_s)
        if how != "timeout":
            proc.send_signal(getattr(signal, how))
        status = proc.wait(timeout=30)
        left = wait_for(lambda: not marked(mark), 5)
        assert left, f"{how}: orphans left:\n{describe(marked(mark))}"
        return status, proc.stderr.read()
    finally:
        kill_all(marked(mark))
        if proc.poll() is None:
            proc.kill()
            proc.wait()


LOAD_CHECK = [sys.executable, "-m", "tools.load_check"]
HOW = ["SIGTERM", "SIGHUP", "SIGKILL", "timeout"]


@pytest.mark.process
@pytest.mark.parametrize("how", HOW)
def test_load_check_leaves_no_spinner_and_no_command(how):
    """The issue's case: the load spinner (a session of its own, nice 19) and the
    timed command end with load_check; SIGTERM and SIGHUP also end in one line and
    the shell's status (128 + the signal)."""
    argv = [*LOAD_CHECK, "--only", "loaded", "--", "sleep", "30"]
    status, err = ends_with_its_children(argv, how, children=2)
    expected = {"SIGTERM": 143, "SIGHUP": 129, "SIGKILL": -9, "timeout": 124}
    assert status == expected[how], err
    if how in ("SIGTERM", "SIGHUP"):
        assert err.strip().splitlines()[-1] == (
            f"python -m tools.load_check: stopped ({how})"
        ), err


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_tool_run_from_the_notebook_ends_with_the_kernel(how):
    """atkit.programs.run_tool (the notebook's way to run a program): the program
    and what it started end when the kernel does, even killed by SIGKILL."""
    code = (
        "from atkit.programs import run_tool; "
        "run_tool('tools.load_check', '--only', 'idle', '--', 'sleep', '30')"
    )
    ends_with_its_children([sys.executable, "-c", code], how, children=2)


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_torchrun_and_its_workers_end_with_their_caller(tmp_path, how):
    """atkit.launch.launch_torchrun: torchrun runs in a session of its own and
    starts each worker in another; killed callers leave neither behind."""
    (tmp_path / "sleeper.py").write_text(
        "import time\n\ndef main():\n    time.sleep(60)\n"
    )
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    code = (
        "from atkit import launch; "
        "launch.launch_torchrun([], launch.worker_code('sleeper'), nproc=2)"
    )
    # the caller, torchrun and its two workers: 3 children of the caller's
    ends_with_its_children(
        [sys.executable, "-c", code], how, children=3, settle_s=1.0, env=env
    )


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_jupyter_kernel_ends_with_thread_probe(how):
    """tools.thread_probe's kernel (a session of its own) is shut down on SIGTERM
    (run_main's exception reaches the probe's `finally`), and ends within a second
    or two of the probe's SIGKILL: ipykernel watches its parent (JPY_PARENT_PID)."""
    argv = [sys.executable, "-m", "tools.thread_probe"]
    ends_with_its_children(argv, how, children=1, settle_s=1.0)


@pytest.mark.process
@pytest.mark.parametrize("how", ["SIGHUP", "SIGKILL"])
def test_end_with_parent_ends_a_child_whatever_ends_the_parent(how):
    """The preexec_fn that startup's probes, bench's memory child, render_page's npm
    and node, tier_coverage's pytest and the Colab setup's pip and git get: a child
    that ignores SIGHUP and lives in a session of its own still ends with its
    parent."""
    code = (
        "import signal, subprocess, time; from atkit import processes; "
        "subprocess.Popen(['sleep', '30'], start_new_session=True, "
        "preexec_fn=processes.end_with_parent()); time.sleep(30)"
    )
    ends_with_its_children([sys.executable, "-c", code], how, children=1)


def test_end_with_parent_stops_a_child_whose_parent_ended_first(monkeypatch):
    """The race: the parent ended between fork and the request; the child then
    stops itself instead of running on as an orphan."""
    from atkit import processes

    with monkeypatch.context() as m:
        m.setattr(os, "getpid", lambda: 1)  # the request names another parent
        request = processes.end_with_parent()
    child = subprocess.Popen(["sleep", "30"], preexec_fn=request)
    assert child.wait(timeout=10) == -signal.SIGTERM


def subprocess_calls(path: Path):
    """(line, keywords) of each subprocess.run/Popen/call/check_* call in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "subprocess"
            and node.func.attr in ("run", "Popen", "call", "check_call", "check_output")
        ):
            yield node.lineno, {k.arg for k in node.keywords}


def test_every_child_a_tool_or_atkit_starts_ends_with_it():
    """Every subprocess call of atkit/, pipeline/ and tools/ passes
    preexec_fn=end_with_parent(...): a child started without it would outlive a
    killed parent (the issue: load_check's spinner, with PPID 1)."""
    missing, calls = [], 0
    for folder in ("atkit", "pipeline", "tools"):
        for path in sorted((ROOT / folder).glob("*.py")):
            for line, keywords in subprocess_calls(path):
                calls += 1
                if "preexec_fn" not in keywords:
                    missing.append(f"{path.relative_to(ROOT)}:{line}")
    assert calls >= 10, calls
    assert not missing, f"children that would outlive their parent: {missing}"
