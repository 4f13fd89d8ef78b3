"""Stop signals of a run: Ctrl-C (SIGINT) and a cluster scheduler's SIGTERM, both handled the same way.

While the chunk loop runs, `DeferredStop` turns either into a `Stop` (a KeyboardInterrupt that remembers the
signal) at the next chunk boundary, so that the state, the checkpoint and the logs hold the same iterations; a
second signal stops at once, or, while a chunk runs (which has consumed the state it was given), as soon as the
chunk's result is held. Before the loop (claiming the folder, compiling, restoring) `TermAsInterrupt`
makes SIGTERM raise at once, as Ctrl-C does there. The runner (`jaxrl.run.loop`) reports either as
`Interrupted`, whose exit status is 128 + the signal's number (130, 143).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading


class Stop(KeyboardInterrupt):
    """A stop signal (SIGINT: Ctrl-C, or SIGTERM: a cluster scheduler's) raised as a KeyboardInterrupt that
    remembers which: `signum`."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def signum_of(error: BaseException) -> int:
    """The signal a KeyboardInterrupt stands for: a `Stop`'s, else SIGINT (a plain Ctrl-C)."""
    return getattr(error, "signum", signal.SIGINT)


def stopped_by(signum: int) -> str:
    """How a run stopped by `signum` says so: "interrupted" (Ctrl-C), or "stopped by SIGTERM"."""
    return "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"


class DeferredStop:
    """Turns Ctrl-C or SIGTERM during the training loop into a `Stop` at the next chunk boundary, so the state,
    the checkpoint and the logs always hold the same iterations. A second one interrupts at once, except while
    a chunk's result is being taken (`taking_chunk`)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = None  # the signal number of the first stop signal
        self.previous = {}
        self.taking = False

    def _handle(self, signum, frame):
        if self.requested is not None and not self.taking:
            raise Stop(signum)
        self.requested = self.requested or signum

    @contextlib.contextmanager
    def taking_chunk(self):
        """From calling a chunk program to holding its result: the chunk consumed the old state (donated), so
        a stop here could save no state. A second signal waits for the boundary too, where it stops with the
        finished chunk saved. It waits for no longer than before: a running XLA computation is not interrupted,
        as Python runs a signal's handler only once the wait for the chunk returns."""
        self.taking = True
        try:
            yield
        finally:
            self.taking = False

    def install(self) -> None:
        # a stop signal whose exception was swallowed before the loop (raised inside a gc callback) is still a
        # stop request: the loop stops at its first boundary instead of running to the end
        self.requested = self.requested or TermAsInterrupt.swallowed
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}

    def uninstall(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def raise_if_requested(self) -> None:
        """At a chunk boundary; over several processes, all stop when any of them saw a stop signal."""
        self.requested = self.requested or TermAsInterrupt.swallowed  # a second signal that landed in a gc callback
        from jaxrl.run import hosts  # here, not at the top: the command line reads `signum_of` without JAX

        if hosts.any_process(self.requested is not None):
            raise Stop(self.requested or signal.SIGINT)


class TermAsInterrupt:
    """While installed (main thread only), SIGTERM raises `Stop(SIGTERM)` at once, as Ctrl-C raises a
    KeyboardInterrupt: compiling, restoring and the first writes stop the way a Ctrl-C stops them (the lock
    released, a new run's folder removed) instead of the process dying with its lock left.

    Either signal can land where Python cannot raise it: in a gc callback such as jax's `_xla_gc_callback`,
    which hands the exception to `sys.unraisablehook` ("Exception ignored in ...", a traceback) and carries on.
    While installed, such a KeyboardInterrupt is recorded in `swallowed` (its signal number) instead of
    printed; `raise_if_swallowed` raises it where the caller can stop cleanly, and `DeferredStop.install`
    turns it into a stop request."""

    swallowed = None  # the signal of a swallowed stop since the last __enter__ (process-wide, as handlers are)

    def __init__(self):
        self.previous = None
        self.previous_hook = None

    @staticmethod
    def _handle(signum, frame):
        raise Stop(signum)

    def _unraisable(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            TermAsInterrupt.swallowed = TermAsInterrupt.swallowed or signum_of(unraisable.exc_value)
        else:
            self.previous_hook(unraisable)

    def __enter__(self):
        TermAsInterrupt.swallowed = None
        self.previous_hook, sys.unraisablehook = sys.unraisablehook, self._unraisable
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
            self.previous = None
        if self.previous_hook is not None:
            sys.unraisablehook, self.previous_hook = self.previous_hook, None

    @staticmethod
    def raise_if_swallowed() -> None:
        """Raises the stop signal a gc callback swallowed, if any, as `Stop`."""
        if TermAsInterrupt.swallowed is not None:
            raise Stop(TermAsInterrupt.swallowed)
