"""Build host to serving host through one bundle file.

One process compiles into a store; `precompile export` packs it into a
bundle; a fresh process with an empty store, a fresh Inductor cache, an
empty Triton cache and a compiler spy on PATH serves from the bundle as a
read-only layer. It must give the same outputs and compile nothing. A signed
bundle is served the same way with `trusted_keys`, and a bundle signed by
another key, or changed after signing, is refused before anything of it runs.
"""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3
from support.processes import run_precompile
from support.warm_start import assert_compiled_nothing, assert_same_outputs, run_scenario

from precompile import Store, open_bundle

pytestmark = pytest.mark.torch


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    proc = run_precompile(*args, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One real compile, shared by the tests below."""
    work = tmp_path_factory.mktemp("build")
    build_store = work / "build-store"
    a = run_scenario("inference", "compile", build_store, work / "build")
    assert a["compiler_runs"], "the build side should have compiled"
    assert a["report"]["entries"]
    return build_store, a


def check_served(a: dict[str, Any], b: dict[str, Any], serving_store: Path) -> None:
    assert_same_outputs(a["outputs"], b["outputs"])
    assert_compiled_nothing(b)
    # The serving store wrote no entries of its own: they were all read from the bundle.
    assert Store(serving_store).refs("dynamo/") == []


def test_serving_process_runs_from_a_shipped_bundle(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    build_store, a = built
    bundle = tmp_path / "model.bundle"
    cli("--store", build_store, "export", bundle)
    shipped = open_bundle(bundle)
    for key, digest in a["report"]["entries"].items():
        assert digest in {shipped.get_ref(name) for name in shipped.refs()}, key
    assert shipped.verify().ok

    serving_store = tmp_path / "serving-store"  # empty: everything must come from the bundle
    b = run_scenario(
        "inference",
        "load",
        serving_store,
        tmp_path / "serve",
        extra_env={"PRECOMPILE_TEST_LAYERS": str(bundle)},
    )
    check_served(a, b, serving_store)


def test_signed_bundle_is_served_with_trusted_keys_and_others_refused(
    built: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    build_store, a = built
    public = cli("keygen", tmp_path / "release.key").stdout.strip()
    other = cli("keygen", tmp_path / "other.key").stdout.strip()
    bundle = tmp_path / "model.bundle"
    cli("--store", build_store, "export", bundle, "--sign", tmp_path / "release.key")

    serving_store = tmp_path / "serving-store"
    b = run_scenario(
        "inference",
        "load",
        serving_store,
        tmp_path / "serve",
        extra_env={"PRECOMPILE_TEST_LAYERS": str(bundle), "PRECOMPILE_TEST_TRUSTED_KEYS": public},
    )
    check_served(a, b, serving_store)

    # Another key's bundle, and ours with one ref renamed and its trailer recomputed:
    # install() refuses both in the serving process, before anything is loaded.
    tampered = tmp_path / "tampered.bundle"
    data = bytearray(bundle.read_bytes())
    index_offset, _, refs_offset, refs_len = struct.unpack_from("<4Q", data, 56)
    data[refs_offset + refs_len - 40] ^= 0x01
    data[-40:-8] = blake3(bytes(data[:128]) + bytes(data[index_offset : refs_offset + refs_len])).digest()
    tampered.write_bytes(bytes(data))
    for name, layer, key in (("foreign", bundle, other), ("tampered", tampered, public)):
        with pytest.raises(AssertionError, match="UntrustedError"):
            run_scenario(
                "inference",
                "load",
                tmp_path / f"store-{name}",
                tmp_path / name,
                extra_env={"PRECOMPILE_TEST_LAYERS": str(layer), "PRECOMPILE_TEST_TRUSTED_KEYS": key},
            )
        assert not (tmp_path / f"store-{name}").exists()
