"""Command line: `jaxrl train | sweep | eval | plot | pbt | render | report`. Every Config field is a flag, its
comment the help.

Parsing and dispatch only: each command's flags are data in `jaxrl.cli_flags`, and what a command does is
`jaxrl.commands`; training is `jaxrl.run` (`loop.run`, the run folder in `run.folder`, `run.evaluate` for eval), a
sweep `jaxrl.sweep` (its summary in `sweep.summary`), plotting `jaxrl.plot`. JAX and the algorithms are imported by
the commands that need them, so `jaxrl --help` starts none of them.

Every error a user can cause ends in one line on stderr, `jaxrl: error: ...`, and a non-zero exit (2: a bad
argument, a run folder or checkpoint that cannot be used; 3: training diverged; 130: Ctrl-C; 143: SIGTERM,
checkpointed like a Ctrl-C), with no traceback; `--debug` anywhere on the command line (or JAXRL_DEBUG=1) shows
it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from jaxrl import field_rules
from jaxrl.catalog import CATALOG
from jaxrl.cli_flags import COMMANDS, FLAG_KINDS, PRESET_FLAG
from jaxrl.commands import RUNNERS, config_from_args, one_line  # noqa: F401 (config_from_args: importable here)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`jaxrl train ppo: error: ...; see --help`) and no prefix matching of
    long flags (`allow_abbrev=False`: `--learning` is an unknown flag, not `--learning-rate`)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class DefaultsOnceFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to a flag's help unless the help already names its default, or there is none
    to show (None, False, a suppressed default): every default appears once."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def add_config_flags(parser: argparse.ArgumentParser, fields, title: str = "algorithm") -> None:
    """One flag per Config field (--num-envs for num_envs) of `fields`, (name, kind, default text, help) as
    `jaxrl.catalog` lists them; unset flags stay out of the namespace (`config_from_args` keeps the default)."""
    group = parser.add_argument_group(f"{title} config")
    for name, kind, default, help_text in fields:
        flag, keywords = "--" + name.replace("_", "-"), FLAG_KINDS[kind]
        bounds = field_rules.describe(field_rules.rule_of(name), keywords.get("metavar", "X"))
        shown = f"default: {default}; {bounds}" if bounds else f"default: {default}"
        group.add_argument(flag, dest=name, default=argparse.SUPPRESS, help=f"{help_text} ({shown})", **keywords)


DESCRIPTION = (
    "Reinforcement learning compiled end to end in JAX. Errors are one line; --debug (anywhere) shows the traceback. "
    "--env-module MODULE (anywhere, repeatable) imports MODULE (a module name, or a .py file's path) first, so that "
    "the environments it registers with jaxrl.envs.register are valid --env ids."
)


def _add(parser, flags) -> None:
    for flag, keywords in flags:
        parser.add_argument(flag, **keywords)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `jaxrl`. train, sweep and pbt have one sub-parser per algorithm (its own group, then
    `--preset` and the Config flags), from `jaxrl.catalog`: no algorithm (nor JAX) is imported to parse; given the
    `command` of a command line, only that command's sub-parsers are built."""
    parser = Parser(prog="jaxrl", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, flags, group) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text, allow_abbrev=False)
        if group is None:
            _add(sub, flags)
            continue
        algos = sub.add_subparsers(dest="algo", required=True, metavar="ALGO")
        if command not in (None, name):
            continue
        for algo, entry in CATALOG.items():
            one = algos.add_parser(algo, allow_abbrev=False, help=entry["doc"], formatter_class=DefaultsOnceFormatter)
            _add(one.add_argument_group(group), flags)
            _add(one, [PRESET_FLAG])
            add_config_flags(one, entry["fields"], algo)
    return parser


def import_env_modules(argv: list[str]) -> list[str]:
    """Imports the module of every `--env-module MODULE` (or `--env-module=MODULE`, anywhere on the command line,
    any number of times; MODULE a module name, or the path of a .py file) and returns `argv` without them: a module
    that calls `jaxrl.envs.register` at import makes its ids valid `--env` values for train, sweep and eval."""
    import importlib
    import importlib.util

    rest, modules = [], []
    for arg in argv:
        if rest and rest[-1] == "--env-module":  # the value of the flag before
            modules.append(arg)
            rest.pop()
        elif arg.startswith("--env-module="):
            modules.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    if modules and os.getcwd() not in sys.path:  # `python -m` would find a module of the working folder too
        sys.path.insert(0, os.getcwd())
    for module in modules:
        path = Path(module)
        is_file = module.endswith(".py") or os.sep in module
        if is_file and not path.is_file():
            raise EnvModuleError(f"--env-module {module}: no such file.")
        try:
            if is_file:
                spec = importlib.util.spec_from_file_location(path.stem, path)
                loaded = sys.modules[path.stem] = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(loaded)
            else:
                importlib.import_module(module)
        except Exception as error:  # ImportError, but also whatever the module's own code raised
            raise EnvModuleError(f"--env-module {module} failed to import: {type(error).__name__}: {error}") from error
    return rest


class EnvModuleError(ImportError):
    """An `--env-module` that could not be imported (whatever its import raised): a user error, exit 2."""


def user_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a user's input or files cause (exit 2), not a bug (exit 1). jaxrl's own ones count where
    their module is loaded (only then can they have been raised), so that nothing here imports JAX."""
    user = [ValueError, TypeError, OSError, OverflowError, ImportError]
    for module, name in (("jaxrl.run.checkpoint", "CheckpointError"), ("jaxrl.run.hosts", "LeadFailed")):
        if module in sys.modules:
            user.append(getattr(sys.modules[module], name))
    return tuple(user)


def _closed_event_loop(unraisable) -> bool:
    """Whether an unraisable exception is the noise of orbax's failed checkpoint operations: tensorstore
    completing a future on the event loop that orbax already closed ("Event loop is closed", after the one
    error that the command reports)."""
    error = unraisable.exc_value
    return isinstance(error, RuntimeError) and str(error) == "Event loop is closed"


def _quiet_unraisable() -> None:
    """Leaves out `_closed_event_loop` noise for the rest of the process (it can come as late as at exit)."""
    previous = sys.unraisablehook
    if getattr(previous, "quiet", False):
        return

    def hook(unraisable):
        if not _closed_event_loop(unraisable):
            previous(unraisable)

    hook.quiet = True
    sys.unraisablehook = hook


def main(argv: list[str] | None = None) -> int:
    """`jaxrl ...`: parses `argv` (default sys.argv[1:]) and runs the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("JAXRL_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    try:
        argv = import_env_modules(argv)
    except EnvModuleError as error:
        if debug:
            raise
        print(f"jaxrl: error: {one_line(error)}", file=sys.stderr)
        return 2
    args = build_parser(next((a for a in argv if not a.startswith("-")), "")).parse_args(argv)
    command = RUNNERS[args.command]
    _quiet_unraisable()
    try:
        return command(args)
    except (KeyboardInterrupt, Exception) as error:
        if debug:
            raise
        if isinstance(error, KeyboardInterrupt):  # a stop signal the command did not report itself
            from jaxrl.run.signals import signum_of, stopped_by

            signum = signum_of(error)
            status, text = 128 + signum, stopped_by(signum)
        elif isinstance(error, user_errors()):
            status, text = 2, f"error: {one_line(error)}"
        else:  # a bug, not a user error: still one line, the traceback with --debug
            status = 1
            text = f"internal error: {type(error).__name__}: {one_line(error)} (rerun with --debug for the traceback)"
        print(f"jaxrl: {text}", file=sys.stderr)
        return status


if __name__ == "__main__":
    sys.exit(main())
