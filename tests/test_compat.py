"""jaxrl._compat: the private JAX API jaxrl relies on still exists (a JAX upgrade that moves it fails here,
naming what moved), and no other jaxrl module imports jax._src."""

import re
from pathlib import Path

import jax

from jaxrl import _compat

PACKAGE = Path(_compat.__file__).parent


def test_xla_bridge_backends_are_initialized():
    from jax._src import xla_bridge

    assert callable(getattr(xla_bridge, "backends_are_initialized", None)), (
        "jax._src.xla_bridge.backends_are_initialized is gone: update jaxrl._compat.backends_are_initialized"
    )
    jax.devices()
    assert _compat.backends_are_initialized() is True


def test_distributed_client_and_its_key_value_methods():
    from jax._src import distributed

    state = getattr(distributed, "global_state", None)
    assert state is not None and hasattr(state, "client"), (
        "jax._src.distributed.global_state.client is gone: update jaxrl._compat.distributed_client"
    )
    assert _compat.distributed_client() is None  # this process never called jax.distributed.initialize
    from jax._src import lib

    # jaxlib's extension module: _jax in jax >= 0.6, xla_extension before
    extension = getattr(lib, "_jax", None) or getattr(lib, "xla_extension", None)
    client_type = getattr(extension, "DistributedRuntimeClient", None)
    assert client_type is not None, "jaxlib's DistributedRuntimeClient moved: check its key-value methods"
    missing = [m for m in _compat.CLIENT_METHODS if not callable(getattr(client_type, m, None))]
    assert not missing, f"DistributedRuntimeClient lacks {missing}: update jaxrl.sweep.gather"


def test_only_compat_imports_private_jax():
    private = re.compile(r"^\s*(from\s+jax\._src|import\s+jax\._src)", re.MULTILINE)
    offenders = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if path.name != "_compat.py" and private.search(path.read_text())
    ]
    assert not offenders, f"import jax._src only in jaxrl/_compat.py: {offenders}"
