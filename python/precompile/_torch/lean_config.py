"""`torch.compile`'s Inductor config snapshot, taken without importing the compiler."""

from __future__ import annotations

from typing import Any

from .patch import _Patch, source_block

# `torch._inductor.compile_fx.get_patched_config_dict` as each known torch
# defines it, whitespace removed. The replacement below runs the same steps;
# a torch whose function reads otherwise keeps its own.
_ROUTED = (
    "defget_patched_config_dict(config_patches:dict[str,Any]|None=None,)->dict[str,Any]:"
    "withpatch_compile_options(config_patches):config_copy=config.get_config_copy()"
    "fornameinconfig_patchesor{}:#coreinductorkeystakeprecedenceoverdevicenamespaces"
    'ifname.replace("-","_")inconfig._config:#type:ignore[attr-defined]continue'
    "route=get_compile_option_owner(name)ifrouteisnotNone:owner_config,key=route"
    "config_copy[name]=getattr(owner_config,key)returnconfig_copy"
)
_PLAIN = (
    "defget_patched_config_dict(config_patches:Optional[Union[str,dict[str,Any]]]=None,)->dict[str,Any]:"
    "withconfig.patch(config_patches):returnconfig.get_config_copy()"
)


def _compile_fx_variant() -> str | None:
    """Which known `get_patched_config_dict` this torch has, read from the
    source file without importing it; None for an unknown one."""
    text = source_block("torch._inductor.compile_fx", r"^def get_patched_config_dict\(.*?(?=^[A-Za-z_@])")
    if text is None:
        return None
    # By body: the signature's annotations are spelled differently across
    # releases (2.12: `str | dict[str, Any] | None`) for the same steps.
    return {_body(_ROUTED): "routed", _body(_PLAIN): "plain"}.get(_body(text))


def _body(text: str) -> str:
    """A whitespace-free function definition after its signature."""
    return text.partition("->dict[str,Any]:")[2]


class _LeanBackendConfig(_Patch):
    """`torch.compile` snapshots Inductor's config without importing `compile_fx`.

    `torch._dynamo.optimize` asks the Inductor backend for its config before
    any cache lookup, and `get_compiler_config` imports
    `torch._inductor.compile_fx` for one helper, and with it the whole
    compiler (lowerings, `select_algorithm`, the scheduler, every code
    generator: about a second on a fresh process). A warm start that the
    store serves runs none of it. While installed, the backend computes the
    same dict with `torch._inductor.config` and the option routing it already
    has loaded; `compile_fx` is imported when a frame must compile.

    Torch versions: 2.11 and newer, where `get_patched_config_dict` reads as
    one of the two known bodies (checked against the source file, whatever
    its signature's annotations).
    Steps aside: `_apply` replaces nothing where the function reads otherwise,
    or the backend's `get_compiler_config` is not torch's.
    """

    def _apply(self) -> None:
        import torch

        wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
        original = None if wrapper is None else vars(wrapper).get("get_compiler_config")
        if original is None or "get_patched_config_dict" not in original.__code__.co_names:
            return
        variant = _compile_fx_variant()
        if variant == "routed":
            try:
                from torch._inductor.codegen.common import get_compile_option_owner, patch_compile_options
            except ImportError:
                return
        elif variant != "plain":
            return
        from torch._inductor import config

        def get_compiler_config(self: Any) -> dict[str, Any]:
            patches = self.config
            if variant == "plain":
                with config.patch(patches):
                    return config.get_config_copy()
            # torch's routed body: device-namespaced options are read back
            # from their owner; core Inductor keys take precedence.
            with patch_compile_options(patches):
                copy = config.get_config_copy()
                for name in patches or {}:
                    if name.replace("-", "_") in config._config:  # type: ignore[attr-defined]
                        continue
                    route = get_compile_option_owner(name)
                    if route is not None:
                        owner, key = route
                        copy[name] = getattr(owner, key)
                return copy

        get_compiler_config.__doc__ = original.__doc__
        self._replace(wrapper, "get_compiler_config", get_compiler_config)


lean_backend_config = _LeanBackendConfig()
