"""The sandbox part of ``rlguard demo``: run a project's tests in a hardened sandbox, then show
what the sandbox refuses (network, writes outside /workspace, privilege).

Kept apart from ``rlguard.cli.demo`` so the full demo (episodes, guard, training) can call it as one
step, and so its checks are tested like any other code.
"""

from __future__ import annotations

import asyncio
import io
import tarfile
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from sandbox.base import ExecResult, SandboxSpec
from sandbox.docker_backend import DockerBackend
from sandbox.textsafe import terminal_safe

#: A small multi-file Python project with its visible tests.
PROJECT: dict[str, str] = {
    "inventory/__init__.py": '"""A tiny inventory: parse stock lines, total their value."""\n',
    "inventory/parse.py": (
        "def parse_line(line: str) -> tuple[str, int, float]:\n"
        '    name, qty, price = (part.strip() for part in line.split(","))\n'
        "    return name, int(qty), float(price)\n"
    ),
    "inventory/value.py": (
        "from inventory.parse import parse_line\n\n\n"
        "def total_value(lines: list[str]) -> float:\n"
        "    return round(sum(qty * price for _, qty, price in map(parse_line, lines)), 2)\n"
    ),
    "tests/test_parse.py": (
        "from inventory.parse import parse_line\n\n\n"
        "def test_parse_line():\n"
        '    assert parse_line("apple, 3, 0.5") == ("apple", 3, 0.5)\n'
    ),
    "tests/test_value.py": (
        "from inventory.value import total_value\n\n\n"
        "def test_total_value():\n"
        '    assert total_value(["apple, 3, 0.5", "pear, 2, 1.25"]) == 4.0\n\n\n'
        "def test_empty():\n"
        "    assert total_value([]) == 0\n"
    ),
}

TEST_COMMAND = "python3 -m pytest -q -p no:cacheprovider tests"


@dataclass(frozen=True)
class Probe:
    """One thing an agent might try, and how to tell the sandbox refused it."""

    name: str
    command: str
    refused_when: str  # text the output shows when refused
    success_marker: str = "ESCAPED"  # printed only if the attempt worked


@dataclass
class ProbeResult:
    probe: Probe
    result: ExecResult

    @property
    def refused(self) -> bool:
        output = self.result.output
        return self.probe.success_marker not in output and self.probe.refused_when in output


@dataclass
class ShowcaseReport:
    tests: ExecResult
    probes: list[ProbeResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """The project's tests passed and every probe was refused."""
        return self.tests.exit_code == 0 and all(p.refused for p in self.probes)


def probes(host_port: int) -> list[Probe]:
    """The refusals shown; ``host_port`` is a listener on the host's 127.0.0.1."""
    connect = (
        f"python3 -c \"import socket\nsocket.create_connection(('127.0.0.1', {host_port}), timeout=3)\n"
        "print('ESCAPED')\" 2>&1 | tail -1"
    )
    return [
        Probe(
            "network: interfaces",
            "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' > /tmp/ifs; cat /tmp/ifs;"
            " [ $(wc -l < /tmp/ifs) -gt 1 ] && echo ESCAPED",
            "lo",
        ),
        Probe("network: host's 127.0.0.1 listener", connect, "ConnectionRefusedError"),
        Probe(  # runc says "Read-only file system"; gVisor checks the owner first: "Permission denied"
            "write outside /workspace",
            "echo pwned > /etc/motd 2>&1 && echo ESCAPED || echo REFUSED",
            "REFUSED",
        ),
        Probe(
            "write to system binaries",
            "cp /bin/true /usr/bin/sneaky 2>&1 && echo ESCAPED || echo REFUSED",
            "REFUSED",
        ),
        Probe(
            "become root with su", "su -c id root </dev/null 2>&1 && echo ESCAPED", "Authentication failure"
        ),
        Probe(  # runc: no user namespace at all; runsc: one inside gVisor's kernel, still read-only
            "user namespace root (unshare -Ur) writing system files",
            "unshare -Ur sh -c 'touch /usr/bin/sneaky && echo ESCAPED' 2>&1 || echo REFUSED",
            "REFUSED",
        ),
        Probe("mount a filesystem", "mount -t tmpfs none /tmp 2>&1 && echo ESCAPED", "must be superuser"),
        Probe(
            "capabilities",
            "grep CapEff /proc/self/status; grep -q 'CapEff:.*[1-9a-f]' /proc/self/status && echo ESCAPED",
            "0000000000000000",
        ),
    ]


def project_archive() -> bytes:
    """:data:`PROJECT` as a tar archive for the sandbox's /workspace."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, text in PROJECT.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


async def run_showcase(backend: DockerBackend, image: str | None = None) -> ShowcaseReport:
    """Run the project's tests, then every probe, in one fresh hardened sandbox."""

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"a sandbox reached the host\n")  # never happens: nothing inside can get here
        writer.close()

    listener = await asyncio.start_server(refuse, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    spec = SandboxSpec(
        image=image or backend.default_image,
        limits=backend.settings.limits,
        episode_id="demo-sandbox",
        workspace=project_archive(),
    )
    sandbox = await backend.create(spec)
    try:
        report = ShowcaseReport(tests=await sandbox.exec(TEST_COMMAND, timeout_s=120))
        for probe in probes(port):
            report.probes.append(ProbeResult(probe, await sandbox.exec(probe.command, timeout_s=30)))
    finally:
        await sandbox.destroy()
        listener.close()
        await listener.wait_closed()
    return report


def probe_said(probe: ProbeResult) -> str:
    """The line of a probe's output that shows the refusal (its last line when none does)."""
    lines = probe.result.output.strip().splitlines() or [""]
    return next((line for line in lines if probe.probe.refused_when in line), lines[-1]).strip()[:90]


def showcase_summary(report: ShowcaseReport) -> dict[str, Any]:
    """The showcase as data (``rlguard demo --json``): the test run's status and every probe."""
    return {
        "ok": report.ok,
        "tests_exit_code": report.tests.exit_code,
        "probes": [
            {"attempt": p.probe.name, "said": terminal_safe(probe_said(p)), "refused": p.refused}
            for p in report.probes
        ],
    }


def print_report(report: ShowcaseReport, console: Console | None = None) -> None:
    """The showcase as a reader sees it: the test run, then a table of refusals."""

    console = console or Console()
    status = (
        "[green]passed[/]" if report.tests.exit_code == 0 else f"[red]failed ({report.tests.exit_code})[/]"
    )
    console.print(f"[bold]Project tests in a hardened sandbox[/] ({TEST_COMMAND}): {status}")
    console.print(terminal_safe(report.tests.output.rstrip()), highlight=False, markup=False)
    table = Table(title="What the sandbox refuses")
    table.add_column("attempt")
    table.add_column("sandbox said")
    table.add_column("refused", justify="center")
    for probe in report.probes:
        table.add_row(
            probe.probe.name,
            probe_said(probe),
            "[green]yes[/]" if probe.refused else "[red]NO[/]",
        )
    console.print(table)
