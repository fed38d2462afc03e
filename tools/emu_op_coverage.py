"""Which entries of rocke.emu.semantics' VALU_OPS / SALU_OPS a test run executes.

    python tools/emu_op_coverage.py [pytest args...]      (default: tests/emu)

Wraps every table entry's function with a counter before the tests import the emulator, runs
pytest in-process, then prints `executed/total` per table and the entries never executed.
Counts executions only; whether a test checks the result is the tests' business."""
from __future__ import annotations

import dataclasses
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's rocke


class _Counter:
    def __init__(self):
        self.executed = {"VALU": set(), "SALU": set()}
        self.tables = {}

    def pytest_configure(self, config):
        from rocke.emu import semantics
        self.tables = {"VALU": semantics.VALU_OPS, "SALU": semantics.SALU_OPS}
        for label, table in self.tables.items():
            for name, op in list(table.items()):
                table[name] = dataclasses.replace(op, fn=self._wrap(label, name, op.fn))

    def _wrap(self, label, name, fn):
        executed = self.executed[label]

        def counted(*args):
            executed.add(name)
            return fn(*args)
        return counted


def main(argv: list[str]) -> int:
    counter = _Counter()
    code = pytest.main(["-q", "-p", "no:xdist", "-p", "no:cacheprovider"] + (argv or ["tests/emu"]),
                       plugins=[counter])
    for label, table in counter.tables.items():
        done = counter.executed[label]
        print(f"{label}: {len(done)}/{len(table)} semantics entries executed")
        never = sorted(set(table) - done)
        if never:
            print(f"  never executed ({len(never)}): {' '.join(never)}")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
