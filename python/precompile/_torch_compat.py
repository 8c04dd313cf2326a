"""The module path that stored guard states name the store's rebuild functions by.

Entries written before the torch adapter became a package name four rebuild
functions as `precompile._torch_compat.<name>` in their guard states
(docs/FORMAT.md, the entry's `dynamo` pickle). They live in
`precompile._torch.stored` now, where new entries name them; this module keeps
the earlier path resolving, so those stores keep loading.
"""

from __future__ import annotations

from ._torch.stored import _import_checked, _import_script_function, _rebuild_dict_subclass, _rebuild_guarded_function

__all__ = ["_import_checked", "_import_script_function", "_rebuild_dict_subclass", "_rebuild_guarded_function"]
