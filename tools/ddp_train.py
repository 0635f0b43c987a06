"""Data-parallel training with the notebook's code, one process per device.

    torchrun --standalone --nproc_per_node=2 tools/ddp_train.py --task copy
    torchrun --standalone --nproc_per_node=8 tools/ddp_train.py --task multi30k \
        --preset gpu --ckpt checkpoints/ddp-gpu.pt

Every rank imports build/annotated_transformer_lib.py, the module that nbexport.py
generates from the notebook's library cells. If that file is missing or older than the
notebook, each rank regenerates it: every rank writes the same text through an atomic
rename, so no rank can import a half-written file. Only rank 0 logs, evaluates and
writes the checkpoint. Run as a single plain process (no torchrun), it trains on one
device.

For tests, AT_DDP_FAULT=RANK:STEP:MODE makes rank RANK fail after its optimiser step
STEP, by raising (MODE=raise), exiting with code 3 (exit) or hanging (hang).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import nbexport  # noqa: E402


def module_path(notebook: Path) -> Path:
    """Where the generated module of `notebook` lives: nbexport's usual file for the
    project's notebook; for any other notebook (tests point at a temporary one), a
    folder of its own in the temporary directory, named after the notebook's path."""
    if notebook.resolve() == nbexport.NOTEBOOK.resolve():
        return nbexport.EXPORT
    tag = hashlib.sha256(str(notebook.resolve()).encode()).hexdigest()[:10]
    folder = Path(tempfile.gettempdir()) / f"at-nbexport-{notebook.stem}-{tag}"
    return folder / f"{nbexport.MODULE_NAME}.py"


def import_notebook(notebook: Path):
    """Regenerate the module if it is stale (atomic write), then import it."""
    out = module_path(notebook)
    fresh = nbexport.module_source(notebook)
    if not out.exists() or out.read_text() != fresh:
        nbexport.export(notebook, out)  # same text from every rank; rename is atomic
    sys.path.insert(0, str(out.parent))
    return importlib.import_module(nbexport.MODULE_NAME)


def fault_injector(rank: int):
    """on_step callback for the failure tests (AT_DDP_FAULT=RANK:STEP:MODE)."""
    spec = os.environ.get("AT_DDP_FAULT")
    if not spec:
        return None
    fault_rank, fault_step, mode = spec.split(":")
    if int(fault_rank) != rank:
        return None

    def on_step(step: int) -> None:
        if step != int(fault_step):
            return
        print(f"rank {rank}: injected fault '{mode}' at step {step}", flush=True)
        if mode == "raise":
            raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        if mode == "exit":
            os._exit(3)
        if mode == "hang":
            while True:
                time.sleep(1)
        raise ValueError(f"unknown fault mode {mode!r}")

    return on_step


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--notebook", type=Path, default=nbexport.NOTEBOOK)
    p.add_argument("--task", choices=("copy", "multi30k"), default="copy")
    p.add_argument("--preset", default=None, help="Multi30k preset (default: PRESET)")
    p.add_argument("--epochs", type=int, default=None)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ckpt", type=Path, default=None, help="rank 0 writes it")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--timeout-s", type=float, default=300.0, help="collective timeout")
    p.add_argument("--norm", choices=("global", "local"), default="global")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument(
        "--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto"
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument(
        "--path", choices=("fast", "didactic"), default="fast", help="model kernels"
    )
    # copy task sizes
    p.add_argument("--n-sentences", type=int, default=4000)
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--vocab", type=int, default=11)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--warmup", type=int, default=None)
    return p.parse_args(argv)


def copy_task(lib, args):
    """(model, batches, to_device, evaluate, d_model, warmup, epochs) for the copy
    task with random-length sentences."""
    lib.torch.manual_seed(args.seed)
    d = args.d_model
    model = lib.make_model(
        args.vocab, args.vocab, "tiny", N=2, d_model=d, d_ff=4 * d, h=4, P_drop=0.0
    )
    batches = lib.bucketed_copy_batches(
        args.vocab, args.n_sentences, args.max_tokens, seed=args.seed
    )
    held_out = lib.bucketed_copy_batches(
        args.vocab, 200, args.max_tokens, seed=args.seed + 1
    )

    def evaluate(m):
        loss_compute = lib.FastLossCompute(m.generator, 0, 0.0)
        total = n = 0
        for b in held_out:
            b = b.to(next(m.parameters()).device)
            out = m(b.src, b.tgt, b.src_mask, b.tgt_mask)
            total += loss_compute(out, b.tgt_y, 1)[0].item()
            n += b.ntokens
        return total / n

    return model, batches, lambda b, dev: b.to(dev), evaluate, d, 100, 3, 0.0, 0


def multi30k_task(lib, args):
    """The same pieces for Multi30k, from Part 3 of the notebook."""
    if not hasattr(lib, "prepare_multi30k"):
        raise SystemExit(f"{args.notebook} has no Multi30k part (Part 3)")
    cfg = lib.multi30k_config(args.preset or lib.PRESET)
    data = lib.prepare_multi30k(cfg)
    lib.torch.manual_seed(cfg.seed)
    model = lib.multi30k_model(cfg, len(data.vocab_src), len(data.vocab_tgt))
    batches = lib.bucket_batches(data.train, cfg.max_tokens)  # index lists

    def evaluate(m):
        crit = lib.LabelSmoothing(len(data.vocab_tgt), lib.PAD, cfg.label_smoothing)
        loss_compute = lib.SimpleLossCompute(m.generator, crit)
        return lib.validation_loss(m, data, cfg, loss_compute)

    def to_device(idx, device):
        return lib.collate(data.train, idx, device)

    return (
        model,
        batches,
        to_device,
        evaluate,
        cfg.d_model,
        cfg.warmup,
        cfg.epochs,
        cfg.label_smoothing,
        lib.PAD,
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    lib = import_notebook(args.notebook)
    torch = lib.torch
    env = lib.setup_distributed(args.timeout_s)
    log = print if env.is_main else (lambda *a, **k: None)
    log(
        f"world size {env.world_size}, device {env.device}, "
        f"backend {torch.distributed.get_backend() if env.world_size > 1 else '-'}, "
        f"module {lib.__file__}",
        flush=True,
    )
    task = copy_task if args.task == "copy" else multi30k_task
    model, batches, to_device, evaluate, d_model, warmup, epochs, eps, pad = task(
        lib, args
    )
    fast = args.path == "fast"
    amp_dtype = lib.autocast_dtype(env.device, args.precision) if fast else None
    attn = lib.fast_attention_impl(env.device, amp_dtype)
    model = lib.set_fast_path(model, fast=fast, attn_impl=attn).to(env.device)
    if args.optimizer == "adam":
        make = lib.make_fast_optimizer if fast else lib.make_optimizer
        optimizer, scheduler = make(model, d_model, warmup=args.warmup or warmup)
    else:  # plain SGD: the exactness tests compare gradients without Adam's scaling
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (s + 1))
    if args.path == "fast":
        loss_compute = lib.FastLossCompute(model.generator, pad, eps)
    else:
        loss_compute = lib.SimpleLossCompute(
            model.generator, lib.LabelSmoothing(model.config.tgt_vocab, pad, eps)
        )
    start = time.perf_counter()
    _, history = lib.train_distributed(
        model,
        batches,
        loss_compute,
        optimizer,
        scheduler,
        env,
        to_device=to_device,
        epochs=args.epochs or epochs,
        max_steps=args.max_steps,
        norm=args.norm,
        amp_dtype=amp_dtype,
        compile_model=args.compile,
        seed=args.seed,
        log_every=args.log_every,
        evaluate=evaluate,
        ckpt_path=args.ckpt,
        on_step=fault_injector(env.rank),
        log=lambda msg: log(msg, flush=True),
    )
    log(f"done in {time.perf_counter() - start:.1f} s", flush=True)
    if env.world_size > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    from torch.distributed.elastic.multiprocessing.errors import record

    sys.exit(record(main)())
