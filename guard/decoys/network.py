"""Decoys for network access: each program fails as it does in a sandbox whose network is down.

Wording and exit codes were taken from the real programs run inside a network namespace without
interfaces (name resolution fails with EAI_AGAIN, connects to an IP with ENETUNREACH). The sandbox
image is Debian bookworm with Python 3.11, so Python tracebacks use its library paths.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime

from guard.decoys.shell import (
    args_of,
    bare_host,
    first_domain,
    first_url,
    has_flag,
    host_of,
    is_ip,
    lquote,
    port_of,
    positionals,
)
from guard.types import Command, NormalizedCall, ToolAnswer

PY_LIB = "/usr/lib/python3.11"
EAI_AGAIN = "Temporary failure in name resolution"
REFUSED = "Couldn't connect to server"

# A non-tty curl draws its progress meter on stderr: a header, then a zero line redrawn with "\r".
_CURL_HEAD = (
    "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
    "                                 Dload  Upload   Total   Spent    Left  Speed\n"
)
_CURL_ZEROS = "\r  0     0    0     0    0     0      0      0 --:--:-- --:--:-- --:--:--     0"


def _target(command: Command, normalized: NormalizedCall, value_opts: frozenset[str] = frozenset()) -> str:
    """The URL (or host) the command reaches for: in its arguments first, then in any inline code."""
    args = args_of(command)
    url = first_url(args)
    if url:
        return url
    for arg in positionals(args, value_opts):
        if bare_host(arg):
            return arg
    return (
        first_url(normalized.code)
        or first_url([normalized.text])
        or first_domain(normalized.text)
        or "localhost"
    )


def curl(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    args = args_of(command)
    url = _target(command, normalized, frozenset({"-o", "--output", "-H", "--header", "-d", "--data", "-X"}))
    host = host_of(url)
    if is_ip(host) or host == "localhost":
        ms = rng.randint(0, 3)
        error = f"curl: (7) Failed to connect to {host} port {port_of(url)} after {ms} ms: {REFUSED}"
        code = 7
    else:
        error, code = f"curl: (6) Could not resolve host: {host}", 6
    silent = has_flag(args, "s", "--silent")
    if silent and not has_flag(args, "S", "--show-error"):
        return ToolAnswer("", code)
    if silent:
        return ToolAnswer(error, code)
    verbose = f"* Could not resolve host: {host}\n* Closing connection 0\n" if has_flag(args, "v") else ""
    # A failed connect redraws the zero line once more and ends it before the error.
    meter = f"{_CURL_HEAD}{_CURL_ZEROS}{_CURL_ZEROS}\n" if code == 7 else f"{_CURL_HEAD}{_CURL_ZEROS}"
    return ToolAnswer(f"{meter}{verbose}{error}", code)


def wget(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    args = args_of(command)
    url = _target(command, normalized, frozenset({"-O", "-o", "-P", "--header", "-U"}))
    if "://" not in url:
        url = f"http://{url}"
    host = host_of(url)
    if has_flag(args, "q", "--quiet"):
        return ToolAnswer("", 4)
    stamp = now.strftime("%Y-%m-%d %H:%M:%S")
    if is_ip(host):
        body = f"Connecting to {host}:{port_of(url)}... failed: Network is unreachable."
    else:
        body = (
            f"Resolving {host} ({host})... failed: {EAI_AGAIN}.\n"
            f"wget: unable to resolve host address {lquote(host)}"
        )
    return ToolAnswer(f"--{stamp}--  {url}\n{body}", 4)


def nc(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    pos = positionals(args_of(command), frozenset({"-p", "-s", "-w", "-x", "-X", "-i", "-q"}))
    host = pos[0] if pos else "localhost"
    port = pos[1] if len(pos) > 1 else "80"
    if is_ip(host):
        return ToolAnswer(f"nc: connect to {host} port {port} (tcp) failed: Network is unreachable", 1)
    return ToolAnswer(f'nc: getaddrinfo for host "{host}" port {port}: {EAI_AGAIN}', 1)


def ssh(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    pos = positionals(
        args_of(command), frozenset({"-p", "-i", "-l", "-o", "-F", "-J", "-L", "-R", "-D", "-P"})
    )
    target = next((p for p in pos if bare_host(p) or "@" in p or ":" in p), pos[0] if pos else "localhost")
    host = target.split("@", 1)[-1].split(":", 1)[0]
    resolve = f"ssh: Could not resolve hostname {host}: {EAI_AGAIN}"
    program = command.program
    if program == "scp":
        return ToolAnswer(f"{resolve}\r\nscp: Connection closed", 255)
    if program == "sftp":
        return ToolAnswer(f"{resolve}\r\nConnection closed.  \nConnection closed", 255)
    if program == "rsync":
        return ToolAnswer(
            f"{resolve}\r\nrsync: connection unexpectedly closed (0 bytes received so far) [Receiver]\n"
            "rsync error: unexplained error (code 255) at io.c(231) [Receiver=3.2.7]",
            255,
        )
    prefix = (
        "" if len(pos) > 1 else "Pseudo-terminal will not be allocated because stdin is not a terminal.\r\n"
    )
    return ToolAnswer(f"{prefix}{resolve}\r\n", 255)


def telnet(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    pos = positionals(args_of(command))
    host = pos[0] if pos else "localhost"
    port = pos[1] if len(pos) > 1 else "telnet"
    return ToolAnswer(f"telnet: could not resolve {host}/{port}: {EAI_AGAIN}", 1)


def _pip_requirements(args: list[str]) -> list[str]:
    value_opts = frozenset(
        {"-r", "--requirement", "-c", "-d", "--dest", "-i", "--index-url", "-t", "--target"}
    )
    value_opts |= {"--extra-index-url", "-f", "--find-links", "--trusted-host", "--python-version"}
    pos = positionals(args, value_opts)
    if pos and pos[0] in ("install", "download", "wheel"):
        return pos[1:]
    if len(pos) > 1 and pos[:2] == ["-m", "pip"]:
        return pos[3:]
    return pos[1:] if pos else []


def _without_ref(url: str) -> str:
    """``https://h/a/b.git@v1.2`` -> ``https://h/a/b.git`` (pip's ``@ref`` suffix is not part of the URL)."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc}{slash}{path.rsplit('@', 1)[0]}"


def _pip_retries(path: str, rng: random.Random) -> list[str]:
    lines = []
    for total in range(4, -1, -1):
        address = f"0x7f{rng.getrandbits(40):010x}"
        lines.append(
            f"WARNING: Retrying (Retry(total={total}, connect=None, read=None, redirect=None, status=None)) "
            "after connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection."
            f"HTTPSConnection object at {address}>: Failed to establish a new connection: "
            f"[Errno -3] {EAI_AGAIN}')': {path}"
        )
    return lines


def _pip_archive(url: str, rng: random.Random) -> ToolAnswer:
    """A requirement given as an archive URL: five retries, then the connection error itself."""
    host, path = host_of(url), "/" + url.split("://", 1)[-1].partition("/")[2]
    address = f"0x7f{rng.getrandbits(40):010x}"
    pool = f"HTTPSConnectionPool(host='{host}', port={port_of(url)})"
    final = (
        f"ERROR: Could not install requirement {url} because of error {pool}: Max retries exceeded with "
        f"url: {path} (Caused by NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection "
        f"object at {address}>: Failed to establish a new connection: [Errno -3] {EAI_AGAIN}'))"
    )
    return ToolAnswer("\n".join([f"Collecting {url}", *_pip_retries(path, rng), final]), 1)


def pip(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    """pip: a VCS URL fails in its git clone; a name retries the index five times, then gives up."""
    args = args_of(command)
    if command.program.startswith("python"):
        args = args[args.index("pip") + 1 :] if "pip" in args else args
    requirements = _pip_requirements(args) or ["requirements"]
    requirement = requirements[0]
    vcs = requirement.split("+", 1)[-1] if requirement.startswith(("git+", "hg+", "svn+")) else None
    if vcs is None and "://" in requirement:
        return _pip_archive(requirement, rng)
    if vcs is not None:
        clone_url = _without_ref((vcs or requirement).split("#", 1)[0])
        build = f"/tmp/pip-req-build-{''.join(rng.choices('abcdefghijklmnopqrstuvwxyz0123456789_', k=8))}"
        clone = f"git clone --filter=blob:none --quiet {clone_url} {build}"
        failure = (
            f"error: subprocess-exited-with-error\n\n"
            f"× {clone} did not run successfully.\n│ exit code: 128\n╰─> See above for output.\n\n"
            "note: This error originates from a subprocess, and is likely not a problem with pip."
        )
        indented = "\n".join(f"  {line}" if line else "  " for line in failure.splitlines())
        return ToolAnswer(
            f"Collecting {requirement}\n"
            f"  Cloning {clone_url} to {build}\n"
            f"  Running command {clone}\n"
            f"  fatal: unable to access '{clone_url.rstrip('/')}/': "
            f"Could not resolve host: {host_of(clone_url)}\n"
            f"{indented}\n{failure}",
            1,
        )
    name = requirement.split("[", 1)[0]
    for sep in ("==", ">=", "<=", "~=", "!=", ">", "<"):
        name = name.split(sep, 1)[0]
    lines = _pip_retries(f"/simple/{name.lower()}/", rng)
    lines.append(
        f"ERROR: Could not find a version that satisfies the requirement {requirement} (from versions: none)"
    )
    lines.append(f"ERROR: No matching distribution found for {requirement}")
    return ToolAnswer("\n".join(lines), 1)


def _py_frame(path: str, line: int, func: str, source: str) -> str:
    return f'  File "{path}", line {line}, in {func}\n    {source}'


def python(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    """A traceback in the style of the library the code uses (requests, urllib, http.client, socket)."""
    code = "\n".join(normalized.code) or normalized.text
    url = first_url([code, *args_of(command)]) or "http://localhost/"
    host, port, path = host_of(url), port_of(url), "/" + url.split("://", 1)[-1].partition("/")[2]
    pos = positionals(args_of(command))
    script = f'"{pos[0]}"' if pos else '"<stdin>"'
    origin = '"<string>"' if "-c" in args_of(command) else script
    top = f"  File {origin}, line 1, in <module>"
    gai = (
        "Traceback (most recent call last):\n"
        + _py_frame(
            f"{PY_LIB}/socket.py",
            962,
            "getaddrinfo",
            "for res in _socket.getaddrinfo(host, port, family, type, proto, flags):",
        )
        + "\n"
    )
    if "requests" in code:
        pool = (
            f"HTTPSConnectionPool(host='{host}', port={port})"
            if port == 443
            else f"HTTPConnectionPool(host='{host}', port={port})"
        )
        cls = "HTTPSConnection" if port == 443 else "HTTPConnection"
        cause = (
            f"NameResolutionError(\"{cls}(host='{host}', port={port}): "
            f"Failed to resolve '{host}' ([Errno -3] {EAI_AGAIN})\")"
        )
        return ToolAnswer(
            "Traceback (most recent call last):\n"
            f"{top}\n"
            + _py_frame(
                "/usr/lib/python3/dist-packages/requests/api.py",
                73,
                "get",
                'return request("get", url, params=params, **kwargs)',
            )
            + "\n"
            + _py_frame(
                "/usr/lib/python3/dist-packages/requests/adapters.py",
                519,
                "send",
                "raise ConnectionError(e, request=request)",
            )
            + f"\nrequests.exceptions.ConnectionError: {pool}: "
            f"Max retries exceeded with url: {path} (Caused by {cause})",
            1,
        )
    if "urllib" in code or "urlopen" in code:
        return ToolAnswer(
            gai + f"socket.gaierror: [Errno -3] {EAI_AGAIN}\n\n"
            "During handling of the above exception, another exception occurred:\n\n"
            "Traceback (most recent call last):\n"
            f"{top}\n"
            + _py_frame(
                f"{PY_LIB}/urllib/request.py", 216, "urlopen", "return opener.open(url, data, timeout)"
            )
            + "\n"
            + _py_frame(f"{PY_LIB}/urllib/request.py", 1351, "do_open", "raise URLError(err)")
            + f"\nurllib.error.URLError: <urlopen error [Errno -3] {EAI_AGAIN}>",
            1,
        )
    if "httpx" in code:
        return ToolAnswer(
            "Traceback (most recent call last):\n"
            f"{top}\n"
            + _py_frame(
                "/usr/lib/python3/dist-packages/httpx/_transports/default.py",
                86,
                "map_httpcore_exceptions",
                "raise mapped_exc(message) from exc",
            )
            + f"\nhttpx.ConnectError: [Errno -3] {EAI_AGAIN}",
            1,
        )
    return ToolAnswer(
        "Traceback (most recent call last):\n"
        f"{top}\n"
        + _py_frame(
            f"{PY_LIB}/socket.py",
            827,
            "create_connection",
            "for res in getaddrinfo(host, port, 0, SOCK_STREAM):",
        )
        + "\n"
        + _py_frame(
            f"{PY_LIB}/socket.py",
            962,
            "getaddrinfo",
            "for res in _socket.getaddrinfo(host, port, family, type, proto, flags):",
        )
        + f"\nsocket.gaierror: [Errno -3] {EAI_AGAIN}",
        1,
    )


def node(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    code = "\n".join(normalized.code) or normalized.text
    host = host_of(first_url([code, *args_of(command)]) or "localhost")
    details = f"  errno: -3001,\n  code: 'EAI_AGAIN',\n  syscall: 'getaddrinfo',\n  hostname: '{host}'\n}}"
    if "fetch(" in code:
        inner = "\n".join("  " + line for line in details.splitlines())
        return ToolAnswer(
            "node:internal/deps/undici/undici:12618\n    Error.captureStackTrace(err, this);\n          ^\n\n"
            "TypeError: fetch failed\n    at node:internal/deps/undici/undici:12618:11\n"
            "    at process.processTicksAndRejections (node:internal/process/task_queues:95:5) {\n"
            f"  cause: Error: getaddrinfo EAI_AGAIN {host}\n"
            "      at GetAddrInfoReqWrap.onlookup [as oncomplete] (node:dns:107:26) {\n"
            f"{inner}\n}}\n\nNode.js v18.19.0",
            1,
        )
    return ToolAnswer(
        "node:events:495\n      throw er; // Unhandled 'error' event\n      ^\n\n"
        f"Error: getaddrinfo EAI_AGAIN {host}\n"
        "    at GetAddrInfoReqWrap.onlookup [as oncomplete] (node:dns:107:26)\n"
        "Emitted 'error' event on ClientRequest instance at:\n"
        "    at Socket.socketErrorListener (node:_http_client:501:9)\n"
        "    at Socket.emit (node:events:517:28)\n"
        "    at emitErrorNT (node:internal/streams/destroy:151:8)\n"
        "    at emitErrorCloseNT (node:internal/streams/destroy:116:3)\n"
        "    at process.processTicksAndRejections (node:internal/process/task_queues:82:21) {\n"
        f"{details}\n\nNode.js v18.19.0",
        1,
    )


def perl(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    code = "\n".join(normalized.code) or normalized.text
    url = first_url([code, *args_of(command)]) or "http://localhost/"
    return ToolAnswer(f"500 Can't connect to {host_of(url)}:{port_of(url)} ({EAI_AGAIN}) <URL:{url}>", 0)


def ruby(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    code = "\n".join(normalized.code) or normalized.text
    url = first_url([code, *args_of(command)]) or "http://localhost/"
    return ToolAnswer(
        f"/usr/lib/ruby/3.1.0/net/http.rb:1018:in `initialize': Failed to open TCP connection to "
        f"{host_of(url)}:{port_of(url)} (getaddrinfo: {EAI_AGAIN}) (SocketError)",
        1,
    )


def apt(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    pos = positionals(args_of(command))
    if pos and pos[0] == "install":
        package = pos[1] if len(pos) > 1 else "package"
        return ToolAnswer(
            "Reading package lists...\nBuilding dependency tree...\nReading state information...\n"
            f"E: Unable to locate package {package}",
            100,
        )
    mirror = "deb.debian.org"
    failure = f"Temporary failure resolving '{mirror}'"
    lines = [
        f"Err:1 http://{mirror}/debian bookworm InRelease\n  {failure}",
        f"Err:2 http://{mirror}/debian-security bookworm-security InRelease\n  {failure}",
        "Reading package lists...",
        f"W: Failed to fetch http://{mirror}/debian/dists/bookworm/InRelease  {failure}",
        "W: Some index files failed to download. They have been ignored, or old ones used instead.",
    ]
    return ToolAnswer("\n".join(lines), 0)


def socat(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    host = first_domain(" ".join(args_of(command))) or _target(command, normalized)
    pid = rng.randint(20, 4000)
    stamp = now.strftime("%Y/%m/%d %H:%M:%S")
    return ToolAnswer(
        f'{stamp} socat[{pid}] E getaddrinfo("{host_of(host)}", "NULL", {{1,0,1,6}}, {{}}): {EAI_AGAIN}', 1
    )


def generic(command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime) -> ToolAnswer:
    """A program without its own wording: the resolver's message, as many small tools print it."""
    url = _target(command, normalized)
    return ToolAnswer(f"{command.program}: {host_of(url)}: {EAI_AGAIN}", 1)


Decoy = Callable[[Command, NormalizedCall, random.Random, datetime], ToolAnswer]

BY_PROGRAM: dict[str, Decoy] = {
    "curl": curl,
    "wget": wget,
    "nc": nc,
    "ncat": nc,
    "netcat": nc,
    "ssh": ssh,
    "scp": ssh,
    "sftp": ssh,
    "rsync": ssh,
    "telnet": telnet,
    "pip": pip,
    "pip3": pip,
    "node": node,
    "nodejs": node,
    "perl": perl,
    "ruby": ruby,
    "apt": apt,
    "apt-get": apt,
    "socat": socat,
}


def network_decoy(
    command: Command, normalized: NormalizedCall, rng: random.Random, now: datetime
) -> ToolAnswer:
    """The failure ``command`` meets when the network is down."""
    program = command.program
    if program.startswith("python"):
        args = args_of(command)
        if len(args) > 1 and args[0] == "-m" and args[1] == "pip":
            return pip(command, normalized, rng, now)
        return python(command, normalized, rng, now)
    if program.startswith("pip"):
        return pip(command, normalized, rng, now)
    return BY_PROGRAM.get(program, generic)(command, normalized, rng, now)
