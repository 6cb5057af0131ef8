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


@dataclass
class ForeignFacts:
    facts: list[str] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


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
    if lang == "awk":
        out.shell.extend(re.findall(r""""((?:[^"\\]|\\.)*)"\s*\|\s*getline""", code))
    return out
