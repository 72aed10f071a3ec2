"""The harness's own failures, kept apart from anything Kafka did wrong.

A SetupError means the harness could not decide (exit 2): a tool is missing, a version is
unknown, the cluster never became ready. Its message is one line that says what to do.
"""


class SetupError(Exception):
    """The harness could not set up or observe the system under test."""


class Unsettled(Exception):
    """A fault whose outcome is not known to be whole: a user's fault command failed, or
    a node did not come back after a change of release. Its op is `info`, with why."""
