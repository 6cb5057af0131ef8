"""A missing file's name is printed as the real program prints it: coreutils quote a name a shell
would read specially (``cat: '/h?dden/a b': No such file or directory``), so an unquoted decoy told
a glob or a space in a hidden path apart from the real answer. Compared with the programs
themselves, run in the sandbox image."""

from __future__ import annotations

import shlex

import docker
import pytest

from guard.decoys.shell import gnu_quote
from sandbox.image import default_image, ensure_image
from tests.guard.test_decoys import HIDDEN, decoy

pytestmark = pytest.mark.docker

NAMES = [
    "/hidden/answer.txt",
    "/h?dden/answer.txt",
    "/hidden/a b.txt",
    "/hidden/it's",
    "/hidden/it's $x",
    "/hidden/a$b",
    "#notes",
    "a#b",
    "~x",
    "{",
    "x{",
    "a]b",
    "a=b",
    "a!b",
    "a\\b",
    "a\tb",
    "\tb",
    "b\t",
    "é.txt",
    'a"b',
]
PROGRAMS = [
    "cat", "nl", "wc", "md5sum", "sha256sum", "sort", "uniq", "realpath", "head", "tac", "ls", "stat", "du",
    "sed -n p",
]  # fmt: skip


@pytest.fixture(scope="module")
def real_answers() -> dict[tuple[str, str], str]:
    """Each program's first stderr line for each missing name, from one container."""
    client = docker.from_env()
    try:
        image = ensure_image(client, default_image())
        runs = [f"{program} {shlex.quote(name)} 2>&1 | head -1" for program in PROGRAMS for name in NAMES]
        script = "cd /tmp\n" + "".join(f"{run}; echo '<<end>>'\n" for run in runs)
        output = client.containers.run(
            image, ["/bin/sh", "-c", script], network_disabled=True, remove=True, user="65534"
        ).decode()
    finally:
        client.close()
    lines = output.split("<<end>>\n")
    keys = [(program, name) for program in PROGRAMS for name in NAMES]
    return dict(zip(keys, lines, strict=False))


@pytest.mark.parametrize("program", PROGRAMS)
def test_decoys_name_missing_files_as_the_programs_do(program: str, real_answers: dict) -> None:
    for name in NAMES:
        if program == "realpath" and not name.startswith("/"):
            continue  # a missing name in an existing directory resolves (no -e): not a hidden path
        answer = decoy(f"{program} {shlex.quote(name)}", HIDDEN, path=name)
        assert answer.output == real_answers[(program, name)], (program, name)


def test_names_a_shell_reads_plainly_stay_unquoted() -> None:
    assert gnu_quote("/hidden/answer.txt") == "/hidden/answer.txt"
    assert gnu_quote("") == "''"
