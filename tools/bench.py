"""Training throughput of the didactic path and the fast path, same model, same batches.

    python tools/bench.py                       # cpu preset model, ~8k vocabulary
    python tools/bench.py --fast-precision bf16 # bf16 autocast on the CPU too
    python tools/bench.py --d-model 512 --d-ff 2048 --layers 6 --heads 8 \
        --max-tokens 4000 --vocab 37000         # the base model, on a GPU

The didactic path is Parts 1-2 as written: attention and LayerNorm as explicit tensor
operations, log-softmax + LabelSmoothing, a `.item()` every step, float32. The fast
path is Part 5: sdpa attention, fused LayerNorm, F.cross_entropy with label smoothing,
no per-step synchronisation, autocast (bf16 on GPUs, fp16 + GradScaler where bf16 is
missing), torch.compile with --compile. Paths alternate round by round so that load
from other processes hits both alike; the best round counts. Peak memory is the
training's peak above the model and data: torch.cuda.max_memory_allocated on a GPU; on
a CPU the growth of the resident set's high-water mark in a fresh process per path
(VmHWM after resetting it through /proc/self/clear_refs, else ru_maxrss); tracemalloc
cannot see torch's allocations. On a shared CPU, wall-clock rates swing with the other
processes' load; the rate per CPU-second of this process (printed too) is steadier,
most of all with --threads 1.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from ddp_train import import_notebook  # noqa: E402

import nbexport  # noqa: E402

# Dense bf16 (fp16 where the GPU has no bf16) tensor-core peaks, FLOP/s, from the
# vendors' data sheets. First match wins, so the specific names come first.
PEAK_FLOPS = [
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("4090", 165e12),
    ("V100", 125e12),  # fp16
    ("T4", 65e12),  # fp16
    ("P100", 18.7e12),  # fp16; the paper's GPU (§5.2)
]


def peak_flops(device_name: str) -> float | None:
    for key, flops in PEAK_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--notebook", type=Path, default=nbexport.NOTEBOOK)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=1500, help="per batch and side")
    p.add_argument("--batches", type=int, default=8, help="distinct batches")
    p.add_argument("--steps", type=int, default=3, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fast-precision", default="auto", help="auto|fp32|bf16|fp16")
    p.add_argument("--compile", action="store_true", help="torch.compile (fast path)")
    p.add_argument("--attn", choices=("sdpa", "didactic"), help="fast path attention")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--paths", default="didactic,fast")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None, help="also write figures here")
    return p.parse_args(argv)


def make_batches(lib, args, device):
    """Sentence pairs with Multi30k-like lengths, bucketed under a token budget."""
    torch = lib.torch
    gen = torch.Generator().manual_seed(0)
    n = args.batches * args.max_tokens // 12
    src_len = (torch.randn(n, generator=gen) * 5 + 14).clamp(4, 40).long()
    tgt_len = (src_len + torch.randint(-3, 4, (n,), generator=gen)).clamp(4, 40)
    order = sorted(range(n), key=lambda i: (int(src_len[i]), int(tgt_len[i])))
    groups, current, longest = [], [], 0
    for i in order:
        need = max(longest, int(src_len[i]), int(tgt_len[i]))
        if current and (len(current) + 1) * need > args.max_tokens:
            groups.append(current)
            current, need = [], max(int(src_len[i]), int(tgt_len[i]))
        current.append(i)
        longest = need
    batches = []
    for group in groups[: args.batches]:
        S = max(int(src_len[i]) for i in group)
        T = max(int(tgt_len[i]) for i in group)
        src = torch.zeros(len(group), S, dtype=torch.long)
        tgt = torch.zeros(len(group), T, dtype=torch.long)
        for row, i in enumerate(group):
            src[row, : src_len[i]] = torch.randint(3, args.vocab, (int(src_len[i]),))
            tgt[row, : tgt_len[i]] = torch.randint(3, args.vocab, (int(tgt_len[i]),))
        batches.append(lib.Batch(src, tgt, pad=0).to(device))
    return batches


def build(lib, args, path, device):
    """(model, loss_compute, optimizer, scheduler, amp_dtype, scaler) for a path."""
    torch = lib.torch
    torch.manual_seed(0)
    model = lib.make_model(
        args.vocab,
        args.vocab,
        "base",
        N=args.layers,
        d_model=args.d_model,
        d_ff=args.d_ff,
        h=args.heads,
        tie="tgt",
    ).to(device)
    if path == "didactic":
        optimizer, scheduler = lib.make_optimizer(model, args.d_model, warmup=400)
        crit = lib.LabelSmoothing(args.vocab, 0, 0.1)
        return model, lib.SimpleLossCompute(model.generator, crit), optimizer, scheduler
    optimizer, scheduler = lib.make_fast_optimizer(model, args.d_model, warmup=400)
    amp = lib.autocast_dtype(device, args.fast_precision)
    lib.set_fast_path(
        model, attn_impl=args.attn or lib.fast_attention_impl(device, amp)
    )
    loss_compute = lib.FastLossCompute(model.generator, 0, 0.1)
    net = lib.maybe_compile(model, args.compile)
    return net, loss_compute, optimizer, scheduler


def fast_attn(lib, setups):
    if "fast" not in setups:
        return "-"
    model = getattr(setups["fast"][0], "_orig_mod", setups["fast"][0])
    impls = {m.attn_impl for m in model.modules() if hasattr(m, "attn_impl")}
    return ",".join(sorted(impls))


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_steps(lib, setup, batches, k, amp_dtype, scaler, start_index=0):
    model, loss_compute, optimizer, scheduler = setup
    tokens = 0
    for j in range(k):
        b = batches[(start_index + j) % len(batches)]
        lib.fast_train_step(
            model, [b], loss_compute, optimizer, scheduler, None, amp_dtype, scaler
        )
        tokens += b.ntokens
    return tokens


def matmul_flops_per_step(model, batch):
    """6 x (encoder weights x source tokens + (decoder + generator weights) x target
    tokens); embeddings are lookups, and attention's own products are left out."""
    enc = sum(p.numel() for p in model.encoder.parameters())
    dec = sum(p.numel() for p in model.decoder.parameters())
    gen = model.generator.proj.weight.numel()
    n_src = int((batch.src != 0).sum())
    return 6 * (enc * n_src + (dec + gen) * batch.ntokens)


def memory_child(lib, args, path, device):
    """Run in a fresh process: growth of the peak RSS over a few training steps."""
    batches = make_batches(lib, args, device)
    setup = build(lib, args, path, device)
    amp, scaler = amp_for(lib, args, path, device)
    try:  # reset the high-water mark, so that importing does not count
        Path("/proc/self/clear_refs").write_text("5")
        base = rss_mib("VmRSS")
        run_steps(lib, setup, batches, 2, amp, scaler)
        peak = rss_mib("VmHWM") - base
    except OSError:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run_steps(lib, setup, batches, 2, amp, scaler)
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    print(json.dumps({"peak_mib": peak}))


def amp_for(lib, args, path, device):
    if path == "didactic":
        return None, None
    amp = lib.autocast_dtype(device, args.fast_precision)
    return amp, lib.make_grad_scaler(device, amp)


def rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def cpu_peak_mib(args, path) -> float:
    """Peak RSS growth over two steps, in a fresh process per path (memory freed by
    one path stays in this process's heap and would hide the other's peak)."""
    cmd = [sys.executable, __file__, "--memory-child", path, *sys.argv[1:]]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mib"]


def main(argv=None) -> int:
    args = parse_args(argv)
    lib = import_notebook(args.notebook)
    torch = lib.torch
    if args.threads:
        torch.set_num_threads(args.threads)
    device = lib.DEVICE
    if args.memory_child:
        memory_child(lib, args, args.memory_child, device)
        return 0
    paths = args.paths.split(",")
    batches = make_batches(lib, args, device)
    setups = {p: build(lib, args, p, device) for p in paths}
    amps = {p: amp_for(lib, args, p, device) for p in paths}
    model = getattr(setups[paths[0]][0], "_orig_mod", setups[paths[0]][0])
    n_params = sum(p.numel() for p in model.parameters())
    ntok = [b.ntokens for b in batches]
    print(
        f"device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(
        f"model N={args.layers} d_model={args.d_model} d_ff={args.d_ff} h={args.heads}"
        f" vocab={args.vocab}: {n_params / 1e6:.1f}M parameters; {len(batches)}"
        f" batches of {min(ntok)}-{max(ntok)} target tokens (max_tokens"
        f" {args.max_tokens}); fast path precision"
        f" {str(amps.get('fast', (None,))[0] or 'fp32').replace('torch.', '')},"
        f" compile={args.compile}, attention"
        f" {fast_attn(lib, setups)}"
    )
    for p in paths:  # warm-up: first-call allocations, kernel selection, compilation
        t = time.perf_counter()
        run_steps(lib, setups[p], batches, 1, *amps[p])
        sync(torch, device)
        print(f"warm-up {p}: {time.perf_counter() - t:.1f} s", flush=True)
    rates = {p: [] for p in paths}
    cpu_rates = {p: [] for p in paths}
    for r in range(args.rounds):
        for p in paths:
            sync(torch, device)
            t, c = time.perf_counter(), time.process_time()
            tokens = run_steps(lib, setups[p], batches, args.steps, *amps[p], r)
            sync(torch, device)
            rates[p].append(tokens / (time.perf_counter() - t))
            cpu_rates[p].append(tokens / (time.process_time() - c))
        print(
            f"round {r + 1}: "
            + ", ".join(
                f"{p} {rates[p][-1]:,.0f} ({cpu_rates[p][-1]:,.0f} per CPU-s)"
                for p in paths
            )
            + " target tok/s",
            flush=True,
        )
    figures = {}
    for p in paths:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            run_steps(lib, setups[p], batches, 2, *amps[p])
            peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        else:
            peak = cpu_peak_mib(args, p)
        figures[p] = {
            "tokens_per_s": max(rates[p]),
            "tokens_per_s_median": statistics.median(rates[p]),
            "tokens_per_cpu_s": max(cpu_rates[p]),
            "peak_mib": peak,
        }
    print()
    for p, f in figures.items():
        print(
            f"{p:>9}: {f['tokens_per_s']:>10,.0f} target tok/s (best round; median"
            f" {f['tokens_per_s_median']:,.0f}; {f['tokens_per_cpu_s']:,.0f} per"
            f" CPU-second), peak memory {f['peak_mib']:,.0f} MiB above model and data"
        )
    if {"didactic", "fast"} <= set(figures):
        d, f = figures["didactic"], figures["fast"]
        ratio = f["tokens_per_s"] / d["tokens_per_s"]
        med = f["tokens_per_s_median"] / d["tokens_per_s_median"]
        figures["speedup"] = ratio
        cpu = f["tokens_per_cpu_s"] / d["tokens_per_cpu_s"]
        figures["speedup_cpu_time"] = cpu
        print(
            f"fast / didactic: {ratio:.2f}x tokens/s (medians: {med:.2f}x;"
            f" per CPU-second: {cpu:.2f}x)"
        )
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = peak_flops(name)
        flops = sum(matmul_flops_per_step(model, b) for b in batches) / sum(ntok)
        for p in paths:
            per_gpu = figures[p]["tokens_per_s"]  # one process, one GPU
            line = f"{p:>9}: {per_gpu:,.0f} target tok/s per GPU"
            if peak:
                mfu = flops * per_gpu / peak
                figures[p]["mfu"] = mfu
                line += f", MFU {mfu:.1%} of {peak / 1e12:.0f} TFLOP/s ({name})"
            else:
                line += f" (no peak FLOP/s known for {name!r}: no MFU)"
            print(line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
