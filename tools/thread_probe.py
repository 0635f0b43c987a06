"""Time a cpu-preset training step and a tiny model's greedy decode inside a Jupyter
kernel, at 1 and at 2 torch threads. Run it idle and under load with load_check:

    python -m tools.load_check -- python -m tools.thread_probe

The kernel starts in the repository root and imports the notebook's module; set
MULTI30K_DIR as for the notebook (the probe itself uses random token ids).
"""

from pathlib import Path

from jupyter_client.manager import start_new_kernel

CODE = r"""
import time
import torch
import nbexport
lib = nbexport.load()
torch.manual_seed(0)
def train_time(threads, steps=6):
    torch.set_num_threads(threads)
    cfg = lib.run_config("cpu")
    model = lib.build_model(cfg.model, 5000, 5000)
    lib.set_fast_path(model, True)
    opt, sched = lib.make_optimizer(model, cfg.model.d_model, cfg.factor, cfg.warmup)
    g = torch.Generator().manual_seed(0)
    B, T = 160, 25   # about 4000 label tokens, like a cpu-preset batch
    src = torch.randint(4, 5000, (B, T), generator=g)
    tgt = torch.randint(4, 5000, (B, T + 1), generator=g)
    batch = lib.Batch(src, tgt, pad=lib.PAD)
    loss = lib.FastLossCompute(model.generator, lib.PAD, cfg.eps_ls)
    lib.train_step(model, batch, loss, opt, sched)
    t0 = time.perf_counter()
    for _ in range(steps):
        lib.train_step(model, batch, loss, opt, sched)
    return (time.perf_counter() - t0) / steps
def decode_time(threads):
    torch.set_num_threads(threads)
    model = lib.make_model(100, 100, "tiny").eval()
    src = torch.randint(4, 100, (8, 20), generator=torch.Generator().manual_seed(0))
    mask = (src != lib.PAD).unsqueeze(-2)
    lib.greedy_decode(model, src, mask, 60, lib.BOS)
    t0 = time.perf_counter()
    with torch.no_grad():
        lib.greedy_decode(model, src, mask, 60, lib.BOS)
    return time.perf_counter() - t0
res = {}
for t in (1, 2):
    res[f"decode_{t}"] = decode_time(t)
    res[f"train_step_{t}"] = train_time(t)
print("RESULT", res)
"""

ROOT = Path(__file__).resolve().parents[1]
km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
out = []


def hook(msg):
    if msg["msg_type"] == "stream":
        out.append(msg["content"]["text"])
    elif msg["msg_type"] == "error":
        out.append("\n".join(msg["content"]["traceback"]))


kc.execute_interactive(CODE, output_hook=hook, timeout=900)
kc.stop_channels()
km.shutdown_kernel()
print("".join(out))
