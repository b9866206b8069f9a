"""Writing the topology layer's files (diagrams, NS-3 topology files, YAML): a path that cannot be
written (a folder where a file should go, a file where a folder should go, no permission, a full
disk) is a one-line error naming the path, never a traceback."""

from __future__ import annotations

from pathlib import Path

from moesim.errors import MoesimError
from moesim.fileio import atomic_write


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def output_folder(path: str | Path, option: str = "--out") -> Path:
    """``path`` as an existing or newly made folder; a file at that path or a failed mkdir is an error."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise MoesimError(f"{option} {path}: is a file, not a folder (name a folder to write into)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MoesimError(f"{option} {path}: cannot create the folder ({_reason(exc)})") from None
    return path


def write_output(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to the file ``path`` atomically; an existing file is replaced, a folder is not."""
    path = Path(path)
    if path.is_dir():
        raise MoesimError(f"{path}: is a folder, not a file (name the file to write)")
    output_folder(path.parent, option="folder")
    try:
        return atomic_write(path, data)
    except OSError as exc:
        raise MoesimError(f"{path}: cannot write the file ({_reason(exc)})") from None
