"""Where the notebook runs: the preset, the device, the CPU threads, the precision that
"auto" picks on this hardware, where checkpoints go, and whether progress bars show.

Importing this module sets OMP_WAIT_POLICY=PASSIVE (unless it is set already); torch
is imported by the functions that use it, later (so that a program's --help, or the
tests' collection, never waits for torch): OpenMP reads the variable once, when torch
loads. PyTorch splits each CPU
operation over a team of threads; by default a thread that has finished its share spins
on its core for a while instead of sleeping, and when another program needs that core
the spinning thread competes with it and with the late thread the whole team waits for.
With PASSIVE, waiting threads sleep, so a busy core costs about its share and no more
(measured with tools.load_check: a cpu-preset notebook run 1.75x slower with one of two
cores busy, instead of stalling). The thread count is fixed by the preset, not by the
current load: sums split over a different number of threads round differently, so the
same seed gives the same numbers only with the same thread count (and the same CPU).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from atkit import config

if TYPE_CHECKING:
    import torch

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
TORCH_WAS_LOADED = "torch" in sys.modules  # then the line above came too late

PRESET_ENV = "AT_PRESET"
CHECKPOINTS_ENV = "AT_CHECKPOINTS"
PROGRESS_ENV = "AT_PROGRESS"
PRETRAINED_ENV = "AT_PRETRAINED"
NEEDS_TRAINING = "# needs training"  # the first line of a cell that trains


def choose_preset(env=None) -> str:
    """The run size: $AT_PRESET if set, else the preset whose record is the default
    on this machine's device (config.default_preset: with CUDA, `gpu`)."""
    import torch

    env = os.environ if env is None else env
    device = "cuda" if torch.cuda.is_available() else "cpu"
    preset = env.get(PRESET_ENV) or config.default_preset(device)
    config.preset(preset, PRESET_ENV)  # an unknown name is refused, naming the variable
    return preset


def default_device() -> torch.device:
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cores_available() -> int:
    """CPU cores this process may run on (respects taskset and container limits)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def device_memory(device) -> int:
    """Bytes of memory on `device`: the GPU's, or the machine's for the CPU (0: not
    known)."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


# float32 weights, their gradients and Adam's two moments: what training holds at least
TRAINING_BYTES_PER_PARAMETER = 16


def check_model_memory(model, device, what: str) -> None:
    """Refuse, naming `what` (the settings that size the model), a model whose
    training would need more memory than `device` has in all: before it is built.
    `model`: the model built on the "meta" device (it holds no numbers)."""
    import torch

    n = sum(p.numel() for p in model.parameters())
    need, have = n * TRAINING_BYTES_PER_PARAMETER, device_memory(device)
    if have and need > have:
        raise config.ConfigError(
            f"{what}: {n:,} parameters, at least {need / 2**30:,.1f} GiB to train "
            "(float32 weights, gradients and Adam's two moments), more than the "
            f"{have / 2**30:,.1f} GiB of memory of {torch.device(device)}; give "
            "smaller sizes"
        )


def torch_threads(preset: str, processes: int = 1) -> int:
    """Intra-op threads for one process of a run of `processes` processes: one for a
    preset whose models are too small to split (its record's `one_thread`), else the
    cores shared among the processes."""
    if config.preset(preset).one_thread:
        return 1
    return max(1, cores_available() // max(1, processes))


def show_progress(env=None) -> bool:
    """Live progress bars, unless $AT_PROGRESS=0 (set by `make run`, so that the
    committed notebook stores one line per epoch instead of every refresh)."""
    env = os.environ if env is None else env
    return env.get(PROGRESS_ENV, "1") != "0"


def checkpoint_root(preset: str, env=None) -> Path:
    """checkpoints/<preset>, or $AT_CHECKPOINTS/<preset> (a Google Drive folder). A
    value that names a file, a broken link or a folder that cannot be written is
    an error naming the variable, at Setup rather than at the first run; so is a
    value of blanks or one with blanks around it (" " would make a folder named
    " "). An empty value counts as unset."""
    from atkit.files import check_writable
    from atkit.settings import ConfigError

    env = os.environ if env is None else env
    value = env.get(CHECKPOINTS_ENV)
    if value and not value.strip():
        raise ConfigError(
            f"{CHECKPOINTS_ENV}={value!r} is blank; set it to the folder for the "
            "checkpoints (a Google Drive folder on Colab), or unset it for "
            "./checkpoints"
        )
    if value and value != value.strip():
        raise ConfigError(
            f"{CHECKPOINTS_ENV}={value!r} begins or ends with a blank, which would "
            f"be part of the folder's name; set it to {value.strip()!r}"
        )
    root = Path(value or "checkpoints").expanduser()
    if value:
        check_writable(root, CHECKPOINTS_ENV)
    return root / preset


def pretrained(env=None) -> bool:
    """Whether the reader asked for the committed model instead of training
    ($AT_PRETRAINED=1; 0 or unset: train)."""
    env = os.environ if env is None else env
    value = env.get(PRETRAINED_ENV, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(
            f"{PRETRAINED_ENV}={value!r}: use 1 (load the committed model, train "
            "nothing) or 0 (train)"
        )
    return value == "1"


def _skip_training(lines: list[str]) -> list[str]:
    """IPython input transformer: a cell that trains becomes one printed line."""
    if lines and lines[0].startswith(NEEDS_TRAINING):
        return [
            "print('skipped: PRETRAINED is on (AT_PRETRAINED=1), and this cell trains "
            "a model or uses one that Parts 3 and 4 train')\n"
        ]
    return lines


def use_pretrained(flag: bool | None = None) -> bool:
    """The notebook's switch for readers who cannot train: with `flag` (default:
    $AT_PRETRAINED) on, every cell whose first line is `# needs training` prints
    one line instead of running, in this IPython kernel, and Part 6 loads the
    committed model; off, the cells run. Returns the flag."""
    flag = pretrained() if flag is None else bool(flag)
    try:
        from IPython import get_ipython
    except ImportError:
        return flag
    shell = get_ipython()
    if shell is not None:
        hooks = shell.input_transformers_cleanup
        hooks[:] = [h for h in hooks if h is not _skip_training]
        if flag:
            hooks.append(_skip_training)
    return flag


# ------------------------------------------------------------------ precision


def cpu_flags() -> dict[str, bool]:
    """The CPU features that decide precision and kernels, as torch sees them."""
    probes = {
        "AMX": "_is_amx_tile_supported",
        "AVX512-BF16": "_is_avx512_bf16_supported",
        "AVX512": "_is_avx512_supported",
    }
    import torch

    return {
        name: bool(getattr(torch.cpu, f, lambda: False)()) for name, f in probes.items()
    }


def cpu_bf16() -> tuple[bool, str]:
    """(has bfloat16 instructions, which): AMX tiles or AVX512-BF16."""
    flags = cpu_flags()
    for name in ("AMX", "AVX512-BF16"):
        if flags[name]:
            return True, name
    return False, "no bfloat16 instructions"


def auto_precision(device) -> tuple[str, str]:
    """What precision="auto" means on `device`, and why, as (name, reason).

    GPUs: bfloat16 where the GPU computes it natively (compute capability 8.0 and up:
    A100, H100, L4, RTX 30xx and later), float16 with a GradScaler on older ones (T4,
    V100), whose bfloat16 is only emulated. CPUs: bfloat16 where the processor has
    bfloat16 instructions, float32 elsewhere.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        major, minor = gpu_capability(device)
        if major >= 8:
            return "bf16", f"the GPU computes bfloat16 natively (sm{major}{minor})"
        return "fp16", f"sm{major}{minor} has no native bfloat16: float16 + GradScaler"
    has, which = cpu_bf16()
    if has:
        return "bf16", f"the CPU has {which}"
    return "fp32", "the CPU has no bfloat16 instructions"


def gpu_capability(device) -> tuple[int, int]:
    """The CUDA compute capability of `device` (a function, so tests can fake it)."""
    import torch

    return torch.cuda.get_device_capability(device)


def c_compiler() -> str | None:
    """The C compiler Triton builds its kernel launcher with ($CC, else gcc, else
    clang), or None."""
    import shutil

    cc = os.environ.get("CC")
    return shutil.which(cc) if cc else shutil.which("gcc") or shutil.which("clang")


def python_headers() -> bool:
    """Whether Python.h is where Triton looks for it when it builds its launcher."""
    import sysconfig

    scheme = sysconfig.get_default_scheme()
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    return (Path(sysconfig.get_paths(scheme=scheme)["include"]) / "Python.h").is_file()


def compile_works(device) -> tuple[bool, str]:
    """Whether torch.compile's generated kernels run here: Triton needs sm70+ on a GPU,
    and a C compiler and Python's headers to build the launcher of its kernels (at
    the first compiled call: without them a compiled run would stop there); a CPU
    needs a C++ compiler."""
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        major, minor = gpu_capability(device)
        if major < 7:
            return False, f"Triton needs sm70 or newer, this GPU is sm{major}{minor}"
        cc = c_compiler()
        if cc is None:
            return False, "Triton builds its kernel launcher with a C compiler: " + (
                "none found (install gcc, or set CC)"
            )
        if not python_headers():
            return False, "Triton's kernel launcher needs Python.h (python3-dev)"
        return True, f"sm{major}{minor}, C compiler {cc}"
    import shutil

    cc = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
    return (cc is not None), (cc or "no C++ compiler for compiled CPU kernels")


def compiled_or_eager(model, log=print, **options):
    """torch.compile(model, **options), or `model` itself, with one line said, where
    compiling fails: when torch.compile is called, or at a call of the compiled
    model, which compiles lazily (at its first call, and again for a shape it has not
    seen). Triton supports some GPUs only loosely (a T4, sm75): a run goes on
    uncompiled rather than stop."""
    import torch

    try:
        compiled = torch.compile(model, **options)
    except Exception as err:  # whatever it is, the model runs as it is
        log(_uncompiled(err))
        return model
    return EagerOnFailure(compiled, model, log)


def _uncompiled(err: Exception) -> str:
    why = (str(err).strip().splitlines() or [""])[0][:160]
    return (
        f"torch.compile failed here ({type(err).__name__}: {why}); the run goes on "
        "uncompiled (slower, nothing else changes)"
    )


class EagerOnFailure:
    """A compiled model that becomes the model itself, for good, at the first call
    that fails. That call is made again uncompiled, from the random state it started
    with if it was the first: a run whose compiling fails at its first step computes
    what an uncompiled run does. An error that the uncompiled model raises too is
    the model's own: it is raised as it is, and nothing is said. Everything else
    (train(), no_sync, _orig_mod) is the compiled model's."""

    def __init__(self, compiled, model, log=print):
        self.__dict__.update(net=compiled, model=model, log=log, first=True)

    def __call__(self, *args, **kwargs):
        if self.net is self.model:
            return self.model(*args, **kwargs)
        rng = _random_state(self.model) if self.first else None
        self.first = False
        try:
            return self.net(*args, **kwargs)
        except Exception as err:  # the model, run below, says if it is its own
            failure = err
        if rng is not None:
            _set_random_state(rng)
        out = self.model(*args, **kwargs)
        self.log(_uncompiled(failure))
        self.net = self.model
        return out

    def __getattr__(self, name):
        return getattr(self.__dict__["net"], name)


def _random_state(model):
    """The CPU generator's state and, for a model on a GPU, that GPU's."""
    import torch

    parameters = getattr(model, "parameters", None)
    p = next(parameters(), None) if callable(parameters) else None
    gpu = p.device if p is not None and p.device.type == "cuda" else None
    return torch.get_rng_state(), gpu, torch.cuda.get_rng_state(gpu) if gpu else None


def _set_random_state(state) -> None:
    import torch

    cpu, gpu, gpu_state = state
    torch.set_rng_state(cpu)
    if gpu is not None:
        torch.cuda.set_rng_state(gpu_state, gpu)


# ------------------------------------------------------------------ the Setup cell


RUN_MIME = "application/vnd.annotated-transformer.run+json"


@dataclass(frozen=True)
class Runtime:
    preset: str
    device: torch.device
    threads: int

    def machine(self) -> str:
        if self.device.type == "cuda":
            import torch

            return torch.cuda.get_device_name(self.device)
        return f"{cores_available()} CPU core(s)"

    def __str__(self) -> str:
        import torch

        late = " (set too late: torch was loaded first; restart)" * TORCH_WAS_LOADED
        return (
            f"preset {self.preset} · {self.device} ({self.machine()}) · "
            f"torch {torch.__version__.split('+')[0]}{late}"
        )

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """The Setup cell's output: the line above, and the same facts as data (a
        type that Jupyter does not show) for tools/readme_results.py to read the
        committed run's preset from."""
        import torch

        facts = {
            "preset": self.preset,
            "device": str(self.device),
            "machine": self.machine(),
            "torch": torch.__version__.split("+")[0],
        }
        if self.device.type == "cpu":  # what decides a CPU run's time
            facts["cpu"] = cpu_name()
            facts["precision"] = auto_precision(self.device)[0]
        return {"text/plain": str(self), RUN_MIME: facts}


def cpu_name() -> str:
    """The processor's model name (Linux), else what `platform` says, else "CPU"."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def setup(clone: str | None = None) -> Runtime:
    """Decide preset, device and threads for this process, and draw plots for the
    page (atkit.figures.use_page_style: SVG, words as text); returns them. With
    `clone`, the folder the Setup cell cloned the repository into where the
    notebook runs without it (Colab), and this package imported from there: work
    in it, update it if a restarted session kept it, and install the missing
    packages first (`atkit.colab.prepare`)."""
    if clone and Path(clone).resolve() == Path(__file__).resolve().parents[1]:
        from atkit import colab

        colab.prepare(clone)
    import torch

    from atkit import figures

    figures.use_page_style()
    preset = choose_preset()
    torch.set_num_threads(torch_threads(preset))
    return Runtime(preset, default_device(), torch.get_num_threads())
