"""How a saved training state's arrays are matched to the state a run builds, by their paths ("opt_state/1/0/mu").

Two layouts differ when the run's state has arrays the checkpoint lacks. One such difference is read anyway: an
optimiser state saved per parameter array, where the run's optimiser works on all parameters raveled into one
vector (`optim.clipped_optimizer`'s `optax.flatten`). Each of the vector's arrays (Adam's `mu`, `nu`) is then, in
the checkpoint, a tree of arrays under the same path, one per parameter array. `optax.flatten` ravels a tree by
concatenating its leaves, each flattened row-major, in `jax.tree.leaves` order; so does `ravel`, over the axes
after any leading ones the vector itself has (the seeds, the devices). The moments are elementwise, so the raveled
state is exactly the one the run's optimiser would have held. Any other difference is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp


class LayoutError(RuntimeError):
    """A saved training state whose arrays do not match the run's (raised by `raveled_subtrees` and `ravel`)."""


def path_name(path) -> str:
    """A pytree path as orbax's metadata names it: its keys, names or indices joined by "/"."""

    def name(key) -> str:
        for attribute in ("key", "name", "idx"):
            if hasattr(key, attribute):
                return str(getattr(key, attribute))
        return str(key)

    return "/".join(name(key) for key in path)


def leaf_paths(tree) -> dict[str, object]:
    """Every array of `tree` (arrays, shapes or orbax's metadata) by its path."""
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "shape"))[0]
    return {path_name(path): leaf for path, leaf in leaves}


def _subtree(tree, path: str):
    for part in path.split("/"):
        tree = tree[int(part)] if isinstance(tree, list | tuple) else tree[part]
    return tree


def saved_tree(step_dir: Path):
    """The metadata tree (shapes and dtypes) of the state saved in `step_dir`; None when orbax cannot read it."""
    import orbax.checkpoint as ocp

    try:
        metadata = ocp.PyTreeCheckpointer().metadata(Path(step_dir) / "state").item_metadata
    except Exception:
        return None
    return getattr(metadata, "tree", metadata)


def raveled_subtrees(saved, wanted, step_dir: Path) -> dict[str, object]:
    """What must be read otherwise than `wanted` (the abstract state to read) from the state `saved` (its metadata
    tree, see `saved_tree`) to build `wanted`: {path: the saved subtree's abstract arrays} for each array of
    `wanted` saved as a tree of arrays under its path (the optimiser per parameter array), {} where every array
    is saved as such. Raises LayoutError, in one line naming a leaf on each side, when `wanted` has an array the
    checkpoint has neither as such nor as a tree under its path. Saved arrays `wanted` does not read pass."""
    have = leaf_paths(saved) if saved is not None else {}
    if not have:  # unreadable metadata: the restore itself says what is wrong
        return {}
    want = leaf_paths(wanted)
    missing, unread = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    lacking = [path for path in missing if not any(s.startswith(path + "/") for s in unread)]
    if lacking:
        other = f" and holds {unread[0]} instead" if unread else ""
        raise LayoutError(
            f"checkpoint {step_dir} holds a training state laid out otherwise than this jaxrl's for the run: it has "
            f"no {lacking[0]}{f' (nor {len(lacking) - 1} more)' if len(lacking) > 1 else ''}{other}. It was "
            "written by another version of jaxrl; resume or evaluate it with that version."
        )
    return {
        path: jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), _subtree(saved, path))
        for path in missing
    }


def expanded(abstract, subtrees: dict[str, object]):
    """`abstract` with each array named in `subtrees` replaced by its saved subtree: what to read."""
    return jax.tree_util.tree_map_with_path(lambda path, x: subtrees.get(path_name(path), x), abstract)


def ravel(restored, abstract, subtrees: dict[str, object], step_dir: Path):
    """`restored` (read as `expanded(abstract, subtrees)`) in the structure of `abstract`: each saved subtree
    raveled into its array, x_1 ... x_k (in `jax.tree.leaves` order) reshaped to the array's leading axes + (-1,)
    and concatenated along the last axis."""
    wanted, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    leaves = treedef.flatten_up_to(restored)

    def one(path, value, like):
        if path not in subtrees:
            return value
        parts = jax.tree.leaves(value)
        lead = tuple(like.shape[:-1])
        if len(like.shape) == 0 or any(x.shape[: len(lead)] != lead for x in parts):
            raise LayoutError(f"checkpoint {step_dir}: the arrays under {path} do not ravel into its {like.shape}.")
        vector = jnp.concatenate([jnp.reshape(x, (*lead, -1)) for x in parts], axis=-1)
        if vector.shape != tuple(like.shape):
            raise LayoutError(
                f"checkpoint {step_dir}: the arrays under {path} ravel into {vector.shape}, not its {like.shape}."
            )
        return vector.astype(like.dtype)

    return treedef.unflatten([one(path_name(p), v, w) for (p, w), v in zip(wanted, leaves, strict=True)])
