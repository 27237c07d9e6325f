"""Shared fixtures: one local SparkSession for the whole test run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

# Inconsistent ops reaching a state table fail loudly in tests (outside them they are logged,
# counted in rw_catalog.rw_streaming_errors and applied): executors must never produce them.
# Set in the environment so `piestream serve` child processes are strict too.
os.environ["PIESTREAM_STRICT_CONSISTENCY"] = "1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", default=False, help="run long soak tests")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """The process's SparkSession (local[2,4]: two cores, failed tasks retried up to 4 times)."""
    from piestream.runtime.spark import spark_session

    # Spark's Python workers unpickle test functions by module name: let them import test modules.
    dirs = [str(d) for d in [TESTS, *TESTS.rglob("*")] if d.is_dir() and d.name != "__pycache__"]
    os.environ["PYTHONPATH"] = os.pathsep.join([*dirs, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    session = spark_session("local[2,4]", app_name="piestream-tests")
    yield session
    session.stop()


@pytest.fixture
def browser() -> Iterator[object]:
    """A headless Chromium (Debian's chromium + chromium-driver, installed by scripts/setup.sh)
    driven by selenium: the dashboard's page tests."""
    import shutil

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromium-driver are missing: run scripts/setup.sh as root"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        opts.add_argument(arg)
    b = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield b
    finally:
        b.quit()
