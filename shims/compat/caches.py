"""Caches: code hashing, the cache folder, the code cache.

Tier 2 of the stable API (``spyre_shims.compat``): the names below are
Inductor's own objects on the installed release (classes keep ``isinstance``
and subclassing), resolved on first access from the per-release table
generated from the release wheels (``surface/compat_table.json``). Where a
release moved or renamed one, the table points at its home there. Their
members are Inductor's and are not promised; the names are, on every release
2.6 - 2.15.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from .._torch import inductor as _inductor
from ._lazy import resolve as _resolve

__all__ = [
    'code_hash',
    'cache_dir',
    'get_path',
    'write',
    'PyCodeCache',
    'FxGraphCache',
    'FxGraphHashDetails',
    'CacheBase',
    'write_atomic',
    'AOTAutogradCache',
    'AotCodeCompiler',
    'BypassFxGraphCache',
    'CUDACodeCache',
    'CodeCacheFuture',
    'CppCodeCache',
    'CppPythonBindingsCodeCache',
    'CppWrapperCodeCache',
    'CudaKernelParamCache',
    'DLLWrapper',
    'FxGraphCachePickler',
    'HalideCodeCache',
    'LambdaFuture',
    'LocalCache',
    'OrderedSetHolder',
    'PersistentCache',
    'ROCmCodeCache',
    'TensorMetadataAndValues',
    'add_ephemeral_timeout_increase_for_distributed',
    'build_code_hash',
    'compiled_fx_graph_hash',
    'custom_op_wrapper',
    'extract_tensor_metadata_for_cache_key',
    'get_cpp_wrapper_cubin_path_name',
    'get_hash',
    'get_inductor_root',
    'get_lock_dir',
    'sha256_hash',
    'split_aot_inductor_output_path',
    'torch_key',
    'touch',
    'write_text',
    'fresh_cache',
]


def __getattr__(name: str) -> Any:
    return _resolve(__name__, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def fresh_cache(**kwargs: Any) -> AbstractContextManager[Any]:
    """Run inside a ``with`` block with a fresh, temporary Inductor cache folder
    (``fresh_cache`` from 2.8, ``fresh_inductor_cache`` before). Keyword arguments
    go to Inductor's function (``cache_entries``, ``dir``, ``delete``)."""
    ctx: AbstractContextManager[Any] = _inductor.compat_fresh_cache(**kwargs)
    return ctx
