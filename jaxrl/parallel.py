"""Data-parallel training of ONE policy over several devices, on JAX's own sharding (`jax.shard_map` over a 1-D
mesh with axis `AXIS`, collectives `lax.pmean` / `lax.psum`).

Each of D devices runs the algorithm's own `init` / `update` on the per-device Config `local_config(config, D)`
(num_envs / D environments, or num_groups / D groups; a replay buffer and replay batch / D), inside the trace-time
context `data_parallel(D)`. Under that context the library's helpers become global:

- `average_gradients(tx)`: the optimiser averages gradients over the devices before its first transformation,
  g = (1/D) sum_d g_d (every optimiser built with `optim.clipped_optimizer` gets it; no algorithm carries a copy);
- `device_key(key)`: fold_in(key, device index), used where streams must differ per device (env resets and
  steps, rollout actions, replay sampling, minibatch shuffles); parameter init and every other key stay shared,
  so the replicated state stays identical on every device;
- `mean_var`, `normalize` (optionally masked), `masked_mean`: statistics of a batch over the global batch
  (observation normalisation, advantage normalisation);
- `gather`, `own_block`, `share_of_sum`: a selection over the global batch (V-MPO's top half: every device
  selects on the gathered advantages and keeps its own block) and a loss that sums over it;
- `global_metrics`: an iteration's metrics over the devices (episode returns and lengths weighted by the
  episodes each device completed, `episodes` summed, the rest averaged).

Outside the context (one device, the default) every helper is the identity or today's expression, so the
one-device program is exactly the program without this module.

State layout of a D-device run: every leaf of the training state gets a leading device axis [D, ...], sharded
over the mesh (device d holds block d). Replicated leaves (parameters, optimiser state, keys, normaliser stats)
are D equal copies; env-batched leaves (env states, observations, replay rings) hold each device's envs along
their first axis. `relayout` maps such a state to another device count (keep copy 0 of a replicated leaf;
concatenate and re-split an env-batched one), which is how checkpoints restore on any device count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxrl import device_rules, losses

AXIS = "data"


class _Context(threading.local):
    """Per thread (the runner traces its programs in several threads at once): the data axis sizes of the
    data-parallel programs being traced, innermost last (0: suspended)."""

    def __init__(self):
        self.sizes: list[int] = []


_context = _Context()


# ---------------------------------------------------------------------------------------------------------------
# The trace-time context
# ---------------------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def data_parallel(size: int):
    """While tracing inside it, the library's helpers act over the named axis `AXIS` of `size` devices."""
    _context.sizes.append(size)
    try:
        yield
    finally:
        _context.sizes.pop()


@contextlib.contextmanager
def suspended():
    """Traces its body as one device (e.g. an evaluation every device runs identically)."""
    _context.sizes.append(0)
    try:
        yield
    finally:
        _context.sizes.pop()


def num_devices() -> int:
    """The data axis size of the program being traced (1 outside `data_parallel`)."""
    sizes = _context.sizes
    return sizes[-1] if sizes and sizes[-1] > 0 else 1


def active() -> bool:
    return num_devices() > 1


def axis_name() -> str | None:
    """The data axis name of the program being traced (`AXIS`), or None on one device: what a layer below the
    algorithms (the environments) is given as an argument instead of reading this context."""
    return AXIS if active() else None


# ---------------------------------------------------------------------------------------------------------------
# The helpers the library calls (identity on one device)
# ---------------------------------------------------------------------------------------------------------------


def pmean(tree):
    """The mean over devices of every leaf, (1/D) sum_d x_d (identity on one device)."""
    return jax.lax.pmean(tree, AXIS) if active() else tree


def psum(tree):
    return jax.lax.psum(tree, AXIS) if active() else tree


def gather(x: jax.Array) -> jax.Array:
    """[n, ...] -> [D n, ...]: every device's block along axis 0, in device order (`x` on one device)."""
    return jax.lax.all_gather(x, AXIS, tiled=True) if active() else x


def own_block(x: jax.Array, n: int) -> jax.Array:
    """This device's block [n, ...] of a `gather`ed [D n, ...] (`x` on one device)."""
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(AXIS) * n, n) if active() else x


def share_of_sum(x: jax.Array) -> jax.Array:
    """D x: this device's term of a loss that SUMS over the global batch, such that the averaged gradients
    (`average_gradients`, (1/D) sum_d grad) are the gradient of the sum and the averaged value is the sum."""
    return x * num_devices() if active() else x


def device_key(key: jax.Array) -> jax.Array:
    """fold_in(key, device index) under data parallelism (its own stream per device), else `key`."""
    return jax.random.fold_in(key, jax.lax.axis_index(AXIS)) if active() else key


def mean_var(batch: jax.Array) -> tuple[jax.Array, jax.Array, int]:
    """(mean, variance, count) over axis 0 of the global batch: with D equal blocks of n rows,
    mean = (1/D) sum_d m_d and var = (1/D) sum_d (v_d + (m_d - mean)^2), count = D n."""
    local_mean, local_var, count = batch.mean(0), batch.var(0), batch.shape[0]
    if not active():
        return local_mean, local_var, count
    mean = pmean(local_mean)
    return mean, pmean(local_var + jnp.square(local_mean - mean)), count * num_devices()


def normalize(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """(x - mean) / (std + 1e-8): the mean and the (population) standard deviation of the elements of `x` where
    `mask` (every element without a mask), over every device's elements under data parallelism. The one
    advantage normaliser of the algorithms; with a mask its statistics are masked means (`masked_mean`), so
    masked-out elements never affect them."""
    if mask is not None:
        mean = masked_mean(x, mask, losses.masked_mean)
        std = jnp.sqrt(masked_mean(jnp.square(x - mean), mask, losses.masked_mean))
        return (x - mean) / (std + 1e-8)
    if not active():
        return (x - x.mean()) / (x.std() + 1e-8)
    mean = pmean(x.mean())
    std = jnp.sqrt(pmean(jnp.square(x - mean).mean()))
    return (x - mean) / (std + 1e-8)


def masked_mean(x: jax.Array, mask: jax.Array, local: Callable) -> jax.Array:
    """sum(x mask) / max(sum(mask), 1) over every device; `local(x, mask)` on one device (today's expression)."""
    if not active():
        return local(x, mask)
    total, count = psum((jnp.where(mask, x, 0.0).sum(), mask.sum().astype(jnp.float32)))
    return total / jnp.maximum(count, 1.0)


def average_gradients(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` applied to the gradients averaged over the devices (the same optimiser state as `tx`'s, so a
    checkpoint's structure does not depend on the device count). Decided when the optimiser is built: inside
    `data_parallel` it averages, outside it is `tx` itself."""
    if not active():
        return tx

    def update(updates, state, params=None):
        return tx.update(pmean(updates), state, params)

    return optax.GradientTransformation(tx.init, update)


def global_metrics(metrics: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """One iteration's metrics over the devices: `episode_return` and `episode_length` as means over every
    device's completed episodes (weights: `episodes`; when none ended anywhere, the mean of the devices'
    values), `episodes` summed, every other float averaged and integers summed."""
    if not active():
        return metrics
    out = {}
    count = metrics.get("episodes")
    for name, value in metrics.items():
        if name in ("episode_return", "episode_length") and count is not None:
            weight = count.astype(jnp.float32)
            total, n = psum((jnp.where(count > 0, value * weight, 0.0), weight))
            # none ended anywhere: the mean of the devices' values (NaN from `episode_metrics`; a grouped
            # learner's member mean, over equal member counts)
            out[name] = jnp.where(n > 0, total / jnp.maximum(n, 1.0), pmean(value)).astype(value.dtype)
        elif jnp.issubdtype(value.dtype, jnp.floating):
            out[name] = pmean(value)
        else:
            out[name] = psum(value)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Devices, the per-device Config, and the sharded program
# ---------------------------------------------------------------------------------------------------------------


def resolve_devices(devices) -> list[jax.Device]:
    """`devices` as a list: a count N (the first N of `jax.devices()`), "all", a Mesh, or a sequence of devices."""
    if isinstance(devices, Mesh):
        return list(devices.devices.flat)
    if devices == "all":
        return list(jax.devices())
    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        have = jax.devices()
        device_rules.check_count(devices, len(have), have[0].platform)
        return list(have[:devices])
    if isinstance(devices, Sequence) and devices and all(isinstance(d, jax.Device) for d in devices):
        return list(devices)
    raise ValueError(f"devices={devices!r}: use a device count, 'all', a Mesh or a list of jax devices.")


def data_mesh(devices) -> Mesh:
    """The 1-D mesh (axis `AXIS`) over `resolve_devices(devices)`."""
    return Mesh(np.array(resolve_devices(devices)), (AXIS,))


def local_config(config, size: int):
    """The Config each of `size` devices runs: num_envs (or num_groups), buffer_size and replay_batch_size
    divided by `size`, learning_starts divided (rounded up), and total_timesteps such that the number of
    iterations is unchanged. Raises ValueError naming a field `size` does not divide."""
    if size == 1:
        return config
    fields = {f.name for f in dataclasses.fields(config)}
    values = {name: getattr(config, name) for name in fields}
    device_rules.check_divides(values, size)
    local = dataclasses.replace(config, **device_rules.divided(values, size))
    return dataclasses.replace(local, total_timesteps=config.num_iterations * local.env_steps_per_iteration)


def per_device(fn: Callable, size: int) -> Callable:
    """`fn` traced under `data_parallel(size)`: the body of a data-parallel program."""

    def body(*args):
        with data_parallel(size):
            return fn(*args)

    return body


def add_device_axis(tree):
    return jax.tree.map(lambda x: x[None], tree)


def drop_device_axis(tree):
    return jax.tree.map(lambda x: x[0], tree)


def shard(fn: Callable, mesh: Mesh, in_specs, out_specs) -> Callable:
    """`jax.shard_map` of `per_device(fn)` over `mesh`; specs as shard_map's, with `P(AXIS)` for the leading
    device axis of a state and `P()` for replicated values. (check_vma=False: scan carries that start
    replicated, e.g. zeros, become device-varying; the library's collectives make the replicated ones equal.)"""
    return jax.shard_map(per_device(fn, mesh.size), mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)


def emulate(fn: Callable, size: int, in_axes, out_axes) -> Callable:
    """The same data-parallel program on ONE device: `jax.vmap` over a named axis of `size` emulated devices
    (the collectives reduce over it). `in_axes`/`out_axes`: 0 for a device-stacked value, None for a replicated
    one. The reference a sharded run is compared against."""
    return jax.vmap(per_device(fn, size), in_axes=in_axes, out_axes=out_axes, axis_name=AXIS, axis_size=size)


def sharded_train(train: Callable, mesh: Mesh) -> Callable:
    """`train(key) -> (state, metrics)` of the per-device Config, as ONE program over `mesh`: the key is
    replicated, the final state is device-stacked [D, ...] (see the module docstring), the metrics replicated."""

    def body(key):
        state, metrics = train(key)
        return add_device_axis(state), metrics

    return shard(body, mesh, in_specs=P(), out_specs=(P(AXIS), P()))


# ---------------------------------------------------------------------------------------------------------------
# Relayout: a device-stacked state on another device count (checkpoints restore on any count)
# ---------------------------------------------------------------------------------------------------------------


def relayout(tree, saved_devices: int, like, devices: int, seed_axes: int = 1):
    """Maps a state saved on `saved_devices` devices to the layout of `like` (arrays or `jax.eval_shape`) on
    `devices` devices. One device means no device axis. Leaves are [D, *seeds, *rest] with `seed_axes` seed
    axes: a leaf whose rest has the same shape on both counts is replicated (copy 0 is kept); one whose first
    rest axis scales as n_saved * D_saved = n * D is env-batched (its envs are concatenated in device order and
    re-split). Anything else raises ValueError naming the leaf."""
    if saved_devices == devices:
        return tree

    def one(path, x, ref):
        x = np.asarray(x) if not _is_key(x) else x
        x = x if saved_devices > 1 else x[None]
        target = tuple(ref.shape) if devices > 1 else (1, *ref.shape)
        s, t = x.shape[1 + seed_axes :], target[1 + seed_axes :]
        if s == t:
            out = jnp.broadcast_to(x[:1], (devices, *x.shape[1:]))
        elif s and t and s[1:] == t[1:] and s[0] * saved_devices == t[0] * devices:
            seeds = x.shape[1 : 1 + seed_axes]
            moved = jnp.moveaxis(x, 0, seed_axes)  # [*seeds, D_saved, n_saved, ...]
            merged = moved.reshape((*seeds, devices, t[0], *t[1:]))
            out = jnp.moveaxis(merged, seed_axes, 0)
        else:
            raise ValueError(
                f"state leaf {jax.tree_util.keystr(path)}: shape {tuple(x.shape)} on {saved_devices} device(s) "
                f"cannot be laid out as {target} on {devices}; restore it on {saved_devices} device(s)."
            )
        return out if devices > 1 else out[0]

    return jax.tree_util.tree_map_with_path(one, tree, like)


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
