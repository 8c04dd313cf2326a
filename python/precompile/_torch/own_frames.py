"""The adapter's own code is torch's infrastructure to Dynamo: never traced, as torch's own files are not."""

from __future__ import annotations

import os

from .patch import _Patch

# This directory (the torch adapter), as Dynamo's skip list spells a directory:
# a prefix of the files under it.
_ADAPTER_DIR = (os.path.dirname(os.path.abspath(__file__)) + os.sep).replace(os.sep, "/")


class _OwnFramesSkipped(_Patch):
    """Dynamo traced the adapter's hooks that torch calls from an eager region, and counted their graph breaks.

    Dynamo hands every Python frame that starts while a compiled function
    runs to its frame converter, and traces each one outside its skip list.
    torch's own files are on that list; the adapter's were not. A compiled
    training step's backward runs eagerly and compiles the lazy backward
    there, through the adapter's hooks (the kept-backward compiler, the
    AOTAutograd cache save): Dynamo traced them, failed on their lock
    (`counters["unimplemented"]`, a graph break in TORCH_LOGS=graph_breaks
    naming a file of this package) and ran every frame they call under its
    callback. While installed, the adapter's directory is on Dynamo's skip
    list, so those frames run as torch's own do.

    Only the adapter's directory: the rest of the package holds code a user
    compiles (the demo's model).

    Torch versions: 2.11 and newer (`trace_rules.SKIP_DIRS` and
    `_recompile_re`). Steps aside where either is missing.
    """

    def __init__(self) -> None:
        super().__init__()
        self._added = False

    @property
    def active(self) -> bool:
        return self._added

    def _apply(self) -> None:
        from torch._dynamo import trace_rules

        dirs = getattr(trace_rules, "SKIP_DIRS", None)
        recompile = getattr(trace_rules, "_recompile_re", None)
        if not isinstance(dirs, list) or not callable(recompile):
            return
        dirs.append(_ADAPTER_DIR)
        recompile()
        self._added = True

    def stop(self) -> None:
        if not self._added:
            return
        from torch._dynamo import trace_rules

        # Only the entry this patch added: others added since stay.
        dirs = trace_rules.SKIP_DIRS
        for i in range(len(dirs) - 1, -1, -1):
            if dirs[i] == _ADAPTER_DIR:
                del dirs[i]
                break
        trace_rules._recompile_re()
        self._added = False


own_frames_skipped = _OwnFramesSkipped()
