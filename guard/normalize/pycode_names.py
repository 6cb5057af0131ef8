"""The Python names the code reader knows by meaning (``guard.normalize.pycode``).

Calls that run shell text or argv, execute code, exit, print, or check something; calls that
read, write, move or delete files (``os``, ``shutil``, ``pathlib``, loaders such as
``pandas.read_csv``); plain names whose assignment is worth a fact; calls too common to record.
Names are matched after import aliases are resolved (``from os import system as s`` is
``os.system``).
"""

from __future__ import annotations

SHELL_CALLS = frozenset(
    {
        "os.system",
        "os.popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        "commands.getoutput",
        "pty.spawn",
        "asyncio.create_subprocess_shell",
        "asyncio.create_subprocess_exec",
        "os.execv",
        "os.execvp",
        "os.execvpe",
        "os.execl",
        "os.execlp",
        "os.spawnv",
        "os.spawnvp",
        "os.posix_spawn",
        "os.posix_spawnp",
    }
)
COPY_CALLS = frozenset(
    {
        "shutil.copy",
        "shutil.copy2",
        "shutil.copyfile",
        "shutil.move",
        "shutil.copytree",
        "os.rename",
        "os.replace",
    }
)
# file-operation calls: the op on their first argument (copy/move/link take a second one)
FILE_CALLS: dict[str, str] = {
    **dict.fromkeys(("os.remove", "os.unlink", "os.rmdir", "os.removedirs"), "delete"),
    "shutil.rmtree": "delete*",
    **dict.fromkeys(("os.rename", "os.replace", "os.renames", "shutil.move"), "move"),
    **dict.fromkeys(("os.chmod", "os.lchmod", "os.chown", "os.lchown", "os.chflags", "shutil.chown"), "mode"),
    **dict.fromkeys(("os.truncate", "os.mkdir", "os.makedirs", "os.mkfifo", "os.utime"), "write"),
    **dict.fromkeys(("os.listdir", "os.scandir", "glob.glob", "glob.iglob"), "list"),
    **dict.fromkeys(("os.walk", "os.fwalk"), "list*"),  # ``*``: the whole tree below
    **dict.fromkeys(
        (
            "shutil.copy",
            "shutil.copy2",
            "shutil.copyfile",
            "shutil.copytree",
            "shutil.copymode",
            "shutil.copystat",
        ),
        "copy",
    ),
    **dict.fromkeys(("os.symlink", "os.link"), "link"),
    **dict.fromkeys(
        (
            "json.load",
            "pickle.load",
            "numpy.load",
            "numpy.loadtxt",
            "numpy.genfromtxt",
            "np.load",
            "np.loadtxt",
            "pandas.read_csv",
            "pandas.read_json",
            "pandas.read_excel",
            "pandas.read_parquet",
            "pandas.read_table",
            "pd.read_csv",
            "pd.read_json",
            "pd.read_excel",
            "pd.read_parquet",
            "pd.read_table",
            "linecache.getline",
            "linecache.getlines",
            "tomllib.load",
            "configparser.read",
            "zipfile.ZipFile",
            "tarfile.open",
            "runpy.run_path",
            "imp.load_source",
            "os.stat",
            "os.path.exists",
            "os.path.isfile",
            "os.path.getsize",
            "filecmp.cmp",
            "difflib.unified_diff",
        ),
        "read",
    ),
    **dict.fromkeys(("fileinput.input", "fileinput.FileInput"), "read"),
}
# pathlib methods: the op on the receiver's path
PATH_METHODS: dict[str, str] = {
    **dict.fromkeys(("read_text", "read_bytes", "stat", "exists", "is_file", "readlink"), "read"),
    **dict.fromkeys(("write_text", "write_bytes", "touch", "mkdir"), "write"),
    **dict.fromkeys(("unlink", "rmdir"), "delete"),
    **dict.fromkeys(("rename", "replace"), "move"),
    **dict.fromkeys(("symlink_to", "hardlink_to", "link_to"), "link"),
    **dict.fromkeys(("chmod", "lchmod", "chown"), "mode"),
    **dict.fromkeys(("iterdir", "glob"), "list"),
    "rglob": "list*",
    "open": "open",
}
PRINTS = frozenset({"print", "sys.stdout.write", "builtins.print", "sys.stderr.write"})
# calls that run or are checks: code that calls them is not a bare printed verdict
CHECKING_CALLS = (
    "subprocess.",
    "os.system",
    "os.popen",
    "pytest.",
    "unittest.",
    "doctest.",
    "self.assert",
    "assert",
    "numpy.testing",
    "np.testing",
    "math.isclose",
)
EXEC_CALLS = frozenset({"exec", "eval", "compile", "builtins.exec", "builtins.eval"})
EXIT_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit", "os.abort", "builtins.exit", "pytest.exit"})
# reading frames to find the caller's values; ``f_globals["__name__"]`` (module names, as logging
# and warnings helpers do) is not among them
FRAME_ATTRS = frozenset({"f_back", "f_locals", "tb_frame", "gi_frame"})

# plain-name assignments worth a fact (every local variable would only be noise)
WATCHED_NAMES = frozenset(
    {
        "pytestmark",
        "collect_ignore",
        "collect_ignore_glob",
        "__eq__",
        "__ne__",
        "__hash__",
        "AssertionError",
        "__builtins__",
        "__import__",
        "exit",
        "quit",
        "open",
        "print",
        "input",
    }
)
TRIVIAL_CALLS = frozenset(
    [
        "len",
        "int",
        "str",
        "float",
        "bool",
        "print",
        "range",
        "isinstance",
        "issubclass",
        "list",
        "dict",
        "set",
        "tuple",
        "enumerate",
        "zip",
        "min",
        "max",
        "sum",
        "sorted",
        "reversed",
        "repr",
        "type",
        "super",
        "hasattr",
        "any",
        "all",
        "abs",
        "round",
        "iter",
        "next",
        "map",
        "filter",
        "id",
        "hash",
        "format",
        "divmod",
        "ord",
        "chr",
        "bytes",
        "bytearray",
        "frozenset",
        "object",
        "vars",
        "dir",
        "callable",
    ]
)
