"""jaxrl._compat: the private JAX API jaxrl relies on still exists (a JAX upgrade that moves it fails here,
naming what moved), and no other jaxrl module imports jax._src."""

import math
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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


def threefry2x32_reference(k0, k1, x0, x1):
    """Threefry-2x32 with 20 rounds (Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"), a NumPy
    loop over uint32 arrays."""
    rotations = ((13, 15, 26, 6), (17, 29, 16, 24))
    ks = (np.uint32(k0), np.uint32(k1), np.uint32(k0) ^ np.uint32(k1) ^ np.uint32(0x1BD11BDA))
    x0, x1 = x0 + ks[0], x1 + ks[1]
    for group in range(5):
        for r in rotations[group % 2]:
            x0 = x0 + x1
            x1 = ((x1 << np.uint32(r)) | (x1 >> np.uint32(32 - r))) ^ x0
        x0 = x0 + ks[(group + 1) % 3]
        x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def _threefry_program(words: int):
    import jax.extend.random as jex_random

    key = jnp.array([0x13198A2E, 0x03707344], jnp.uint32)
    return jax.jit(lambda count: jex_random.threefry_2x32(key, count)), np.arange(2 * words, dtype=np.uint32)


def test_threefry_private_lowering_pieces_exist():
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir.dialects import hlo
    from jax._src.random import threefry2x32

    for name in ("threefry2x32_p", "_threefry2x32_cpu_lowering_rule"):
        assert hasattr(threefry2x32, name), f"jax._src.random.threefry2x32.{name} is gone: update _compat"
    for name in ("register_lowering", "multi_broadcast_in_dim", "broadcast_in_dim", "ir_constant"):
        assert hasattr(mlir, name), f"jax._src.interpreters.mlir.{name} is gone: update _compat"
    for name in ("add", "xor", "or_", "shift_left", "shift_right_logical"):
        assert hasattr(hlo, name), f"jax._src.lib.mlir.dialects.hlo.{name} is gone: update _compat"


@pytest.mark.parametrize("words", [1, 2, _compat.THREEFRY_UNROLLED_FROM - 1, _compat.THREEFRY_UNROLLED_FROM, 1000])
def test_threefry_on_cpu_gives_the_reference_bits_rolled_or_unrolled(words):
    import jaxrl.algos.base  # noqa: F401 (registers the lowering, as every algorithm does)

    program, count = _threefry_program(words)
    with np.errstate(over="ignore"):
        x0, x1 = threefry2x32_reference(0x13198A2E, 0x03707344, count[:words], count[words:])
    np.testing.assert_array_equal(np.asarray(program(count)), np.concatenate([x0, x1]))
    unrolled = "stablehlo.while" not in program.lower(count).as_text()
    assert unrolled == (words >= _compat.THREEFRY_UNROLLED_FROM)


def test_threefry_straight_line_gives_jaxs_loop_bits_for_vmapped_keys_and_broadcast_keys():
    import jaxrl.algos.base  # noqa: F401

    keys = jax.random.split(jax.random.key(7), 3)

    def draws():  # a fresh jit each time: lowered with the rule registered now
        vmapped = jax.jit(jax.vmap(lambda k: jax.random.bits(k, (4, 5))))
        one = jax.jit(lambda k: jax.random.uniform(k, (6, 7)))
        return vmapped.lower(keys).as_text(), np.asarray(vmapped(keys)), np.asarray(one(keys[0]))

    text, vmapped, one = draws()
    assert "stablehlo.while" not in text
    try:
        _compat.unroll_threefry_on_cpu(math.inf)  # JAX's loop everywhere
        loop_text, loop_vmapped, loop_one = draws()
    finally:
        _compat.unroll_threefry_on_cpu()
    assert "stablehlo.while" in loop_text
    np.testing.assert_array_equal(vmapped, loop_vmapped)
    np.testing.assert_array_equal(one, loop_one)


def test_threefry_reference_matches_the_published_answers():
    # Random123's known-answer vectors for threefry2x32_20 (kat_vectors)
    with np.errstate(over="ignore"):
        for key, counter, expected in (
            ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
            ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
            ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ):
            got = threefry2x32_reference(*key, *(np.array([c], np.uint32) for c in counter))
            assert (int(got[0][0]), int(got[1][0])) == expected


def test_threefry_of_a_symbolic_shape_exports_with_jaxs_loop():
    import jaxrl.algos.base  # noqa: F401

    (n,) = jax.export.symbolic_shape("n")
    draw = jax.jit(lambda key, x: jax.random.uniform(key, x.shape))
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    exported = jax.export.export(draw, platforms=["cpu"])(key, jax.ShapeDtypeStruct((n,), jnp.float32))
    assert "stablehlo.while" in exported.mlir_module()
    concrete = exported.call(jax.random.key(3), jnp.zeros(10))
    np.testing.assert_array_equal(np.asarray(concrete), np.asarray(jax.random.uniform(jax.random.key(3), (10,))))
