"""What the store holds for a function a lookup missed, and how it differs from here.

A miss runs in serving processes, often on a cold start where nothing is
stored, so its work is bounded: for each local layer (the writable store and
each read-only store or bundle; never the remote, where a lookup is a round
trip and index refs are not sent) one ref read (`host/fn/<fn-id>`, see
`key_parts`), one manifest of a few hundred bytes, and one more ref read to
check that the entry it names is still there. Nothing is listed or scanned.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from . import _torch as tc
from . import entries
from .environment import Environment
from .key_parts import KeyParts, index_ref
from .protocols import ReadStore
from .schema import FnIndexMeta

__all__ = ["env_differences", "key_differences", "local_layers"]

log = logging.getLogger("precompile")


def local_layers(store: Any) -> list[ReadStore]:
    """The layers of `store` a miss may look in: all but a remote, which
    lists only by scanning every key of its server."""
    layers = getattr(store, "layers", None)
    if layers is None:
        return [store]
    remote = getattr(store, "remote", None)
    return [store.writable, *(layer for layer in layers if layer is not remote)]


def env_differences(stored: Environment, device_type: str) -> list[tuple[str, str]]:
    """How the environment `stored` (of an entry for `device_type`) differs from here."""
    here = entries.environment("cpu")
    if device_type != "cpu":
        # An accelerator this process has not started is not asked about.
        initialized = device_type in tc.initialized_accelerators()
        here = entries.environment(device_type) if initialized else dataclasses.replace(here, accelerator=None)
    return stored.differences(here)


def key_differences(store: ReadStore, key: str, here: KeyParts) -> list[tuple[str, str]]:
    """The factors in which the function's last stored entry, under another
    key or environment, differs from `here`: key parts (`source`, `line`,
    `file`) first, then environment factors (`torch`, `python`, ...). Empty
    where no layer indexes the function, or its entry is gone or is this
    very key's (`not_stored`)."""
    name = index_ref(here)
    if name is None:
        return []
    mine = set(entries.lookup_refs(key, start_devices=False))
    for layer in local_layers(store):
        index = _read_index(layer, name)
        if index is None or index.ref in mine or layer.get_ref(index.ref) is None:
            continue
        if entries.parse_ref(index.ref) is None:
            continue
        found = index.key_parts.differences(here) + env_differences(index.env, index.device_type)
        if found:
            return found
    return []


def _read_index(layer: ReadStore, name: str) -> FnIndexMeta | None:
    digest = layer.get_ref(name)
    if digest is None:
        return None
    try:
        _, doc = layer.get_manifest(digest)
        return FnIndexMeta.from_json(doc)
    except Exception:  # an index from another build, or damaged: no hint, still a miss
        log.debug("function index %s does not read", name, exc_info=True)
        return None
