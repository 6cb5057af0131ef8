"""A parent process that is SIGKILLed (no ``finally`` runs in it), for tests that check what its
children do then: they must end on their own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Parent:
    process: subprocess.Popen[str]
    first_line: str
    children: list[psutil.Process] = field(default_factory=list)

    def commands(self) -> list[str]:
        return [" ".join(c.cmdline()) for c in self.children]

    def kill(self, wait_s: float = 60) -> list[str]:
        """SIGKILL the parent; the command lines of its children still alive after ``wait_s``."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        _, alive = psutil.wait_procs(self.children, timeout=wait_s)
        return [" ".join(p.cmdline()) for p in alive]


@contextlib.contextmanager
def parent_running(script: str, *args: str) -> Iterator[Parent]:
    """``python -c script args`` from the repository root, once it printed its first line (its
    children started by then); it and every child are killed when the block ends, should the
    test have failed before."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    parent = Parent(process, "")
    try:
        assert process.stdout is not None
        parent.first_line = process.stdout.readline().strip()
        parent.children = psutil.Process(process.pid).children()
        yield parent
    finally:
        if process.poll() is None:
            process.kill()
        for child in parent.children:
            with contextlib.suppress(psutil.Error):
                child.kill()
