"""The host side of a training run: `folder` (the run folder: claim, lock, cleanup, reading it back), `compile`
(the chunk programs, evaluation inside the chunk, compiling them side by side), `session` (compiling,
restoring, saving), `loop` (the chunk loop: `run`), `signals` (Ctrl-C and SIGTERM: a checkpoint at the next
chunk boundary), `report` (RunResult, the one final return and divergence rule, summary.json), `checkpoint`,
`logging` (metric sinks) and `evaluate` (policy evaluation on fresh episodes, a run's checkpoint evaluated).

`from jaxrl.run import run; run(ppo, config, seeds=4)` trains in compiled chunks with checkpoints and logs. The
names below are imported on first use, so that `jaxrl.run.report` or `jaxrl.run.folder` alone does not start
the runner.
"""

import importlib

_NAMES = {
    "Divergence": "jaxrl.run.loop",
    "Interrupted": "jaxrl.run.loop",
    "RunOptions": "jaxrl.run.loop",
    "run": "jaxrl.run.loop",
    "make_run_dir": "jaxrl.run.folder",
    "RunResult": "jaxrl.run.report",
    "final_return": "jaxrl.run.report",
    "format_summary": "jaxrl.run.report",
    "summary": "jaxrl.run.report",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module 'jaxrl.run' has no attribute {name!r}")
    value = getattr(importlib.import_module(_NAMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
