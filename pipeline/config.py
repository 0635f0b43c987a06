"""Configs made and checked: the book's ModelConfig from a named size, a preset's
RunConfig, and a saved config read back. The book's ModelConfig is a plain dataclass
that declares the values each setting allows (`atkit.settings.setting`); they are
checked here, where configs are made, and by every RunConfig that holds one."""

from __future__ import annotations

import annotated_transformer_lib as book
from atkit import config
from atkit.config import RunConfig
from atkit.settings import check_model, choose, with_overrides


def model_config(size: str = "base", **overrides):
    """The book's ModelConfig of a named size (MODEL_SIZES) plus overrides, checked:
    an unknown size or setting, a wrong type or a value out of bounds is a
    ConfigError that names it."""
    sizes = choose("size", size, book.MODEL_SIZES)
    cfg = with_overrides(book.ModelConfig(**sizes), "model", **overrides)
    check_model(cfg)
    return cfg


def run_config(name: str, **changes) -> RunConfig:
    """The RunConfig of preset `name`, with some run or model settings changed."""
    p = config.preset(name)
    return RunConfig(model=model_config(**p.model), **p.run).updated(**changes)


def config_from_dict(d: dict) -> RunConfig:
    """A RunConfig saved with `to_dict()` (a checkpoint's, a model file's)."""
    return RunConfig(**{**d, "model": model_config(**d["model"])})
