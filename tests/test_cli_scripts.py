"""The command line in pipes and scripts: whole values off a terminal, closed
pipes, global options anywhere, one-line errors with stable exit codes,
control characters from the store escaped, and the cache-managing commands
(rm, prune, dir, pubkey, ls --remote). Each runs the real `python -m
precompile` in a child process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.processes import PROGRAMS, child_env, run_precompile, run_python
from support.synthetic import make_entries

from precompile import Store

LONG = "dynamo/" + "k" * 150  # longer than any terminal rich would assume


def cli_json(*args: object, env: dict[str, str] | None = None) -> Any:
    proc = run_precompile(*args, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def one_line_error(proc: subprocess.CompletedProcess[str], status: int) -> str:
    """The child failed with `status` and a single `precompile: error:` line."""
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("precompile: error: "), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "[Errno" not in proc.stderr, proc.stderr
    return proc.stderr


# Runs the command line with the named top-level modules unimportable, as on
# a host without them installed.
_HIDDEN = textwrap.dedent(
    """
    import runpy, sys
    hidden = set(sys.argv[1].split(","))
    class Hide:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in hidden:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Hide())
    sys.argv = ["precompile", *sys.argv[2:]]
    runpy.run_module("precompile", run_name="__main__")
    """
)


def run_without(modules: str, *args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _HIDDEN, modules, *map(str, args)],
        capture_output=True,
        text=True,
        env=child_env(env),
        timeout=120,
    )


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """Three synthetic entries plus one under a 157-character ref name."""
    root = tmp_path / "store"
    store = Store(root)
    refs = make_entries(store, 3, shared_kib=4)
    store.set_ref(LONG, refs["dynamo/e0"])
    return root


def test_off_a_terminal_values_are_whole_and_tab_separated(filled: Path) -> None:
    proc = run_precompile("--store", filled, "ls")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 4  # no header, no wrapped continuation lines
    names = [line.split("\t")[0] for line in lines]
    assert LONG in names and "dynamo/e1" in names
    assert all(len(line.split("\t")) == 9 for line in lines)

    du = run_precompile("--store", filled, "du").stdout.splitlines()
    assert any(line.endswith("\t" + LONG) for line in du)
    # Messages are not wrapped either: the error names the whole path.
    far = filled / ("x" * 120) / ("y" * 120)
    proc = run_precompile("--store", far, "ls")
    assert str(far) in one_line_error(proc, 2)


def test_a_closed_pipe_is_a_normal_end(filled: Path) -> None:
    # The reading end is closed before the command starts: its first write
    # meets a closed pipe, as `precompile ls --json | head -0` would.
    for args in (("ls", "--json"), ("ls",), ("show", "dynamo/e0"), ("stats",), ("--help",)):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "precompile", "--store", str(filled), *args],
                stdout=write_end,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
                timeout=120,
            )
        finally:
            os.close(write_end)
        assert proc.returncode == 0 and proc.stderr == "", (args, proc.stderr)


def test_global_options_before_or_after_the_command(filled: Path, tmp_path: Path) -> None:
    before = cli_json("--store", filled, "ls")
    assert cli_json("ls", "--store", filled) == before
    assert cli_json("ls", "dynamo/e", "--store", filled, "--shared")[0]["name"] == "dynamo/e0"
    # explain takes --store after its name too: what is missing now is the record, not the option.
    proc = run_precompile("explain", "--store", filled)
    assert "no run has recorded" in one_line_error(proc, 2)
    assert cli_json("dir", "--store", filled)["path"] == str(filled)


def test_a_team_store_opens_with_shared(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    team.chmod(0o2775)
    store = Store(team, shared=True)
    store.set_ref("dynamo/x", store.put(b"team entry"))
    team.chmod(0o2775)

    refused = run_precompile("--store", team, "ls")
    assert "--shared" in one_line_error(refused, 1)
    assert [r["name"] for r in cli_json("--store", team, "--shared", "ls")] == ["dynamo/x"]
    assert [r["name"] for r in cli_json("ls", "--store", team, "--shared")] == ["dynamo/x"]
    assert [r["name"] for r in cli_json("ls", "--store", team, env={"PRECOMPILE_SHARED": "1"})] == ["dynamo/x"]
    assert cli_json("verify", "--store", team, "--shared")["ok"]


def test_errors_are_one_line_with_stable_exit_codes(filled: Path, tmp_path: Path) -> None:
    # argparse's own refusals are one line too.
    for args in (("frobnicate",), (), ("ls", "--bogus"), ("gc", "--max-size", "10X")):
        one_line_error(run_precompile("--store", filled, *args), 2)
    # Not a store: a path that does not exist and a directory that holds none, alike.
    for path in ("/nonexistent", "/etc", tmp_path):
        assert "no store or bundle" in one_line_error(run_precompile("--store", path, "ls"), 2)
    # Sizes and durations past any store's range.
    for args in (("--max-size", "99999999999999999999P"), ("--grace", "99999999999999999999d")):
        proc = run_precompile("--store", filled, "gc", "--dry-run", *args)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    # Remote URLs: an unknown scheme or option is a bad invocation; the password never shows.
    proc = run_precompile("stats", "--remote", "foo://user:hunter2@host/0")
    assert "hunter2" not in one_line_error(proc, 2)
    proc = run_precompile("stats", "--remote", "redis://user:hunter2@127.0.0.1:1/0?bogus=1")
    assert "'bogus'" in one_line_error(proc, 2) and "hunter2" not in proc.stderr
    proc = run_precompile("stats", "--remote", "redis://:hunter2@127.0.0.1:1/0?connect_timeout=0.5")
    assert "hunter2" not in one_line_error(proc, 1)
    # No remote at all.
    assert "PRECOMPILE_REMOTE" in one_line_error(run_precompile("--store", filled, "push"), 2)
    # Words, not errno text.
    bundle = tmp_path / "one.bundle"
    assert run_precompile("--store", filled, "export", bundle, "dynamo/e0").returncode == 0
    assert "needs a store directory" in one_line_error(run_precompile("--store", bundle, "explain"), 2)
    key = tmp_path / "k"
    assert run_precompile("keygen", key).returncode == 0
    assert "already exists" in one_line_error(run_precompile("keygen", key), 1)


def test_without_redis_or_torch_a_command_says_what_is_missing(filled: Path, signed_fleet: tuple[str, str]) -> None:
    url = "redis://127.0.0.1:1/0"
    for args in (("push", url), ("pull", url), ("stats", "--remote", url), ("ls", "--remote", url)):
        proc = run_without("redis", "--store", filled, *args)
        assert "redis" in one_line_error(proc, 1), args
    proc = run_without("torch", "--store", filled, "demo")
    assert "torch" in one_line_error(proc, 1)


def test_remote_commands_honour_precompile_remote(
    filled: Path, tmp_path: Path, redis_server: Any, signed_fleet: tuple[str, str]
) -> None:
    env = {"PRECOMPILE_REMOTE": redis_server.url}
    pushed = cli_json("--store", filled, "push", "dynamo/e1", env=env)
    assert pushed["refs"] == 1
    assert [r["name"] for r in cli_json("ls", "--remote", env=env)] == ["dynamo/e1"]
    assert cli_json("stats", "--remote", env=env)["entries"] == 1
    # An explicit URL still wins, as a first word or as --remote.
    assert cli_json("--store", filled, "push", redis_server.url, "dynamo/e2")["refs"] == 1
    listed = cli_json("ls", "--remote", redis_server.url)
    assert [r["name"] for r in listed] == ["dynamo/e1", "dynamo/e2"]
    fresh = tmp_path / "fresh"
    assert cli_json("--store", fresh, "pull", env=env)["refs"] == 2
    assert Store(fresh).refs() == ["dynamo/e1", "dynamo/e2"]


def test_control_characters_from_the_store_are_escaped(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    hostile = "\x1b[2J\x1b]52;c;aGk=\x07\x9b31m\x7fend"
    leaf = store.put(b"leaf")
    store.set_ref("dynamo/evil", store.put_manifest([leaf], {"kind": hostile}))
    # Plain output and rich's (forced to act as on a terminal).
    for env in ({}, {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "COLUMNS": "200"}):
        proc = run_precompile("--store", tmp_path / "store", "show", "dynamo/evil", env=env)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout
        assert "\\x1b[2J" in text and "\\x07" in text and "\\x9b" in text and "\\x7fend" in text
        assert "\x1b]52" not in text and "\x07" not in text and "\x9b" not in text and "\x7f" not in text
        assert "\x1b[2J" not in text
    doc = cli_json("--store", tmp_path / "store", "show", "dynamo/evil")
    assert doc["nodes"][0]["meta"]["kind"] == hostile  # JSON carries it exactly, escaped by JSON


def test_rm_prune_dir_and_pubkey(filled: Path, tmp_path: Path) -> None:
    store = Store(filled)
    digest = store.get_ref("dynamo/e1")
    assert digest is not None
    # A digest prefix names the entry; a prefix too short names nothing.
    assert cli_json("--store", filled, "rm", "--dry-run", digest[:8])["removed"] == ["dynamo/e1"]
    one_line_error(run_precompile("--store", filled, "rm", "nope"), 2)
    assert cli_json("--store", filled, "rm", digest[:8], "dynamo/e2")["removed"] == ["dynamo/e1", "dynamo/e2"]
    assert Store(filled).refs() == sorted(["dynamo/e0", LONG])
    one_line_error(run_precompile("--store", filled, "rm"), 2)

    # prune: only what has not been used within the duration.
    old = 40 * 86400
    ref_file = filled / "refs" / "dynamo" / "e0"
    os.utime(ref_file, (ref_file.stat().st_atime - old, ref_file.stat().st_mtime - old))
    assert Store(filled).ref_mtime("dynamo/e0") is not None
    dry = cli_json("--store", filled, "prune", "--older-than", "30d", "--dry-run")
    assert dry["removed"] == ["dynamo/e0"] and Store(filled).get_ref("dynamo/e0") is not None
    pruned = cli_json("--store", filled, "prune", "--older-than", "30d", "--grace", "0")
    assert pruned["removed"] == ["dynamo/e0"] and Store(filled).refs() == [LONG]
    assert cli_json("--store", filled, "rm", "--all")["removed"] == [LONG]
    assert cli_json("--store", filled, "gc", "--grace", "0")["objects_kept"] == 0

    # dir: the default store path, which need not exist yet.
    default = tmp_path / "cache"
    proc = run_precompile("dir", env={"PRECOMPILE_STORE": str(default)})
    assert proc.returncode == 0 and proc.stdout == f"{default}\n"

    key = tmp_path / "release.key"
    public = run_precompile("keygen", key).stdout.strip()
    shown = run_precompile("pubkey", key)
    assert shown.returncode == 0 and shown.stdout.strip() == public
    secret = key.read_bytes()
    assert secret.hex() not in shown.stdout and secret.strip().decode(errors="replace") not in shown.stdout
    one_line_error(run_precompile("pubkey", tmp_path / "absent.key"), 1)


@pytest.mark.torch
def test_show_and_rm_name_entries_by_function_or_digest_prefix(
    compiled_store: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    # A copy: rm must not empty the module's shared store.
    root = tmp_path / "store"
    assert run_precompile("--store", compiled_store[0], "export", tmp_path / "all.bundle").returncode == 0
    assert run_precompile("--store", root, "import", "--allow-unsigned", tmp_path / "all.bundle").returncode == 0
    store = Store(root)
    (ref,) = store.refs("dynamo/")
    digest = store.get_ref(ref)
    assert digest is not None

    listed = run_precompile("--store", root, "ls").stdout.split("\t")
    assert listed[1] == "MLP.forward" and listed[2] == "scenario.py:46"
    by_function = cli_json("--store", root, "show", "MLP.forward")
    assert by_function["root"] == digest and by_function["entry"]["function"] == "MLP.forward"
    assert cli_json("--store", root, "show", digest[:6])["root"] == digest
    assert cli_json("--store", root, "show", "forward")["root"] == digest
    # Every object under the entry says what it is for.
    roles = [n["role"] for n in by_function["nodes"][1:]]
    assert all(roles), roles
    joined = " ".join(roles)
    for role in ("Dynamo entry record", "backend ", "forward graph", "compiled library (.so)", "ISA probe"):
        assert role in joined, (role, roles)
    text = run_precompile("--store", root, "show", "MLP.forward").stdout
    assert "forward graph" in text and "compiled library (.so)" in text

    # A second function named forward makes the short name ambiguous.
    children, meta = store.get_manifest(digest)
    other = store.put_manifest(children, {**meta, "fn_name": "Other.forward"})
    store.set_ref("dynamo/other", other)
    proc = run_precompile("--store", root, "show", "forward")
    assert proc.returncode == 2 and "ambiguous" in proc.stderr and "MLP.forward" in proc.stderr, proc.stderr
    assert "Other.forward" in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert cli_json("--store", root, "show", "Other.forward")["root"] == other

    assert cli_json("--store", root, "rm", "MLP.forward")["removed"] == [ref]
    assert Store(root).refs("dynamo/") == ["dynamo/other"]


@pytest.mark.torch
def test_a_failed_demo_process_shows_its_last_lines(tmp_path: Path) -> None:
    # A sitecustomize that breaks only the demo's child processes.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, sys\n"
        "if 'precompile.demo' in sys.orig_argv:\n"
        "    sys.stderr.write('noise\\nthe child broke: \\x1b[2Jboom\\n')\n"
        "    sys.stderr.flush()\n"
        "    os._exit(3)\n"
    )
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    proc = run_precompile("--store", tmp_path / "store", "demo", env=env)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "the child broke: \\x1b[2Jboom" in lines[-2] and "\x1b" not in proc.stderr
    assert lines[-1].startswith("precompile: error: ") and "compile process failed with exit status 3" in lines[-1]


@pytest.mark.torch
def test_ls_names_the_script_of_a_function_in_main(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = child_env({"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    run_python(PROGRAMS / "saved_at_exit.py", store, env=env)
    (line,) = run_precompile("--store", store, "ls").stdout.splitlines()
    assert line.split("\t")[1:3] == ["Net.forward", "saved_at_exit.py:18"], line
    (entry,) = cli_json("--store", store, "ls")
    assert entry["entry"]["file"] == str(PROGRAMS / "saved_at_exit.py")
