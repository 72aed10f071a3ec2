"""Code the tests and the benchmarks (bench/) share; not part of the installed package."""
