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

from tasks.grading import isolated as grading
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
                "tests_left": os.path.exists("/GRADER/tests/test_shop.py")
                and os.path.getsize("/GRADER/tests/test_shop.py") > 0,
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


def run_runner(
    tmp_path: Path,
    timeout_s: float = 60,
    call_timeout_s: float = 2,
    workspace: dict | None = None,
    hidden: str = HIDDEN,
    pristine: list | None = None,
) -> tuple[dict, str]:
    root, workspace_dir = tmp_path / "grader", tmp_path / "workspace"
    (root / "lib").mkdir(parents=True)
    (root / "tests").mkdir()
    for name, source in grading.INSIDE_FILES.items():
        shutil.copy(source, root / name)
    (root / "pytest.ini").write_text(grading.GRADER_INI)
    (root / "tests" / "test_shop.py").write_text(textwrap.dedent(hidden))
    for name, text in (WORKSPACE if workspace is None else workspace).items():
        path = workspace_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).replace("/GRADER", str(root)))
    config = {
        "nonce": NONCE,
        "tests": [str(root / "tests")],
        "ini": str(root / "pytest.ini"),
        "rootdir": str(root / "tests"),
        "lib": str(root / "lib"),
        "workspace": str(workspace_dir),
        "timeout_s": timeout_s,
        "call_timeout_s": call_timeout_s,
        **({"pristine": pristine} if pristine is not None else {}),
    }
    (root / "config.json").write_text(json.dumps(config))
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-B", str(root / "runner.py"), str(root / "config.json")],
        capture_output=True,
        text=True,
        timeout=timeout_s + 30,
        cwd=workspace_dir,
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


# ------------------------------------------------------------------ the proxy model, widened
# Shapes taken from real suites (more-itertools, packaging, attrs, webcolors): values that are not
# plain data as arguments, protocols on library objects, random seeds, shared module state.
WORKSPACE_PROTOCOLS = {
    "lib/__init__.py": """
        import random
        from collections import namedtuple
        from fractions import Fraction

        REGISTRY = {}
        LIMIT = 3
        RGB = namedtuple("RGB", "red green blue")


        class Version:
            def __init__(self, text):
                self.parts = tuple(int(p) for p in text.split("."))

            def __eq__(self, other):
                return isinstance(other, Version) and self.parts == other.parts

            def __lt__(self, other):
                return self.parts < other.parts

            def __hash__(self):
                return hash(self.parts)


        class Resource:
            def __init__(self):
                self.log = []

            def __enter__(self):
                self.log.append("enter")
                return self

            def __exit__(self, exc_type, exc, tb):
                self.log.append(exc_type.__name__ if exc_type else "clean")
                return exc_type is KeyError


        class Retryable(Exception):
            pass


        def take(iterable, n):
            out = []
            for item in iterable:
                if len(out) == n:
                    break
                out.append(item)
            return out


        def first_true(iterable, pred):
            return next((x for x in iterable if pred(x)), None)


        def halve(value):
            return value / 2 if isinstance(value, Fraction) else None


        def size(obj):
            return len(obj), obj.name


        def raise_if(exc_class, flag):
            if flag:
                raise exc_class("raised by the library")
            return exc_class.__name__


        def call(fn, *args):
            return fn(*args)


        def double(x):
            return 2 * x


        def register(name, value):
            REGISTRY[name] = value


        def capped(n):
            return min(n, LIMIT)


        def roll():
            return random.random()


        def color():
            return RGB(255, 0, 0)


        def retry(fn, exceptions):
            try:
                return fn()
            except exceptions:
                return "caught"


        def counter():
            n = 0
            while True:
                yield n
                n += 1
    """,
}

HIDDEN_PROTOCOLS = """
    import random
    from fractions import Fraction

    import pytest

    import lib


    class Sized:
        name = "sized"

        def __len__(self):
            return 7


    class LocalError(ValueError):
        pass


    def test_range_generator_and_iterators_go_lazily():
        assert lib.take(range(10**12), 3) == [0, 1, 2]
        pulled = []

        def gen():
            for i in range(100):
                pulled.append(i)
                yield i

        assert lib.take(gen(), 2) == [0, 1]
        assert pulled == [0, 1, 2]  # lazily: one item past the two taken, never the whole range
        assert lib.first_true(iter([1, 4, 9]), lambda x: x > 3) == 4


    def test_fractions_and_test_local_objects():
        assert lib.halve(Fraction(1, 3)) == Fraction(1, 6)
        assert lib.size(Sized()) == (7, "sized")


    def test_exception_classes_as_arguments():
        assert lib.raise_if(ValueError, False) == "ValueError"
        with pytest.raises(LocalError, match="raised by the library"):
            lib.raise_if(LocalError, True)
        with pytest.raises(lib.Retryable):
            lib.raise_if(lib.Retryable, True)

        def boom():
            raise LocalError("x")

        assert lib.retry(boom, (LocalError, KeyError)) == "caught"


    def test_module_level_function_as_argument():
        assert lib.call(lib.double, 21) == 42
        from lib import double

        assert lib.call(double, 4) == 8


    def test_next_with_hash_and_comparisons_on_library_objects():
        numbers = lib.counter()
        assert next(numbers) == 0 and next(numbers) == 1
        assert lib.Version("1.2") == lib.Version("1.2") and lib.Version("1.2") != lib.Version("1.3")
        assert lib.Version("1.2") < lib.Version("1.10")
        assert len({lib.Version("1.0"), lib.Version("1.0"), lib.Version("2.0")}) == 2
        resource = lib.Resource()
        with resource:
            pass
        with resource:
            raise KeyError("suppressed by the library's __exit__")
        assert resource.log == ["enter", "clean", "enter", "KeyError"]
        assert lib.color() == (255, 0, 0) and lib.color().red == 255
        assert isinstance(lib.Version("1"), lib.Version)


    def test_random_seed_seeds_the_worker_too():
        random.seed(1234)
        first = lib.roll()
        random.seed(1234)
        assert lib.roll() == first


    def test_module_constants_are_shared_not_copied(monkeypatch):
        lib.register("a", 1)
        lib.REGISTRY["b"] = 2
        assert lib.REGISTRY == {"a": 1, "b": 2} and "b" in lib.REGISTRY
        monkeypatch.setattr(lib, "LIMIT", 10)
        assert lib.capped(7) == 7


    def test_monkeypatch_is_undone():
        assert lib.capped(7) == 3


    def test_import_module_gets_the_workspace_module():
        import importlib

        assert importlib.import_module("lib").double(2) == 4
"""


def test_proxy_model_carries_real_test_shapes(tmp_path):
    result, _ = run_runner(tmp_path, workspace=WORKSPACE_PROTOCOLS, hidden=HIDDEN_PROTOCOLS)
    failed = {name: t["message"] for name, t in result["tests"].items() if t["outcome"] != "passed"}
    assert failed == {}
    assert len(result["outcomes"]) == 9


def test_callbacks_cannot_reach_a_tests_globals(tmp_path):
    workspace = {
        "spy/__init__.py": """
            def peek(fn):
                leaks = []
                for name in ("__globals__", "__code__", "__closure__"):
                    try:
                        leaks.append(getattr(fn, name))
                    except AttributeError:
                        pass
                return len(leaks)


            def frame(gen):
                try:
                    return gen.gi_frame.f_globals["SECRET"]
                except AttributeError:
                    return "blocked"
        """,
    }
    hidden = """
        import spy

        SECRET = 42


        def test_no_globals():
            assert spy.peek(lambda: SECRET) == 0


        def test_no_frames():
            def gen():
                yield SECRET

            assert spy.frame(gen()) == "blocked"
    """
    result, _ = run_runner(tmp_path, workspace=workspace, hidden=hidden)
    assert set(result["outcomes"].values()) == {"passed"}, result["tests"]


def test_a_tests_class_may_derive_from_a_workspace_class(tmp_path):
    workspace = {
        "handlers/__init__.py": """
            class Handler:
                def __init__(self, prefix):
                    self.prefix = prefix
                    self.seen = []

                def handle(self, item):
                    return self.prefix + str(item)

                def process(self, items):
                    out = [self.handle(item) for item in items]
                    self.seen.extend(out)
                    return out


            def run(handler, items):
                return handler.process(items), isinstance(handler, Handler)


            def keep(handler):
                return handler
        """,
    }
    hidden = """
        import handlers


        class Shouting(handlers.Handler):
            def __init__(self, prefix, factor):
                super().__init__(prefix)
                self.factor = factor

            def handle(self, item):
                return super().handle(item).upper() * self.factor


        def test_overrides_run_here_and_the_base_runs_there():
            shouting = Shouting("x", 2)
            assert shouting.process(["a"]) == ["XAXA"]
            assert shouting.seen == ["XAXA"]  # set by the workspace's code, read here
            assert handlers.run(shouting, ["b"]) == (["XBXB"], True)
            assert handlers.keep(shouting) is shouting
            assert isinstance(shouting, handlers.Handler) and isinstance(shouting, Shouting)


        def test_without_overrides_it_is_the_base():
            class Plain(handlers.Handler):
                pass

            assert Plain("p").process([1]) == ["p1"]
    """
    result, _ = run_runner(tmp_path, workspace=workspace, hidden=hidden)
    assert set(result["outcomes"].values()) == {"passed"}, result["tests"]


def test_workspace_cannot_shadow_what_tests_use_to_check(tmp_path):
    """Only the code under test is served: not the standard library, pytest, the grader's helpers,
    nor an image package the pristine workspace did not have (a test may compute expected values
    with it). A package the pristine workspace has is served even though the image ships it."""
    fake = "def median(values):\n    return 'rigged'\n"
    workspace = {
        "stats.py": fake,
        "statistics.py": fake,
        "rlguard_checks.py": "def same(a, b):\n    return True\n",
        "iniconfig/__init__.py": "RIGGED = True\n",
        "packaging/__init__.py": "RIGGED = True\n",
    }
    hidden = """
        import statistics

        import iniconfig
        import packaging
        import stats
        from rlguard_checks import same


        def test_helpers_are_the_images():
            assert stats.median([1, 2, 3]) == "rigged"  # the code under test is the workspace's
            assert statistics.median([1, 2, 3]) == 2
            assert not same(1, 2)
            assert not hasattr(iniconfig, "RIGGED")
            assert packaging.RIGGED is True
    """
    result, _ = run_runner(tmp_path, workspace=workspace, hidden=hidden, pristine=["packaging", "stats"])
    assert result["outcomes"] == {"test_helpers_are_the_images": "passed"}, result["tests"]
    assert result["summary"]["served"] == ["packaging", "stats"]
