"""Shared fixtures: the repository's bundled trace, small windows so that tests are quick."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = str(ROOT / "traces" / "itp" / "cluster10.csv")
CLUSTER = "3x8:V100"


@pytest.fixture
def trace() -> str:
    return TRACE


@pytest.fixture
def small_env_kwargs() -> dict:
    return dict(trace=TRACE, cluster=CLUSTER, window_jobs=40, windows=4)


@pytest.fixture(scope="session")
def lachesis_bin() -> str:
    """The `lachesis` binary to compare against (tests/python.rs sets LACHESIS_BIN)."""
    path = os.environ.get("LACHESIS_BIN")
    if not path:
        pytest.skip("LACHESIS_BIN is not set (tests/python.rs sets it)")
    return path
