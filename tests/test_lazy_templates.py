"""Inductor's kernel templates compile on first use while a store is installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.processes import run_python

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("jinja2")

from torch._inductor.codegen.common import KernelTemplate  # noqa: E402

import precompile  # noqa: E402


def test_templates_render_the_same_and_fail_the_same(tmp_path: Path) -> None:
    source = "{{ name }}: {{ value | indent_except_first(2) }}"
    plain = KernelTemplate._template_from_string(source)
    with precompile.installed(str(tmp_path / "store"), save_on_exit=False):
        lazy = KernelTemplate._template_from_string(source)
        assert repr(lazy) == "<lazy template, not compiled yet>"
        assert lazy  # torch asserts a template exists
        assert lazy.render(name="x", value="a\nb") == plain.render(name="x", value="a\nb")
        assert type(lazy._get()) is type(plain)
        broken = KernelTemplate._template_from_string("{% if %}")
        with pytest.raises(Exception) as lazily:
            broken.render()
    with pytest.raises(Exception) as eagerly:
        KernelTemplate._template_from_string("{% if %}")
    # torch defines its error class per call: the same class, by name.
    assert type(lazily.value).__qualname__ == type(eagerly.value).__qualname__
    assert str(lazily.value) == str(eagerly.value)
    # Uninstalled: torch's own function again.
    assert KernelTemplate._template_from_string(source).render(name="y", value="1") == "y: 1"
    assert "lazy" not in repr(KernelTemplate._template_from_string(source))


_CHILD = """
import sys, torch, precompile
precompile.install(sys.argv[1], save_on_exit=False)
from torch._inductor.select_algorithm import TritonTemplate
import torch._inductor.kernel.mm  # builds Inductor's matmul templates
templates = list(TritonTemplate.all_templates.values())
assert templates, "Inductor built no templates"
print(sum(t.template._template is None for t in templates), len(templates))
"""


def test_importing_inductor_kernels_compiles_no_template(tmp_path: Path) -> None:
    proc = run_python("-c", _CHILD, tmp_path / "store", timeout=600, tail=3000)
    uncompiled, total = map(int, proc.stdout.split())
    assert uncompiled == total > 0
