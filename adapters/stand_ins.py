# SPDX-License-Identifier: Apache-2.0
"""Loading one kernel file of a package without the package: the modules it imports from the
package, stood in for while it loads. An adapter builds its stand-ins (each restating what
the release's own module defines, and saying so in its docstring) and loads the file inside
``in_sys_modules``; afterwards sys.modules is as it was."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types


def package(name: str) -> types.ModuleType:
    """A package module whose ``__init__`` is not run (submodules are stood in for or loaded
    by path)."""
    module = types.ModuleType(name)
    module.__path__ = []
    return module


def module_from(path: str, name: str) -> types.ModuleType:
    """The module of one file, loaded by path under ``name`` (not put in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def in_sys_modules(modules: dict):
    """``modules`` (name -> module) in sys.modules while the body runs; whatever was there
    under those names before is put back."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
