"""Shared test setup: the notebook's library cells, imported as one module.

The code under test lives only in annotated_transformer.md; `nbexport.load` writes its
non-demo cells to build/annotated_transformer_lib.py and imports that file. Tests run
in the small `ci` preset (one torch thread, Setup's rule for it) and read Multi30k from
$MULTI30K_DIR (default: ../shared/data/multi30k beside the repository).
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AT_PRESET", "ci")
os.environ.setdefault(
    "MULTI30K_DIR", str((ROOT / ".." / "shared" / "data" / "multi30k").resolve())
)
DATA = Path(os.environ["MULTI30K_DIR"])


@pytest.fixture(scope="session")
def lib():
    """The notebook's library code as a module."""
    import nbexport

    module = nbexport.load()
    module.torch.set_num_threads(module.torch_threads("ci"))
    return module


@pytest.fixture(scope="session")
def copy_model(lib):
    """Part 2's copy-task model, trained as the notebook trains it (to convergence)."""
    model, losses = lib.train_copy_task()
    return model, losses


def quiet(*args, **kwargs):
    """A `log` for train() that prints nothing."""


@pytest.fixture(scope="module")
def cfg(lib, request):
    """The ci preset with the calling test module's TINY settings."""
    return lib.run_config("ci", **request.module.TINY)


@pytest.fixture(scope="module")
def data(lib, cfg):
    return lib.prepare_data(cfg)
