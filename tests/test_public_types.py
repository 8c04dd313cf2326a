"""The public API as a type checker sees it, and what importing it costs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.processes import child_env

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / "python"


# torch is skipped (its names become Any): the snippet is judged by the
# package's own annotations, and checking torch itself takes minutes.
_CONFIG = """\
[mypy]
[mypy-torch.*]
follow_imports = skip
"""


def _mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(textwrap.dedent(source))
    config = tmp_path / "mypy.ini"
    config.write_text(_CONFIG)
    env = {**os.environ, "MYPYPATH": str(PYTHON)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--hide-error-context",
            # The package's own checks run from the project's configuration;
            # here only the snippet's use of it is judged.
            "--follow-imports=silent",
            "--cache-dir",
            str(ROOT / ".mypy_cache" / "public-types"),
            "--config-file",
            str(config),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )


def test_misuse_of_the_public_api_is_a_type_error(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    r = _mypy(
        tmp_path,
        """
        import precompile

        precompile.install(123)
        precompile.installed(save_on_exit="no")
        report: int = precompile.save()
        precompile.uninstall(1)
        warning: precompile.SaveReport = precompile.PrecompileWarning("x")
        """,
    )
    lines = [line for line in r.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in lines] == ["4", "5", "6", "7", "8"], r.stdout + r.stderr
    assert "install" in lines[0] and '"int"' in lines[0]
    assert "installed" in lines[1] and "save_on_exit" in lines[1]
    assert "SaveReport" in lines[2]


def test_correct_use_of_the_public_api_type_checks(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    r = _mypy(
        tmp_path,
        """
        import warnings

        import precompile
        from precompile import PrecompileWarning, SaveReport

        cache: precompile.StoreDynamoCache = precompile.install("/tmp/store", save_on_exit=False)
        with precompile.installed("/tmp/store", save_on_exit=False, trusted_keys=["k"]) as c:
            print(c.path_prefix())
        report: SaveReport = precompile.save()
        entries: dict[str, str] = report.entries
        path: str = precompile.default_store_path()
        warnings.warn(PrecompileWarning("x"))
        precompile.uninstall()
        """,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_warning_class_imports_no_torch() -> None:
    code = "import sys\nfrom precompile import PrecompileWarning\nassert 'torch' not in sys.modules, 'torch imported'\n"
    # The tested package, wherever it is installed (its binary module is built there).
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.mark.torch
def test_installed_takes_exactly_the_keywords_of_install() -> None:
    import inspect

    import precompile

    def keywords(fn: object) -> list[tuple[str, object, object]]:
        params = inspect.signature(fn).parameters.values()  # type: ignore[arg-type]
        return [(p.name, p.kind, p.default) for p in params]

    assert keywords(precompile.installed) == keywords(precompile.install)
