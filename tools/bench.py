"""Training throughput of the didactic step and the fast step: same model, same batches.

    python -m tools.bench                          # the preset's model (cpu: N=2)
    python -m tools.bench --preset gpu             # the gpu preset's model, compiled
    python -m tools.bench --preset gpu --size base # Table 3's base sizes (N=6, d=512,
                                                   # d_ff=2048, h=8), the preset's vocab
    python -m tools.bench --precision fp32         # the fast path in float32
    python -m tools.bench --attn sdpa              # the fast path's attention kernel
    python -m tools.bench --profile                # operators by self time, fast path
    python -m tools.bench --json bench.json        # the figures as JSON too

The didactic path is Parts 1-2 as written: attention and LayerNorm as explicit tensor
operations, log-softmax + LabelSmoothing, float32, Adam's per-tensor update. The fast
path is Part 2's fast step in the preset's precision ("auto": what the hardware does
best) and, where the preset says so, compiled. Both are assembled as a run assembles
them (`pipeline.run.build`: the notebook's `training_parts`, switched to the fast step)
and trained by the notebook's `train_step`, on batches made by its `make_batches`
from random token ids with Multi30k-like lengths. Throughput is counted in label
(target) tokens per second. Paths alternate round by round so that load from other
processes hits both alike; the best round counts.

Besides tokens/s the script prints the arithmetic rate the step achieves (FLOP/s, from
PyTorch's FlopCounterMode on one step of each batch: forward and backward) and, on a
GPU, MFU: that rate as a share of the GPU's dense bf16 (fp16) peak. On a CPU it prints
the features that decide the precision (AMX, AVX512-BF16) instead. Peak memory is the
training's peak above the model and data: max_memory_allocated on a GPU; on a CPU the
growth of the resident set's high-water mark in a fresh process per path.

Last, where the run is the one the target is set for, it prints the target beside what
it measured. The target is set for the gpu preset's own model (N=6, d_model=512,
d_ff=1024, h=4, vocabulary 8000) on one H100: the fast step at least 5 times the
didactic one and at least 300,000 label tokens/s. It is judged only for `--preset gpu`
as it stands (no --set, --size, --vocab, --precision, --compile or --attn) on an H100;
elsewhere one line says that no target is judged and why, and no target figure is
printed beside figures it was not set for (issue 68: on a CPU it is a GPU target, not
measured). Every flag and the --json path are checked before anything
is measured; a failure ends in one `error:` line (tools/errors.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

from atkit import config, files, processes, runtime
from atkit.prose import say
from tools import errors
from tools import train as cli

PROG = "python -m tools.bench"

# Dense bf16 (fp16 where the GPU has no bf16) tensor-core peaks, FLOP/s, from the
# vendors' data sheets. Names match as whole words, specific ones first.
PEAK_FLOPS = [
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("GH200", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L40", 181e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("4090", 165e12),
    ("V100", 125e12),  # fp16
    ("T4", 65e12),  # fp16
    ("P100", 18.7e12),  # fp16; the paper's GPU (§5.2)
]
PATHS = ("didactic", "fast")


@dataclasses.dataclass(frozen=True)
class Target:
    """What the fast step should reach (issue 46): set on the gpu preset's own model,
    measured as `python -m tools.bench --preset gpu` measures it, on one `gpu`."""

    preset: str = "gpu"
    gpu: str = "H100"
    speedup: float = 5.0  # fast / didactic, label tokens/s
    tokens_per_s: float = 300_000  # the fast path's label tokens/s


TARGET = Target()


def names_gpu(device_name: str, key: str) -> bool:
    """Whether `key` ("H100") names the GPU `device_name`, as a whole word."""
    return bool(re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", device_name, re.I))


def peak_flops(device_name: str) -> float | None:
    for key, flops in PEAK_FLOPS:
        if names_gpu(device_name, key):
            return flops
    return None


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def paths_arg(text: str) -> list[str]:
    paths = text.split(",")
    bad = [p for p in paths if p not in PATHS] or (len(set(paths)) < len(paths))
    if bad or not paths:
        raise argparse.ArgumentTypeError(f"choose from {PATHS}, comma-separated")
    return paths


def parse_args(lib=None, argv=None):
    """(args, the RunConfig to measure). The command line is read before the
    notebook (`lib`, loaded here when None) and torch load: --help is quick."""
    import nbexport

    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    config.add_preset_option(p)
    cli.add_set_option(p)
    p.add_argument(
        "--size",
        choices=sorted(nbexport.registry_names("MODEL_SIZES")),
        default=None,
        help="a named model size instead of the preset's model",
    )
    p.add_argument("--vocab", type=positive, default=None, help="default: bpe_size")
    p.add_argument("--batches", type=positive, default=8, help="distinct batches")
    p.add_argument("--steps", type=positive, default=3, help="timed steps per round")
    p.add_argument("--rounds", type=positive, default=3)
    p.add_argument(
        "--precision",
        choices=config.PRECISIONS,
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
        type=positive,
        default=None,
        help="torch threads (default: Setup's rule for the preset)",
    )
    p.add_argument(
        "--attn",
        choices=("didactic", "sdpa"),
        default=None,
        help="the fast path's attention (default: fast_attention_impl's choice)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="print torch.profiler's top operators of the fast path and stop",
    )
    p.add_argument("--paths", type=paths_arg, default=list(PATHS))
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--json",
        type=cli.file_path,
        default=None,
        help="also write the figures to this file (JSON)",
    )
    args = p.parse_args(argv)
    cores = runtime.cores_available()
    if args.threads and args.threads > cores:
        p.error(
            f"--threads {args.threads}: this process may use {cores} CPU core(s); "
            f"give at most {cores} (more threads than cores only wait for each other)"
        )
    if args.profile and args.json:
        p.error("--profile prints a table and writes no figures: leave out --json")
    try:
        args.preset = args.preset or runtime.choose_preset()
    except ValueError as err:
        p.error(f"{err}, or give --preset")
    lib = lib or cli.library()
    cfg = cli.config_from_args(lib, args.preset, args.changes)
    if args.size:
        model = cli.pipeline().model_config(args.size, norm=cfg.model.norm, max_len=256)
        cfg = dataclasses.replace(cfg, model=model)
    return args, cfg


def check_json(path: Path) -> Path:
    """The file that --json will write (for a symbolic link, the file it points to),
    or a refusal that says what to do: now, before anything is measured. Not the
    notebook, nor the module made from it (atkit.files.check_outputs)."""
    import nbexport

    read = [("the notebook", nbexport.NOTEBOOK), ("its module", nbexport.EXPORT)]
    (path,) = files.check_outputs([("--json", path)], read, writes="the figures")
    return files.output_file("--json", path, "bench.json")


def synthetic_pairs(lib, cfg, vocab, n_batches):
    """Sentence pairs with Multi30k-like lengths (about 14 ids)."""
    torch = lib.torch
    gen = torch.Generator().manual_seed(0)
    n = n_batches * cfg.max_tokens // 12
    src_len = (torch.randn(n, generator=gen) * 5 + 14).clamp(4, 40).long().tolist()
    shift = torch.randint(-3, 4, (n,), generator=gen).tolist()
    tgt_len = [max(4, min(40, s + d)) for s, d in zip(src_len, shift, strict=True)]
    return [
        (
            torch.randint(4, vocab, (s,), generator=gen).tolist(),
            torch.randint(4, vocab, (t,), generator=gen).tolist(),
        )
        for s, t in zip(src_len, tgt_len, strict=True)
    ]


def build(lib, cfg, vocab, path, device, precision, compile_model, attn=None):
    """(model to call, loss_compute, optimizer, scheduler, precision) for a path."""
    if path == "didactic":
        cfg = cfg.updated(fast=False, precision="fp32", compile=False)
    else:
        cfg = cfg.updated(fast=True, precision=precision, compile=compile_model)
    from atkit import fast as atfast
    from pipeline import run

    sizes = types.SimpleNamespace(vocab_src=range(vocab), vocab_tgt=range(vocab))
    model, opt, sched, loss, prec = run.build(cfg, sizes, device)
    if path == "fast" and attn:
        atfast.set_fast_path(model, attn_impl=attn)
    net = atfast.maybe_compile(model, cfg.compile, device)
    net, loss, opt = run.step_parts(net, loss, opt, prec)  # as a run steps
    return net, loss, opt, sched, prec


def run_steps(lib, setup, batches, k, start_index=0):
    model, loss_compute, optimizer, scheduler, precision = setup
    tokens = 0
    for j in range(k):
        b = batches[(start_index + j) % len(batches)]
        lib.train_step(model, b, loss_compute, optimizer, scheduler)  # Part 2's
        tokens += b.ntokens
    return tokens


def step_flops(lib, setup, batches) -> float:
    """FLOPs of one training step per batch (forward + backward), counted by
    PyTorch, averaged per label token."""
    from torch.utils.flop_counter import FlopCounterMode

    model, loss_compute, _, _, precision = setup
    model = getattr(model, "_orig_mod", model)
    total = tokens = 0
    for b in batches:
        counter = FlopCounterMode(display=False)
        with counter, precision.autocast() if precision else _nothing():
            out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)
            loss_compute(out, b.tgt_y, b.ntokens)[1].backward()
        model.zero_grad(set_to_none=True)
        total += counter.get_total_flops()
        tokens += b.ntokens
    return total / tokens


def profile(lib, setup, batches, steps):
    """torch.profiler's operators by self time over `steps` fast steps (after two
    warm-up steps)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    run_steps(lib, setup, batches, 2)
    activities = [ProfilerActivity.CPU]
    if lib.torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profiler(activities=activities) as prof:
        run_steps(lib, setup, batches, steps)
    key = "self_cuda_time_total" if len(activities) > 1 else "self_cpu_time_total"
    print(f"{steps} fast steps, precision {setup[4].name}:")
    print(prof.key_averages().table(sort_by=key, row_limit=15))


def _nothing():
    import contextlib

    return contextlib.nullcontext()


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
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=processes.end_with_parent(signal.SIGKILL),
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise RuntimeError(
            f"measuring the {path} path's memory in a fresh process failed (exit "
            f"{proc.returncode}): {last}"
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])["peak_mib"]


def cpu_features() -> str:
    import torch

    flags = runtime.cpu_flags()
    have = [name for name, on in flags.items() if on] or ["none of AMX/AVX512"]
    aten = torch.backends.cpu.get_cpu_capability()
    return f"CPU features: {', '.join(have)} (ATen kernels: {aten})"


def target_setting(lib, args, vocab, precision_name, compile_model) -> list[str]:
    """How this run differs from the one the target is set for (`--preset gpu` as
    it stands), as the flags that make the difference; [] for none."""
    ref = cli.pipeline().run_config(TARGET.preset)
    differ = []
    if args.preset != TARGET.preset:
        differ.append(f"--preset {args.preset}")
    differ += [f"--set {key}" for key, _ in args.changes]
    if args.size:
        differ.append(f"--size {args.size}")
    if vocab != ref.bpe_size:
        differ.append(f"--vocab {vocab}")
    if precision_name != ref.precision:
        differ.append(f"--precision {precision_name}")
    if compile_model != ref.compile:
        differ.append("--compile" if compile_model else "--no-compile")
    if args.attn:
        differ.append(f"--attn {args.attn}")
    if set(args.paths) != set(PATHS):
        differ.append(f"--paths {','.join(args.paths)}")
    return differ


def judge_target(lib, differ, device_name, figures) -> tuple[list[str], dict]:
    """The lines that put the target beside the measured figures, and the same as a
    record for the JSON file. The target is judged only where it was set: the gpu
    preset's run as it stands, on an H100."""
    ref = cli.pipeline().run_config(TARGET.preset)
    m = ref.model
    lines = [
        f"target: fast >= {TARGET.speedup:g}x didactic and >= "
        f"{TARGET.tokens_per_s:,.0f} label tok/s, for the {TARGET.preset} preset's "
        f"model (N={m.N} d_model={m.d_model} d_ff={m.d_ff} h={m.h} vocab="
        f"{ref.bpe_size}, `{PROG} --preset {TARGET.preset}`) on one {TARGET.gpu}"
    ]
    record = {
        "speedup": TARGET.speedup,
        "tokens_per_s": TARGET.tokens_per_s,
        "gpu": TARGET.gpu,
        "preset": TARGET.preset,
        "judged": False,
        "met": None,
    }
    if device_name is None:
        why = "it is a GPU target and this run is on a CPU (not measured here)"
        return [not_judged(why)], {**record, "why_not_judged": why}
    fast = figures.get("fast", {})
    speedup = figures.get("speedup")
    measured = "measured: " + ", ".join(
        part
        for part in (
            f"fast {speedup:.2f}x didactic" if speedup else None,
            f"{fast['tokens_per_s']:,.0f} label tok/s" if fast else None,
            f"MFU {fast['mfu']:.1%}" if "mfu" in fast else None,
        )
        if part
    )
    lines.append(measured + f" on {device_name}")
    if differ:
        why = f"this run is not the target's setting ({', '.join(differ)})"
    elif not names_gpu(device_name, TARGET.gpu):
        why = f"{device_name} is not an {TARGET.gpu}"
    else:
        short = []
        if speedup < TARGET.speedup:
            short.append(f"speedup {speedup:.2f}x < {TARGET.speedup:g}x")
        if fast["tokens_per_s"] < TARGET.tokens_per_s:
            short.append(
                f"{fast['tokens_per_s']:,.0f} < {TARGET.tokens_per_s:,.0f} label tok/s"
            )
        lines.append(f"target NOT met: {'; '.join(short)}" if short else "target met")
        return lines, {**record, "judged": True, "met": not short}
    return [not_judged(why)], {**record, "why_not_judged": why}


def not_judged(why: str) -> str:
    """The one line of a run the target was not set for: no target figure beside
    figures it would not compare with."""
    return (
        f"no speed target judged here: {why}; the target is set for `{PROG} --preset "
        f"{TARGET.preset}` on one {TARGET.gpu}"
    )


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, cfg = parse_args(None, argv)
    lib = cli.library()
    torch = lib.torch
    if args.json and not args.memory_child:
        args.json = check_json(args.json)
    vocab = args.vocab or cfg.bpe_size
    precision_name = args.precision or cfg.precision
    compile_model = cfg.compile if args.compile is None else args.compile
    torch.set_num_threads(args.threads or runtime.torch_threads(args.preset))
    device = runtime.default_device()
    cli.check_model_size(lib, cfg.model, vocab, vocab, device)
    pairs = synthetic_pairs(lib, cfg, vocab, args.batches)
    batches = lib.make_batches(pairs, cfg, device)[: args.batches]
    paths = args.paths
    if args.memory_child:
        setup = build(
            lib,
            cfg,
            vocab,
            args.memory_child,
            device,
            precision_name,
            compile_model,
            args.attn,
        )
        memory_child(lib, setup, batches)
        return 0
    if args.profile:
        setup = build(
            lib, cfg, vocab, "fast", device, precision_name, compile_model, args.attn
        )
        profile(lib, setup, batches, args.steps)
        return 0
    setups = {
        p: build(lib, cfg, vocab, p, device, precision_name, compile_model, args.attn)
        for p in paths
    }
    model = getattr(setups[paths[0]][0], "_orig_mod", setups[paths[0]][0])
    n_params = sum(p.numel() for p in model.parameters())
    ntok = [b.ntokens for b in batches]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    print(
        f"device {device}"
        + (f" ({name})" if name else "")
        + f", torch {torch.__version__}, {torch.get_num_threads()} thread(s)"
    )
    if device.type == "cpu":
        print(cpu_features())
    auto, why = runtime.auto_precision(device)
    print(f'precision="auto" here: {auto} ({why})')
    m = cfg.model
    say(
        f"preset {args.preset}: N={m.N} d_model={m.d_model} d_ff={m.d_ff} h={m.h} "
        f"vocab={vocab}: {n_params / 1e6:.1f}M parameters; {len(batches)} batches "
        f"of {min(ntok)}-{max(ntok)} label tokens (max_tokens {cfg.max_tokens})",
        indent=2,
    )
    if "fast" in setups:
        from atkit import fast as atfast

        fast = setups["fast"]
        impl = args.attn or atfast.fast_attention_impl(fast[4])
        print(
            f"fast path: precision {fast[4].name}, attention {impl}, "
            f"compile={compile_model and fast[0] is not model}"
        )
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
    peak = peak_flops(name) if name else None
    for p in paths:
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            run_steps(lib, setups[p], batches, 2)
            mem = (torch.cuda.max_memory_allocated(device) - base) / 2**20
        else:
            mem = cpu_peak_mib(argv, p)
        rate = max(rates[p])
        flops = step_flops(lib, setups[p], batches) * rate
        figures[p] = {
            "tokens_per_s": rate,
            "tokens_per_s_median": statistics.median(rates[p]),
            "flops_per_s": flops,
            "peak_mib": mem,
        }
        if peak:
            figures[p]["mfu"] = flops / peak
    print()
    for p, f in figures.items():
        mfu = f", MFU {f['mfu']:.1%} of {peak / 1e12:.0f} TFLOP/s" if peak else ""
        say(
            f"{p:>9}: {f['tokens_per_s']:>10,.0f} label tok/s (best round; median "
            f"{f['tokens_per_s_median']:,.0f}), {f['flops_per_s'] / 1e9:,.1f} "
            f"GFLOP/s{mfu}, peak memory {f['peak_mib']:,.0f} MiB above model and data",
            indent=11,
        )
    if {"didactic", "fast"} <= set(figures):
        ratio = figures["fast"]["tokens_per_s"] / figures["didactic"]["tokens_per_s"]
        figures["speedup"] = ratio
        print(f"fast / didactic: {ratio:.2f}x label tokens/s")
    differ = target_setting(lib, args, vocab, precision_name, compile_model)
    lines, figures["target"] = judge_target(lib, differ, name, figures)
    print()
    for line in lines:
        say(line, indent=2)
    if args.json:
        files.write_text_atomic(args.json, json.dumps(figures, indent=2) + "\n")
        print(f"figures -> {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(errors.run_main(main, PROG))
