"""The torch versions install() accepts: older than supported is an error, newer than tested a warning."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")
import precompile
from precompile import _torch as tc

pytestmark = pytest.mark.torch


def test_a_torch_older_than_supported_is_a_typed_error() -> None:
    with pytest.raises(precompile.UnsupportedTorchError, match=r"needs torch >= 2\.11; this is torch 2\.10\.1"):
        tc.check_torch_version("2.10.1+cpu")
    with pytest.raises(precompile.UnsupportedTorchError):
        tc.check_torch_version("1.13.0")


def test_a_torch_newer_than_tested_warns_once() -> None:
    newer = f"{tc.NEWEST_TESTED[0]}.{tc.NEWEST_TESTED[1] + 1}.0.dev20270101+cu140"
    with pytest.warns(precompile.PrecompileWarning, match="newer than the newest torch precompile was tested"):
        tc.check_torch_version(newer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tc.check_torch_version(newer)  # once per process


def test_the_tested_range_is_silent_and_includes_this_torch(tmp_path) -> None:
    assert tc.OLDEST_SUPPORTED <= tc.NEWEST_TESTED
    for version in ("2.11.0", f"{tc.NEWEST_TESTED[0]}.{tc.NEWEST_TESTED[1]}.3+cu132"):
        tc.check_torch_version(version)
    # The torch these tests run on is tested: install() warns about nothing
    # (pytest turns warnings into errors).
    with precompile.installed(tmp_path / "store", save_on_exit=False):
        pass
