"""File writes shared by every layer: atomic replacement of regular files, output folders checked up front,
``-`` for standard output, and strict YAML reading.

``atomic_write`` writes a temporary file in the target's folder and renames it over the target, so readers
see the old file or the whole new one. A special file (``/dev/stdout``, a FIFO, a terminal), or a link to
one, is written in place: renaming over those would replace the device or the pipe by a regular file. A
link to anything else is refused: writing through it would replace a file the user did not name, and
replacing the link would silently drop it. Every failure is a one-line ``MoesimError`` naming the path.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from moesim.errors import MoesimError

STDOUT = "-"
"""The path that means standard output (``--to -``)."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _in_place(path: Path) -> bool:
    """Whether ``path`` must be written where it is instead of replaced: an existing file that is not a
    regular file (device, FIFO, socket), or a link into /dev or /proc (a file descriptor of this process)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise MoesimError(f"{path}: cannot write ({_reason(exc)})") from None
    if stat.S_ISDIR(st.st_mode):
        raise MoesimError(f"{path}: is a folder; name a file to write")
    if not stat.S_ISREG(st.st_mode):
        return True
    return path.is_symlink() and os.path.realpath(path).startswith(("/dev/", "/proc/"))


def _refuse_link(path: Path, option: str = "") -> None:
    """A one-line error when ``path`` is a symbolic link to a regular file, or a dangling one (links to
    special files, e.g. ``/dev/stdout``, are written in place)."""
    if not path.is_symlink():
        return
    real = os.path.realpath(path)
    if real.startswith(("/dev/", "/proc/")) or (os.path.exists(real) and not os.path.isfile(real)):
        return
    where = f"{option} {path}" if option else str(path)
    raise MoesimError(f"{where}: is a symbolic link to {real}; moesim does not write through links "
                      "(name the file itself, or remove the link)")


def atomic_write(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` so readers see the old file or the whole new one, never a part.

    Missing parent folders are created. Returns ``path``.
    """
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    _refuse_link(path)
    if _in_place(path):
        try:
            with open(path, "wb") as f:
                f.write(raw)
        except OSError as exc:
            raise MoesimError(f"{path}: cannot write ({_reason(exc)})") from None
        return path
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise MoesimError(f"{folder}: cannot create this folder, a file of that name exists") from None
    except OSError as exc:
        raise MoesimError(f"{folder}: cannot create the folder ({_reason(exc)})") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise MoesimError(f"{path}: cannot write in {folder} ({_reason(exc)})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        _unlink_quietly(tmp)
        raise MoesimError(f"{path}: cannot write ({_reason(exc)})") from None
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return path


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_output(path: str | Path, data: bytes | str) -> str:
    """Write a user-named output: ``-`` is standard output, anything else goes through ``atomic_write``.
    Returns a name for messages (``standard output`` or the path)."""
    if str(path) == STDOUT:
        raw = data.encode() if isinstance(data, str) else data
        try:
            sys.stdout.flush()
            sys.stdout.buffer.write(raw)
            sys.stdout.buffer.flush()
        except BrokenPipeError:  # `... --to - | head`: the reader has what it wanted
            _silence_stdout()
        return "standard output"
    return str(atomic_write(path, data))


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def check_output_folder(path: str | Path, option: str = "--out") -> Path:
    """Check, before any work, that the command can write into folder ``path`` (created later by the writes
    if missing): a one-line error when it is a file, when a file stands where one of its folders should be,
    or when it (or the folder it would be created in) is not writable. Creates nothing."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise MoesimError(f"{option} {folder}: is a file, not a folder (name a folder to write into)")
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise MoesimError(f"{option} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "the folder is" if existing == folder else f"{existing} is"
        raise MoesimError(f"{option} {folder}: {what} not writable")
    return folder


def output_file(path: str | Path, option: str = "--to") -> str:
    """Check a file the command will write, before any work (``-`` is standard output): a one-line
    error when it is a folder or when a file stands where one of its folders should be."""
    if str(path) == STDOUT:
        return STDOUT
    target = Path(path)
    if target.is_dir():
        raise MoesimError(f"{option} {target}: is a folder; name a file (or - for standard output)")
    _refuse_link(target, option)
    for parent in target.parents:
        if parent.exists():
            if not parent.is_dir():
                raise MoesimError(f"{option} {target}: {parent} is a file, not a folder")
            break
    return str(target)


def refuse_special_file(path: str | Path, what: str) -> None:
    """A one-line error when the input ``path`` is a FIFO, a socket or a device: reading one waits for a
    writer, or never ends, instead of reading a file. A missing file is left to the reader to report."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise MoesimError(f"{path}: not a regular file (a FIFO, socket or device); give the {what} as a file")


class _StrictLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate mapping keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml_strict(text: str, source: str) -> Any:
    """Parse YAML safely, rejecting duplicate keys; errors are one line naming ``source`` and the position."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise MoesimError(f"{source}: not valid YAML{where}: {problem}") from None
