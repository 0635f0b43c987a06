"""Starting and ending torchrun's workers, from a notebook or a terminal.

`launch_torchrun` runs `python -m torch.distributed.run` (the `torchrun` command) with
the kernel's own interpreter; each worker runs the code its caller names (this package
starts no program of its own choosing: `worker_code(module)` runs a module's `main`).
The notebook's workers run `tools.train.main`, which imports the module that
nbexport.py generates from the notebook, so the workers run the notebook's code as it
is on disk (edit a cell, launch again: nbexport regenerates the module). A
function defined in a notebook cell could not be sent to a worker: a fresh interpreter
finds functions by module and name, and the cell's module is the kernel's `__main__`.
The launcher streams the workers' output as it arrives, turns a failure into an
exception that quotes the end of the output, and stops the whole process group past
`timeout_s`. When one worker dies, torchrun stops the others and names the failed rank;
the process group's timeout covers a worker that hangs instead. torchrun ends when its
caller ends, however it ends, and each worker when torchrun ends (atkit/processes.py:
torchrun starts each worker in a session of its own, which no signal to the caller's
group reaches).

Ending a worker. The all-reduces that DDP starts during the backward pass run on gloo's
own threads, and each keeps a snapshot of the thread's state that holds a Python
object; the gloo thread lets go of it after the collective completes, which needs the
interpreter's lock. If that moment falls while the interpreter is shutting down, the
thread cannot take the lock, and the C++ runtime aborts the process ("terminate called
without an active exception"): a finished run reported as a crash (a core dump showed
`ProcessGroupGloo::runLoop` releasing an `AsyncAllreduceWork` during `Py_Finalize`; a
PyTorch issue). A worker therefore ends with `os._exit` once its work is done: by then
the process group is destroyed, checkpoints and results are closed files, and only the
output buffers need flushing.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from atkit.processes import end_with_parent
from atkit.settings import check_setting

REPO = Path(__file__).resolve().parents[1]


def worker_code(module: str) -> str:
    """The code a worker runs: `module`'s main(), its return value the exit status;
    first the worker asks to end with torchrun (atkit.processes)."""
    return (
        "import sys, importlib; from atkit import processes; "
        "processes.end_with_parent_now(); "
        f"sys.exit(importlib.import_module({module!r}).main())"
    )


def setup_distributed(device="auto", timeout_s=300.0):
    """Join the process group torchrun described; returns (rank, size, local_rank,
    local_size, device). NCCL between GPUs, gloo between CPU processes."""
    import torch
    import torch.distributed as dist

    check_setting(
        "setup_distributed", "device", device, str, choices=("auto", "cpu", "cuda")
    )
    if "LOCAL_RANK" not in os.environ:
        raise RuntimeError("WORLD_SIZE is set but LOCAL_RANK is not: use torchrun")
    local_rank = int(os.environ["LOCAL_RANK"])
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if local_size > torch.cuda.device_count():
            raise RuntimeError(
                f"{local_size} processes per machine but {torch.cuda.device_count()} "
                "GPU(s): start one process per GPU, or pass --device cpu (gloo)"
            )
        dev = torch.device("cuda", local_rank)
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    dist.init_process_group(
        "nccl" if dev.type == "cuda" else "gloo",
        timeout=datetime.timedelta(seconds=timeout_s),
        device_id=dev if dev.type == "cuda" else None,
    )
    return dist.get_rank(), dist.get_world_size(), local_rank, local_size, dev


def finish_distributed() -> None:
    import torch.distributed as dist

    dist.destroy_process_group()


def worker_exit(status: int):
    """Leave a torchrun worker without the interpreter's teardown (see above)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def torchrun_command(cli_args, code, nproc=2, **rdzv):
    """The torchrun command line whose workers run `code` (Python source) with
    `cli_args`; rdzv: nnodes, node_rank, rdzv_endpoint, ... (none: --standalone, one
    machine)."""
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    cmd += [f"--{k}={v}" for k, v in rdzv.items()] if rdzv else ["--standalone"]
    cmd += [f"--nproc_per_node={nproc}", "--no-python", sys.executable, "-c", code]
    return [*cmd, *map(str, cli_args)]


def launch_torchrun(
    cli_args,
    code,
    nproc=2,
    timeout_s=None,
    env=None,
    check=True,
    echo=True,
    **rdzv,
):
    """Run torchrun with workers that run `code` (Python source, such as
    `worker_code("tools.train")`), stream its output, return (returncode, output).
    With check, a non-zero exit raises RuntimeError; past timeout_s everything is
    stopped."""
    check_setting("launch_torchrun", "nproc", nproc, int, low=1)
    check_setting(
        "launch_torchrun", "timeout_s", timeout_s, float, above=0, optional=True
    )
    cmd = torchrun_command(cli_args, code, nproc, **rdzv)
    path = os.pathsep.join(p for p in [str(REPO), os.environ.get("PYTHONPATH")] if p)
    child_env = {**os.environ, **(env or {}), "PYTHONPATH": path}
    # Each worker's share of the cores, said up front: without it torchrun sets 1
    # and prints a banner about it; the workers set their torch threads anyway.
    cores = max(1, (os.cpu_count() or 1) // nproc)
    child_env.setdefault("OMP_NUM_THREADS", str(cores))
    proc = subprocess.Popen(
        cmd,
        env=child_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so we can stop all of it
        preexec_fn=end_with_parent(),  # and it ends with us, even killed by SIGKILL
    )
    timed_out = threading.Event()

    def stop():
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout_s, stop) if timeout_s is not None else None
    if timer is not None:
        timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if echo:
                print(line, end="", flush=True)
        proc.wait()
    finally:
        if timer is not None:
            timer.cancel()
        if proc.poll() is None:  # interrupted (KeyboardInterrupt): stop the workers
            stop()
    output = "".join(lines)
    if timed_out.is_set():
        raise TimeoutError(f"torchrun did not finish within {timeout_s} s")
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"torchrun exited with code {proc.returncode}:\n" + "".join(lines[-25:])
        )
    return proc.returncode, output
