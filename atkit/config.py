"""A run's settings and the presets, as data (no torch here: a program's --help and
AT_PRESET read them at once).

- `RunConfig`: everything about one training run; its `model` is the notebook's
  `ModelConfig` (Part 1), checked with the bounds its fields declare. The pipeline
  makes RunConfigs (`pipeline.run_config`, `pipeline.config_from_dict`): it imports
  the notebook's code, this module never does.
- `RecipeConfig`: Part 4's decoding choices, made on val (beam, length penalty,
  averaging).
- `PRESETS`: one `Preset` record per name; every list of preset names (AT_PRESET, each
  program's --preset) is `preset_names()`, and what differs between presets is a field
  of the record, never an `if` on a name: even the preset chosen by default on a
  machine is the one whose record names its device (`default_preset`). How long the
  long cells took in the committed run is in `runs/cell-minutes.json` (written by
  `make readme` from the executed notebook), read by `expected_time`.
- The vocabulary kinds `RunConfig.vocab` chooses from, each with the Part whose cell
  defines it.
"""

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from atkit.data import LANGS
from atkit.settings import (
    ConfigError,
    ConfigTypeError,
    check_fields,
    check_model,
    check_named,
    setting,
    with_overrides,
)

ROOT = Path(__file__).resolve().parents[1]
MINUTES_FILE = ROOT / "runs" / "cell-minutes.json"
PRECISIONS = ("auto", "fp32", "bf16", "fp16")  # Part 2's deep dive on the fast step


# ------------------------------------------------------------- vocabulary kinds


@dataclass(frozen=True)
class VocabKind:
    """A value of RunConfig.vocab: where the notebook defines it, and the setting that
    sizes it."""

    part: str
    cell: str
    sized_by: str


VOCAB_KINDS = {
    "words": VocabKind("Part 3", "Vocabulary", "min_freq"),
    "bpe": VocabKind("Part 4 (§5.1)", "One subword vocabulary", "bpe_size"),
}


# ------------------------------------------------------------------ RunConfig


@dataclass(frozen=True)
class RunConfig:
    model: Any  # Part 1's ModelConfig
    # data
    src_lang: str = setting("de", choices=LANGS)  # translate from this language
    vocab: str = setting("words", choices=tuple(VOCAB_KINDS))
    min_freq: int = setting(2, low=1, read_if={"vocab": "words"})  # rarer: <unk>
    bpe_size: int = setting(8000, low=5, read_if={"vocab": "bpe"})  # Part 4's pieces
    n_train: int | None = setting(None, low=1)  # training pairs used (None: all)
    n_eval: int | None = setting(None, low=1)  # val/test sentences used (None: all)
    max_sent_len: int = setting(128, low=3)  # ids per training sentence, <s> </s> too
    max_tokens: int = setting(4000, low=1)  # padded ids per batch and side (§5.1)
    pad_multiple: int = setting(1, low=1)  # batch lengths a multiple of this
    # optimisation
    eps_ls: float = setting(0.1, low=0.0, below=1.0)  # label smoothing, §5.4
    warmup: int = setting(4000, low=1)  # §5.3
    factor: float = setting(1.0, above=0.0)  # scales the rate of eq. 3
    cooldown: float = setting(0.0, low=0.0, high=1.0)  # Part 2; 0: eq. 3 as is
    weight_decay: float = setting(0.0, low=0.0)  # 0: the paper's Adam
    # the training budget; eq. 3 alone never reads the total, so it may change
    steps: int = setting(1000, low=1, resumable={"cooldown": 0.0})
    eval_every: int = setting(100, low=1)  # steps between validations
    resume_every: int = setting(1, low=1, resumable=True)  # evaluations per last.pt
    keep: int = setting(5, low=1)  # snapshots kept around the best (Part 4)
    seed: int = setting(0, low=0, high=2**32 - 1)
    # speed (Part 2's fast step) and decoding
    fast: bool = setting(False)
    precision: str = setting("fp32", choices=PRECISIONS)
    compile: bool = setting(False, resumable=True)  # the same numbers, compiled
    decode_tokens: int = setting(8000, low=1, resumable=True)  # ids per decoding batch

    def __post_init__(self):
        model = self.model
        if not hasattr(model, "__dataclass_fields__") or isinstance(model, type):
            kind = type(model).__name__
            raise ConfigTypeError(f"RunConfig.model must be a ModelConfig, not {kind}")
        check_model(model)  # the bounds that ModelConfig's fields declare
        check_fields(self)

    def updated(self, **changes) -> "RunConfig":
        """This config with some run or model settings changed."""
        model_names = {f.name for f in fields(self.model)}
        model = {k: v for k, v in changes.items() if k in model_names}
        run = {k: v for k, v in changes.items() if k not in model_names}
        if "model" in run:
            raise ConfigError("change model settings by name (d_model=...), not model=")
        new_model = with_overrides(self.model, "model", **model)
        return with_overrides(self, "run or model", model=new_model, **run)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RecipeConfig:
    beam_size: int = setting(4, low=1)  # §6.1
    alphas: tuple = (0.0, 0.6, 1.5, 2.5)  # length penalties tried on `val`;
    alpha_step: float = setting(1.0, above=0.0)  # then larger ones while the best
    alpha_cap: float = setting(6.0, low=0.0)  # is the largest tried, up to this
    n_avg: int = setting(5, low=1)  # at most this many snapshots averaged, §6.1
    eq3_branch: float = setting(0.3, above=0.0, below=1.0)  # last share: eq. 3 alone
    post_schedule: bool = setting(True)  # a post-norm twin with a schedule of its own,
    post_factor: float = setting(0.5, above=0.0)  # with the factor scaled by this
    post_warmup: int = setting(4000, low=1)  # and this warm-up

    def __post_init__(self):
        check_fields(self)
        if not self.alphas or not all(
            isinstance(a, int | float) and not isinstance(a, bool) and a >= 0
            for a in self.alphas
        ):
            raise ConfigError(f"RecipeConfig.alphas={self.alphas!r}: numbers >= 0")


# -------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Preset:
    """Everything a preset decides, as data. `model`: the arguments of Part 1's
    `model_config`; `run`: the RunConfig settings that differ from its defaults;
    `recipe`: Part 4's; `about`: what it is for, in a few words; `one_thread`: torch
    uses one thread (models too small to split), else the cores, shared among the
    processes; `publishes`: its run's Part 4 model is the one the page serves
    (exported into docs/); `default_on`: the device type ("cpu", "cuda") on which it
    is the preset chosen when AT_PRESET names none."""

    about: str
    model: dict
    run: dict
    recipe: RecipeConfig
    one_thread: bool = False
    publishes: bool = False
    default_on: str | None = None

    def __post_init__(self):
        check_named(RunConfig, {"model": None, **self.run})


PRESETS = {
    "ci": Preset(
        about="tiny models for the tests",
        model=dict(
            size="tiny",
            N=2,
            d_model=64,
            d_ff=256,
            h=4,
            norm="pre",
            tie="tgt",
            max_len=256,
        ),
        run=dict(
            n_train=1000,
            # val/test sentences scored: a model of 90 steps decodes most to their
            # length limit, so this sets most of the tests' decoding time
            n_eval=25,
            min_freq=1,
            max_tokens=1000,
            bpe_size=1000,
            warmup=100,
            factor=0.5,
            cooldown=0.3,
            steps=90,
            eval_every=30,
            keep=3,
        ),
        recipe=RecipeConfig(n_avg=3, post_warmup=200, alphas=(0.0, 1.0), alpha_cap=2.0),
        one_thread=True,
    ),
    "cpu": Preset(  # the runs behind each choice: runs/README.md
        about="a full run on two CPU cores",
        # E3, E5: N=2 for 3/4 of N=3's arithmetic, the full recipe's val BLEU within
        # its seed range (Part 3's 0.9 lower); B, C: the paper's dropout,
        # without which the smaller batches overfit
        model=dict(size="small", N=2, P_drop=0.1, norm="pre", tie="tgt", max_len=256),
        run=dict(
            max_tokens=2000,  # B: twice the updates from the same tokens
            bpe_size=7000,  # sixth round: above 5,000 on every seed, 1.09x a step
            warmup=400,  # a fifth of the run
            factor=0.7071,  # D: peak 2.2e-3 = 3.1e-3 / sqrt(2), for half the batch
            cooldown=0.3,
            steps=2000,  # about 9 passes; L: val BLEU about +1 over 1,600 steps
            eval_every=80,  # snapshots 80 steps apart for averaging (Part 4)
            keep=6,  # L: the average of 6 scored best on val, both ways
            fast=True,
            precision="auto",
        ),
        recipe=RecipeConfig(n_avg=6, post_schedule=False),  # one model less: shorter
        publishes=True,
        default_on="cpu",
    ),
    "gpu": Preset(  # each value is a choice; the deep dive on presets gives sources
        about="a larger model for one or more GPUs",
        # fairseq's IWSLT shape: d_ff 1024 and 4 heads
        model=dict(
            size="base", d_ff=1024, h=4, norm="pre", tie="tgt", P_drop=0.3, max_len=256
        ),
        run=dict(
            max_tokens=8000,  # about twice fairseq's IWSLT batch of 4096 tokens
            pad_multiple=8,  # few batch shapes for the compiled step
            warmup=800,  # a fifth of the run
            factor=0.45,  # peak 7.0e-4: about fairseq's 5e-4 x sqrt(2), twice the batch
            cooldown=0.3,  # anneal to zero over the last 30%
            weight_decay=1e-4,  # as fairseq's IWSLT recipe
            steps=4000,  # about 70 passes over the corpus
            eval_every=100,  # snapshots 100 steps apart, averaged in Part 4
            resume_every=10,  # last.pt every 1,000 steps
            keep=5,
            fast=True,
            precision="auto",
            compile=True,
        ),
        recipe=RecipeConfig(n_avg=5, post_warmup=1600),  # post-norm: peak 2.5e-4
        default_on="cuda",
    ),
}


def preset_names() -> tuple[str, ...]:
    """The one list of preset names: AT_PRESET's and every program's --preset."""
    return tuple(PRESETS)


def preset(name: str, what: str = "preset") -> Preset:
    """The record of preset `name`; an unknown name is refused naming `what`."""
    if name not in PRESETS:
        raise ConfigError(f"{what}={name!r} is unknown; use one of {list(PRESETS)}")
    return PRESETS[name]


def default_preset(device_type: str) -> str:
    """The preset whose record is the default on `device_type` ("cpu", "cuda")."""
    (name,) = [n for n, p in PRESETS.items() if p.default_on == device_type]
    return name


def publisher() -> str:
    """The preset whose run the page serves (its record's `publishes`)."""
    (name,) = [n for n, p in PRESETS.items() if p.publishes]
    return name


def add_preset_option(parser, default=None, help=None) -> None:
    """A program's --preset, from the one list."""
    parser.add_argument(
        "--preset",
        choices=preset_names(),
        default=default,
        help=help or "the run's size (default: AT_PRESET, else the hardware's)",
    )


def settings_table(name: str) -> str:
    """Preset `name` in a few lines: the model's size and the settings that differ
    from it, then the run's and the recipe's settings that differ from their
    defaults (RunConfig's and RecipeConfig's)."""
    from atkit.prose import wrap

    p = preset(name)
    model = dict(p.model)
    size = model.pop("size", "base")
    parts = {
        "model": [size, *(f"{k}={v!r}" for k, v in model.items())],
        "run": [f"{k}={v!r}" for k, v in p.run.items()],
        "recipe": [f"{k}={v!r}" for k, v in _changed(p.recipe).items()] or ["as §6.1"],
    }
    lines = [f"preset {name} ({p.about}):"]
    lines += [
        wrap(f"  {k + ':':<8}{', '.join(v)}", indent=10) for k, v in parts.items()
    ]
    return "\n".join(lines)


def _changed(config) -> dict:
    default = type(config)()
    return {
        f.name: getattr(config, f.name)
        for f in fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    }


# ---------------------------------------------------- the committed run's times


# runs/cell-minutes.json: {preset: {"machine": ..., "minutes": {cell: minutes}}}
MINUTES_SCHEMA = {
    "type": "object",
    "additionalProperties": {
        "type": "object",
        "required": ["machine", "minutes"],
        "properties": {
            "machine": {"type": "string", "minLength": 1},
            "minutes": {
                "type": "object",
                "additionalProperties": {"type": "number", "minimum": 0},
            },
        },
    },
}
MINUTES_FIX = (
    "write it again from the executed notebook with `make readme` (python -m "
    "tools.readme_results)"
)


def committed_minutes(path: Path = MINUTES_FILE) -> dict:
    """{preset: {"machine": ..., "minutes": {cell: minutes}}} of the committed run
    (runs/cell-minutes.json); {} where the file is missing. A file that is not such
    a record is a MalformedFileError naming it and what to do."""
    from atkit.records import read_json

    try:
        return read_json(path, MINUTES_SCHEMA, fix=MINUTES_FIX)
    except FileNotFoundError:
        return {}


def expected_time(name: str, cell: str, path: Path = MINUTES_FILE) -> str:
    """How long `cell` took with preset `name` in the committed run, in words."""
    preset(name)
    run = committed_minutes(path).get(name, {})
    minutes = run.get("minutes", {}).get(cell)
    if minutes is None:
        return f"expected time of this cell with preset {name}: not measured yet"
    return (
        f"expected: about {max(1, round(minutes))} min with preset {name} on "
        f"{run['machine']}"
    )


def check_copy_task(cfg: RunConfig) -> None:
    """The copy task (Part 5's check) has one vocabulary of symbols: a config that
    asks for subwords or another source language is refused."""
    if cfg.vocab != "words" or cfg.src_lang != "de":
        raise ConfigError(
            "the copy task has no languages or subwords: leave vocab and src_lang "
            f"as they are (got vocab={cfg.vocab!r}, src_lang={cfg.src_lang!r})"
        )
