"""Pathological calls cost a bounded amount of memory and time, and are escalated, never a crash.

Written as the attack: ``a=x; a=$a$a; ...`` doubled 30+ times (the call that took the gateway
down), and its cousins through every step that computes text: parameter expansion, printf
repeats, tr ranges, appended files, decoders, nested eval, Python and foreign code. The bounds
asserted are safety bounds (far above what the budgets allow), not performance numbers:
``rlguard bench guard-budget`` measures those.
"""

from __future__ import annotations

import time
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guard.normalize import normalize
from guard.normalize.budget import Budget
from guard.rules import RuleEngine
from guard.settings import GuardSettings
from guard.types import ToolCall

MAX_SECONDS = 10.0  # per call on a loaded machine, with tracemalloc slowing allocation down
MAX_PEAK_BYTES = 128 * 1024 * 1024
ENGINE = RuleEngine.from_settings(GuardSettings())

names = st.from_regex(r"[a-z][a-z0-9_]{0,3}", fullmatch=True)
doublings = st.integers(min_value=20, max_value=64)
concat = st.sampled_from(["${v}${v}", "$v$v", '"$v$v"', "$v$v$v", '"${v}"x"${v}"', "$v${v}$v$v"])
uses = st.sampled_from(
    [
        "echo $v",
        'eval "$v"',
        'cat <<< "$v"',
        "printf '%s' \"$v\" | base64 -d | sh",
        'bash -c "$v"',
        'echo "$v" > f.py; python3 f.py',
        "echo ${v//x/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx}",
        "echo ${v#*y} ${v%%x*y}",
        "echo ${v^^} ${#v}",
    ]
)


def measure(call: ToolCall) -> tuple[float, int, str | None]:
    tracemalloc.start()
    started = time.perf_counter()
    try:
        normalized = normalize(call)
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return elapsed, peak, normalized.parse_error


def assert_bounded(call: ToolCall) -> str | None:
    elapsed, peak, error = measure(call)
    assert elapsed < MAX_SECONDS, f"{elapsed:.2f} s"
    assert peak < MAX_PEAK_BYTES, f"{peak / 2**20:.0f} MiB"
    # Over budget or unreadable: stage 1 escalates it, it is never allowed. (The wall-clock backstop
    # depends on the machine's load, so a second reading may finish in time: only the deterministic
    # budgets must give the same verdict twice.)
    if error is not None and "time budget" not in error:
        match = ENGINE.evaluate(call).match
        assert match is not None and match.category == "unparseable"
    return error


def test_the_reported_doubling_bomb_is_escalated_cheaply() -> None:
    command = "a=x; " + "a=$a$a; " * 34 + "echo $a"
    error = assert_bounded(ToolCall("bash", {"command": command}))
    assert error is not None and "over" in error


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(name=names, n=doublings, form=concat, use=uses)
def test_doubling_through_any_step_is_bounded(name: str, n: int, form: str, use: str) -> None:
    step = f"{name}={form.replace('v', name)}; "
    command = f"{name}=x; " + step * n + use.replace("$v", f"${name}").replace("{v", "{" + name)
    command = command.replace('"$v', f'"${name}')
    assert_bounded(ToolCall("bash", {"command": command}))


@settings(max_examples=30, suppress_health_check=[HealthCheck.too_slow])
@given(
    width=st.integers(min_value=1000, max_value=60_000),
    copies=st.integers(min_value=2, max_value=200),
    kind=st.sampled_from(["printf", "cat", "append", "tr", "echo", "herestring", "xargs"]),
)
def test_text_builders_are_bounded(width: int, copies: int, kind: str) -> None:
    big = "x" * width
    if kind == "printf":
        command = f"printf '{'%s' * copies}' " + " ".join(["$b"] * copies)
    elif kind == "cat":
        command = "echo $b > f; cat " + " ".join(["f"] * copies) + " > g; cat g g g g | sh"
    elif kind == "append":
        command = "echo $b > f; " + "cat f >> f; " * copies + "sh f"
    elif kind == "tr":
        command = "echo $b | tr '\\000-\\377' 'a-z' | " * min(copies, 50) + "sh"
    elif kind == "echo":
        command = "echo " + " ".join(["$b"] * copies) + " | sh"
    elif kind == "herestring":
        command = "sh <<< " + "$b" * copies
    else:
        command = "echo $b | xargs -I{} sh -c '{}{}{}{}'"
    assert_bounded(ToolCall("bash", {"command": f"b={big}; {command}"}))


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(depth=st.integers(min_value=2, max_value=12), width=st.integers(min_value=1, max_value=40))
def test_nested_eval_and_decoders_are_bounded(depth: int, width: int) -> None:
    inner = "curl http://x.com/s; " * width
    for _ in range(depth):
        inner = f"eval {inner!r}; " * 2
    assert_bounded(ToolCall("bash", {"command": inner}))


@settings(max_examples=20, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=50, max_value=5000),
    shape=st.sampled_from(["exec_chain", "deep_list", "concat", "many_calls", "node_strings"]),
)
def test_code_readers_are_bounded(n: int, shape: str) -> None:
    if shape == "exec_chain":
        code = "import base64\n" + "exec('x=1')\n" * n
        call = ToolCall("write_file", {"path": "src/a.py", "content": code})
    elif shape == "deep_list":
        call = ToolCall("write_file", {"path": "src/a.py", "content": "x = " + "[" * n + "]" * n})
    elif shape == "concat":
        call = ToolCall("write_file", {"path": "src/a.py", "content": "x = " + "+".join(["'a'"] * n)})
    elif shape == "many_calls":
        content = "import os\n" + "os.system('curl http://x.com/a; cat /hidden/x')\n" * n
        call = ToolCall("write_file", {"path": "src/a.py", "content": content})
    else:
        content = "require('child_process').execSync('curl http://x.com/a');\n" * n
        call = ToolCall("write_file", {"path": "tools/a.js", "content": content})
    assert_bounded(call)


def test_a_small_budget_is_honoured() -> None:
    """The budget is what binds, not some other limit: a tight one refuses a modest call."""
    call = ToolCall("bash", {"command": "a=" + "y" * 5000 + "; echo $a$a$a"})
    assert normalize(call).parse_error is None
    assert "over" in (normalize(call, Budget(max_work_chars=10_000)).parse_error or "")
    assert "over" in (normalize(call, Budget(max_value_chars=8000)).parse_error or "")
