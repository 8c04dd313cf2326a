"""The patch registry: what install() starts, in which order, what it reports,
and `PRECOMPILE_PATCHES_OFF` for turning one off."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.processes import child_env, run_precompile

pytestmark = pytest.mark.torch


def _run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=300,
    )


_REPORT = """
    import json, sys
    import precompile
    from precompile import _torch as tc
    before = [s.to_json() for s in tc.report()]
    precompile.install(sys.argv[1], save_on_exit=False)
    during = [s.to_json() for s in tc.report()]
    actives = [patch.active for _, patch in tc.patches()]
    precompile.uninstall()
    after = [s.to_json() for s in tc.report()]
    print(json.dumps({"before": before, "during": during, "actives": actives, "after": after,
                      "names": [name for name, _ in tc.patches()]}))
"""


def test_report_lists_every_patch_in_start_order(tmp_path: Path) -> None:
    proc = _run(_REPORT, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    names = out["names"]
    assert len(names) == len(set(names)) >= 20
    for when in ("before", "during", "after"):
        assert [s["name"] for s in out[when]] == names
    assert [s["active"] for s in out["during"]] == out["actives"]
    # Installed: an active patch has no reason, an inactive one says torch needs none.
    for status in out["during"]:
        assert status["summary"], status
        assert (status["reason"] == "") == status["active"], status
        if not status["active"]:
            assert status["reason"] == "this torch needs no adaptation"
    # Some patches adapt every supported torch: they are active while installed.
    assert {"save_to_dynamo_cache", "kernel_capture", "backend_capture", "install_hardening"} <= {
        s["name"] for s in out["during"] if s["active"]
    }
    for when in ("before", "after"):
        assert not any(s["active"] for s in out[when])
        assert {s["reason"] for s in out[when]} == {"not installed"}


def test_a_patch_turned_off_stays_inactive(tmp_path: Path) -> None:
    proc = _run(_REPORT, tmp_path, PRECOMPILE_PATCHES_OFF="kernel_capture, backend_capture")
    assert proc.returncode == 0, proc.stderr
    during = {s["name"]: s for s in json.loads(proc.stdout)["during"]}
    for name in ("kernel_capture", "backend_capture"):
        assert during[name]["active"] is False
        assert during[name]["reason"] == "turned off by PRECOMPILE_PATCHES_OFF"
    assert during["install_hardening"]["active"] is True


def test_an_unknown_patch_name_fails_install_before_anything_changes(tmp_path: Path) -> None:
    script = """
        import sys
        import precompile
        import torch._dynamo.package as package
        from precompile import _torch as tc
        try:
            precompile.install(sys.argv[1], save_on_exit=False)
        except ValueError as e:
            print(e)
        assert "load" not in vars(package.DynamoCache), "the DynamoCache was swapped"
        assert not any(patch.active for _, patch in tc.patches())
        assert not precompile.dynamo._active
    """
    proc = _run(script, tmp_path, PRECOMPILE_PATCHES_OFF="no_such_patch")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "PRECOMPILE_PATCHES_OFF names no patch called no_such_patch"


def test_doctor_reports_the_patches_install_starts(tmp_path: Path) -> None:
    proc = _run(_REPORT, tmp_path)
    assert proc.returncode == 0, proc.stderr
    during = json.loads(proc.stdout)["during"]
    doctor = run_precompile("doctor", "--json")
    assert doctor.returncode == 0, doctor.stderr
    doc = json.loads(doctor.stdout)
    import torch

    assert doc["torch"] == torch.__version__
    env = doc["environment"]
    assert env["torch"] == torch.__version__ and len(env["id"]) == 16 and env["accelerator"] is None
    assert doc["patches"] == during
    text = run_precompile("doctor")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    active = sum(s["active"] for s in during)
    assert f"torch patches active on this host: {active} of {len(during)}" in lines
    for status in during:
        state = "active" if status["active"] else "inactive"
        assert any(line.split()[:2] == [state, status["name"]] for line in lines), status["name"]


def test_doctor_says_which_patches_are_turned_off() -> None:
    doctor = run_precompile("doctor", "--json", env={"PRECOMPILE_PATCHES_OFF": "install_hardening"})
    assert doctor.returncode == 0, doctor.stderr
    (status,) = [s for s in json.loads(doctor.stdout)["patches"] if s["name"] == "install_hardening"]
    assert status["active"] is False
    assert status["reason"] == "turned off by PRECOMPILE_PATCHES_OFF"
    bad = run_precompile("doctor", env={"PRECOMPILE_PATCHES_OFF": "no_such_patch"})
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr.strip() == "precompile: error: PRECOMPILE_PATCHES_OFF names no patch called no_such_patch"
