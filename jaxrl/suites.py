"""Not a module: the environment suites are `jaxrl.envs.suites`."""

raise ImportError(
    "jaxrl.suites does not exist: the environment suites are jaxrl.envs.suites (from jaxrl.envs import suites)."
)
