"""Text from a sandbox made safe to print on a terminal.

Anything an agent wrote (command output, file names, arguments, a guard's quote of them) may carry
escape sequences: CSI/OSC sequences that set the window title, conceal or erase lines, move the
cursor, or C1 controls that some terminals obey without an ESC. Printed raw, an agent could hide
its own rows from an admin reading ``rlguard audit``. :func:`terminal_safe` keeps the text readable
and shows every control as a visible escape instead.
"""

from __future__ import annotations

import re

# C0 controls but newline and tab, DEL, C1 controls, and the Unicode bidirectional overrides and
# isolates that reorder what is shown ("Trojan Source"), plus the line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str, *, one_line: bool = False) -> str:
    """``text`` with every terminal control shown as ``\\xNN``/``\\uNNNN`` (``one_line``: newlines
    and tabs too), so printing it cannot drive the terminal."""
    text = _UNSAFE.sub(_visible, text)
    if one_line:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text
