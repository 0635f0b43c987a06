"""Checked settings: a wrong type, a value out of range or an unknown name is an error
that names the setting, the value and what is allowed, raised before anything runs."""

from __future__ import annotations

import math
import types
from dataclasses import field, fields, replace


class ConfigError(ValueError):
    """A setting with a value that is not allowed; the message says what is."""


class ConfigTypeError(ConfigError, TypeError):
    """A setting of the wrong type."""


_KINDS = {
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    bool: lambda v: isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}

# Integer settings end up in C code (seeds, sizes); beyond this they overflow there.
INT_LIMIT = 2**63 - 1
# Float settings end up in float32 arithmetic (the learning rate, weight decay and
# their product in Adam's step); within this bound even a product of two stays finite
# there (float32 reaches 3.4e38).
FLOAT_LIMIT = 1e15


def _number(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def allowed(
    kind, *, low=None, above=None, below=None, high=None, choices=None, optional=False
) -> str:
    """What `check_setting` accepts, in words: "a number >= 0 and < 1"."""
    if choices is not None:
        text = f"one of {list(choices)}"
    elif kind is bool:
        text = "True or False"
    else:
        text = {int: "an integer", float: "a finite number", str: "a string"}[kind]
        bounds = [
            f"{op} {_number(v)}"
            for op, v in ((">=", low), (">", above), ("<", below), ("<=", high))
            if v is not None
        ]
        text += " " + " and ".join(bounds) if bounds else ""
    return text + (" or None" if optional else "")


def check_setting(
    owner,
    name,
    value,
    kind,
    *,
    low=None,
    above=None,
    below=None,
    high=None,
    choices=None,
    optional=False,
):
    """Raise ConfigError unless `value` is a `kind` within the bounds or choices; the
    message names the setting and the value and says what is allowed."""
    where = f"{owner}.{name}={value!r}"
    if value is None and optional:
        return
    what = allowed(
        kind,
        low=low,
        above=above,
        below=below,
        high=high,
        choices=choices,
        optional=optional,
    )
    if not _KINDS[kind](value):
        raise ConfigTypeError(f"{where}: must be {what}, not {type(value).__name__}")
    if choices is not None and value not in choices:
        raise ConfigError(f"{where}: choose {what}")
    if kind is int and abs(value) > INT_LIMIT:
        raise ConfigError(f"{where}: must be at most {INT_LIMIT} in size")
    if kind is float and math.isfinite(value) and abs(value) > FLOAT_LIMIT:
        raise ConfigError(
            f"{where}: must be at most {FLOAT_LIMIT:g} in size (larger numbers "
            "overflow the float32 arithmetic of training)"
        )
    out_of_range = (
        (kind is float and not math.isfinite(value))
        or (low is not None and value < low)
        or (high is not None and value > high)
        or (above is not None and not value > above)
        or (below is not None and not value < below)
    )
    if out_of_range:
        raise ConfigError(f"{where}: must be {what}")


def with_overrides(config, owner, **overrides):
    """`config` (a dataclass) with some fields replaced; an unknown name is an error."""
    known = [f.name for f in fields(config)]
    unknown = sorted(set(overrides) - set(known))
    if unknown:
        raise ConfigError(f"unknown {owner} setting(s) {unknown}; known: {known}")
    return replace(config, **overrides)


def setting(default, *, resumable=False, read_if=None, **bounds):
    """A dataclass field whose value `check_fields` checks: `bounds` are the keyword
    arguments of `check_setting` (low, above, below, high, choices).

    What a field declares about itself, so that no other module keeps a list of names:
    `resumable` (True, or a dict of other fields' values under which it holds): a run
    saved with another value may resume with this one, because it changes no number
    the run computes; `read_if` (a dict of other fields' values): the run reads this
    setting only when they hold (a word-level run never reads the BPE size), so
    another value changes nothing either."""
    meta = {"check": bounds, "resumable": resumable, "read_if": read_if or {}}
    return field(default=default, metadata=meta)


def _holds(conditions: dict, cfg: dict) -> bool:
    return all(cfg.get(k) == v for k, v in conditions.items())


def unread(cls, cfg: dict) -> set[str]:
    """The fields of dataclass `cls` that a config `cfg` (a dict) never reads."""
    return {
        f.name
        for f in fields(cls)
        if f.metadata.get("read_if") and not _holds(f.metadata["read_if"], cfg)
    }


def free_on_resume(cls, cfg: dict) -> set[str]:
    """The fields of `cls` whose value a run saved with config `cfg` (a dict) may
    change when it resumes: those declared `resumable` (where their condition holds
    in `cfg`) and those it never reads."""
    free = set()
    for f in fields(cls):
        cond = f.metadata.get("resumable", False)
        if cond is True or (isinstance(cond, dict) and _holds(cond, cfg)):
            free.add(f.name)
    return free | unread(cls, cfg)


def _kind(annotation):
    """(kind, optional) of a field annotation such as int, float or `int | None`."""
    if isinstance(annotation, types.UnionType):
        kinds = [a for a in annotation.__args__ if a is not type(None)]
        return kinds[0], type(None) in annotation.__args__
    return annotation, False


def check_fields(config) -> None:
    """Check every field of a dataclass declared with `setting(...)`: its type (from
    the annotation) and its bounds. Raises ConfigError naming the first bad one."""
    for f in fields(config):
        if "check" in f.metadata:
            kind, optional = _kind(f.type)
            check_setting(
                type(config).__name__,
                f.name,
                getattr(config, f.name),
                kind,
                optional=optional,
                **f.metadata["check"],
            )


def check_model(config) -> None:
    """Check a ModelConfig: every field's type (its annotation) and the bounds it
    declares (`setting(...)`, in the notebook's ModelConfig itself), then d_model
    even (§3.5's sines and cosines come in pairs) and divisible by h. Raises
    ConfigError naming the first bad setting."""
    for f in fields(config):
        kind, optional = _kind(f.type)
        bounds = f.metadata.get("check", {})
        value = getattr(config, f.name)
        name = type(config).__name__
        check_setting(name, f.name, value, kind, optional=optional, **bounds)
    if config.d_model % config.h or config.d_model % 2:
        raise ConfigError(
            f"{type(config).__name__}.d_model={config.d_model}: must be even (§3.5) "
            f"and divisible by h={config.h}"
        )


def check_tie(tie: str, src_vocab: int, tgt_vocab: int) -> None:
    """tie='all' shares one matrix between both sides: it needs one vocabulary."""
    if tie == "all" and src_vocab != tgt_vocab:
        raise ConfigError(
            f"tie='all' needs one vocabulary for both sides, got src_vocab="
            f"{src_vocab} and tgt_vocab={tgt_vocab}; use tie='tgt' or 'none'"
        )


def choose(name: str, key, table: dict):
    """table[key], or a ConfigError naming `name` and the keys allowed."""
    if key not in table:
        raise ConfigError(f"{name}={key!r} is unknown; use one of {list(table)}")
    return table[key]


# Model settings that earlier versions of the notebook had and this one has not,
# with the value under which they changed nothing (None: any value, a choice of
# kernel that computed the same function). A saved config that holds one at that
# value reads as today's; any other value is left for the model's check to refuse.
RETIRED_MODEL_SETTINGS = {"P_drop_attn": 0.0, "P_drop_ff": 0.0, "attn_impl": None}


def current_config(config):
    """A saved run config (a dict with a "model" dict) without the retired model
    settings that changed nothing; in place, and returned."""
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict):
        for name, neutral in RETIRED_MODEL_SETTINGS.items():
            if name in model and (neutral is None or model[name] == neutral):
                del model[name]
    return config


def check_named(cls, values: dict) -> None:
    """Check settings given by name (a dict) as dataclass `cls` would check them when
    made: an unknown name, a wrong type or a value out of bounds is a ConfigError. A
    preset's settings are checked this way when the preset is defined."""
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown {cls.__name__} setting(s) {unknown}; known: {list(known)}"
        )
    for name, value in values.items():
        f = known[name]
        if "check" in f.metadata:
            kind, optional = _kind(f.type)
            check_setting(
                cls.__name__,
                name,
                value,
                kind,
                optional=optional,
                **f.metadata["check"],
            )
