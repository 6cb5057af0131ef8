"""Effects of the programs that copy, move, link, delete, pack or select files: ``cp``/``install``/
``rsync``/``scp``, ``mv``, ``rm``, ``ln``, archives and compressors, ``find`` (``-delete``, and
what ``-exec`` and ``| xargs`` get: ``find_selection``), and git's working-tree commands. A copy,
move or link keeps its ``source``, so a hidden file stays hidden under its new name. Their table
is ``PLACEMENT_HANDLERS``; ``guard.normalize.effects`` dispatches on it.
"""

from __future__ import annotations

import posixpath
import re

from guard.normalize.effects_args import (
    Handler,
    effect_path,
    effects_on,
    has_flag,
    landing_paths,
    operands_of,
    option_value,
    split_names,
)
from guard.paths import absolute
from guard.types import Effect

# options that take a value, per handler (built once, not per command)
_RM_VALUES = frozenset({"-n", "--iterations", "-s", "--size"})
_ZIP_VALUES = frozenset({"-x", "-i", "-b", "-n", "-t", "-tt", "-P"})
_COMPRESS_VALUES = frozenset({"-S", "--suffix", "-o", "--output", "-T", "--threads"})
_GIT_RESTORE_VALUES = frozenset({"-s", "--source"})
_GIT_APPLY_VALUES = frozenset({"-p", "-C", "--directory", "--exclude", "--include"})
_GIT_READ_VALUES = frozenset({"-L", "-C", "--format", "--prefix", "-o", "--output"})
_GIT_READERS = frozenset({"show", "cat-file", "blame", "log", "diff", "grep", "archive", "whatchanged"})


def _copy(link: bool = False) -> Handler:
    """cp/install/rsync/scp: sources read (recursive with -r/-a), the target written, one copy per
    source (``source`` set, so a copy of a hidden file stays hidden under its new name)."""
    value_opts = frozenset(
        split_names(
            "-t -S -m -o -g --target-directory --suffix --mode --owner --group -e --rsh --exclude "
            "--include --filter -f --chmod --chown"
        )
    )

    def handle(argv: list[str], cwd: str) -> list[Effect]:
        args = argv[1:]
        name = argv[0]
        if name == "install" and has_flag(args, "d", ("--directory",)):
            return effects_on("write", operands_of(args, value_opts), cwd)
        recursive = (name in ("rsync",) and has_flag(args, "ra", ("--recursive", "--archive"))) or (
            name != "rsync" and has_flag(args, "rRa", ("--recursive", "--archive"))
        )
        operands = operands_of(args, value_opts)
        target_dir = option_value(args, ("-t", "--target-directory"))
        if target_dir is not None:
            sources, targets = operands, [target_dir]
        elif len(operands) >= 2:
            sources, targets = operands[:-1], operands[-1:]
        else:
            return effects_on("read", operands, cwd, recursive)
        as_link = link or (name == "cp" and has_flag(args, "sl", ("--symbolic-link", "--link")))
        out = effects_on("read", sources, cwd, recursive)
        deletes = name == "rsync" and any(a.startswith("--del") for a in args)
        for source in sources:
            src = effect_path(source, cwd)
            for target in targets:
                if effect_path(target, cwd) is None:
                    continue
                into = target_dir is not None or len(sources) > 1 or target.endswith("/")
                lands = landing_paths(target, source, cwd)[1:] if into else landing_paths(target, source, cwd)
                for land in lands:
                    out.append(Effect("link" if as_link else "write", land, recursive or deletes, src))
        if name == "rsync" and "--remove-source-files" in args:
            out.extend(effects_on("delete", sources, cwd, recursive))
        return out

    return handle


def _move(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    if argv[0] == "git":
        args = args[1:]
    value_opts = frozenset(["-t", "-S", "--target-directory", "--suffix"])
    operands = operands_of(args, value_opts)
    target_dir = option_value(args, ("-t", "--target-directory"))
    if target_dir is not None:
        sources, target = operands, target_dir
    elif len(operands) >= 2:
        sources, target = operands[:-1], operands[-1]
    else:
        return []
    out: list[Effect] = []
    for source in sources:
        src = effect_path(source, cwd)
        if src is None:
            continue
        out.append(Effect("move", src, True))
        out.extend(Effect("write", land, False, src) for land in landing_paths(target, source, cwd))
    return out


def _delete(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    if argv[0] == "git":
        args = args[1:]
    recursive = argv[0] != "unlink" and has_flag(args, "rR", ("--recursive",))
    return effects_on("delete", operands_of(args, _RM_VALUES), cwd, recursive)


def _link(argv: list[str], cwd: str) -> list[Effect]:
    """``ln [-s] TARGET [LINK]``: LINK is created (or replaced with -f) and points at TARGET; a
    symbolic link's relative TARGET is resolved from LINK's directory."""
    args = argv[1:]
    value_opts = frozenset(["-t", "-S", "--target-directory", "--suffix"])
    operands = operands_of(args, value_opts)
    symbolic = has_flag(args, "s", ("--symbolic",))
    target_dir = option_value(args, ("-t", "--target-directory"))
    if target_dir is not None:
        pairs = [(t, f"{target_dir.rstrip('/')}/{posixpath.basename(t)}") for t in operands]
    elif len(operands) == 1:
        pairs = [(operands[0], posixpath.basename(operands[0].rstrip("/")) or operands[0])]
    elif len(operands) >= 2:
        last = operands[-1]
        many = len(operands) > 2 or last.endswith("/")
        pairs = [(t, f"{last.rstrip('/')}/{posixpath.basename(t)}" if many else last) for t in operands[:-1]]
    else:
        return []
    out: list[Effect] = []
    for target, link in pairs:
        where = effect_path(link, cwd)
        if where is None:
            continue
        base = posixpath.dirname(where) if symbolic else cwd
        out.append(Effect("link", where, False, absolute(target, base)))
    return out


def _tar(argv: list[str], cwd: str) -> list[Effect]:
    """Creating reads the members (recursively) and writes the archive; extracting reads the
    archive and writes into ``-C DIR`` (or the working directory): that directory itself is
    changed, not everything in it (what the archive holds is unknown)."""
    args = argv[1:]
    first = args[0] if args else ""
    mode_letters = (
        first
        if first and not first.startswith("-")
        else "".join(a[1:] for a in args if re.fullmatch(r"-[A-Za-z]+", a))
    )
    archive = option_value(args, ("-f", "--file"))
    if archive is None and first and not first.startswith("-") and "f" in first and len(args) > 1:
        archive = args[1]
    directory = option_value(args, ("-C", "--directory")) or cwd
    opts = frozenset(
        split_names(
            "-f -C -T -X -b -H --file --directory --files-from --exclude-from --exclude --format -I "
            "--use-compress-program"
        )
    )
    members = [
        m
        for m in operands_of(args[1:] if first and not first.startswith("-") else args, opts)
        if m != archive
    ]
    long = [a for a in args if a.startswith("--")]
    extract = "x" in mode_letters or "--extract" in long or "--get" in long
    create = (
        "c" in mode_letters
        or "r" in mode_letters
        or "u" in mode_letters
        or "--create" in long
        or "--append" in long
    )
    out: list[Effect] = []
    if extract:
        out.extend(effects_on("read", [archive] if archive else [], cwd))
        target = effect_path(directory, cwd)
        if target is not None:
            out.append(Effect("write", target, False, absolute(archive, cwd) if archive else None))
        out.extend(
            Effect("write", absolute(m, directory), True) for m in members if effect_path(m, directory)
        )
    elif create:
        out.extend(effects_on("read", members, directory, True))
        if archive:
            sources = [absolute(m, directory) for m in members]
            out.extend(
                Effect("write", p, False, sources[0] if len(sources) == 1 else None)
                for p in [effect_path(archive, cwd)]
                if p
            )
    else:
        out.extend(effects_on("read", [archive] if archive else [], cwd))
    return out


def _zip(argv: list[str], cwd: str) -> list[Effect]:
    args = argv[1:]
    operands = operands_of(args, _ZIP_VALUES)
    if argv[0] == "unzip":
        archive = operands[:1]
        out = effects_on("read", archive, cwd)
        if not has_flag(args, "lpt", ()):
            target = option_value(args, ("-d",))
            where = effect_path(target or ".", cwd)
            if where is not None:
                out.append(Effect("write", where, False, absolute(archive[0], cwd) if archive else None))
        return out
    recursive = has_flag(args, "r", ("--recurse-paths",))
    out = effects_on("read", operands[1:], cwd, recursive)
    out.extend(effects_on("write", operands[:1], cwd))
    return out


def _compress(argv: list[str], cwd: str) -> list[Effect]:
    """gzip/bzip2/xz/zstd FILE: FILE is read and, unless kept or sent to stdout, replaced."""
    args = argv[1:]
    operands = operands_of(args, _COMPRESS_VALUES)
    out = effects_on("read", operands, cwd)
    keeps = has_flag(args, "kcltL", ("--keep", "--stdout", "--to-stdout", "--list", "--test"))
    if not keeps:
        out.extend(effects_on("delete", operands, cwd))
    return out


def _find(argv: list[str], cwd: str) -> list[Effect]:
    """Start directories are listed recursively; ``-delete`` deletes what the expression selects
    (a ``-name`` pattern narrows it to ``START/**/PATTERN``)."""
    starts: list[str] = []
    for arg in argv[1:]:
        if arg.startswith(("-", "(", "!", ")")):
            break
        starts.append(arg)
    starts = starts or ["."]
    named = any(a in ("-name", "-iname", "-path", "-ipath", "-wholename") for a in argv)
    # with a name test only what matches is listed; without one, everything below each start
    out = (
        [Effect("list", g) for g in find_selection(argv, cwd)]
        if named
        else effects_on("list", starts, cwd, True)
    )
    if "-delete" in argv:
        for glob in find_selection(argv, cwd):
            out.append(Effect("delete", glob, False))
    return out


def find_selection(argv: list[str], cwd: str) -> list[str]:
    """What a ``find`` expression selects, as globs: ``START/**/NAME`` for ``-name NAME``/
    ``-iname``, ``-path`` patterns as given, else everything under each start (``START/**``)."""
    starts: list[str] = []
    for arg in argv[1:]:
        if arg.startswith(("-", "(", "!", ")")):
            break
        starts.append(arg)
    names = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-name", "-iname")]
    paths = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-path", "-wholename", "-ipath")]
    out: list[str] = []
    for start in starts or ["."]:
        root = absolute(start, cwd).rstrip("/")
        if names:
            out.extend(f"{root}/**/{name}" for name in names)
        elif paths:
            out.extend(absolute(p, cwd) for p in paths)
        else:
            out.append(f"{root}/**")
    return out


def _git(argv: list[str], cwd: str) -> list[Effect]:
    """The git sub-commands that change or read working-tree paths (``checkout``/``restore`` of
    paths, ``rm``, ``mv``, ``apply``'s patch file); history reads are ``guard.repo``'s business."""
    args = argv[1:]
    if not args:
        return []
    sub, rest = args[0], args[1:]
    if sub == "mv":
        return _move(argv, cwd)
    if sub == "rm":
        return _delete(argv, cwd)
    if sub in ("checkout", "restore"):
        if "--" in rest:
            paths = rest[rest.index("--") + 1 :]
        elif sub == "restore":
            paths = operands_of(rest, _GIT_RESTORE_VALUES)
        else:
            return []
        return effects_on("write", paths, cwd)
    if sub == "apply" or sub == "am":
        return effects_on("read", operands_of(rest, _GIT_APPLY_VALUES), cwd)
    if sub in _GIT_READERS:
        # a file's content from the object store: ``REV:path`` words and paths after ``--``
        paths = rest[rest.index("--") + 1 :] if "--" in rest else []
        paths += [w.split(":", 1)[1] for w in rest if ":" in w and not w.startswith("-") and "://" not in w]
        if sub in ("blame", "archive") and "--" not in rest:
            paths += operands_of(rest, _GIT_READ_VALUES)[1 if sub == "archive" else 0 :]
        root = cwd if not cwd.startswith("/workspace") else "/workspace"
        return effects_on("read", [p for p in paths if p], root)
    return []


PLACEMENT_HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(["cp", "install", "rsync", "scp"], _copy()),
    "mv": _move,
    **dict.fromkeys(["rm", "unlink", "shred", "rmdir", "srm"], _delete),
    "ln": _link,
    **dict.fromkeys(["tar", "bsdtar", "gtar"], _tar),
    **dict.fromkeys(["zip", "unzip"], _zip),
    **dict.fromkeys(
        ["gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "zstd", "unzstd", "lzma", "compress", "lz4"],
        _compress,
    ),
    "find": _find,
    "git": _git,
}
