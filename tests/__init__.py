"""The test suite, laid out as the package it tests (tests/client for gpumsg/client, ...).

A package, so that modules in different folders may share a name and helpers are imported by
their full name (``from tests.libs.harness import ...``). tests/stress is a folder of its own
(no ``__init__.py``): its campaign modules are also run by benchmarks/bench_reliability.py,
which imports them by their bare names.
"""
