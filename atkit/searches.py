"""A decoding method as a record: its function and its options, each with a default
and bounds. The notebook's SEARCHES maps names to such records; `make_search` and the
command line (`tools.train --search NAME --search-set KEY=VALUE`) read the options from
here. The page implements two of the searches, greedy and beam: that list is one
tuple, tools/model_schema.py's PAGE_SEARCHES, which writes them with their options'
bounds from these records into the model file's schema (atkit/page/model_schema.json);
the exported manifest (tools.export_model) and the page's translator read both from
the schema, and keep no list of their own.

A search function is called as `decode(model, src, src_mask, max_len, start_symbol,
end_symbol, stepper=..., **options)` and returns (B, <= max_len) token ids, each row
starting with `start_symbol`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from atkit.settings import ConfigError, check_setting


@dataclass(frozen=True)
class Option:
    """The bounds of one option of a search, as `check_setting` takes them; its
    default (and so its type, int or float) is the decoding function's own."""

    low: int | float | None = None
    above: int | float | None = None
    high: int | float | None = None


@dataclass(frozen=True)
class Search:
    """A decoding function with its options (name -> Option): greedy decoding has
    none, beam search its beam size and alpha. Each option is a keyword parameter of
    the function, whose default is the option's."""

    decode: Callable
    options: dict = field(default_factory=dict)

    def __post_init__(self):
        params = inspect.signature(self.decode).parameters
        for name in self.options:
            default = params[name].default if name in params else None
            if not isinstance(default, int | float) or isinstance(default, bool):
                raise TypeError(
                    f"option {name}: {self.decode.__name__} needs a keyword "
                    f"parameter {name} with a number as its default"
                )

    def defaults(self) -> dict:
        """Every option at its default (the decoding function's)."""
        params = inspect.signature(self.decode).parameters
        return {name: params[name].default for name in self.options}

    def make(self, name: str, **options):
        """The decoding function with `options` set (the others at their defaults),
        each checked against its bounds; one the search lacks is an error."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ConfigError(
                f"the search {name} has no option(s) {unknown}; its options: "
                f"{list(self.options) or 'none'}"
            )
        if not self.options:
            return self.decode
        defaults = self.defaults()
        values = {**defaults, **options}
        for key, value in values.items():
            bounds = vars(self.options[key])
            check_setting(name, key, value, type(defaults[key]), **bounds)
        return functools.partial(self.decode, **values)


def search_name(search, searches: dict) -> str:
    """A made search in words, with its options: 'greedy', or
    'beam(beam_size=4, alpha=0.6)' (the name it has in `searches`)."""
    func = getattr(search, "func", search)
    names = [n for n, record in searches.items() if record.decode is func]
    name = names[0] if names else getattr(func, "__name__", "search")
    options = getattr(search, "keywords", {})
    if not options:
        return name
    return f"{name}({', '.join(f'{k}={v}' for k, v in options.items())})"


def manifest_entry(searches: dict, name: str, **options) -> dict:
    """The settings of search `name` as a model file records them for the page:
    every option's value (the record's defaults where not given), checked."""
    searches[name].make(name, **options)  # checks the names and the bounds
    return {**searches[name].defaults(), **options}


class PrefixModel:
    """A model stand-in for checking searches by hand: encode, decode and generator
    with next-token probabilities looked up by `probs(first_source_id, prefix)`
    (the prefix a tuple of the ids after <s>), so that sentences of one batch can
    have different tables. encode passes the source through."""

    def __init__(self, probs):
        self.probs = probs

    def encode(self, src, src_mask):
        return src.float().unsqueeze(-1)  # (B, S, 1)

    def decode(self, memory, src_mask, ys, tgt_mask):
        import torch

        rows = [
            self.probs(int(m[0, 0]), tuple(y[1:]))
            for m, y in zip(memory, ys.tolist(), strict=True)
        ]
        return torch.tensor(rows, dtype=torch.float).log().unsqueeze(1)  # (B, 1, V)

    def generator(self, x):
        return x  # already log-probabilities
