"""The test suites, a package so that its support code imports as `tests.support...` and
`tests.histories` (pytest's default "prepend" import mode then puts the repository root,
the first folder above without an __init__.py, on sys.path)."""
