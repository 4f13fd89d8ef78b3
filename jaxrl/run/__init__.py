"""The host side of a training run: `compile` (the chunk programs, evaluation inside the chunk, compiling them
side by side), `loop` (the chunk loop: `run`), `report` (RunResult, the one final return, summary.json),
`checkpoint`, `logging` (metric sinks) and `evaluate` (policy evaluation on fresh episodes).

`from jaxrl.run import run; run(ppo, config, seeds=4)` trains in compiled chunks with checkpoints and logs.
"""

from jaxrl.run.loop import Divergence, Interrupted, make_run_dir, run
from jaxrl.run.report import RunResult, final_return, format_summary, summary

__all__ = ["Divergence", "Interrupted", "RunResult", "final_return", "format_summary", "make_run_dir", "run", "summary"]
