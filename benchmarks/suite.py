"""The results benchmark is `benchmarks.scorecard`; this name is kept only to say so."""

import sys

MESSAGE = "benchmarks.suite is now benchmarks.scorecard: run python -m benchmarks.scorecard"

if __name__ == "__main__":
    sys.exit(MESSAGE)
raise ImportError(MESSAGE)
