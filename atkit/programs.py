"""Running a program of the repository from the notebook: `run_tool("tools.bench",
"--preset", "cpu")` is `python -m tools.bench --preset cpu` in a process of its own,
with this interpreter, which ends when the caller's process ends (a kernel restarted
or killed: atkit/processes.py). The caller names the program; this module names
none."""

from __future__ import annotations

import subprocess
import sys

from atkit.processes import end_with_parent


class ToolError(RuntimeError):
    """A program that ended with an error; the message holds the end of its stderr."""


def run_tool(module: str, *args) -> None:
    """`python -m module args...` (each argument as str); its output is printed, a
    failure raised as ToolError with the end of what it wrote to stderr."""
    cmd = [sys.executable, "-m", module, *(str(a) for a in args)]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=end_with_parent(),
    )
    print(proc.stdout, end="")
    if proc.returncode:
        raise ToolError(
            f"{module} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}"
        )
