"""Time three things inside a Jupyter kernel, at 1 and at 2 torch threads: a `ci`-size
model's greedy decode (Part 2's demo size), a `cpu`-preset model's greedy decode of a
batch with the key/value cache (Part 3's scoring), and a `cpu`-preset training step.
With --epoch instead: one epoch of Part 3's `cpu`-preset training on Multi30k, with the
preset's own thread count, as the notebook's training cell runs it (into a temporary
folder; nothing is kept). Run it idle and under load with load_check:

    python -m tools.load_check -- python -m tools.thread_probe
    python -m tools.load_check -- python -m tools.thread_probe --wait-policy ACTIVE
    python -m tools.load_check -- python -m tools.thread_probe --epoch

The kernel starts in the repository root with OMP_WAIT_POLICY set as the notebook sets
it (PASSIVE) unless --wait-policy says otherwise, and imports the notebook's module.
The inputs are random token ids and untrained weights: the timings, not the outputs,
are the point. Set MULTI30K_DIR as for the notebook.
"""

import argparse
import os
from pathlib import Path

from jupyter_client.manager import start_new_kernel

CODE = r"""
import time
import torch
import nbexport
lib = nbexport.load()
torch.manual_seed(0)
cpu = lib.run_config("cpu")
g = torch.Generator().manual_seed(0)
def train_time(threads, steps=6):
    torch.set_num_threads(threads)
    model = lib.build_model(cpu.model, 5000, 5000)
    lib.set_fast_path(model, True)
    opt, sched = lib.make_optimizer(model, cpu.model.d_model, cpu.factor, cpu.warmup)
    B, T = 160, 25   # about 4000 label tokens, like a cpu-preset batch
    src = torch.randint(4, 5000, (B, T), generator=g)
    tgt = torch.randint(4, 5000, (B, T + 1), generator=g)
    batch = lib.Batch(src, tgt, pad=lib.PAD)
    loss = lib.FastLossCompute(model.generator, lib.PAD, cpu.eps_ls)
    lib.train_step(model, batch, loss, opt, sched)
    t0 = time.perf_counter()
    for _ in range(steps):
        lib.train_step(model, batch, loss, opt, sched)
    return (time.perf_counter() - t0) / steps
def decode_time(threads, model, vocab, B, S, max_len, stepper):
    torch.set_num_threads(threads)
    model.eval()
    src = torch.randint(4, vocab, (B, S), generator=g)
    mask = (src != lib.PAD).unsqueeze(-2)
    with torch.no_grad():
        lib.greedy_decode(model, src, mask, max_len, lib.BOS, stepper=stepper)
        t0 = time.perf_counter()
        lib.greedy_decode(model, src, mask, max_len, lib.BOS, stepper=stepper)
    return time.perf_counter() - t0
tiny = lib.make_model(100, 100, "tiny")
small = lib.build_model(cpu.model, 5000, 5000)
res = {}
for t in (1, 2):
    res[f"ci_decode_{t}"] = decode_time(t, tiny, 100, 8, 20, 60, lib.DecoderStepper)
    res[f"cpu_decode_{t}"] = decode_time(
        t, small, 5000, cpu.eval_batch_size, 20, 40, lib.CachedDecoderStepper
    )
    res[f"cpu_train_step_{t}"] = train_time(t)
print("seconds (fewer is better), torch", torch.__version__)
for k, v in res.items():
    print(f"  {k:<18} {v:7.2f} s")
"""

EPOCH = r"""
import tempfile
import time
import torch
import nbexport
lib = nbexport.load()
torch.set_num_threads(lib.torch_threads("cpu"))
cfg = lib.run_config("cpu", epochs=1)
data = lib.prepare_data(cfg, lib.fetch_multi30k())
with tempfile.TemporaryDirectory() as tmp:
    t0 = time.perf_counter()
    model, history = lib.train(cfg, data, tmp, torch.device("cpu"), log=lambda *a: None)
    seconds = time.perf_counter() - t0
print(f"one cpu-preset epoch of Part 3 ({history['steps'][-1]} steps) at "
      f"{torch.get_num_threads()} thread(s): {seconds:.1f} s, "
      f"val loss {history['val_loss'][-1]:.4f}")
"""

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wait-policy",
        choices=["PASSIVE", "ACTIVE"],
        default="PASSIVE",
        help="OMP_WAIT_POLICY for the kernel (the notebook's: PASSIVE)",
    )
    parser.add_argument(
        "--epoch",
        action="store_true",
        help="time one epoch of Part 3's cpu-preset training instead",
    )
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_WAIT_POLICY": args.wait_policy}
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT), env=env)
    out = []

    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    try:
        code = EPOCH if args.epoch else CODE
        kc.execute_interactive(code, output_hook=hook, timeout=1800)
    finally:
        kc.stop_channels()
        km.shutdown_kernel()
    print(f"OMP_WAIT_POLICY={args.wait_policy}")
    print("".join(out))


if __name__ == "__main__":
    main()
