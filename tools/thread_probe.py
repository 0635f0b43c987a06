"""Time three things inside a Jupyter kernel, at 1 and at 2 torch threads: a `ci`-size
model's greedy decode (Part 2's demo size), a `cpu`-preset model's greedy decode of a
batch with the key/value cache (Part 3's scoring), and a `cpu`-preset training step.
With --epoch instead: 120 steps of Part 3's `cpu`-preset training on Multi30k, with
the preset's own thread count, as the notebook's training cell runs it (into a
temporary folder; nothing is kept). Run it idle and under load with load_check:

    python -m tools.load_check -- python -m tools.thread_probe
    python -m tools.load_check -- python -m tools.thread_probe --wait-policy ACTIVE
    python -m tools.load_check -- python -m tools.thread_probe --epoch

The kernel starts in the repository root with OMP_WAIT_POLICY set as the notebook sets
it (PASSIVE) unless --wait-policy says otherwise, and runs `probe_threads` or
`probe_epoch` below, imported from this module. The inputs are random token ids and
untrained weights: the timings, not the outputs, are the point. Set MULTI30K_DIR as
for the notebook. An error inside the kernel (no Multi30k for --epoch, say) ends the
script with one `error:` line naming it (the kernel's traceback too with
AT_TRACEBACK=1) and exit status 1, so that load_check stops instead of timing it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import types
from pathlib import Path

from tools import errors

PROG = "python -m tools.thread_probe"
ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 1800  # the longest a probe may take (--epoch: minutes)


def _train_time(lib, cpu, threads, gen, steps=6):
    torch = lib.torch
    torch.set_num_threads(threads)
    from pipeline import run

    sizes = types.SimpleNamespace(vocab_src=range(5000), vocab_tgt=range(5000))
    model, opt, sched, loss, precision = run.build(cpu, sizes, "cpu")
    model, loss, opt = run.step_parts(model, loss, opt, precision)  # as a run steps
    B, T = 160, 25  # about 4000 label tokens, like a cpu-preset batch
    src = torch.randint(4, 5000, (B, T), generator=gen)
    tgt = torch.randint(4, 5000, (B, T + 1), generator=gen)
    batch = lib.Batch(src, tgt, pad=lib.PAD)
    lib.train_step(model, batch, loss, opt, sched)
    start = time.perf_counter()
    for _ in range(steps):
        lib.train_step(model, batch, loss, opt, sched)
    return (time.perf_counter() - start) / steps


def _decode_time(lib, threads, model, vocab, B, S, max_len, stepper, gen):
    torch = lib.torch
    torch.set_num_threads(threads)
    model.eval()
    src = torch.randint(4, vocab, (B, S), generator=gen)
    mask = (src != lib.PAD).unsqueeze(-2)
    with torch.no_grad():
        lib.greedy_decode(model, src, mask, max_len, lib.BOS, stepper=stepper)
        start = time.perf_counter()
        lib.greedy_decode(model, src, mask, max_len, lib.BOS, stepper=stepper)
    return time.perf_counter() - start


def probe_threads() -> None:
    """Decode and train-step timings at 1 and 2 threads (run inside the kernel)."""
    import annotated_transformer_lib as lib
    import pipeline

    torch = lib.torch
    torch.manual_seed(0)
    cpu = pipeline.run_config("cpu")
    gen = torch.Generator().manual_seed(0)
    tiny = lib.make_model(100, 100, "tiny")
    small = lib.build_model(cpu.model, 5000, 5000)
    res = {}
    for t in (1, 2):
        res[f"ci_decode_{t}"] = _decode_time(
            lib, t, tiny, 100, 8, 20, 60, lib.DecoderStepper, gen
        )
        res[f"cpu_decode_{t}"] = _decode_time(
            lib, t, small, 5000, 200, 20, 40, lib.CachedDecoderStepper, gen
        )
        res[f"cpu_train_step_{t}"] = _train_time(lib, cpu, t, gen)
    print("seconds (fewer is better), torch", torch.__version__)
    for k, v in res.items():
        print(f"  {k:<18} {v:7.2f} s")


def probe_epoch(steps: int = 120) -> None:
    """`steps` steps of Part 3's cpu-preset training (run inside the kernel)."""
    import annotated_transformer_lib as lib
    import pipeline
    from atkit import data as corpus
    from atkit import runtime

    torch = lib.torch
    torch.set_num_threads(runtime.torch_threads("cpu"))
    cfg = pipeline.run_config("cpu", steps=steps, eval_every=steps)
    data = pipeline.prepare_data(cfg, corpus.fetch_multi30k())
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        log = lambda *a: 0  # noqa: E731
        _, history = pipeline.train(cfg, data, tmp, torch.device("cpu"), log=log)
        seconds = time.perf_counter() - start
    print(
        f"{steps} cpu-preset steps of Part 3 at {torch.get_num_threads()} thread(s): "
        f"{seconds:.1f} s, val loss {history['val_loss'][-1]:.4f}"
    )


class KernelError(RuntimeError):
    """The probe raised an exception inside the kernel."""


def main(argv=None) -> int:
    try:
        from jupyter_client.manager import start_new_kernel
    except ImportError as err:
        raise errors.UsageError(
            f"{err}: the probe runs in a Jupyter kernel; install the project's "
            "requirements (make setup)"
        ) from err

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wait-policy",
        choices=["PASSIVE", "ACTIVE"],
        default="PASSIVE",
        help="OMP_WAIT_POLICY for the kernel (the notebook's: PASSIVE)",
    )
    parser.add_argument(
        "--epoch",
        action="store_true",
        help="time Part 3's cpu-preset training instead",
    )
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_WAIT_POLICY": args.wait_policy}
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=env)
    out, failed = [], []

    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            failed.append(msg["content"])

    call = "probe_epoch()" if args.epoch else "probe_threads()"
    try:
        kc.execute_interactive(
            f"from tools.thread_probe import {call[:-2]}; {call}",
            output_hook=hook,
            timeout=TIMEOUT_S,
        )
    except TimeoutError as err:
        raise KernelError(
            f"{call} took more than {TIMEOUT_S} s in the kernel and was stopped; "
            "free the machine (or its cores) and run it again"
        ) from err
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    if failed:
        error = failed[0]
        if os.environ.get(errors.TRACEBACK_ENV) == "1":
            print("\n".join(error.get("traceback", [])), file=sys.stderr)
        if error["ename"] in errors.REFUSALS:  # missing data, say: no bug
            raise errors.UsageError(f"{call} in the kernel: {error['evalue']}")
        raise KernelError(
            f"{call} failed in the kernel: {error['ename']}: {error['evalue']}"
        )
    print(f"OMP_WAIT_POLICY={args.wait_policy}")
    print("".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(errors.run_main(main, PROG))
