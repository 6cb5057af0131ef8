"""What the shell runs once the spelling is gone: program names, wrappers, shells and interpreters.

A wrapper (``env``, ``timeout``, ``sudo``, ...) runs its argument vector as a command; ``unwrap``
strips the wrapper's own options and returns the inner argv, so ``timeout -s 9 5 nice -n 3 curl x``
reaches ``curl x``. Tables, not code paths, so a new wrapper is one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Wrapper:
    """How to find the inner command: options that take a value, and positionals to skip first."""

    value_opts: frozenset[str] = frozenset()
    positionals: int = 0
    assignments: bool = False  # env-style NAME=VALUE before the command
    lookup_opts: frozenset[str] = frozenset()  # e.g. ``command -v``: looks a name up, runs nothing
    shell_string: bool = False  # the rest is one shell string (``watch``)


def _w(
    value_opts: str = "",
    positionals: int = 0,
    assignments: bool = False,
    lookup_opts: str = "",
    shell_string: bool = False,
) -> Wrapper:
    return Wrapper(
        frozenset(value_opts.split()), positionals, assignments, frozenset(lookup_opts.split()), shell_string
    )


WRAPPERS: dict[str, Wrapper] = {
    "env": _w("-u --unset -C --chdir -S --split-string", assignments=True),
    "timeout": _w("-s --signal -k --kill-after", positionals=1),
    "nice": _w("-n --adjustment"),
    "nohup": _w(),
    "command": _w(lookup_opts="-v -V"),
    "builtin": _w(),
    "exec": _w("-a"),
    "xargs": _w(
        "-I -n -P -L -s -d -E -a --max-args --max-procs --delimiter --arg-file --max-lines "
        "--max-chars --eof --process-slot-var"
    ),
    "sudo": _w("-u -g -C -D -h -p -r -t -U -T --user --group --host --prompt --chdir", assignments=True),
    "doas": _w("-u -C"),
    "runuser": _w("-u -g -G --user --group"),
    "stdbuf": _w("-i -o -e --input --output --error"),
    "time": _w("-f -o --format --output"),
    "watch": _w("-n -d --interval --differences -q --equexit", shell_string=True),
    "ionice": _w("-c -n -t --class --classdata"),
    "chrt": _w(positionals=1),
    "taskset": _w(positionals=1),
    "setsid": _w(),
    "unbuffer": _w(),
    "strace": _w("-e -o -p -s -u -a -b -E -I -O -P -S -X"),
    "ltrace": _w("-e -o -p -s -u -a -n"),
    "flock": _w("-w -E --timeout --conflict-exit-code", positionals=1),
    "chronic": _w(),
    "faketime": _w(positionals=1),
    "proxychains": _w("-f"),
    "proxychains4": _w("-f"),
    "torsocks": _w(),
    "fakeroot": _w(),
    "busybox": _w(),
    "toybox": _w(),
    "catchsegv": _w(),
    "valgrind": _w(),
    "unshare": _w("--mount-proc --propagation --setgroups -S -G --setuid --setgid --wd --root"),
    "nsenter": _w("-t --target -S -G --setuid --setgid --wd -w -r --root"),
    "chroot": _w("--userspec --groups", positionals=1),
    "firejail": _w(),
    "bwrap": _w(),
    "systemd-run": _w("-p --property -u --unit"),
    "parallel": _w("-j --jobs"),
}

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "ash", "mksh", "rbash", "fish", "yash", "posh"})
SHELL_VALUE_OPTS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})

INTERPRETERS: dict[str, str] = {
    "node": "node",
    "nodejs": "node",
    "deno": "node",
    "bun": "node",
    "perl": "perl",
    "ruby": "ruby",
    "php": "php",
    "lua": "lua",
    "Rscript": "r",
    "awk": "awk",
    "gawk": "awk",
    "mawk": "awk",
    "nawk": "awk",
    "tclsh": "tcl",
    "osascript": "applescript",
}
INLINE_CODE_FLAGS: dict[str, frozenset[str]] = {
    "python": frozenset({"-c"}),
    "node": frozenset({"-e", "--eval", "-p", "--print", "eval"}),
    "perl": frozenset({"-e", "-E"}),
    "ruby": frozenset({"-e"}),
    "php": frozenset({"-r"}),
    "lua": frozenset({"-e"}),
    "r": frozenset({"-e"}),
    "tcl": frozenset(),
    "applescript": frozenset({"-e"}),
}

_PYTHON = re.compile(r"^(?:python|pypy)(?:[0-9](?:\.[0-9]+)?)?(?:-dbg|m|u)?$")

# Program names a glob in the program word (``/usr/bin/cu?l``) is expanded against: common tools
# plus everything the rule pack cares about. Expanding against these names mirrors what the shell
# would find on PATH without touching the filesystem.
KNOWN_PROGRAMS: tuple[str, ...] = tuple(
    sorted(
        set(
            [
                "curl",
                "wget",
                "nc",
                "ncat",
                "netcat",
                "socat",
                "telnet",
                "ssh",
                "scp",
                "sftp",
                "rsync",
                "ftp",
                "lftp",
                "aria2c",
                "axel",
                "http",
                "https",
                "httpie",
                "lynx",
                "links",
                "w3m",
                "elinks",
                "openssl",
                "git",
                "pip",
                "pip3",
                "pipx",
                "uv",
                "poetry",
                "conda",
                "mamba",
                "npm",
                "npx",
                "yarn",
                "pnpm",
                "gem",
                "cargo",
                "go",
                "apt",
                "apt-get",
                "yum",
                "dnf",
                "apk",
                "brew",
                "python",
                "python2",
                "python3",
                "pypy",
                "pypy3",
                "node",
                "nodejs",
                "deno",
                "bun",
                "perl",
                "ruby",
                "php",
                "lua",
                "awk",
                "gawk",
                "mawk",
                "sed",
                "grep",
                "egrep",
                "fgrep",
                "rg",
                "ag",
                "ack",
                "find",
                "locate",
                "mlocate",
                "fd",
                "fdfind",
                "tree",
                "ls",
                "dir",
                "du",
                "cat",
                "tac",
                "head",
                "tail",
                "less",
                "more",
                "nl",
                "od",
                "xxd",
                "hexdump",
                "strings",
                "base64",
                "base32",
                "basenc",
                "rev",
                "tr",
                "cut",
                "sort",
                "uniq",
                "wc",
                "tee",
                "cp",
                "mv",
                "rm",
                "rmdir",
                "unlink",
                "shred",
                "truncate",
                "touch",
                "mkdir",
                "chmod",
                "chown",
                "ln",
                "tar",
                "zip",
                "unzip",
                "gzip",
                "gunzip",
                "zcat",
                "bzip2",
                "xz",
                "7z",
                "cpio",
                "dd",
                "echo",
                "printf",
                "bash",
                "sh",
                "dash",
                "zsh",
                "ksh",
                "fish",
                "env",
                "timeout",
                "nice",
                "nohup",
                "xargs",
                "sudo",
                "doas",
                "stdbuf",
                "time",
                "watch",
                "docker",
                "podman",
                "ctr",
                "crictl",
                "kubectl",
                "nerdctl",
                "nsenter",
                "unshare",
                "mount",
                "umount",
                "chroot",
                "pivot_root",
                "debugfs",
                "insmod",
                "modprobe",
                "capsh",
                "setcap",
                "mknod",
                "pytest",
                "tox",
                "nox",
                "make",
                "cmake",
                "gcc",
                "cc",
                "clang",
                "javac",
                "java",
                "kill",
                "pkill",
                "ps",
                "top",
                "id",
                "whoami",
                "uname",
                "hostname",
                "dig",
                "nslookup",
                "host",
                "ping",
                "traceroute",
                "ip",
                "ifconfig",
                "route",
                "iptables",
                "nmap",
                "tcpdump",
                "strace",
                "ltrace",
                "gdb",
                "vim",
                "vi",
                "nano",
                "emacs",
                "diff",
                "patch",
                "cmp",
                "file",
                "stat",
                "readlink",
                "realpath",
                "dirname",
                "basename",
                "sleep",
                "true",
                "false",
                "test",
            ]
        )
    )
)


def program_name(word: str) -> str:
    """``/usr/bin/curl`` → ``curl``; a program word is matched by its last path component."""
    return word.rstrip("/").rsplit("/", 1)[-1] or word


def expand_program_glob(name: str, limit: int = 8) -> list[str]:
    """Known programs a globbed program word could run (``cu?l`` → ``curl``), at most ``limit``."""
    found = [p for p in KNOWN_PROGRAMS if fnmatchcase(p, name)]
    return found[:limit]


def is_python(name: str) -> bool:
    return bool(_PYTHON.match(name))


def unwrap(program: str, argv: list[str]) -> tuple[list[str], bool] | None:
    """The inner argv a wrapper runs, and whether it is one shell string; None: not a wrapper,
    or a wrapper that runs nothing (``command -v curl`` only looks ``curl`` up)."""
    spec = WRAPPERS.get(program)
    if spec is None:
        return None
    i = 1
    positionals = spec.positionals
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if arg in spec.lookup_opts:
            return None
        if arg.startswith("-") and len(arg) > 1 and not (program == "time" and arg == "-p"):
            name = arg.split("=", 1)[0]
            i += 2 if name in spec.value_opts and "=" not in arg else 1
            continue
        if spec.assignments and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", arg):
            i += 1
            continue
        if positionals:
            positionals -= 1
            i += 1
            continue
        break
    inner = argv[i:]
    return (inner, spec.shell_string) if inner else None


def find_exec(argv: list[str]) -> list[list[str]]:
    """The commands ``find ... -exec CMD {} ;`` (and -execdir/-ok/-okdir) runs."""
    found: list[list[str]] = []
    i = 0
    while i < len(argv):
        if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            while j < len(argv) and argv[j] not in (";", "+", "\\;"):
                j += 1
            if j > i + 1:
                found.append(argv[i + 1 : j])
            i = j
        i += 1
    return found
