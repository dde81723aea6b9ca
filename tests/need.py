"""Skips that speak: a test that cannot run here for want of something skips with the reason,
except under CI (``CI=true``), where that something is part of the set-up and its absence is an error."""
from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

#: Debian's dataset-fashion-mnist; .ci/run installs it when it runs as root
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def under_ci() -> bool:
    """Whether CI=true is set (as GitHub Actions, GitLab CI and most others set it)."""
    return os.environ.get("CI", "").strip().lower() == "true"


def need(what: str, reason: str, *, required: bool | None = None) -> NoReturn:
    """Skip the test for want of `what`, with `reason`; fail it instead where `what` is required
    (by default: under CI, where its set-up provides it)."""
    if under_ci() if required is None else required:
        pytest.fail(f"{what} missing under CI=true (its set-up should provide it): {reason}", pytrace=False)
    pytest.skip(reason)


def need_fashion_mnist() -> None:
    """Skip without the Fashion-MNIST files; under CI as root (where .ci/run installs them) fail."""
    if not FASHION_DIR.is_dir():
        need("Fashion-MNIST", f"{FASHION_DIR} absent (apt-get install dataset-fashion-mnist)",
             required=under_ci() and os.geteuid() == 0)


#: mark of the tests that read the real Fashion-MNIST files (tests/conftest.py calls need_fashion_mnist)
needs_fashion = pytest.mark.needs_fashion
