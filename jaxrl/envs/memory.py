"""Memory tasks, registered as ids every Config accepts: MemoryChain at a chosen memory length and POPGym's tasks.

`MemoryChain-bsuite-L<n>`: bsuite's memory chain (Osband et al. 2020, "Behaviour Suite for Reinforcement
Learning"; gymnax's `MemoryChain-bsuite`) with `memory_length = n` instead of 5: a context bit is shown in the first
two observations only (gymnax's step returns the observation of the state before the step), and the action at
the last of the episode's n + 1 steps is rewarded +1 if it reports the bit, -1 if not (0 reward before; a policy
without memory scores 0 in expectation). The first observation entry is a clock, 1 - time / n. gymnax's own id
keeps n = 5; `envs.make("MemoryChain-bsuite", memory_length=n)` gives the same env, but a Config names only an id.

`popgym-<Task><Level>-v0`: POPGym's RepeatPrevious, CountRecall, PositionOnlyCartPole and PositionOnlyPendulum
(Morad et al. 2023, "POPGym: Benchmarking Partially Observable Reinforcement Learning") at its Easy, Medium and
Hard levels, defined in `jaxrl.envs.popgym`.

gymnax (and `jaxrl.envs.popgym`, which imports it) is imported inside the factories, on first use (see
`jaxrl.envs`).
"""

from __future__ import annotations

from jaxrl.envs.registry import register_builtin

MEMORY_LENGTHS = (10, 20, 30, 40, 80, 100)


def memory_chain(memory_length: int):
    """The factory of `MemoryChain-bsuite-L<memory_length>`: (gymnax MemoryChain, its params at that length)."""

    def factory(**env_params):
        from gymnax.environments.bsuite.memory_chain import MemoryChain

        env = MemoryChain()
        return env, env.default_params.replace(memory_length=memory_length, **env_params)

    return factory


def memory_chain_id(memory_length: int) -> str:
    return f"MemoryChain-bsuite-L{memory_length}"


POPGYM_TASKS = ("RepeatPrevious", "CountRecall", "PositionOnlyCartPole", "PositionOnlyPendulum")
POPGYM_LEVELS = ("Easy", "Medium", "Hard")
POPGYM_IDS = tuple(f"popgym-{task}{level}-v0" for task in POPGYM_TASKS for level in POPGYM_LEVELS)


def popgym_task(env_id: str):
    """The factory of the POPGym task `env_id`: (its environment, its params), keywords as `jaxrl.envs.popgym.make`."""

    def factory(**env_params):
        from jaxrl.envs import popgym

        return popgym.make(env_id, **env_params)

    return factory


for _length in MEMORY_LENGTHS:
    register_builtin(memory_chain_id(_length), memory_chain(_length))
for _id in POPGYM_IDS:
    register_builtin(_id, popgym_task(_id))
