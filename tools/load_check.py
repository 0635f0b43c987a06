"""Wall time of a command, idle and with a core kept busy by another program.

    python -m tools.load_check -- make test
    python -m tools.load_check --rounds 2 -- python -m tools.bench --preset ci
    python -m tools.load_check --busy 1 --only loaded -- make run PRESET=cpu

The load is the one a user meets when something else runs beside the notebook: a
separate program, in its own session (as if started from another terminal), spinning at
the lowest priority, `nice -n 19 python3 -c "while True: pass"`, one per `--busy` core.
The command runs idle first, then loaded (rounds alternate when `--rounds` > 1), and the
script prints each wall time and the ratio loaded / idle. It is a measurement for a
person to read, not a test: nothing here passes or fails, and the numbers depend on the
machine. The command must leave the working tree as it found it for the rounds to be
comparable (`make test` does; a training run should use `--fresh` or a new folder).
A command that cannot be found, or that fails, ends the script with one `error:` line
(and the command's exit status); so does a --busy beyond the machine's cores. The
spinners and the command end with the script, however it ends (Ctrl-C, SIGTERM,
SIGHUP, a `timeout`, SIGKILL): atkit/processes.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

from atkit import processes
from tools import errors

PROG = "python -m tools.load_check"
SPIN = "while True: pass"


def start_load(busy):
    """`busy` spinning processes at nice 19, each in a session of its own, each
    killed when this process ends (a session of its own gets no signal of ours)."""
    procs = []
    try:
        for _ in range(busy):
            procs.append(
                subprocess.Popen(
                    ["nice", "-n", "19", sys.executable, "-c", SPIN],
                    start_new_session=True,  # own session and scheduler group
                    preexec_fn=processes.end_with_parent(signal.SIGKILL),
                )
            )
    except BaseException:
        stop_load(procs)
        raise
    return procs


def stop_load(procs):
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def timed(command, quiet):
    """Wall seconds and exit status of one run of `command`; if this process is
    stopped meanwhile, so is the command (SIGTERM, then SIGKILL)."""
    out = subprocess.DEVNULL if quiet else None
    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=out, stderr=out, preexec_fn=processes.end_with_parent()
    )
    try:
        rc = proc.wait()
    finally:
        processes.stop(proc)
    return time.perf_counter() - start, rc


def check_command(command) -> None:
    """Refuse, before anything runs, a command that cannot be started."""
    name = command[0]
    if shutil.which(name):
        return
    if os.sep in name and os.path.isfile(name):
        raise errors.UsageError(
            f"the command {name} is not executable; make it so (chmod +x {name}) or "
            "run it through its interpreter (-- python3 script.py)"
        )
    raise errors.UsageError(
        f"the command {name!r} was not found (no such file, and not on PATH); "
        "check its name, e.g. -- make test"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=1, help="cores to keep busy")
    parser.add_argument("--rounds", type=int, default=1, help="runs per condition")
    parser.add_argument(
        "--only", choices=["idle", "loaded"], help="measure one condition only"
    )
    parser.add_argument(
        "--quiet", action="store_true", help="hide the command's own output"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to time after --, e.g. -- make test")
    if args.busy < 1 or args.rounds < 1:
        parser.error("--busy and --rounds must be at least 1")
    cores = len(os.sched_getaffinity(0))
    if args.busy > cores:
        parser.error(
            f"--busy {args.busy}: this process may use {cores} CPU core(s); give at "
            f"most {cores} (one spinner per core)"
        )
    conditions = [args.only] if args.only else ["idle", "loaded"]
    check_command(command)
    if "loaded" in conditions and not shutil.which("nice"):
        raise errors.UsageError(
            "the load is started with `nice`, which is not on PATH; install it "
            "(coreutils) or measure with --only idle"
        )
    times = {c: [] for c in conditions}
    for r in range(args.rounds):
        for condition in conditions:
            load = start_load(args.busy) if condition == "loaded" else []
            try:
                seconds, rc = timed(command, args.quiet)
            finally:
                stop_load(load)
            times[condition].append(seconds)
            print(
                f"[load_check] round {r + 1} {condition:>6}: {seconds:8.1f} s"
                f" (exit {rc})",
                file=sys.stderr,
                flush=True,
            )
            if rc != 0:
                print(
                    f"{PROG}: error: the command failed (exit {rc}) in round {r + 1}, "
                    f"{condition}: its time measures nothing; make it succeed alone "
                    "first, then time it",
                    file=sys.stderr,
                    flush=True,
                )
                return rc if 0 < rc < 256 else 1
    print(f"command: {' '.join(command)}")
    print(f"cores: {cores}, busy while loaded: {args.busy} (nice 19, own session)")
    for condition, ts in times.items():
        runs = ", ".join(f"{t:.1f}" for t in ts)
        print(f"{condition:>6}: median {statistics.median(ts):8.1f} s  (runs: {runs})")
    if len(times) == 2:
        ratio = statistics.median(times["loaded"]) / statistics.median(times["idle"])
        print(f"loaded / idle: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(errors.run_main(main, PROG))
