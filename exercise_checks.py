"""The checks of exercises.ipynb: each calls the reader's function on small inputs,
compares the result with the main notebook's own code (the module nbexport.py
generates) or with PyTorch's and sacreBLEU's implementations, and says in words what
is wrong.

    import exercise_checks as check
    check.attention(attention)   # -> a Verdict: correct, wrong (and why), not done

This module sits beside exercises.md, not in atkit: atkit is a library that the main
notebook imports, and it never imports the notebook; the checks do, by name
(`annotated_transformer_lib`, which nbexport.py writes from it). On Colab the
notebook's Setup cell clones the repository and works inside the clone, so this file
is importable there as it is in a checkout.

A check never raises, whatever the reader's function does or returns. A stub that
still raises NotImplementedError is "not done yet"; an error inside the reader's
function is reported with its type, message and line; a result that is no tensor, a
complex, sparse or wrongly typed tensor, a tensor on another device, a NumPy array, a
generator or None is named as such; a function that changes its inputs in place is
told so; and a wrong result names the first thing that is off (a shape, a mask, a sum,
a scaling factor, one of the older versions' known variants, the first position that
differs). Anything the check did not foresee still ends as a verdict that names the
exception, never as a traceback. ``EXERCISES`` lists every check in the notebook's
order; tests/test_exercises.py runs each against the solutions
(exercises_solutions.py), against typical wrong answers and against hostile ones.

A reader's function that runs longer than ``TIME_LIMIT_S`` seconds (a loop that never
ends) is stopped with a message. The mechanism is SIGALRM: ``signal.setitimer`` arms a
timer whose handler raises inside the reader's code as soon as the interpreter next
looks for signals, which stops pure-Python loops and interrupts ``time.sleep`` (one long
PyTorch operation runs to its end first). Jupyter's kernel, Colab's included, runs a
cell in its main thread, the only thread where Python lets a program set a signal
handler, and Linux and macOS have the timer, so it works there. The alternatives fall
short: a worker thread with a deadline can stop waiting but cannot stop the thread,
whose loop would spin on in the kernel; a subprocess cannot receive a function defined
in a notebook cell (it does not pickle), and forking a kernel that holds PyTorch's
thread pools can deadlock. The exception the handler raises derives from BaseException,
so a reader's ``except Exception`` does not swallow it, and the timer repeats every half
second until the call ends. Where no such timer exists (Windows, or a check called from
another thread) the call runs without a limit, and the kernel's Interrupt button stops
it: the check then answers "interrupted" instead of raising. The previous SIGALRM
handler and timer are restored after every call, so the kernel stays usable.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import numbers
import signal
import textwrap
import threading
import time
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

NOT_DONE = (  # a no-break space keeps the code in one piece when the line wraps
    "not done yet: write the function above in place of its "
    "`raise\u00a0NotImplementedError`, run its cell, then this one"
)
INTERRUPTED = (
    "interrupted before your function returned (the kernel's Interrupt); run this "
    "cell again to check it"
)
MARKS = {"correct": "✓", "wrong": "✗", "not done": "…"}
TIME_LIMIT_S = 10.0  # for one call of the reader's function; each takes milliseconds


@dataclass(frozen=True)
class Verdict:
    """What a check found; shown in the notebook as one line of text."""

    exercise: str
    status: str  # "correct", "wrong" or "not done"
    message: str

    @property
    def ok(self) -> bool:
        return self.status == "correct"

    def __repr__(self) -> str:  # lines of at most 88 characters, as the code's
        text = f"{MARKS[self.status]} {self.exercise}: {self.message}"
        return textwrap.fill(text, 88, subsequent_indent="  ", break_long_words=False)

    __str__ = __repr__


class _NotDone(Exception):
    pass


class _Interrupted(Exception):
    pass


class _Wrong(Exception):
    pass


class _Raised(_Wrong):
    """The reader's function raised; `text` says what, as `Type: message`."""

    def __init__(self, message: str, text: str):
        super().__init__(message)
        self.text = text


class _TimeUp(BaseException):  # not an Exception: a reader's `except Exception` lets
    pass  # it through


EXERCISES: dict[str, Callable[..., Verdict]] = {}


def _exercise(body):
    """Register a check; the public function turns its outcome into a Verdict."""
    name = body.__name__

    @functools.wraps(body)
    def check(*functions) -> Verdict:
        dtype = torch.get_default_dtype()
        try:
            for fn in functions:
                if not callable(fn):
                    raise _Wrong(f"expected a function, got {_kind(fn)}")
            with torch.no_grad():
                praise = body(*functions)
        except _NotDone:
            return Verdict(name, "not done", NOT_DONE)
        except (_Interrupted, KeyboardInterrupt):
            return Verdict(name, "not done", INTERRUPTED)
        except _Wrong as wrong:
            return Verdict(name, "wrong", str(wrong))
        except Exception as exc:  # what a result no check foresaw can make torch do
            return Verdict(
                name,
                "wrong",
                f"the check could not compare what your function returned with the "
                f"expected result ({_exception_text(exc)}); make it return what the "
                "exercise asks for",
            )
        finally:
            torch.set_default_dtype(dtype)  # in case the reader's function changed it
        return Verdict(name, "correct", f"correct. {praise}")

    EXERCISES[name] = check
    return check


# --------------------------------------------------------------------------- helpers


@functools.cache
def _lib():
    """The main notebook's library code (the module nbexport.py writes from it)."""
    import annotated_transformer_lib

    return annotated_transformer_lib


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _exception_text(exc: BaseException) -> str:
    """`Type: message`, even when the exception's own str() fails."""
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be shown)"
    name = type(exc).__name__
    return f"{name}: {_short(message, 300)}" if message else name


def _repr(value) -> str:
    try:
        return _short(repr(value))
    except Exception:  # an int of more than 4300 digits, say
        return "too long to show"


def _kind(value) -> str:
    """What a value is, in words, for a message (never calls the value's own code
    beyond its type and, for a string, its characters)."""
    if value is None:
        return "None (did you forget `return`?)"
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, bool):
        return f"a bool ({value})"
    if isinstance(value, str | bytes):
        return f"a {type(value).__name__} ({_short(repr(value[:80]))})"
    if isinstance(value, numbers.Number):
        if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
            return f"a complex number {_repr(value)}"
        return f"a number ({_repr(value)})"
    if type(value).__module__ == "numpy" and hasattr(value, "shape"):
        return f"a NumPy array of shape {tuple(value.shape)}"
    if isinstance(value, types.GeneratorType):
        return (
            "a generator (a function that uses `yield`, or a `(... for ...)` "
            "expression in parentheses, makes one)"
        )
    if isinstance(value, list | tuple):
        inner = {type(v).__name__ for v in value[:8]}
        of = f" of {', '.join(sorted(inner))}" if inner else ""
        return f"a {type(value).__name__} of {len(value)} items{of}"
    if isinstance(value, types.FunctionType | types.MethodType | nn.Module):
        return f"a {type(value).__name__} (did you return it instead of calling it?)"
    if type(value) is object:
        return "a bare object()"
    return f"an object of type {type(value).__qualname__}"


_MASK_HINT = {  # for multi-head attention's mask
    "must match the size": " (a mask of shape (B, T, S) needs a head dimension, "
    "mask.unsqueeze(1), to broadcast to the scores' (B, h, T, S))"
}
_HINTS = {
    "view size is not compatible": " (after a transpose the tensor is not "
    "contiguous: use .reshape, or .contiguous().view)",
    "without overflow": " (a fill value such as -1e9 does not fit in float16, whose "
    "largest magnitude is 65504: fill with torch.finfo(scores.dtype).min)",
}


def _arm(seconds: float) -> Callable[[], None]:
    """Raise _TimeUp in the main thread after `seconds`, and every half second after
    that, until the function returned is called (see the module's docstring). That
    function may be called twice: an alarm that interrupts the first call before it
    takes effect lands in _call's `except _TimeUp`, which calls it again. Without
    SIGALRM, or off the main thread, nothing is armed."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        return lambda: None
    state = {"armed": True}

    def on_alarm(signum, frame):
        if state["armed"]:
            raise _TimeUp

    def disarm():
        if not state["armed"]:
            return
        state["armed"] = False  # from here on an alarm does nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        if outer[0] > 0:  # someone else's timer was running: give it its time back
            left = max(outer[0] - (time.monotonic() - start), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, outer[1])

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    outer = signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    return disarm


def _parameter_name(fn, i: int) -> str:
    """The reader's name for their function's i-th argument: `name`, or its
    number."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = (
        params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD)
        if i < len(params)
        else False
    )
    return f"`{params[i].name}`" if positional else f"number {i + 1}"


def _state(module: nn.Module) -> dict:
    return {k: v.clone() for k, v in module.state_dict().items()}


def _changed(before, after) -> bool:
    if isinstance(before, torch.Tensor):
        return before.shape != after.shape or not torch.equal(before, after)
    return before.keys() != after.keys() or any(
        _changed(v, after[k]) for k, v in before.items()
    )


def _call(fn, *args, context: str = "", hints: dict | None = None):
    """fn(*args) with copies of the tensor arguments, within TIME_LIMIT_S.
    NotImplementedError means not done; any other error is reported with the line of
    the reader's code it came from; a changed argument is reported by name."""
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    states = {i: _state(a) for i, a in enumerate(args) if isinstance(a, nn.Module)}
    disarm = _arm(TIME_LIMIT_S)
    try:
        try:
            result = fn(*copies)
        finally:
            disarm()
    except NotImplementedError:
        raise _NotDone from None
    except _TimeUp:
        disarm()  # again, in case the alarm interrupted the first call
        raise _Wrong(
            f"your function ran longer than {TIME_LIMIT_S:g} s{context}; look for a "
            "loop that never ends (the check stopped it; a call should take "
            "milliseconds)"
        ) from None
    except KeyboardInterrupt:
        raise _Interrupted from None
    except SystemExit:
        raise _Wrong(
            f"your function called exit() or sys.exit(){context}: return the result "
            "instead"
        ) from None
    except BaseException as exc:  # the reader's code may raise anything
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if f.filename != __file__ and "site-packages" not in f.filename
        ]
        where = f", at `{frames[-1].line}`" if frames and frames[-1].line else ""
        text = _exception_text(exc)
        hints = {**_HINTS, **(hints or {})}
        hint = next((h for key, h in hints.items() if key in text), "")
        raise _Raised(
            f"your function raised {text}{where}{context}{hint}", text
        ) from None
    for i, (arg, passed) in enumerate(zip(args, copies, strict=True)):
        if isinstance(arg, torch.Tensor) and _changed(arg, passed):
            name = _parameter_name(fn, i)
            raise _Wrong(
                f"your function changed its argument {name} in place{context} (an "
                "in-place operation such as `.sub_()`, `+=` or an assignment to a "
                "slice): its caller still needs the original, so compute a new "
                "tensor instead"
            )
        if i in states and _changed(states[i], _state(arg)):
            arg.load_state_dict(states[i])
            name = _parameter_name(fn, i)
            raise _Wrong(
                f"your function changed the weights of its argument {name}{context}: "
                "it should only use them"
            )
    return result


_NUMPY_HINT = (
    ": return a torch tensor (compute with torch throughout, or convert with "
    "torch.from_numpy)"
)


def _tensor(
    value, what: str, dtype=None, why: str = "the inputs' dtype, which the result keeps"
) -> torch.Tensor:
    """`value` if it is a real, dense CPU tensor (of `dtype`, a torch.dtype or
    "integer", when given, `why` saying why that one); otherwise say what it is
    instead."""
    if not isinstance(value, torch.Tensor):
        hint = ""
        if type(value).__module__ == "numpy" and hasattr(value, "shape"):
            hint = _NUMPY_HINT
        elif isinstance(value, list | tuple):
            hint = ": build the result with torch operations (or torch.stack)"
        raise _Wrong(f"{what} should be a tensor, got {_kind(value)}{hint}")
    if value.layout != torch.strided:
        raise _Wrong(
            f"{what} is a {value.layout} tensor; return an ordinary (dense) one"
            " (.to_dense())"
        )
    if value.device.type != "cpu":
        raise _Wrong(
            f"{what} is on device {value.device}, but the check's inputs are on the "
            "CPU: create new tensors on the inputs' device (device=x.device)"
        )
    if value.is_complex():
        imag = value.imag.abs()
        size = imag.max().item() if imag.numel() else 0.0
        part = (
            f"imaginary parts as large as {size:.4g}"
            if size > 0
            else "imaginary parts that are all zero"
        )
        raise _Wrong(
            f"{what} is complex ({value.dtype}, with {part}); the answer is real: "
            "find where a complex number entered the computation"
        )
    if dtype == "integer":
        if value.dtype.is_floating_point or value.dtype == torch.bool:
            raise _Wrong(
                f"{what} has dtype {value.dtype}; token ids and indices are integers "
                "(torch.long)"
            )
    elif dtype is not None and value.dtype != dtype:
        hint = f" ({why})"
        if dtype.is_floating_point and not value.dtype.is_floating_point:
            hint = " (integers cannot hold these values: compute with float tensors)"
        raise _Wrong(f"{what} has dtype {value.dtype}, expected {dtype}{hint}")
    return value


def _shape(t: torch.Tensor, expected, what: str, hint: str = "") -> None:
    if tuple(t.shape) != tuple(expected):
        raise _Wrong(
            f"wrong shape: {what} has shape {tuple(t.shape)}, expected "
            f"{tuple(expected)}{hint}"
        )


def _close(got, want, atol=1e-5, rtol=1e-4) -> bool:
    if got.shape != want.shape:
        return False
    return bool(torch.allclose(got.double(), want.double(), atol=atol, rtol=rtol))


def _first_difference(got, want, what, dims, atol=1e-5, rtol=1e-4, hint="") -> None:
    """Raise naming the first position where `got` and `want` differ."""
    got, want = got.double(), want.double()
    bad = ~torch.isclose(got, want, atol=atol, rtol=rtol)
    if bad.any():
        idx = tuple(bad.nonzero()[0].tolist())
        at = ", ".join(f"{d} {i}" for d, i in zip(dims, idx, strict=True))
        raise _Wrong(
            f"{what} differs at ({at}): expected {want[idx].item():.6g}, got "
            f"{got[idx].item():.6g}{hint}"
        )


def _diagnose(got, variants, atol=1e-5, rtol=1e-4) -> None:
    """If `got` matches one of the (tensor, message) variants, raise its message."""
    for want, message in variants:
        if _close(got, want, atol, rtol):
            raise _Wrong(message)


def _number(value, what: str) -> float:
    """`value` as a float if it is a real number (or a one-element real tensor)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise _Wrong(f"{what} should be a number, got {_kind(value)}")
        value = _tensor(value, what).item()
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        raise _Wrong(
            f"{what} should be a real number, got the complex number "
            f"{_repr(value)}: find where a complex number (or a negative "
            "number's fractional power) entered the computation"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        hint = ": return a Python float, float(...)" if hasattr(value, "shape") else ""
        raise _Wrong(f"{what} should be a number, got {_kind(value)}{hint}")
    try:
        return float(value)
    except OverflowError:
        raise _Wrong(f"{what} is too large to be a float: {_kind(value)}") from None


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed), dtype=dtype)


# --------------------------------------------------------------------------- Part 1


def _ln(x, gamma, beta, eps, unbiased=False, eps_outside=False):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=unbiased, keepdim=True)
    std = var.sqrt() + eps if eps_outside else (var + eps).sqrt()
    return gamma * (x - mean) / std + beta


@_exercise
def layer_norm(fn):
    d, eps = 8, 1e-6
    x = _randn(2, 3, d, seed=1) * 3 + 1
    x[1, 2] = 1e-3 * _randn(d, seed=2)  # a row whose features barely vary
    gamma, beta = _randn(d, seed=3), _randn(d, seed=4)
    want = F.layer_norm(x, (d,), gamma, beta, eps)
    got = _tensor(_call(fn, x, gamma, beta, eps), "the result", x.dtype)
    _shape(got, x.shape, "the result", " (normalise over the last dimension only)")
    if not _close(got, want):
        plain = _ln(x, 1.0, 0.0, eps)
        _diagnose(
            got,
            [
                (
                    _ln(x, gamma, beta, eps, unbiased=True, eps_outside=True),
                    "this is the unbiased std with eps outside the square root, "
                    "(x - mean) / (x.std(-1) + eps), as the 2018 and 2022 annotated "
                    "versions wrote it: two differences from LayerNorm. x.std() "
                    "divides by d - 1 where LayerNorm divides by d (unbiased=False), "
                    "and LayerNorm adds eps to the variance, sqrt(var + eps), which "
                    "differs from std + eps on rows whose features barely vary (row "
                    "(1, 2) of the check's input)",
                ),
                (
                    _ln(x, gamma, beta, eps, unbiased=True),
                    "you used the unbiased variance (divided by d - 1, the default "
                    "of x.var() and x.std()); LayerNorm divides by d: "
                    "x.var(-1, unbiased=False)",
                ),
                (
                    _ln(x, gamma, beta, eps, eps_outside=True),
                    "eps is added outside the square root (std + eps); LayerNorm "
                    "takes sqrt(var + eps). The two differ on rows whose features "
                    "barely vary: see row (1, 2) of the check's input",
                ),
                (plain, "gamma and beta were not applied: gamma * x_hat + beta"),
                (plain * gamma, "beta (the shift) was not added"),
                (plain + beta, "gamma (the scale) was not applied"),
            ],
        )
        _first_difference(got, want, "the result", ("batch", "row", "feature"))
    return "It matches F.layer_norm (nn.LayerNorm's function)."


def _pre(x, sub, norm, drop):
    return x + drop(sub(norm(x)))


@_exercise
def pre_norm(fn):
    torch.manual_seed(0)
    d = 8
    x = _randn(2, 5, d, seed=5)
    norm, sub = nn.LayerNorm(d), nn.Linear(d, d)
    nn.init.normal_(norm.weight)
    nn.init.normal_(norm.bias)
    halve = lambda t: 0.5 * t  # noqa: E731 (a dropout stand-in the check can see)
    got = _tensor(_call(fn, x, sub, norm, halve), "the result", x.dtype)
    _shape(got, x.shape, "the result")
    want = _pre(x, sub, norm, halve)
    if not _close(got, want):
        ident = lambda t: t  # noqa: E731
        _diagnose(
            got,
            [
                (
                    norm(x + halve(sub(x))),
                    "that is post-norm (the paper's, §3.1): pre-norm normalises the "
                    "sublayer's input and leaves the residual path x untouched: "
                    "x + dropout(sublayer(norm(x)))",
                ),
                (
                    x + halve(norm(sub(x))),
                    "you normalised the sublayer's output; pre-norm normalises its "
                    "input: x + dropout(sublayer(norm(x)))",
                ),
                (
                    _pre(x, sub, norm, ident),
                    "dropout was not applied (the check passes a stand-in that "
                    "halves its input): x + dropout(sublayer(norm(x)))",
                ),
                (
                    halve(_pre(x, sub, norm, ident)),
                    "dropout was applied to the sum, residual included; it belongs "
                    "on the sublayer's output only",
                ),
                (halve(sub(norm(x))), "the residual x is not added back"),
                (x + halve(sub(x)), "the norm was not applied"),
            ],
        )
        _first_difference(got, want, "the result", ("batch", "position", "feature"))
    block = _lib().SublayerConnection(d, 0.0, norm="pre").eval()
    got = _tensor(_call(fn, x, sub, block.norm, block.dropout), "the result", x.dtype)
    _shape(got, x.shape, "the result")
    _first_difference(
        got,
        block(x, sub),
        "the result with the notebook's own LayerNorm",
        ("batch", "position", "feature"),
    )
    return "It matches the notebook's SublayerConnection(norm='pre')."


@_exercise
def subsequent_mask(fn):
    for size in (4, 7, 1):
        got = _tensor(_call(fn, size, context=f" (size={size})"), "the mask")
        _shape(
            got,
            (1, size, size),
            f"subsequent_mask({size})",
            " (a leading 1 lets the mask broadcast over the batch)",
        )
        if got.dtype != torch.bool:
            raise _Wrong(
                f"the mask has dtype {got.dtype}, expected torch.bool (True means "
                "'may attend', as in F.scaled_dot_product_attention)"
            )
        want = torch.ones(size, size, dtype=torch.bool).tril()[None]
        if torch.equal(got, want):
            continue
        if torch.equal(got, ~want):
            raise _Wrong("True and False are swapped: True means 'may attend'")
        if size > 1 and torch.equal(got, want.tril(-1)):
            raise _Wrong(
                "the diagonal is False: position t may attend to itself (row t is "
                "True at columns 0..t)"
            )
        if torch.equal(got, want.transpose(1, 2)):
            raise _Wrong(
                "the mask lets each position see the future and hides the past: "
                "row t must be True at columns 0..t (a lower triangle, torch.tril)"
            )
        t, c = (got != want)[0].nonzero()[0].tolist()
        raise _Wrong(
            f"subsequent_mask({size}) at row {t}, column {c} is {bool(got[0, t, c])}"
            f", expected {bool(want[0, t, c])} (row t is True at columns 0..t)"
        )
    return "It equals torch.tril of a boolean matrix of ones."


def _attention_inputs(dtype=torch.float32):
    q = _randn(2, 3, 4, 8, seed=10, dtype=dtype)  # (B, h, T, d_k)
    k = _randn(2, 3, 5, 8, seed=11, dtype=dtype)  # (B, h, S, d_k)
    v = _randn(2, 3, 5, 6, seed=12, dtype=dtype)  # (B, h, S, d_v)
    mask = torch.rand(2, 1, 4, 5, generator=_gen(13)) > 0.4  # (B, 1, T, S)
    mask[..., 0] = True  # every query may look at some key
    return q, k, v, mask


def _weights(q, k, mask, scale):
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
    return scores.softmax(-1)


def _pair(value, what, dtype, context=""):
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise _Wrong(
            f"{what} should return (output, weights){context}, got {_kind(value)}"
        )
    out = _tensor(value[0], f"the output{context}", dtype)
    return out, _tensor(value[1], f"the weights{context}", dtype)


@_exercise
def attention(fn):
    q, k, v, mask = _attention_inputs()
    d_k = q.size(-1)
    out, p = _pair(_call(fn, q, k, v, mask), "attention", q.dtype)
    _shape(p, (2, 3, 4, 5), "the weights", " (batch, heads, queries, keys)")
    _shape(out, (2, 3, 4, 6), "the output", " (batch, heads, queries, d_v)")
    dims = ("batch", "head", "query", "key")
    sums = p.double().sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
        idx = tuple(
            (~torch.isclose(sums, torch.ones_like(sums), atol=1e-4))
            .nonzero()[0]
            .tolist()
        )
        b, h, t = idx
        zeroed = bool((p.double().abs() * ~mask).max() == 0) and bool(
            (sums < 1 + 1e-6).all()
        )
        hint = (
            "you zeroed the masked weights after the softmax; fill the masked scores "
            "before it, so that the weights left still sum to one"
            if zeroed
            else "the softmax runs over the keys, the last dimension (softmax(dim=-1))"
        )
        raise _Wrong(
            f"the weights' rows do not sum to one (batch {b}, head {h}, query {t} "
            f"sums to {sums[idx].item():.4g}): {hint}"
        )
    want = _weights(q, k, mask, d_k**-0.5)
    if not _close(p, want):
        valid = (~mask).any(-1, keepdim=True)  # rows that keep a key when inverted
        inverted = torch.where(valid, _weights(q, k, ~mask, d_k**-0.5), 0.0)
        if _close(torch.where(valid, p, 0.0), inverted):
            raise _Wrong(
                "you hid the keys where the mask is True: True means 'may attend', "
                "so fill the scores where the mask is False"
            )
        leak = (p.double() > 1e-6) & ~mask
        if leak.any():
            idx = tuple(leak.nonzero()[0].tolist())
            at = ", ".join(f"{d} {i}" for d, i in zip(dims, idx, strict=True))
            raise _Wrong(
                f"masked positions receive weight: at ({at}) the mask is False and "
                f"the weight is {p[idx].item():.4g}. Fill the masked scores with a "
                "very negative number (torch.finfo(scores.dtype).min) before the "
                "softmax"
            )
        _diagnose(
            p,
            [
                (
                    _weights(q, k, mask, 1.0),
                    f"the scores are not scaled: eq. 1 divides QK^T by sqrt(d_k) = "
                    f"sqrt({d_k}) before the softmax",
                ),
                (
                    _weights(q, k, mask, 1 / d_k),
                    f"you divided the scores by d_k = {d_k}; eq. 1 divides by its "
                    f"square root, sqrt(d_k) = {d_k**0.5:.4g}",
                ),
                (
                    _weights(q, k, mask, d_k**0.5),
                    "you multiplied the scores by sqrt(d_k); eq. 1 divides by it",
                ),
            ],
        )
        _first_difference(p, want, "the weights", dims)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if not _close(out, ref):
        _first_difference(
            out,
            ref,
            "the output (compared with F.scaled_dot_product_attention)",
            ("batch", "head", "query", "feature"),
            hint=": it is weights @ value",
        )
    out0, _ = _pair(_call(fn, q, k, v, context=" with mask=None"), "attention", q.dtype)
    _shape(out0, out.shape, "the output with mask=None")
    _first_difference(
        out0,
        F.scaled_dot_product_attention(q, k, v),
        "the output with mask=None",
        ("batch", "head", "query", "feature"),
    )
    q16, k16, v16, _ = _attention_inputs(torch.float16)
    out16, p16 = _pair(
        _call(fn, q16, k16, v16, mask, context=" with float16 inputs"),
        "attention",
        q16.dtype,
        " with float16 inputs",
    )
    _shape(p16, p.shape, "the weights with float16 inputs")
    _shape(out16, out.shape, "the output with float16 inputs")
    if not torch.isfinite(out16).all() or (p16.float() * ~mask).abs().max() > 0:
        raise _Wrong(
            "with float16 inputs masked positions get weight or the output is not "
            "finite: fill with torch.finfo(scores.dtype).min, which every dtype holds"
        )
    return "It matches F.scaled_dot_product_attention, in float32 and float16."


def _split_ref(x, h):
    B, L, d = x.shape
    return x.view(B, L, h, d // h).transpose(1, 2)


@_exercise
def heads(split_heads, merge_heads):
    B, L, h, d_k = 2, 3, 4, 2
    x = torch.arange(B * L * h * d_k, dtype=torch.float32).view(B, L, h * d_k)
    got = _tensor(_call(split_heads, x, h), "split_heads's result", x.dtype)
    _shape(
        got,
        (B, h, L, d_k),
        f"split_heads of a {(B, L, h * d_k)} input with h={h}",
        " (batch, heads, positions, d_k)",
    )
    want = _split_ref(x, h)
    if not torch.equal(got, want):
        idx = tuple((got != want).nonzero()[0].tolist())
        b, head, pos, _ = idx
        have = [divmod(int(v) % (L * h * d_k), h * d_k) for v in got[b, head, pos]]
        lo = head * d_k
        hint = (
            " (you reshaped straight to (B, h, L, d_k), which cuts the sequence, "
            "not the features, into heads: view as (B, L, h, d_k) first, then swap "
            "dimensions 1 and 2)"
            if torch.equal(got, x.view(B, h, L, d_k))
            else ""
        )
        raise _Wrong(
            f"split_heads: head {head} at position {pos} should hold features "
            f"{lo}..{lo + d_k - 1} of position {pos}; yours holds (position, feature) "
            f"{', '.join(map(str, have))}{hint}"
        )
    back = _call(merge_heads, want.contiguous())
    back = _tensor(back, "merge_heads's result", x.dtype)
    _shape(
        back,
        x.shape,
        f"merge_heads of a {tuple(want.shape)} input",
        " (batch, positions, h * d_k)",
    )
    if not torch.equal(back, x):
        hint = (
            " (you reshaped without moving the heads back next to d_k: transpose "
            "dimensions 1 and 2 first, then reshape)"
            if torch.equal(back, want.reshape(B, L, h * d_k))
            else ""
        )
        _first_difference(
            back,
            x,
            "merge_heads(split_heads(x))",
            ("batch", "position", "feature"),
            hint=hint,
        )
    return "merge_heads undoes split_heads, and both match the notebook's layout."


def _mha_reference(q, kv, mask, lin, h, scale=None, w_o=True):
    B, T, d = q.shape
    split = lambda t: _split_ref(t, h)  # noqa: E731
    Q, K, V = split(lin[0](q)), split(lin[1](kv)), split(lin[2](kv))
    m = None if mask is None else mask.unsqueeze(1)
    x = F.scaled_dot_product_attention(Q, K, V, attn_mask=m, scale=scale)
    x = x.transpose(1, 2).reshape(B, T, d)
    return lin[3](x) if w_o else x


@_exercise
def multi_head_attention(fn):
    torch.manual_seed(1)
    B, T, S, d, h = 2, 4, 5, 16, 4
    q, kv = _randn(B, T, d, seed=20), _randn(B, S, d, seed=21)
    mask = torch.rand(B, T, S, generator=_gen(22)) > 0.4  # (B, T, S), True: attend
    mask[..., 0] = True
    mha = nn.MultiheadAttention(d, h, batch_first=True)
    nn.init.normal_(mha.in_proj_bias)
    nn.init.normal_(mha.out_proj.bias)
    lin = [nn.Linear(d, d) for _ in range(4)]
    for i, layer in enumerate(lin[:3]):
        layer.weight.copy_(mha.in_proj_weight[i * d : (i + 1) * d])
        layer.bias.copy_(mha.in_proj_bias[i * d : (i + 1) * d])
    lin[3].weight.copy_(mha.out_proj.weight)
    lin[3].bias.copy_(mha.out_proj.bias)
    got = _call(fn, q, kv, kv, *lin, h, mask, hints=_MASK_HINT)
    got = _tensor(got, "the result", q.dtype)
    _shape(got, (B, T, d), "the result", " (batch, queries, d_model)")
    want, _ = mha(q, kv, kv, attn_mask=(~mask).repeat_interleave(h, 0))
    if not _close(got, want):
        _diagnose(
            got,
            [
                (
                    _mha_reference(q, kv, mask, lin, h, w_o=False),
                    "the output projection W^O is missing: apply w_o to the "
                    "concatenated heads",
                ),
                (
                    _mha_reference(q, kv, mask, lin, h, scale=d**-0.5),
                    f"you scaled the scores by sqrt(d_model) = sqrt({d}); each head "
                    f"divides by sqrt(d_k) = sqrt(d_model / h) = sqrt({d // h})",
                ),
                (
                    _mha_reference(q, kv, None, lin, h),
                    "the mask was not applied (mask has shape (B, T, S); give it "
                    "a head dimension: mask.unsqueeze(1))",
                ),
            ],
        )
        _first_difference(
            got,
            want,
            "the result (compared with nn.MultiheadAttention)",
            ("batch", "query", "feature"),
        )
    return "It matches nn.MultiheadAttention with the same weights."


def _pe_variant(max_len, d, kind):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    col = torch.arange(d, dtype=torch.float64)
    pair = col - col % 2  # the 2i of the formula, for both columns of a pair
    angle = pos / 10000 ** ((col if kind == "column" else pair) / d)
    if kind == "halves":
        angle = pos / 10000 ** (2 * torch.arange(d // 2, dtype=torch.float64) / d)
        return torch.cat([angle.sin(), angle.cos()], 1)
    if kind == "times":
        angle = pos * 10000 ** (pair / d)
    even = col % 2 == 0
    if kind == "swapped":
        even = ~even
    return torch.where(even, angle.sin(), angle.cos())


@_exercise
def positional_encoding(fn):
    max_len, d = 12, 8
    got = _tensor(
        _call(fn, max_len, d),
        "the table",
        torch.float32,
        "the dtype of the main notebook's table, and of the embeddings it is added to",
    )
    _shape(
        got, (max_len, d), f"sinusoidal_table({max_len}, {d})", " (positions, d_model)"
    )
    want = _lib().sinusoidal_table(max_len, d)
    if not _close(got, want):
        _diagnose(
            got,
            [
                (
                    _pe_variant(max_len, d, "swapped"),
                    "sines and cosines are swapped: even columns (2i) hold sines, "
                    "odd columns (2i + 1) cosines",
                ),
                (
                    _pe_variant(max_len, d, "column"),
                    "the exponent uses the column index j; both columns 2i and "
                    "2i + 1 of a pair share the frequency 1 / 10000^(2i / d_model)",
                ),
                (
                    _pe_variant(max_len, d, "halves"),
                    "you put all sines in the first half and all cosines in the "
                    "second; §3.5 interleaves them: sin in column 2i, cos in 2i + 1",
                ),
                (
                    _pe_variant(max_len, d, "times"),
                    "you multiplied the position by 10000^(2i / d_model); it is "
                    "divided by it (the wavelengths grow with i)",
                ),
            ],
        )
        _first_difference(got, want, "the table", ("position", "column"))
    return "It matches the notebook's sinusoidal_table."


# --------------------------------------------------------------------------- Part 2


def _off_by_one(got, step1, d_model, warmup, where) -> None:
    """Raise if `got` (step -> the reader's rate) is eq. 3 with the step, or warmup,
    off by one: over the whole schedule, or only while it rises or only as it decays.
    `step1` describes what the reader's function did at step 1."""
    w = warmup

    def line(s, w=w):  # the rising part of eq. 3; 0 at step 0
        return d_model**-0.5 * s * w**-1.5

    def decay(s):
        return d_model**-0.5 * s**-0.5 if s > 0 else math.inf

    def eq3(s, w=w):
        return min(decay(s), line(s, w))

    def fits(f, steps):
        return all(math.isclose(got[s], f(s), rel_tol=1e-6) for s in steps)

    steps = sorted(got)
    rising = [s for s in steps if s < w]
    falling = [s for s in steps if s > w]

    def at(s):
        return f" (at step {s}, eq. 3 gives {eq3(s):.6g}, yours {got[s]:.6g})"

    if fits(lambda s: eq3(s - 1), [s for s in steps if s >= 2]):
        raise _Wrong(
            f"off by one in the step{where}: at every step k from 2 on, yours is eq. "
            f"3's rate of step k - 1{at(w)}, and at step 1 {step1}. Eq. 3 counts the "
            "optimiser's steps from 1 and the k-th step uses step = k: use `step` as "
            "it comes, without subtracting 1 (PyTorch's LambdaLR counts from 0, "
            "which is why the main notebook hands it `lambda s: rate(s + 1)`)"
        )
    if fits(lambda s: eq3(s + 1), steps):
        raise _Wrong(
            f"off by one in the step{where}: at every step k, yours is eq. 3's rate "
            f"of step k + 1{at(w)}, so it peaks at step {w - 1} instead of {w}. The "
            "step already counts from 1: use it as it comes, without adding 1"
        )
    for other in (w - 1, w + 1):
        if fits(lambda s, o=other: eq3(s, o), steps):
            raise _Wrong(
                f"off by one in warmup{where}: yours is eq. 3 with warmup = {other} "
                f"instead of {w}: it rises as step * {other}^-1.5 and peaks at step "
                f"{other}{at(w // 2)}; use warmup as it comes"
            )
    for shift in (-1, 1):
        k = f"k {'-' if shift < 0 else '+'} 1"
        if fits(lambda s, d=shift: line(s + d), rising) and fits(eq3, falling):
            raise _Wrong(
                f"off by one in the warm-up{where}: at each step k < warmup yours is "
                f"the rising line's value at step {k}, d_model^-0.5 * ({k}) * "
                f"warmup^-1.5{at(rising[-1])}; the decay after warmup is right. Use "
                "step itself in step * warmup^-1.5"
            )
        if fits(eq3, rising) and fits(lambda s, d=shift: decay(s + d), falling):
            raise _Wrong(
                f"off by one in the decay{where}: at each step k > warmup yours is "
                f"d_model^-0.5 * ({k})^-0.5, the decay of step {k}"
                f"{at(falling[0])}; the warm-up is right. Use step itself in "
                "step^-0.5"
            )


@_exercise
def rate(fn):
    lib = _lib()
    for d_model, warmup in ((512, 400), (64, 10)):
        steps = sorted(
            {1, 2, warmup // 2, warmup - 1, warmup, warmup + 1, 4 * warmup, 10_000}
        )
        where = f" (d_model={d_model}, warmup={warmup})"
        got, failed = {}, None
        for s in steps:
            call = f" (called as rate({s}, {d_model}, {warmup}))"
            try:
                value = _call(fn, s, d_model, warmup, context=call)
                got[s] = _number(value, f"rate({s}, {d_model}, {warmup})")
            except _Raised as raised:
                if s != 1:  # an error at step 1 may be step 0's: judged below
                    raise
                failed = raised
        want = {s: lib.rate(s, d_model, 1.0, warmup) for s in steps}
        if failed is None and all(
            math.isclose(got[s], want[s], rel_tol=1e-6) for s in steps
        ):
            continue
        if failed is not None:
            step1 = f"your function raised {failed.text} (step 0's rate is undefined)"
        elif got[1] == 0:
            step1 = "it gives 0, the rate of step 0"
        elif math.isclose(got[1], want[1], rel_tol=1e-6):
            step1 = (
                "it gives eq. 3's rate of step 1 (step 0 moved to 1, as the 2022 "
                "annotated version's `if step == 0: step = 1` did)"
            )
        else:
            step1 = f"it gives {got[1]:.6g}"
        _off_by_one(got, step1, d_model, warmup, where)
        if failed is not None:
            raise failed
        ratios = [got[s] / want[s] for s in steps]
        if all(math.isclose(r, d_model**0.5, rel_tol=1e-6) for r in ratios):
            raise _Wrong(
                f"your rate is sqrt(d_model) = {d_model**0.5:.4g} times too large at "
                f"every step{where}: the factor d_model^-0.5 is missing"
            )
        if all(math.isclose(r, ratios[0], rel_tol=1e-6) for r in ratios):
            raise _Wrong(
                f"your rate is {ratios[0]:.4g} times eq. 3's at every step{where}: "
                "the shape is right, a constant factor is not"
            )
        grid = range(1, 3 * warmup + 1)
        curve = [_number(_call(fn, s, d_model, warmup), "the rate") for s in grid]
        peak = max(grid, key=lambda s: curve[s - 1])
        if peak != warmup:
            raise _Wrong(
                f"your rate peaks at step {peak}{where}; eq. 3 rises linearly until "
                "step = warmup and decays after it, as min(step^-0.5, step * "
                "warmup^-1.5)"
            )
        s = next(s for s in steps if not math.isclose(got[s], want[s], rel_tol=1e-6))
        raise _Wrong(
            f"at step {s}{where} eq. 3 gives {want[s]:.6g}, yours {got[s]:.6g}"
        )
    return "It matches eq. 3 (the notebook's rate with factor 1, no cool-down)."


def _over_k_minus_2(q, target, K, eps) -> bool:
    """Whether q is the older versions' target: eps / (K - 2) on the tokens other
    than the label (one column, their padding, may be 0), and 1 - eps on the label
    (or 1 - eps + eps / (K - 2))."""
    share = eps / (K - 2)
    q = q.double()
    rows = torch.arange(len(target))
    label = q[rows, target]
    others = q.clone()
    others[rows, target] = share
    near = lambda t, v: torch.isclose(t, torch.full_like(t, v), atol=1e-7)  # noqa: E731
    zero = q.abs() < 1e-9
    return bool(
        (near(others, share) | (others.abs() < 1e-9)).all()
        and (zero.sum(1) <= 1).all()
        and (
            near(label, 1 - eps) | near(label, 1 - eps + share) | zero[rows, target]
        ).all()
        and not zero[rows, target].all()
    )


@_exercise
def label_smoothing(fn):
    K, eps = 6, 0.1
    target = torch.tensor([2, 0, 5, 3])
    got = _tensor(
        _call(fn, target, K, eps),
        "q",
        torch.float32,
        "the dtype of the log-probabilities it multiplies",
    )
    _shape(got, (len(target), K), "q", " (one row per label, one column per token)")
    if _over_k_minus_2(got, target, K, eps):
        raise _Wrong(
            f"you spread eps over K - 2 tokens, eps / (K - 2) = {eps / (K - 2):.4g} "
            "each, as the 2018 and 2022 annotated versions did (they left out the "
            "label and the padding token); §5.4 mixes in the uniform distribution "
            f"over all K = {K} tokens: every token gets eps / K = {eps / K:.4g}, and "
            "the label 1 - eps on top"
        )
    crit = _lib().LabelSmoothing(K, padding_idx=-1, smoothing=eps)
    crit(torch.zeros(len(target), K).log_softmax(-1), target)
    want = crit.true_dist
    sums = got.double().sum(1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-6):
        row = int((sums - 1).abs().nan_to_num(math.inf).argmax())
        hint = ""
        if math.isclose(float(got[row, target[row]]), 1 - eps, rel_tol=1e-5):
            hint = (
                "; the label's entry is 1 - eps, but the uniform part covers the "
                "label too: (1 - eps) + eps / K"
            )
        raise _Wrong(
            f"q's rows must sum to one; row {row} sums to {sums[row].item():.6g}{hint}"
        )
    if not _close(got, want, atol=1e-6):
        others = torch.full((len(target), K), eps / (K - 1))
        others[torch.arange(len(target)), target] = 1 - eps
        _diagnose(
            got,
            [
                (
                    others,
                    "you gave the label 1 - eps and spread eps over the K - 1 other "
                    "tokens; §5.4's definition mixes in the uniform distribution "
                    "over all K: the label gets 1 - eps + eps / K, every other token "
                    "eps / K",
                ),
                (
                    F.one_hot(target, K).to(got.dtype),
                    "q is the one-hot target, not smoothed: mix it with the uniform "
                    "distribution, (1 - eps) * one_hot + eps / K",
                ),
            ],
            atol=1e-6,
        )
        _first_difference(got, want, "q", ("label", "token"), atol=1e-6)
    logits = _randn(len(target), K, seed=30)
    ours = -(got * logits.log_softmax(-1)).sum(-1).mean()
    ref = F.cross_entropy(logits, target, label_smoothing=eps)
    if not math.isclose(ours.item(), ref.item(), rel_tol=1e-5):
        raise _Wrong("the loss with your q differs from F.cross_entropy's")
    return (
        f"It is the notebook's target, and -sum(q * log p) gives "
        f"F.cross_entropy(label_smoothing={eps}): {ref.item():.4f} on random logits."
    )


@functools.cache
def _decode_model():
    torch.manual_seed(5)  # a seed where a decoder without the mask writes other tokens
    V = 12
    model = _lib().make_model(  # two layers: with one, a missing mask changes nothing
        V, V, "tiny", N=2, d_model=32, d_ff=64, h=4, P_drop=0.0, tie="none"
    )
    return model.eval()


def _decode_setup():
    """The notebook's code, a fresh copy of a small untrained model, a batch."""
    model = copy.deepcopy(_decode_model())
    src = torch.randint(2, 12, (3, 6), generator=_gen(31))
    src_mask = torch.ones(3, 1, 6, dtype=torch.bool)
    return _lib(), model, src, src_mask


def _spy_on_decode(model) -> list:
    """Make model.decode record the (prefix length, tgt_mask) of each call."""
    calls = []
    decode = model.decode
    signature = inspect.signature(decode)

    @functools.wraps(decode)
    def spy(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs).arguments
            tgt = bound.get("tgt")
            length = tgt.size(-1) if isinstance(tgt, torch.Tensor) else None
            calls.append((length, bound.get("tgt_mask")))
        except TypeError:
            pass  # decode itself will say what is wrong with the arguments
        return decode(*args, **kwargs)

    model.decode = spy
    return calls


def _mask_problem(calls) -> str:
    """What is wrong with the target masks the reader passed to model.decode."""
    for length, mask in calls:
        if length is None or length < 2:
            continue  # a one-token prefix needs no mask
        if mask is None:
            return (
                f"the subsequent mask is missing: model.decode got tgt_mask=None for "
                f"a prefix of {length} tokens, so every position attends to the "
                "positions after it; from the second decoder layer on (the check's "
                "model has two) that changes the newest position's output too. "
                "Pass subsequent_mask(ys.size(1)) as tgt_mask"
            )
        want = torch.ones(length, length, dtype=torch.bool).tril()
        try:
            same = torch.equal(torch.broadcast_to(mask, want.shape), want)
        except (RuntimeError, TypeError):
            same = (
                isinstance(mask, torch.Tensor)
                and mask.dim() == 3
                and all(torch.equal(m, want) for m in mask)
            )
        if not same:
            return (
                f"the tgt_mask passed to model.decode for a prefix of {length} tokens "
                "is not the subsequent mask (row t True at columns 0..t): pass "
                "subsequent_mask(ys.size(1))"
            )
    return ""


@_exercise
def greedy_decode(fn):
    lib, model, src, src_mask = _decode_setup()
    max_len, start = 7, 1
    calls = _spy_on_decode(model)
    got = _call(fn, model, src, src_mask, max_len, start)
    del model.decode  # the spy: the model's own method again
    got = _tensor(got, "the result", "integer")
    _shape(
        got,
        (src.size(0), max_len),
        "the result",
        " (one row per sentence, max_len tokens counting the start symbol)",
    )
    want = lib.greedy_decode(model, src, src_mask, max_len, start)
    if not torch.equal(got[:, 0], want[:, 0]):
        raise _Wrong(f"every row must start with the start symbol {start}")
    problem = _mask_problem(calls)
    if problem:
        raise _Wrong(problem)
    if not torch.equal(got, want):
        b, t = (got != want).nonzero()[0].tolist()
        hint = (
            "; the earlier tokens are right: run the decoder on the whole prefix "
            "ys with subsequent_mask, and take its output at the newest position "
            "([:, -1])"
            if t > 1
            else "; the first token after the start symbol is already wrong: take "
            "the argmax of model.generator on the decoder's output at the last "
            "position"
        )
        raise _Wrong(
            f"sentence {b}, position {t}: expected token {want[b, t].item()}, got "
            f"{got[b, t].item()}{hint}"
        )
    return "It writes the same tokens as the notebook's greedy_decode."


# --------------------------------------------------------------------------- Part 3

_BLEU_CASES = [  # (outputs, references): shorter, longer and as long as the refs
    (
        ["the cat sat on the mat today", "a dog runs in a park"],
        ["the cat sat on the mat", "a dog runs in the park"],
    ),
    (
        ["the cat sat on mat", "a dog runs"],
        ["the cat sat on the mat", "a dog runs in the park"],
    ),
    (
        ["a man rides a red bike down the street", "two girls play"],
        ["a man rides a red bike on the street", "two girls play"],
    ),
]


def _bleu_stats():
    from sacrebleu.metrics import BLEU

    return [BLEU().corpus_score(hyp, [ref]) for hyp, ref in _BLEU_CASES]


@_exercise
def bleu(brevity_penalty, bleu_score):
    from sacrebleu.metrics import BLEU

    for st in _bleu_stats():
        c, r = st.sys_len, st.ref_len
        got = _number(_call(brevity_penalty, c, r), "brevity_penalty")
        if not math.isclose(got, st.bp, rel_tol=1e-6):
            if c < r and math.isclose(got, math.exp(1 - c / r), rel_tol=1e-6):
                raise _Wrong(
                    f"brevity_penalty({c}, {r}): you computed e^(1 - c/r) = "
                    f"{got:.4g}; the penalty is e^(1 - r/c) = {st.bp:.4g}, with c "
                    "the output's length and r the references'"
                )
            if c > r:
                raise _Wrong(
                    f"brevity_penalty({c}, {r}) = {got:.4g}: an output longer than "
                    "its references is not penalised, BP = 1 when c > r"
                )
            raise _Wrong(
                f"brevity_penalty({c}, {r}) should be {st.bp:.6g} (sacreBLEU's), "
                f"got {got:.6g}"
            )
        got = _number(
            _call(bleu_score, list(st.counts), list(st.totals), c, r), "bleu_score"
        )
        want = BLEU.compute_bleu(st.counts, st.totals, c, r).score
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        where = f" (counts {st.counts}, totals {st.totals}, c={c}, r={r})"
        if math.isclose(100 * got, want, rel_tol=1e-6):
            raise _Wrong(
                f"your BLEU is {got:.4g}, sacreBLEU's {want:.4g}: sacreBLEU reports "
                "percent, multiply by 100"
            )
        p = [ct / t for ct, t in zip(st.counts, st.totals, strict=True)]
        arith = st.bp * sum(p) / 4 * 100
        if math.isclose(got, arith, rel_tol=1e-6):
            raise _Wrong(
                f"you averaged the precisions arithmetically{where}; BLEU takes "
                "their geometric mean, exp(sum(log p_n) / 4)"
            )
        if st.bp < 1 and math.isclose(got, want / st.bp, rel_tol=1e-6):
            raise _Wrong(f"the brevity penalty is missing{where}: BLEU = BP * mean")
        raise _Wrong(f"BLEU should be {want:.6g} (sacreBLEU's){where}, got {got:.6g}")
    return "Both match sacreBLEU on outputs shorter, longer and as long as the refs."


# --------------------------------------------------------------------------- Part 4


@_exercise
def length_penalty(fn):
    lib = _lib()
    for length in (1, 4, 12, 30):
        for alpha in (0.0, 0.6, 1.0, 2.0):
            got = _number(_call(fn, length, alpha), "length_penalty")
            want = lib.length_penalty(length, alpha)
            if math.isclose(got, want, rel_tol=1e-6):
                continue
            if math.isclose(got * want, 1.0, rel_tol=1e-6):
                raise _Wrong(
                    f"length_penalty({length}, {alpha}) = {got:.6g} is the inverse "
                    f"of lp = ((5 + |Y|) / 6)^alpha = {want:.6g}: the score divides "
                    "by lp, so return lp itself"
                )
            raise _Wrong(
                f"length_penalty({length}, {alpha}) should be ((5 + {length}) / 6)^"
                f"{alpha} = {want:.6g}, got {got:.6g}"
            )
    return "It matches the notebook's length_penalty (Wu et al., 2016)."


def _beam_inputs():
    B, k, V = 2, 3, 7
    score = _randn(B, k, seed=40).abs().neg() * 3  # running log-probabilities
    score[1, 1:] = -math.inf  # sentence 1 is at its first step: one live beam
    logp = _randn(B * k, V, seed=41).log_softmax(-1)  # (B*k, V)
    return score, logp, k


@_exercise
def beam_candidates(fn):
    score, logp, k = _beam_inputs()
    B, V = score.size(0), logp.size(-1)
    result = _call(fn, score, logp, k)
    if not isinstance(result, tuple | list) or len(result) != 3:
        raise _Wrong(f"return (top, beam, token), got {_kind(result)}")
    top = _tensor(result[0], "top", score.dtype)
    beam = _tensor(result[1], "beam", "integer")
    token = _tensor(result[2], "token", "integer")
    for t, name in ((top, "top"), (beam, "beam"), (token, "token")):
        _shape(t, (B, 2 * k), name, " (sentences, 2 * k candidates)")
    cand = (score.view(-1, 1) + logp).view(B, k * V)
    want, idx = cand.topk(2 * k, dim=-1)
    if not _close(top, want):
        only_logp = logp.view(B, k * V).masked_fill(cand == -math.inf, -math.inf)
        _diagnose(
            top,
            [
                (
                    only_logp.topk(2 * k, -1).values,
                    "you ranked the extensions by the new token's log-probability "
                    "alone; add each beam's running score: score[b, beam] + logp",
                ),
                (
                    (score.view(-1, 1) + logp)
                    .topk(2, -1)
                    .values.view(B, 2 * k)
                    .sort(-1, descending=True)
                    .values,
                    "you took the best extensions of each beam separately; the 2k "
                    "best of a sentence are chosen among all k * V extensions",
                ),
            ],
        )
        _first_difference(
            top, want, "top", ("sentence", "candidate"), hint=" (best first)"
        )
    if beam.min() < 0 or beam.max() >= k or token.min() < 0 or token.max() >= V:
        raise _Wrong(
            f"beam must lie in 0..{k - 1} and token in 0..{V - 1}: of a flat index "
            "idx into the (k * V) candidates, the beam is idx // V and the token "
            "idx % V"
        )
    rows = torch.arange(B)[:, None] * k + beam
    total = score.gather(1, beam) + logp[rows, token]
    if not _close(total, top):
        b, r = (~torch.isclose(total, top)).nonzero()[0].tolist()
        raise _Wrong(
            f"sentence {b}, candidate {r}: score[{b}, {beam[b, r].item()}] + logp of "
            f"token {token[b, r].item()} is {total[b, r].item():.4g}, but top says "
            f"{top[b, r].item():.4g}: of a flat index idx, the beam is idx // V and "
            "the token idx % V"
        )
    return "Its candidates, beams and tokens match a topk over all k * V extensions."
