"""The trusted runner and its remote-import proxies, run as real processes (no container needed).

A synthetic workspace and hidden test file go through ``tasks/grading/inside/runner.py`` exactly as in
the grading sandbox (``python3 -I -S -B``, the same bundle layout); the hidden tests assert what
the trusted side must see of workspace code: plain data, identity-compared handles, mapped
exceptions, callbacks, crashes and hangs confined to one test, and no way into the runner.
"""

import json
import shutil
import subprocess
import sys
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from tasks.grading import grade as grading
from tasks.grading.inside import wire

NONCE = "feedfacefeedfacefeedfacefeedface"

WORKSPACE = {
    "shop/__init__.py": """
        from shop.core import Basket, OutOfStock, always_equal, apply, crash, hang, probe_grader, total
    """,
    "shop/core.py": """
        import os, sys, time
        from decimal import Decimal


        class OutOfStock(KeyError):
            pass


        class Basket:
            def __init__(self):
                self.items = {}

            def add(self, sku, qty):
                if qty <= 0:
                    raise ValueError(f"bad quantity {qty}")
                self.items[sku] = self.items.get(sku, 0) + qty
                return self

            def take(self, sku):
                if sku not in self.items:
                    raise OutOfStock(sku)
                return self.items.pop(sku)

            def __contains__(self, sku):
                return sku in self.items

            def __len__(self):
                return len(self.items)


        class _Always(float):
            def __eq__(self, other):
                return True

            __hash__ = float.__hash__


        def always_equal():
            return _Always(1.0)


        def total(prices):
            return sum(prices, Decimal("0")), (1, 2.0, "x", b"y", None, True, {3}, frozenset({4}))


        def apply(fn, values):
            return [fn(v) for v in values]


        def crash():
            os._exit(3)


        def hang():
            time.sleep(60)


        def probe_grader():
            return {
                "tests_left": os.path.exists("/GRADER/tests"),
                "config_left": os.path.exists("/GRADER/config.json"),
                "inside_pytest": "_pytest" in sys.modules,
            }
    """,
    "conftest.py": "raise SystemExit('workspace conftest must never load')\n",
    "pygments_like.py": "VALUE = 1\n",
}

HIDDEN = """
    import pytest
    import shop
    from decimal import Decimal
    from shop import Basket, total


    def test_plain_data_keeps_exact_types():
        value, extras = total([Decimal("1.10"), Decimal("2.25")])
        assert type(value) is Decimal and value == Decimal("3.35")
        assert extras == (1, 2.0, "x", b"y", None, True, {3}, frozenset({4}))
        assert [type(x) for x in extras[:2]] == [int, float]


    def test_handles_methods_and_protocols():
        basket = Basket()
        assert basket.add("apple", 2) is basket  # one proxy per remote object
        basket.add("pear", 1)
        assert "apple" in basket and "kiwi" not in basket
        assert len(basket) == 2
        assert basket.items == {"apple": 2, "pear": 1}
        assert basket.take("apple") == 2


    def test_exceptions_map_to_local_classes():
        basket = Basket()
        with pytest.raises(ValueError, match="bad quantity 0"):
            basket.add("apple", 0)
        with pytest.raises(shop.OutOfStock):
            basket.take("kiwi")
        with pytest.raises(KeyError):
            basket.take("kiwi")


    def test_always_equal_object_is_not_equal():
        assert shop.always_equal() == 1.0


    def test_callbacks_run_here_with_plain_arguments():
        seen = []

        def double(x):
            seen.append(x)
            return x * 2

        assert shop.apply(double, [1, 2, 3]) == [2, 4, 6]
        assert seen == [1, 2, 3]


    def test_only_the_hidden_tests_get_workspace_modules():
        elsewhere = compile("import pygments_like", "/usr/lib/python3/dist-packages/_pytest/lazy.py", "exec")
        with pytest.raises(ModuleNotFoundError):
            exec(elsewhere, {})  # an import by pytest's own code finds no proxy
        import pygments_like

        assert pygments_like.VALUE == 1


    def test_worker_crash_fails_this_test():
        shop.crash()


    def test_worker_restarts_for_the_next_test():
        assert total([Decimal("1")])[0] == Decimal("1")


    def test_hang_fails_this_test():
        shop.hang()


    def test_hidden_tests_and_config_are_gone_before_workspace_code_runs():
        assert shop.probe_grader() == {"tests_left": False, "config_left": False, "inside_pytest": False}
"""


def run_runner(tmp_path: Path, timeout_s: float = 60, call_timeout_s: float = 2) -> tuple[dict, str]:
    root, workspace = tmp_path / "grader", tmp_path / "workspace"
    (root / "lib").mkdir(parents=True)
    (root / "tests").mkdir()
    for name, source in grading.INSIDE_FILES.items():
        shutil.copy(source, root / name)
    (root / "pytest.ini").write_text(grading._GRADER_INI)
    (root / "tests" / "test_shop.py").write_text(textwrap.dedent(HIDDEN))
    for name, text in WORKSPACE.items():
        path = workspace / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).replace("/GRADER", str(root)))
    config = {
        "nonce": NONCE,
        "tests": [str(root / "tests")],
        "ini": str(root / "pytest.ini"),
        "rootdir": str(root / "tests"),
        "lib": str(root / "lib"),
        "workspace": str(workspace),
        "timeout_s": timeout_s,
        "call_timeout_s": call_timeout_s,
    }
    (root / "config.json").write_text(json.dumps(config))
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(root / "runner.py"), str(root / "config.json")],
        capture_output=True,
        text=True,
        timeout=timeout_s + 30,
        cwd=workspace,
    )
    assert not (root / "config.json").exists()  # one-shot: gone before workspace code runs
    report = grading.parse_runner_output(run.stdout, NONCE)
    assert not report.problems, report.problems
    assert report.summary is not None, run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = {nodeid.split("::")[-1]: test["outcome"] for nodeid, test in report.tests.items()}
    return {"outcomes": outcomes, "summary": report.summary, "tests": report.tests}, run.stdout


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict:
    result, _ = run_runner(tmp_path_factory.mktemp("runner"))
    return result


@pytest.mark.parametrize(
    "test",
    [
        "test_plain_data_keeps_exact_types",
        "test_handles_methods_and_protocols",
        "test_exceptions_map_to_local_classes",
        "test_callbacks_run_here_with_plain_arguments",
        "test_worker_restarts_for_the_next_test",
        "test_hidden_tests_and_config_are_gone_before_workspace_code_runs",
        "test_only_the_hidden_tests_get_workspace_modules",
    ],
)
def test_remote_workspace_behaves_like_local_code(graded, test):
    assert graded["outcomes"][test] == "passed", graded["tests"]


@pytest.mark.parametrize(
    ("test", "why"),
    [
        ("test_always_equal_object_is_not_equal", "assert <remote _Always #"),
        ("test_worker_crash_fails_this_test", "RemoteCrash"),
        ("test_hang_fails_this_test", "RemoteTimeout"),
    ],
)
def test_cheats_and_failures_fail_only_their_test(graded, test, why):
    assert graded["outcomes"][test] == "failed"
    message = next(t["message"] for nodeid, t in graded["tests"].items() if nodeid.endswith(test))
    assert why in message, message


def test_summary_counts_worker_restarts_and_ignores_workspace_conftest(graded):
    summary = graded["summary"]
    assert summary["collected"] == len(graded["outcomes"]) == 10
    assert "3 failed, 7 passed" in summary["pytest_tail"], summary["pytest_tail"]
    assert summary["served"] == ["pygments_like", "shop"]  # conftest is never served, tests dirs neither
    assert summary["worker"]["starts"] == 3 and summary["worker"]["failures"] == 2
    assert summary["timed_out"] is False
    # Lazy imports in the runner cannot reach a directory the worker's uid could write to.
    assert summary["sys_path"] and not any(p.startswith(("/tmp", "/workspace")) for p in summary["sys_path"])


def test_grading_deadline_marks_the_run_timed_out(tmp_path):
    result, _ = run_runner(tmp_path, timeout_s=3, call_timeout_s=30)
    assert result["summary"]["timed_out"] is True
    assert result["outcomes"]["test_hang_fails_this_test"] == "failed"


# ------------------------------------------------------------------------------ wire format
def _no_other(value):
    raise TypeError(f"not plain: {type(value).__name__}")


def test_wire_round_trips_plain_data_with_exact_types():
    value = [
        None,
        True,
        1,
        1.0,
        "s",
        b"b",
        (1, (2,)),
        {1: "a", (2, 3): [4]},
        {5},
        frozenset({6}),
        Decimal("1.10"),
    ]
    data = wire.decode(wire.loads(wire.dumps({"v": wire.encode(value, _no_other)}))["v"], _no_other)
    assert data == value
    assert [type(x) for x in data] == [type(x) for x in value]


def test_wire_sends_subclasses_and_unknown_tags_to_the_hook():
    class Sneaky(float):
        def __eq__(self, other):
            return True

    seen = []
    wire.encode([Sneaky(1.0), True], lambda v: seen.append(type(v).__name__) or {"t": "h", "id": 1})
    assert seen == ["Sneaky"]
    with pytest.raises(wire.WireError):
        wire.decode({"v": [1]}, _no_other)  # an untagged object is never plain data
    with pytest.raises(wire.WireError):
        wire.decode({"t": "set", "v": [[1]]}, _no_other)  # unhashable member


def test_wire_caps_depth_and_size():
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(wire.WireError, match="deeper"):
        wire.encode(deep, _no_other)
    with pytest.raises(wire.WireError, match="values"):
        wire.decode([0] * (wire.MAX_ITEMS + 1), _no_other)
    with pytest.raises(wire.WireError):
        wire.loads(b"[1, 2]")
