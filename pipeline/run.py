"""The resumable run: Part 3's `train` loop with its bookkeeping.

The book's `train(cfg, data, device)` is the loop a reader reads: the model, loss and
optimiser (`training_parts`), the batches, then windows of batches from the shuffled
epochs, each trained by Part 2's `run_epoch` and followed by `validation_loss`, the
best weights kept. `train` here is that same loop, calling those same functions, plus
what a real run needs around them (the notebook's deep dive "How a run survives a
crash" explains it):

* a folder per run: every `eval_every` steps a validation loss and a snapshot, every
  `resume_every` evaluations the whole state (`last.pt`, `atkit.resume`), so that a
  run started again continues where it stopped, and a finished run is loaded;
* a fingerprint of the book's code that trains (`fingerprint`), and of a model's own
  code where it was built outside the book (`model_code`): a run made by other code
  is trained again, and the log says which definitions changed;
* the faster step and lower precision, wrapped around Part 2's step rather than
  written into it: the model and the loss run under autocast (`Autocast`,
  `RunLoss`), float16's gradient scaler steps the optimiser (`ScaledOptimizer`);
* several processes (Part 5's `world`): each trains its share of the batches, the
  loss divided by the global batch's label tokens (`world.norm`);
* after each window, its losses read once from the device: a loss that is no longer
  finite stops the run, naming the first bad step.

A test holds this loop's losses to the book's `train` for the same config and seed.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import tempfile
import textwrap
import time
import types
from pathlib import Path

import torch

import annotated_transformer_lib as book
from atkit import checkpoints, fast, resume
from atkit.data import check_token_budget, epoch_order
from atkit.programs import run_tool
from atkit.resume import TrainingRun
from atkit.runner import SingleProcess, checked_sum, history_line
from atkit.settings import check_tie
from pipeline.config import config_from_dict
from pipeline.data import vocab_from_state

# ------------------------------------------------------------- the fingerprint

# The book's definitions whose code decides what a run computes: the model (Part 1),
# the loss, the step and the loop (Part 2, Part 3's training loop), the data
# (vocabularies, batches). A change to any of them makes a trained run stale.
TRAINED_BY = {
    "model": (
        "EncoderDecoder",
        "Generator",
        "LayerNorm",
        "SublayerConnection",
        "clones",
        "EncoderLayer",
        "Encoder",
        "DecoderLayer",
        "Decoder",
        "subsequent_mask",
        "attention",
        "MultiHeadedAttention",
        "PositionwiseFeedForward",
        "Embeddings",
        "sinusoidal_table",
        "PositionalEncoding",
        "ModelConfig",
        "MODEL_SIZES",
        "model_config",
        "build_model",
    ),
    "loss": ("SimpleLossCompute", "LabelSmoothing"),
    "step": (
        "Batch",
        "train_step",
        "run_epoch",
        "rate",
        "make_optimizer",
        "training_parts",
        "batch_stream",
        "validation_loss",
    ),
    "data": (
        "Vocab",
        "build_vocab",
        "build_word_vocabs",
        "SharedBPE",
        "train_shared_bpe",
        "build_shared_bpe",
        "bucket_batches",
        "collate",
        "make_batches",
    ),
}


def book_source() -> str:
    """The book's code: the committed module's text."""
    return inspect.getsource(book)


def definitions(source: str) -> dict[str, str]:
    """{name: code} of the book's top-level definitions (functions, classes and
    assignments) in `source`, as the parser reads them: comments, blank lines and the
    line each starts on do not count. The first definition of a name is its own."""
    found = {}
    for node in ast.parse(source).body:
        names = {getattr(node, "name", None)}
        if isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        for name in names - {None}:
            found.setdefault(name, ast.dump(node))
    return found


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint() -> dict:
    """{name: digest} of every definition in TRAINED_BY, from the book's source
    (parsed once: a fingerprint is taken at every start of a run)."""
    code = definitions(book_source())
    prints = {}
    for names in TRAINED_BY.values():
        for name in names:
            if name not in code:
                raise LookupError(
                    f"the book defines no {name} (pipeline.run.TRAINED_BY names it)"
                )
            prints[name] = digest(code[name])
    return prints


# Where a model's classes come from when they are not its own code: the book (its
# fingerprint covers it), PyTorch, the machinery.
NOT_MODEL_CODE = ("annotated_transformer_lib", "torch", "atkit", "builtins")


def model_code(model) -> dict:
    """{name: digest} of the code that a model built outside the book brings with it
    (a companion notebook's variant): every class of its modules defined elsewhere
    than the book, PyTorch or atkit, and every function or class of the same module
    that their code names (a helper a method calls, a class a constructor makes, a
    base class), followed from there; each from its source as the parser reads it
    (comments and blank lines do not count). Empty for a model of the book's own
    classes. What only built the model (a function that swapped its modules, an
    initialisation) is not named by the model's code, so it is not covered."""
    out, seen = {}, set()
    todo = [type(m) for m in model.modules()]
    todo = [c for c in todo if not c.__module__.startswith(NOT_MODEL_CODE)]
    home = {c.__module__ for c in todo}  # the modules the variant was written in
    while todo:
        obj = todo.pop()
        if obj in seen:
            continue
        seen.add(obj)
        functions, text = code_of(obj)
        out[obj.__qualname__] = digest(text)
        near = list(getattr(obj, "__bases__", ()))  # a class's bases
        for f in functions:
            near += [f.__globals__.get(n) for n in code_names(f.__code__)]
        todo += [
            x
            for x in near
            if isinstance(x, type | types.FunctionType)
            and getattr(x, "__module__", None) in home
            and x not in seen
        ]
    return out


def code_of(obj) -> tuple[list, str]:
    """(the functions, the text to digest) of a function or class: a class as its
    name, bases, plain attributes and methods (each method's own source: a class
    defined in a notebook cell has none of its own before Python 3.13)."""
    if isinstance(obj, types.FunctionType):
        return [obj], function_source(obj)
    functions, parts = [], [obj.__name__, *(b.__qualname__ for b in obj.__bases__)]
    for name, value in vars(obj).items():
        value = getattr(value, "__func__", value)  # staticmethod, classmethod
        if isinstance(value, property):
            value = value.fget
        if isinstance(value, types.FunctionType):
            functions.append(value)
            parts.append(function_source(value))
        elif not name.startswith("__"):
            parts.append(f"{name} = {value!r}")
    return functions, "\n".join(parts)


def function_source(f) -> str:
    try:
        source = textwrap.dedent(inspect.getsource(f))
    except (OSError, TypeError):
        raise ValueError(
            f"pipeline.run.model_code: {f.__qualname__} has no source to fingerprint "
            "(define the model's code in a file or a notebook cell)"
        ) from None
    try:
        return ast.dump(ast.parse(source))
    except SyntaxError:  # a lambda inside a longer expression
        return source.strip()


def code_names(code) -> set[str]:
    """The global names a code object (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= code_names(const)
    return names


def changed_code(saved: dict | None, now: dict) -> str | None:
    """Why a run saved with fingerprint `saved` is stale under `now`, in words; None
    when the code that trains is the same."""
    if not saved:
        return "its checkpoints record no fingerprint of the code that trained it"
    changed = [n for n in now if saved.get(n) != now[n]]
    changed += [n for n in saved if n not in now]
    if not changed:
        return None
    parts = [
        f"{part} ({', '.join(n for n in names if n in changed)})"
        for part, names in TRAINED_BY.items()
        if any(n in changed for n in names)
    ]
    books = {n for names in TRAINED_BY.values() for n in names}
    own = [n for n in changed if n not in books]
    if own:
        parts.append(f"the model's own code ({', '.join(own)})")
    whose = "the code" if own else "the book's code"
    return f"{whose} changed since it was trained: " + "; ".join(parts)


def stale_run(ckpt_dir, code: dict) -> str | None:
    """Why the run saved in ckpt_dir (if any) was made by other code, else None."""
    found = checkpoints.resume_state(ckpt_dir, lambda *a, **k: None)
    if found is None:
        return None
    return changed_code(found[1].get("history", {}).get("code"), code)


# ----------------------------------------------------------- around the step


class Autocast(torch.nn.Module):
    """A model whose forward pass runs under a precision's autocast."""

    def __init__(self, model, precision):
        super().__init__()
        self.model, self.precision = model, precision

    def forward(self, *args):
        with self.precision.autocast():
            return self.model(*args)


class RunLoss:
    """Part 2's loss compute as a run calls it: under autocast, divided by the
    processes' normaliser (`norm(label tokens)`, None: the batch's own), scaled for
    float16's gradient scaler, and each step's summed loss kept (`steps`) for the
    check after a window."""

    def __init__(self, loss_compute, precision, norm=None):
        self.loss_compute, self.precision, self.norm = loss_compute, precision, norm
        self.steps = []

    def __call__(self, x, y, ntokens):
        norm = self.norm(ntokens) if self.norm is not None else ntokens
        with self.precision.autocast():
            loss_sum, loss = self.loss_compute(x, y, norm)
        self.steps.append(loss_sum)
        scaler = self.precision.scaler
        return loss_sum, scaler.scale(loss) if scaler is not None else loss


class ScaledOptimizer:
    """An optimiser stepped through float16's gradient scaler (the step is skipped
    when a gradient overflowed)."""

    def __init__(self, optimizer, scaler):
        self.optimizer, self.scaler = optimizer, scaler

    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()


# ------------------------------------------------------------------ the parts


def build(cfg, data, device, model=None):
    """(model, optimizer, scheduler, loss_compute, precision) of a config: the
    book's `training_parts` (with `model` instead of a new one, if given), switched
    to the faster step where the config asks for it."""
    check_tie(cfg.model.tie, len(data.vocab_src), len(data.vocab_tgt))
    model, loss_compute, optimizer, scheduler = book.training_parts(
        cfg, data, device, model
    )
    precision = fast.choose_precision(device, cfg.precision)
    if cfg.fast:
        fast.set_fast_path(model, attn_impl=fast.fast_attention_impl(precision))
        loss_compute = fast.FastLossCompute(model.generator, book.PAD, cfg.eps_ls)
    return model, optimizer, scheduler, loss_compute, precision


def model_from_checkpoint(checkpoint, device="cpu"):
    """(model in eval mode, RunConfig, source vocab, target vocab) of a checkpoint
    file or dict in the notebook's format."""
    state, where = checkpoints.checked_state(checkpoint)
    with checkpoints.not_this_notebook(where):
        cfg = config_from_dict(state["config"])
        vs, vt = (vocab_from_state(state[k]) for k in ("vocab_src", "vocab_tgt"))
        check_tie(cfg.model.tie, len(vs), len(vt))
        model = book.build_model(cfg.model, len(vs), len(vt))
        model.load_state_dict(state["model"])
    return model.to(device).eval(), cfg, vs, vt


def best_model(ckpt_dir, history, device):
    """The snapshot with the lowest validation loss, rebuilt."""
    snapshot = resume.load_snapshot(ckpt_dir, history, history["best_step"])
    return model_from_checkpoint(snapshot, device)[0]


def averaged_model(ckpt_dir, history, device, n_avg):
    """The average (the book's `average_checkpoints`, §6.1) of the n_avg snapshots
    that end at the best one."""
    snapshots = resume.load_last_snapshots(ckpt_dir, history, n_avg)
    model = model_from_checkpoint(snapshots[-1], device)[0]
    model.load_state_dict(book.average_checkpoints(snapshots))
    return model.eval()


# ------------------------------------------------------------------ the run


def train(
    cfg,
    data,
    ckpt_dir,
    device,
    *,
    model=None,
    batches=None,
    log=print,
    max_steps=None,
    world=None,
    fresh=False,
):
    """Train, resume, or load the finished run in ckpt_dir; returns (model, history).
    `model`: an already-built model to train (a variant of the book's; its own code
    joins the fingerprint, `model_code`), else the book's `build_model`; `batches`:
    (training batches, validation batches) to use instead of the book's
    `make_batches` of data.train and data.val, each with the fields Part 2's
    `train_step` reads (src, tgt, src_mask, tgt_mask, tgt_y, ntokens), in the order
    of the pairs' buckets (a decoder-only variant joins each pair into one row);
    `fresh` deletes an earlier run's checkpoint files in ckpt_dir first, as does a
    run made by other code (the log says which code changed); `world` is the
    processes that share the run (one by default)."""
    world = world or SingleProcess()
    log = log if world.is_main else (lambda *args, **kw: None)
    code = fingerprint() | ({} if model is None else model_code(model))
    if not fresh:
        checkpoints.check_ckpt_dir(ckpt_dir)  # a folder it can use, first
        why = stale_run(ckpt_dir, code)
        if why is not None:
            log(f"{ckpt_dir}: {why}: training it again")
            fresh = True
    with resume.run_folder(ckpt_dir, world, fresh, log):  # checked and locked
        run = start_run(cfg, data, ckpt_dir, device, world, log, model=model)
        run.history.setdefault("code", code)
        return train_run(run, world, log, max_steps, batches)


def start_run(cfg, data, ckpt_dir, device, world=None, log=print, model=None):
    """The run's parts as a TrainingRun, put back from the folder's last.pt (or
    prev.pt) if it has one."""
    world = world or SingleProcess()
    built = build(cfg, data, device, model)
    run = TrainingRun(cfg, data, *built, Path(ckpt_dir), torch.device(device))
    resume.resume(run, world, log)
    return run


def train_run(run, world, log=print, max_steps=None, batches=None):
    """The book's `train` loop with its bookkeeping: up to the run's budget (or
    max_steps), windows of batches (`run_batches`) trained by Part 2's `run_epoch`,
    every eval_every steps `evaluate`. Returns (model, history)."""
    cfg, p = run.cfg, run.progress
    resume.check_max_steps(run, max_steps)
    if p["step"] >= cfg.steps:
        return finished_run(run, log)
    batches, val_batches = run_batches(run, world, batches)
    net = fast.maybe_compile(world.wrap(run.model), cfg.compile, run.device, log)
    net, loss, optimizer = step_parts(
        net, run.loss_compute, run.optimizer, run.precision, world.norm
    )
    stop = min(cfg.steps, max_steps or cfg.steps)
    while p["step"] < stop:
        todo, epoch_done = next_window(run, world, len(batches), stop)
        desc = f"steps {p['step'] + 1}-{p['step'] + len(todo)} of {cfg.steps}"
        start = time.perf_counter()
        _, ntokens, steps = book.run_epoch(
            [batches[j] for j in todo], net, loss, optimizer, run.scheduler, desc
        )
        total = checked_sum(loss.steps, p["step"], desc)  # stops on inf or NaN
        loss.steps.clear()
        seconds = time.perf_counter() - start
        advance(run, world, steps, total, ntokens, seconds, epoch_done)
        if p["step"] % cfg.eval_every == 0 or p["step"] == cfg.steps:
            evaluate(run, val_batches, world, log, last=p["step"] == stop)
        elif p["step"] == stop:  # stopped early by max_steps: resumable
            resume.save_run(run, world)
    return run.model, run.history


def step_parts(model, loss_compute, optimizer, precision, norm=None):
    """(model, loss, optimiser) as Part 2's `train_step` takes them in a run: the
    model under autocast in a lower precision, the loss as `RunLoss` (the processes'
    normaliser `norm`, float16's scaling, each step's loss kept), the optimiser
    stepped through float16's scaler; in float32 the model and optimiser as they
    are."""
    if precision.dtype is not None:
        model = Autocast(model, precision)
    if precision.scaler is not None:
        optimizer = ScaledOptimizer(optimizer, precision.scaler)
    return model, RunLoss(loss_compute, precision, norm), optimizer


def run_batches(run, world, given=None):
    """The run's training and validation batches (`given`, or the book's, collated
    once on its device), after checking that every sentence fits the positional
    encoding and every batch its token budget."""
    cfg, data = run.cfg, run.data
    resume.check_lengths(run)
    check_token_budget(cfg, data.train)
    if given is not None:
        batches, val_batches = given
    else:
        batches = book.make_batches(data.train, cfg, run.device)
        val_batches = book.make_batches(data.val, cfg, run.device)
    if len(batches) < world.size:
        raise ValueError(f"{len(batches)} batches cannot feed {world.size} processes")
    run.history["world_size"] = world.size
    return batches, val_batches


def next_window(run, world, n_batches, stop):
    """(batch indices up to the next evaluation or `stop`, whether they end the
    epoch): this process's share of the rest of the epoch's order, the order the
    book's `batch_stream` gives."""
    cfg, p = run.cfg, run.progress
    order = epoch_order(n_batches, cfg.seed, p["epoch"])
    mine = world.shard(order[p["batch"] :])
    next_eval = (p["step"] // cfg.eval_every + 1) * cfg.eval_every
    todo = mine[: min(next_eval, stop) - p["step"]]
    return todo, len(todo) == len(mine)


def advance(run, world, steps, loss, ntokens, seconds, epoch_done):
    """Count a window's steps, summed loss, label tokens and time into the run."""
    p = run.progress
    run.window_s += seconds  # training seconds since the last evaluation
    run.history["train_time_s"] += seconds
    p.update(
        step=p["step"] + steps,
        batch=p["batch"] + steps * world.size,
        loss=p["loss"] + loss,
        ntokens=p["ntokens"] + ntokens,
    )
    if epoch_done:
        p.update(epoch=p["epoch"] + 1, batch=0)


def finished_run(run, log):
    """A run that reached its budget: its log as it was, and its model."""
    log(f"finished run loaded from {run.ckpt_dir}:")
    for i in range(len(run.history["steps"])):
        log(history_line(run.history, i))
    return run.model.eval(), run.history


def validation_loss(run: TrainingRun, val_batches) -> float:
    """The book's `validation_loss`, in the run's precision."""
    model, loss = run.model, run.loss_compute
    if run.precision.dtype is not None:
        model, loss = Autocast(model, run.precision), RunLoss(loss, run.precision)
    return book.validation_loss(model, val_batches, loss)


def evaluate(run, val_batches, world, log=print, last=False):
    """Validate, snapshot, and every resume_every evaluations (and at the last step
    of a call to train) write last.pt."""
    p, h = run.progress, run.history
    summed = world.all_sum(torch.tensor([p["loss"], p["ntokens"]], dtype=torch.float64))
    loss, ntokens = summed.tolist()
    val = validation_loss(run, val_batches)
    h["steps"].append(p["step"])
    h["train_loss"].append(loss / max(ntokens, 1))
    h["val_loss"].append(val)
    h["time_s"].append(run.window_s)
    h["tokens"] += int(ntokens)
    if h["best_step"] is None or val < h["val_loss"][h["steps"].index(h["best_step"])]:
        h["best_step"] = p["step"]
    p.update(loss=0.0, ntokens=0)
    run.window_s = 0.0
    resume.save_snapshot(run, world, val)
    if last or len(h["steps"]) % run.cfg.resume_every == 0:
        resume.save_run(run, world)
        resume.prune_snapshots(run, world)  # keeps those Part 4 may average
    world.barrier()
    log(history_line(h, len(h["steps"]) - 1))


def bench(preset: str, steps: int = 3, rounds: int = 3) -> dict:
    """Part 5: the book's step against the fast one on the preset's model, measured
    by tools/bench.py in a process of its own (atkit.programs.run_tool); its report
    printed, its figures (the JSON it writes into a folder of its own) returned."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        args = ["--preset", preset, "--steps", steps, "--rounds", rounds]
        run_tool("tools.bench", *args, "--json", out)
        return json.loads(out.read_text(encoding="utf-8"))
