"""Inline code in languages other than Python (node, perl, ruby, php, awk): a lexical scan.

No full parsers for these: rules match their text with regexes (``guard/rulepacks``), and this
module pulls out what needs the shell normaliser in turn (strings handed to ``system``,
``execSync``, backticks, ``qx``) plus string literals that look like paths or URLs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STRING = re.compile(r"""'((?:[^'\\\n]|\\.){1,4096})'|"((?:[^"\\\n]|\\.){1,4096})"|`([^`]{1,4096})`""")
_SHELL_CALL = re.compile(
    r"""\b(?:system|exec|execSync|execFileSync|spawnSync|spawn|popen|shell_exec|passthru|proc_open|
    IO\.popen|Open3\.\w+|%x|qx|readpipe)\s*[({]?\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")""",
    re.X,
)
_BACKTICK = re.compile(r"`([^`]{1,4096})`")
_PATHLIKE = re.compile(r"^(?:/|\.{1,2}/|~/)[^\s]*$")
_URL = re.compile(r"\b([a-z][a-z0-9+.-]*)://([^/\s'\"]*)", re.I)
_REQUIRE = re.compile(r"""\b(?:require|import)\s*\(?\s*['"]([\w:/@.-]+)['"]|\buse\s+([\w:]+)""")


def _names(text: str) -> list[str]:
    """A table's words (program or function names), written as one string to keep tables short."""
    return text.split()


@dataclass
class ForeignFacts:
    facts: list[str] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    effects: list[tuple[str, str, str | None]] = field(default_factory=list)  # (op, path, source)


_Q = r"""(?:'((?:[^'\\\n]|\\.){1,1024})'|"((?:[^"\\\n]|\\.){1,1024})"|`([^`$]{1,1024})`)"""
# file operations by function name (node's fs, perl, ruby's File/FileUtils, php); the first string
# argument is the path, the second (copy, rename, link) the target
_FILE_OPS: dict[str, str] = {
    **dict.fromkeys(
        _names(
            "writeFileSync writeFile createWriteStream file_put_contents write truncateSync truncate "
            "touch mkdirSync mkdir mkdir_p utimesSync"
        ),
        "write",
    ),
    **dict.fromkeys(["appendFileSync", "appendFile"], "append"),
    **dict.fromkeys(
        [
            "unlinkSync",
            "unlink",
            "rmSync",
            "rm",
            "rmdirSync",
            "rmdir",
            "rm_rf",
            "rm_r",
            "delete",
            "remove_dir",
        ],
        "delete",
    ),
    **dict.fromkeys(["renameSync", "rename", "mv", "move"], "move"),
    **dict.fromkeys(["copyFileSync", "copyFile", "cpSync", "cp", "copy", "cp_r", "copy_file"], "copy"),
    **dict.fromkeys(["symlinkSync", "symlink", "linkSync", "link", "ln_s", "ln", "ln_sf"], "link"),
    **dict.fromkeys(["chmodSync", "chmod", "chownSync", "chown", "lchownSync"], "mode"),
    **dict.fromkeys(
        _names(
            "readFileSync readFile createReadStream file_get_contents read readlines foreach "
            "readdirSync readdir entries children"
        ),
        "read",
    ),
}
_FILE_CALL = re.compile(
    r"""(?<![\w'"])(?P<fn>"""
    + "|".join(sorted(map(re.escape, _FILE_OPS), key=len, reverse=True))
    + r""")\s*\(?\s*"""
    + _Q
    + r"""(?:\s*,\s*"""
    + _Q
    + r""")?"""
)
_PERL_OPEN = re.compile(
    r"""\bopen\s*\(?\s*(?:my\s+)?[$\w]+\s*,\s*(?:'([<>+]{1,2})'|"([<>+]{1,2})")\s*,\s*""" + _Q
)
_PERL_OPEN2 = re.compile(
    r"""\bopen\s*\(?\s*(?:my\s+)?[$\w]+\s*,\s*(?:'(>>?|\+<)\s*([^'\n]+)'|"(>>?|\+<)\s*([^"$\n]+)")"""
)
_RUBY_OPEN = re.compile(r"""\bFile\.open\s*\(?\s*""" + _Q + r"""\s*,\s*['"]([rwa+b]+)['"]""")


_AWK_GETLINE = re.compile(r'getline[^<;]*<\s*"([^"]+)"')
_AWK_PRINT_TO = re.compile(r'(?:print|printf)[^>;]*>>?\s*"([^"]+)"')


def _file_effects(code: str) -> list[tuple[str, str, str | None]]:
    out: list[tuple[str, str, str | None]] = []
    for m in _FILE_CALL.finditer(code):
        op = _FILE_OPS.get(m.group("fn"))
        if op is None:
            continue
        first = next((g for g in m.groups()[1:4] if g), None)
        second = next((g for g in m.groups()[4:7] if g), None)
        if not first:
            continue
        if op in ("copy", "move", "link"):
            if not second:
                continue
            if op == "copy":
                out += [("read", first, None), ("write", second, first)]
            elif op == "move":
                out += [("move", first, None), ("write", second, first)]
            else:
                out.append(("link", second, first))
        else:
            out.append((op, first, None))
    for m in _PERL_OPEN.finditer(code):
        mode = m.group(1) or m.group(2)
        path = next((g for g in m.groups()[2:5] if g), None)
        if path:
            out.append(("read" if mode == "<" else "append" if mode == ">>" else "write", path, None))
    for m in _PERL_OPEN2.finditer(code):
        mode, path = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        if path:
            out.append(("append" if mode == ">>" else "write", path.strip(), None))
    for m in _RUBY_OPEN.finditer(code):
        path = next((g for g in m.groups()[:3] if g), None)
        mode = m.group(4)
        if path:
            out.append(
                ("append" if "a" in mode else "write" if any(c in mode for c in "w+") else "read", path, None)
            )
    return out


def foreign_facts(lang: str, code: str) -> ForeignFacts:
    """Imports, URLs, path literals and shell strings in ``code`` written in ``lang``."""
    out = ForeignFacts()
    for a, b in _REQUIRE.findall(code):
        out.facts.append(f"import:{a or b}")
    for scheme, host in _URL.findall(code):
        out.facts.append(f"url:{scheme.lower()}://{host.lower()}")
    for groups in _STRING.findall(code):
        value = next((g for g in groups if g), "")
        if _PATHLIKE.match(value):
            out.paths.append(value)
    for single, double in _SHELL_CALL.findall(code):
        out.shell.append(single or double)
    if lang in ("perl", "ruby", "php"):
        out.shell.extend(_BACKTICK.findall(code))
    if lang != "awk":
        out.effects = _file_effects(code)
    else:  # getline < "file" reads it; print > "file" / >> "file" writes it
        out.effects = [("read", m, None) for m in _AWK_GETLINE.findall(code)]
        out.effects += [("write", m, None) for m in _AWK_PRINT_TO.findall(code)]
    if lang == "awk":
        out.shell.extend(re.findall(r""""((?:[^"\\]|\\.)*)"\s*\|\s*getline""", code))
    return out
