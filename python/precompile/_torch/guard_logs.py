"""torch's warnings about guards it drops under `caching_precompile`, for guards on names a fresh process imports."""

from __future__ import annotations

import logging

from .patch import _Patch

# torch's message (torch/_dynamo/guards.py, the guard filter it installs under
# `caching_precompile`): "%s guard on %s is dropped with caching_precompile=True."
_DROPPED = "is dropped with caching_precompile=True"
# Guards on these sources check the identity of a module, builtin or function
# that generated code reaches by import or from builtins.
_BY_NAME = ("G['__import_", "G['__builtins_dict___")
# Guards that check a global's identity with a module or a builtin: a loading
# process binds the function's globals by importing its module, which binds
# the same modules and builtins by name again.
_GLOBAL_MODULE_OR_BUILTIN = ("MODULE_MATCH", "BUILTIN_MATCH")

log = logging.getLogger("precompile")


class _DroppedGuardFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if _DROPPED not in str(record.msg) or not isinstance(record.args, tuple) or len(record.args) != 2:
            return True
        guard_type, name = record.args
        by_import = str(name).startswith(_BY_NAME)
        if not by_import and not (guard_type in _GLOBAL_MODULE_OR_BUILTIN and str(name).startswith("G[")):
            return True
        log.debug("torch dropped the %s guard on %s (a name a loading process imports)", guard_type, name)
        return False


class _DroppedGuardNotes(_Patch):
    """Quiet torch's "guard ... is dropped with caching_precompile=True" warnings for names resolved by import.

    Under `caching_precompile` torch drops every identity guard (ID_MATCH and
    the guards derived from it: MODULE_MATCH, BUILTIN_MATCH, CLOSURE_MATCH)
    and logs a warning for each, several on every compile of a plain module.
    Those on `G['__import_...']` and `G['__builtins_dict___...']` check a module,
    builtin or function that the generated code reaches by import: a process
    loading the entry binds those names by importing them again (see
    `precompile.module_aliases`), so the dropped identity check would hold
    there anyway, and the warning says nothing to act on. The same holds for
    MODULE_MATCH and BUILTIN_MATCH on a function's globals (`G['torch']`,
    `G['torch'].relu`): the loading process binds them by importing the
    function's module. While installed,
    those warnings go to the `precompile` logger at DEBUG; a dropped guard on
    anything else (a local object, a closure's value) is still torch's
    warning.

    Torch versions: 2.11 and newer log these warnings from `torch._dynamo.guards`.
    Steps aside: adds a filter to that logger and nothing else; a torch that
    words the warning differently passes through unchanged.
    """

    def _apply(self) -> None:
        logger = logging.getLogger("torch._dynamo.guards")
        self._replace(logger, "filters", [*logger.filters, _DroppedGuardFilter()])


dropped_guard_notes = _DroppedGuardNotes()
