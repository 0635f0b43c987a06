"""Shared test setup: the notebook's library cells, imported as one module.

The code under test lives only in annotated_transformer.md; `nbexport.load` executes its
non-demo cells into a module. Tests run in the small `ci` preset and read Multi30k from
$MULTI30K_DIR (default: ../shared/data/multi30k beside the repository).
"""

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("AT_PRESET", "ci")
os.environ.setdefault(
    "MULTI30K_DIR", str((ROOT / ".." / "shared" / "data" / "multi30k").resolve())
)

import nbexport  # noqa: E402


@pytest.fixture(scope="session")
def nb():
    """The notebook's library code as a module."""
    return nbexport.load()
