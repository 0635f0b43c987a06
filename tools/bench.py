"""Training throughput of the didactic step and the fast step: same model, same batches.

    python -m tools.bench                          # the preset's model (cpu: "small")
    python -m tools.bench --preset gpu             # the base model, bf16, compiled
    python -m tools.bench --preset gpu --set max_tokens=16000 --vocab 37000
    python -m tools.bench --precision bf16         # bf16 autocast on the CPU too

The didactic path is Parts 1-2 as written: attention and LayerNorm as explicit tensor
operations, log-softmax + LabelSmoothing, float32, Adam's per-tensor update. The fast
path is Part 2's fast step: sdpa attention, fused LayerNorm, F.cross_entropy with label
smoothing, fused Adam, the preset's precision (bf16 on GPUs that have it, fp16 with a
GradScaler on those that do not) and, where the preset says so, torch.compile. Both use
the notebook's `train_step`, which never waits for the device. Throughput is counted in
label (target) tokens per second, as everywhere in the notebook. Paths alternate round
by round so that load from other processes hits both alike; the best round counts.

Peak memory is the training's peak above the model and data: max_memory_allocated on a
GPU; on a CPU the growth of the resident set's high-water mark in a fresh process per
path. On a GPU the script also prints MFU, the share of the GPU's dense bf16 peak that
the step's matrix products reach.
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

import nbexport

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


def parse_args(lib, argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=lib.PRESET_NAMES, default=None)
    p.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        type=lib.parse_setting,
        metavar="KEY=VALUE",
        help="change a RunConfig or ModelConfig setting",
    )
    p.add_argument("--vocab", type=int, default=None, help="default: bpe_size")
    p.add_argument("--batches", type=int, default=8, help="distinct batches")
    p.add_argument("--steps", type=int, default=3, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--precision",
        choices=lib.PRECISIONS,
        default=None,
        help="fast path precision (default: the preset's)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the fast path (default: the preset's)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: Setup's rule for the preset)",
    )
    p.add_argument("--paths", default="didactic,fast")
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--json", type=Path, default=None, help="also write figures here")
    return p.parse_args(argv)


def make_batches(lib, cfg, vocab, n_batches, device):
    """Sentence pairs with Multi30k-like lengths, bucketed by the notebook's
    bucket_batches under the preset's token budget."""
    torch = lib.torch
    gen = torch.Generator().manual_seed(0)
    n = n_batches * cfg.max_tokens // 12
    src_len = (torch.randn(n, generator=gen) * 5 + 14).clamp(4, 40).long().tolist()
    tgt_len = [
        max(4, min(40, s + d))
        for s, d in zip(
            src_len, torch.randint(-3, 4, (n,), generator=gen).tolist(), strict=True
        )
    ]
    pairs = [
        (
            torch.randint(4, vocab, (s,), generator=gen).tolist(),
            torch.randint(4, vocab, (t,), generator=gen).tolist(),
        )
        for s, t in zip(src_len, tgt_len, strict=True)
    ]
    buckets = lib.bucket_batches(pairs, cfg.max_tokens)[:n_batches]
    return [lib.collate(pairs, b, cfg.pad_multiple).to(device) for b in buckets]


def build(lib, cfg, vocab, path, device, precision_name, compile_model):
    """(model, loss_compute, optimizer, scheduler, precision) for a path."""
    torch = lib.torch
    torch.manual_seed(0)
    model = lib.build_model(cfg.model, vocab, vocab).to(device)
    d_model = cfg.model.d_model
    if path == "didactic":
        lib.set_fast_path(model, fast=False)
        optimizer, scheduler = lib.make_optimizer(model, d_model, warmup=400)
        crit = lib.LabelSmoothing(vocab, lib.PAD, cfg.eps_ls)
        loss = lib.SimpleLossCompute(model.generator, crit)
        return model, loss, optimizer, scheduler, None
    precision = lib.choose_precision(device, precision_name)
    lib.set_fast_path(model, attn_impl=lib.fast_attention_impl(precision))
    optimizer, scheduler = lib.make_optimizer(model, d_model, warmup=400, fused=True)
    loss = lib.FastLossCompute(model.generator, lib.PAD, cfg.eps_ls)
    net = lib.maybe_compile(model, compile_model)
    return net, loss, optimizer, scheduler, precision


def run_steps(lib, setup, batches, k, start_index=0):
    model, loss_compute, optimizer, scheduler, precision = setup
    tokens = 0
    for j in range(k):
        b = batches[(start_index + j) % len(batches)]
        lib.train_step(
            model, b, loss_compute, optimizer, scheduler, precision=precision
        )
        tokens += b.ntokens
    return tokens


def matmul_flops_per_step(model, batch, pad):
    """6 x (encoder weights x source tokens + (decoder + generator weights) x target
    tokens); embeddings are lookups, and attention's own products are left out."""
    enc = sum(p.numel() for p in model.encoder.parameters())
    dec = sum(p.numel() for p in model.decoder.parameters())
    gen = model.generator.proj.weight.numel()
    n_src = int((batch.src != pad).sum())
    return 6 * (enc * n_src + (dec + gen) * batch.ntokens)


def rss_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024  # kB
    raise KeyError(field)


def memory_child(lib, setup, batches):
    """Run in a fresh process: growth of the peak RSS over two training steps."""
    try:  # reset the high-water mark, so that importing does not count
        Path("/proc/self/clear_refs").write_text("5")
        base = rss_mib("VmRSS")
        run_steps(lib, setup, batches, 2)
        peak = rss_mib("VmHWM") - base
    except OSError:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        run_steps(lib, setup, batches, 2)
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    print(json.dumps({"peak_mib": peak}))


def cpu_peak_mib(argv, path) -> float:
    cmd = [sys.executable, "-m", "tools.bench", *argv, "--memory-child", path]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mib"]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    lib = nbexport.load()
    torch = lib.torch
    args = parse_args(lib, argv)
    preset = args.preset or lib.choose_preset()
    cfg = lib.run_config(preset, **dict(args.changes))
    vocab = args.vocab or cfg.bpe_size
    precision_name = args.precision or cfg.precision
    compile_model = cfg.compile if args.compile is None else args.compile
    torch.set_num_threads(args.threads or lib.torch_threads(preset))
    device = lib.default_device()
    batches = make_batches(lib, cfg, vocab, args.batches, device)
    paths = args.paths.split(",")
    if args.memory_child:
        setup = build(
            lib, cfg, vocab, args.memory_child, device, precision_name, compile_model
        )
        memory_child(lib, setup, batches)
        return 0
    setups = {
        p: build(lib, cfg, vocab, p, device, precision_name, compile_model)
        for p in paths
    }
    model = getattr(setups[paths[0]][0], "_orig_mod", setups[paths[0]][0])
    n_params = sum(p.numel() for p in model.parameters())
    ntok = [b.ntokens for b in batches]
    fast = setups.get("fast")
    print(
        f"device {device}"
        + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
        + f", torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    )
    m = cfg.model
    print(
        f"preset {preset}: N={m.N} d_model={m.d_model} d_ff={m.d_ff} h={m.h} "
        f"vocab={vocab}: {n_params / 1e6:.1f}M parameters; {len(batches)} batches "
        f"of {min(ntok)}-{max(ntok)} label tokens (max_tokens {cfg.max_tokens})"
    )
    if fast:
        print(f"fast path: precision {fast[4].name}, compile={compile_model}")
    for p in paths:  # warm-up: first-call allocations, kernel selection, compiling
        t = time.perf_counter()
        run_steps(lib, setups[p], batches, 1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        print(f"warm-up {p}: {time.perf_counter() - t:.1f} s", flush=True)
    rates = {p: [] for p in paths}
    for r in range(args.rounds):
        for p in paths:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t = time.perf_counter()
            tokens = run_steps(lib, setups[p], batches, args.steps, r * args.steps)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            rates[p].append(tokens / (time.perf_counter() - t))
        print(
            f"round {r + 1}: "
            + ", ".join(f"{p} {rates[p][-1]:,.0f}" for p in paths)
            + " label tok/s",
            flush=True,
        )
    figures = {}
    for p in paths:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            run_steps(lib, setups[p], batches, 2)
            peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        else:
            peak = cpu_peak_mib(argv, p)
        figures[p] = {
            "tokens_per_s": max(rates[p]),
            "tokens_per_s_median": statistics.median(rates[p]),
            "peak_mib": peak,
        }
    print()
    for p, f in figures.items():
        print(
            f"{p:>9}: {f['tokens_per_s']:>10,.0f} label tok/s (best round; median "
            f"{f['tokens_per_s_median']:,.0f}), peak memory {f['peak_mib']:,.0f} "
            "MiB above model and data"
        )
    if {"didactic", "fast"} <= set(figures):
        ratio = figures["fast"]["tokens_per_s"] / figures["didactic"]["tokens_per_s"]
        figures["speedup"] = ratio
        print(f"fast / didactic: {ratio:.2f}x label tokens/s")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = peak_flops(name)
        flops = sum(matmul_flops_per_step(model, b, lib.PAD) for b in batches)
        flops /= sum(ntok)
        for p in paths:
            rate = figures[p]["tokens_per_s"]
            line = f"{p:>9}: {rate:,.0f} label tok/s per GPU"
            if peak:
                figures[p]["mfu"] = flops * rate / peak
                line += (
                    f", MFU {figures[p]['mfu']:.1%} of {peak / 1e12:.0f} "
                    f"TFLOP/s ({name})"
                )
            print(line)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
