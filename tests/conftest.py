"""Shared fixtures. Importing torch registers the "spyre" device through the
torch.backends entry point; ``spyre_adapter`` is imported explicitly as well so
the suite also runs with autoload disabled."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # layering_contract for import-linter

import torch  # noqa: E402

import spyre_adapter  # noqa: E402

spyre_adapter.register()  # when autoload is off

from spyre_adapter.context import current  # noqa: E402
from spyre_shims.runtime import reset_compiled  # noqa: E402

TOLERANCES = {
    torch.float32: {"atol": 1e-4, "rtol": 1e-4},
    torch.float16: {"atol": 1e-2, "rtol": 1e-2},
    torch.bfloat16: {"atol": 8e-2, "rtol": 5e-2},
}


@pytest.fixture
def report():
    """The device report, emptied for the test."""
    current().report.reset()
    yield current().report


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    reset_compiled()
    yield


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONHASHSEED", "0")
