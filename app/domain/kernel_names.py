"""The kernels a request may name: the server's own list, never a filesystem path. A session's
baseline and the scripted agent's `submit: {path: ...}` pick one of these names; anything
else (an absolute path, `../`, a symlink, a file the server does not ship) is refused before
a byte is read. The names are the problem's baseline and the gallery kernels, spelled as
their place in the project (`kernels/attention/baseline.cu`), plus short aliases
(`baseline`, `gallery/fa2-mma-a`). Candidate sources travel as text (`source`)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from app.settings import PROJECT_ROOT

ATTENTION = PROJECT_ROOT / "kernels" / "attention"
BASELINE = "kernels/attention/baseline.cu"


class UnknownKernel(ValueError):
    """A name that is not on the server's list."""


@lru_cache(maxsize=1)
def kernel_names() -> dict[str, Path]:
    """name -> file, for every kernel a request may name (regular files inside the project's
    kernels folder; a symlink is not listed)."""
    found: dict[str, Path] = {}
    root = ATTENTION.resolve()

    def add(path: Path, *names: str) -> None:
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root):
            return
        for name in names:
            found[name] = path

    add(ATTENTION / "baseline.cu", BASELINE, "baseline")
    for path in sorted((ATTENTION / "gallery").glob("*.cu")):
        add(path, path.relative_to(PROJECT_ROOT).as_posix(), f"gallery/{path.stem}")
    return found


def kernel_path(name: str, what: str = "kernel") -> Path:
    """The file of a listed kernel; UnknownKernel for anything else."""
    path = kernel_names().get(name) if isinstance(name, str) else None
    if path is None:
        shown = name if len(str(name)) <= 120 else f"{str(name)[:120]}..."
        raise UnknownKernel(f"the {what} kernel does not exist: {shown!r} is not a kernel this server offers; "
                            f"name one of {', '.join(listed_names())}")
    return path


def kernel_source(name: str) -> str | None:
    """A listed kernel's text, or None for a name not on the list (a stored row from before
    names, or an imported trace, never opens a path)."""
    try:
        return kernel_path(name).read_text()
    except UnknownKernel:
        return None


def listed_names() -> list[str]:
    """The short names, for messages and the API."""
    return [n for n in kernel_names() if not n.startswith("kernels/")]
