"""Host-side path checks for file operations: everything stays under /workspace.

This is the first of two checks. It refuses absolute paths elsewhere and ``..`` that climbs out,
lexically. The in-sandbox runner then resolves symlinks (which only the container can see) and
refuses any real path outside /workspace, so a symlink the agent planted cannot redirect a read or
a write.
"""

import posixpath

from sandbox.base import PathEscapeError

WORKSPACE = "/workspace"


def workspace_path(path: str) -> str:
    """The normalised absolute form of ``path`` (relative ones are under /workspace)."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise PathEscapeError(f"invalid path {path!r}")
    full = path if path.startswith("/") else f"{WORKSPACE}/{path}"
    normalised = posixpath.normpath(full)
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    if normalised != WORKSPACE and not normalised.startswith(WORKSPACE + "/"):
        raise PathEscapeError(f"path {path!r} is outside /workspace")
    return normalised
