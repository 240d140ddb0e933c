"""Shared fixtures. Importing torch registers the "spyre" device through the
torch.backends entry point; ``spyre_adapter`` is imported explicitly as well so
the suite also runs with autoload disabled."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch  # noqa: F401  (registers the "spyre" device through the torch.backends entry point)

import spyre_adapter

spyre_adapter.register()  # when autoload is off

from spyre_shims.runtime import reset_compiled

from spyre_adapter.backend.session import current


@pytest.fixture
def report():
    """The device report, emptied for the test."""
    current().report.reset()
    yield current().report


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    reset_compiled()
    yield


#: IBM's torch-spyre cost model beside the checkout (the package never searches for it:
#: the folder holds code, run only from where it is named).
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "reference" / "torch-spyre-cost-model"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if REFERENCE.is_dir():
        os.environ.setdefault("SPYRE_REFERENCE_DIR", str(REFERENCE))
