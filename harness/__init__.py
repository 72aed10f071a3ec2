"""onceproof: evidence, not marketing, for Kafka's exactly-once claims.

Installed, the repository's folders form this one package: harness/ is `onceproof` (the
shell that wires plan -> run -> history -> check -> verdict), checkers/ is
`onceproof.checkers` and workloads/ is `onceproof.workloads`.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("onceproof")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
