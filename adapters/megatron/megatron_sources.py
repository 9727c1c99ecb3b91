# SPDX-License-Identifier: Apache-2.0
"""Megatron-LM's RoPE sources from an installed megatron-core wheel, without megatron.core's
package __init__ (it imports torch.distributed APIs of torch >= 2, and Debian's python3-torch
is 1.13).

Only Megatron's own files run: rope_utils.py, rotary_pos_embedding.py,
yarn_rotary_pos_embedding.py and, on a GPU, fused_mla_yarn_rope_apply.py. The modules they
import from megatron.core but that the RoPE code does not use on these paths are stand-ins:

- ``megatron.core.parallel_state``: only read when no ``cp_group`` is passed (we always pass one);
- ``megatron.core.utils``: ``internal_api``, ``null_decorator`` and ``experimental_fn(...)``
  (decorators that return the function), ``deprecate_inference_params`` (unused by RoPE),
  ``is_te_min_version`` (False: Transformer Engine is not installed);
- ``megatron.core.transformer``: ``TransformerConfig``, a type named in annotations only.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types

VERSION = "0.16.1"  # the wheel ci/python-test.sh installs (pinned, with its hash)
#: A folder holding another release's files (``megatron/core/...`` and a ``VERSION`` file, as
#: adapters/releases.py unpacks them), used instead of the installed package. One release per
#: process.
ROOT_VARIABLE = "MLAROPE_MEGATRON_ROOT"


#: The newest release, which CI runs beside the installed one: its files from
#: ``adapters/releases.py`` (the sdist pinned by hash in releases.toml, unpacked without a build).
NEWEST = "0.19.2"


def _package(name: str, path: str | None) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [path] if path else []  # a package whose __init__ is not run
    sys.modules[name] = module
    return module


def _find_root() -> str:
    if os.environ.get(ROOT_VARIABLE):
        core = os.path.join(os.environ[ROOT_VARIABLE], "megatron", "core")
        if not os.path.isdir(core):
            raise ImportError(
                f"{ROOT_VARIABLE}={os.environ[ROOT_VARIABLE]}: no megatron/core in it"
            )
        return core
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"megatron-core is not installed (pip install --no-deps megatron-core=={VERSION})"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "core")


def load():
    """The namespace of Megatron's RoPE modules: ``rope_utils``, ``yarn`` (and ``version``)."""
    if "megatron.core.models.common.embeddings.rope_utils" not in sys.modules:
        core = _find_root()
        _package("megatron", os.path.dirname(core))
        mcore = _package("megatron.core", core)
        mcore.parallel_state = types.ModuleType("megatron.core.parallel_state")
        utils = types.ModuleType("megatron.core.utils")
        utils.internal_api = utils.null_decorator = lambda f: f
        utils.deprecate_inference_params = lambda *a, **k: None
        utils.experimental_fn = lambda *a, **k: lambda f: f  # a decorator factory (<= 0.15)
        utils.is_te_min_version = lambda *a, **k: False  # Transformer Engine is absent (<= 0.13)
        sys.modules["megatron.core.utils"] = utils
        transformer = types.ModuleType("megatron.core.transformer")
        transformer.TransformerConfig = type("TransformerConfig", (), {})
        sys.modules["megatron.core.transformer"] = transformer
        for sub in ("models", "models.common", "fusions"):
            _package(f"megatron.core.{sub}", os.path.join(core, *sub.split(".")))
        _package(
            "megatron.core.models.common.embeddings",
            os.path.join(core, "models", "common", "embeddings"),
        )
    ns = types.SimpleNamespace()
    ns.rope_utils = importlib.import_module("megatron.core.models.common.embeddings.rope_utils")
    ns.yarn = importlib.import_module(
        "megatron.core.models.common.embeddings.yarn_rotary_pos_embedding"
    )
    ns.version = _version()
    return ns


def _version() -> str:
    """The release loaded: the unpacked one's dist-info, else the installed package's."""
    root = os.environ.get(ROOT_VARIABLE)
    if not root:
        from importlib.metadata import version

        return version("megatron-core")
    if os.path.isfile(os.path.join(root, "VERSION")):  # unpacked by adapters/releases.py
        with open(os.path.join(root, "VERSION"), encoding="utf-8") as f:
            return f.read().strip()
    for entry in os.listdir(root):
        if entry.startswith("megatron_core-") and entry.endswith(".dist-info"):
            with open(os.path.join(root, entry, "METADATA"), encoding="utf-8") as f:
                for line in f:
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
    raise ImportError(f"{ROOT_VARIABLE}={root}: no VERSION nor megatron_core-*.dist-info in it")


def load_fused():
    """Megatron's fused MLA YaRN RoPE (Triton: a GPU, or Triton's interpreter on the host)."""
    load()
    return importlib.import_module("megatron.core.fusions.fused_mla_yarn_rope_apply")


class _Torch(types.ModuleType):
    """torch, seen by yarn_rotary_pos_embedding.py on a machine without CUDA or torch >= 2:
    ``torch.cuda.current_device()`` names the CPU, and ``with torch.device(...)`` (torch >= 2)
    is a no-op (every tensor there is created with an explicit device)."""

    def __init__(self, torch):
        super().__init__("torch")
        self._torch = torch
        if not hasattr(torch.device("cpu"), "__enter__"):
            self.device = lambda *a, **k: contextlib.nullcontext()
        if not torch.cuda.is_available():
            self.cuda = types.SimpleNamespace(current_device=lambda: "cpu")

    def __getattr__(self, name):
        return getattr(self._torch, name)


def yarn_on_host(yarn_module):
    """Let Megatron's YarnRotaryEmbedding run on the host (see _Torch); returns the module."""
    import torch

    if not isinstance(yarn_module.torch, _Torch):
        yarn_module.torch = _Torch(torch)
    return yarn_module
