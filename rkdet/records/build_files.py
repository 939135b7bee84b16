"""The files of a build folder that may be sent to a board: regular files inside the folder, named by its manifest.

Why its own module: a build folder is input (a colleague's, a CI artefact), and a push copies host bytes
to another machine. So nothing is pushed by walking the folder: the golden inputs are exactly the ones
the manifest lists (`inputs.golden`), each opened below the folder one component at a time with
`O_NOFOLLOW` (a symlinked file, a symlinked `golden/` or `golden/inputs/` is refused, never followed),
`O_NONBLOCK` and `fstat` (a FIFO or device is refused, never waited on), its `.npy` header and size
checked, its tensor hashed (`output_hash`, the manifest's `tensor`) while it is copied into a private
staging folder: the board is sent the very bytes that were checked, and only after all of them passed.
Every other file a push sends (`model.rknn`, `model.io.json`, `model.onnx`, the emulator's stand-in and
`golden/simulator/`) goes through `regular_file` / `regular_tree` first. Deploy and the on-board
bisection call this; any refusal is one line naming the file, exit 2, before the build's first byte is sent.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rkdet.errors import InputError
from rkdet.records.manifest import Manifest

MAX_GOLDEN_INPUT = 256 << 20  # bytes of one golden input .npy (a 4K RGB frame is 25 MiB)
MAX_TREE_FILES = 100_000  # files under a pushed folder (golden/simulator)
_NPY_MAGIC = b"\x93NUMPY"
# numeric dtypes as numpy spells them (`dtype.str`, which `output_hash` hashes): no objects, no records
_PLAIN_DESCR = re.compile(r"\|[biu]1|[<>][iuf](2|4|8)")
_CHUNK = 1 << 20
_O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_O_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
ADVICE = "a build folder sends only regular files inside it that its manifest names; re-run rkdet convert"


def _kind(mode: int) -> str:
    from rkdet.records.io import kind

    return kind(mode)


def _parts(rel: str) -> list[str]:
    parts = PurePosixPath(rel).parts
    if not parts or any(p in ("", ".", "..", "/") for p in parts):
        raise InputError(f"{rel}: not a plain relative path inside the build folder")
    return list(parts)


@contextmanager
def open_inside(folder: Path, rel: str, advice: str = ADVICE) -> Iterator[int]:
    """A read descriptor of `folder/rel`, opened one component at a time without following a symlink
    (every folder below `folder` a real folder, the file a regular file, O_NONBLOCK: a FIFO never
    blocks). `folder` itself is the path the user named and is opened as given."""
    *dirs, name = _parts(rel)
    where = Path(folder, *dirs, name)
    with _dirs(folder, dirs, advice) as dfd:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            raise InputError(f"{where}: missing; {advice}") from None
        except OSError as err:
            raise InputError(f"{where}: cannot read ({err.strerror}); {advice}") from None
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{where}: is {_kind(st.st_mode)}, not a regular file; {advice}")
        try:
            fd = os.open(name, _O_READ, dir_fd=dfd)
        except OSError as err:
            raise InputError(f"{where}: cannot open ({err.strerror}); {advice}") from None
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(now.st_mode):
                raise InputError(f"{where}: changed while it was opened; {advice}")
            yield fd
        finally:
            os.close(fd)


def regular_file(folder: Path, rel: str, sha256: str | None = None, field: str = "sha256") -> Path:
    """`folder/rel` when it is a regular file inside the folder (no symlink on the way) and, if given,
    its sha256 is the manifest's; one line naming the file otherwise."""
    with open_inside(folder, rel) as fd:
        if sha256 is not None:
            digest = hashlib.sha256()
            while chunk := os.read(fd, _CHUNK):
                digest.update(chunk)
            if digest.hexdigest() != sha256:
                raise InputError(f"{Path(folder) / rel}: sha256 {digest.hexdigest()[:16]}… is not the manifest's "
                                 f"{field} {sha256[:16]}…; the build folder was changed after rkdet convert, re-run it")
    return Path(folder) / rel


def regular_tree(folder: Path, rel: str) -> list[str]:
    """The relative paths of every file under `folder/rel` (a real folder inside the build folder):
    each must be a regular file or a real folder; a symlink, FIFO, device or socket is one line."""
    found: list[str] = []
    with _dirs(folder, _parts(rel)) as top:
        _walk(Path(folder) / rel, top, "", found)
    return found


@contextmanager
def _dirs(folder: Path, parts: list[str], advice: str = ADVICE) -> Iterator[int]:
    """A descriptor of `folder/parts...`, each part a real folder (never a symlink followed)."""
    try:
        fds = [os.open(folder, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))]
    except OSError as err:
        raise InputError(f"{folder}: cannot open the build folder ({err.strerror})") from None
    where = Path(folder)
    try:
        for part in parts:
            where = where / part
            try:
                st = os.stat(part, dir_fd=fds[-1], follow_symlinks=False)
            except FileNotFoundError:
                raise InputError(f"{where}: missing; {advice}") from None
            if not stat.S_ISDIR(st.st_mode):
                raise InputError(f"{where}: is {_kind(st.st_mode)}, not a folder; {advice}")
            try:
                fds.append(os.open(part, _O_DIR, dir_fd=fds[-1]))
            except OSError as err:
                raise InputError(f"{where}: cannot open ({err.strerror}); {advice}") from None
        yield fds[-1]
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _walk(where: Path, dfd: int, prefix: str, found: list[str]) -> None:
    for name in sorted(os.listdir(dfd)):
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        rel = f"{prefix}{name}"
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _O_DIR, dir_fd=dfd)
            try:
                _walk(where, sub, rel + "/", found)
            finally:
                os.close(sub)
        elif stat.S_ISREG(st.st_mode):
            found.append(rel)
            if len(found) > MAX_TREE_FILES:
                raise InputError(f"{where}: more than {MAX_TREE_FILES} files; {ADVICE}")
        else:
            raise InputError(f"{where / rel}: is {_kind(st.st_mode)}, not a regular file; {ADVICE}")


@dataclass(frozen=True)
class GoldenInput:
    """One golden input the manifest names: `golden/inputs/<name>.npy` and the hash of its tensor."""

    name: str
    tensor: str

    @property
    def file(self) -> str:
        return f"{self.name}.npy"


def golden_inputs(folder: Path, manifest: Manifest) -> tuple[GoldenInput, ...]:
    """The golden inputs `manifest.json` lists (`inputs.golden`: a name or file stem and a tensor hash),
    each a plain file name, each once; one line naming the manifest and the entry otherwise."""
    where = Path(folder) / "manifest.json"
    out: list[GoldenInput] = []
    seen: set[str] = set()
    for i, rec in enumerate(manifest.inputs.golden):
        name, tensor = rec.stem, rec.tensor
        bad = (not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(".")
               or any(ord(c) < 32 or ord(c) == 127 for c in name) or len(f"{name}.npy".encode("utf-8", "replace")) > 255)
        if bad:
            raise InputError(f"{where}: inputs.golden[{i}] names {name!r}, not a plain file name; {ADVICE}")
        if tensor is None or len(tensor) != 64 or any(c not in "0123456789abcdef" for c in tensor):
            raise InputError(f"{where}: inputs.golden[{i}].tensor is not 64 lowercase hex; {ADVICE}")
        if name in seen:
            raise InputError(f"{where}: inputs.golden names {name!r} twice; {ADVICE}")
        seen.add(name)
        out.append(GoldenInput(name, tensor))
    return tuple(out)


def stage_golden_inputs(folder: Path, manifest: Manifest, dest: Path) -> Path:
    """Copy the golden inputs the manifest names into `dest` (a fresh private folder), each checked while
    it is read: a regular file inside the folder, a plain `.npy` (no pickled objects, C order, as many data
    bytes as its header declares, at most MAX_GOLDEN_INPUT), whose tensor hashes as the manifest's. The
    board gets `dest`: the bytes that were checked, nothing else."""
    dest = Path(dest)
    with _dirs(folder, ["golden", "inputs"]):  # a real folder, even when the manifest names no input
        pass
    dest.mkdir(mode=0o700)
    for gold in golden_inputs(folder, manifest):
        rel = f"golden/inputs/{gold.file}"
        with open_inside(folder, rel) as fd:
            data = _read_npy(Path(folder) / rel, fd)
        digest = _tensor_hash(Path(folder) / rel, data)
        if digest != gold.tensor:
            raise InputError(f"{Path(folder) / rel}: its tensor hashes {digest[:16]}…, not the manifest's "
                             f"{gold.tensor[:16]}…; the build folder was changed after rkdet convert, re-run it")
        fd_out = os.open(dest / gold.file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd_out, "wb") as f:
            f.write(data)
    return dest


def _read_npy(path: Path, fd: int, advice: str = ADVICE) -> bytes:
    size = os.fstat(fd).st_size
    if size > MAX_GOLDEN_INPUT:
        raise InputError(f"{path}: {size} bytes, over the {MAX_GOLDEN_INPUT >> 20} MiB an input may have; {advice}")
    chunks, got = [], 0
    while got <= size and (chunk := os.read(fd, min(_CHUNK, size + 1 - got))):
        chunks.append(chunk)
        got += len(chunk)
    if got != size:
        raise InputError(f"{path}: changed while it was read; {advice}")
    return b"".join(chunks)


def _npy_header(path: Path, data: bytes, advice: str = ADVICE) -> tuple[str, tuple[int, ...], bytes]:
    """(dtype.str, shape, data bytes) of a plain C-order numeric .npy, from its header: no unpickling,
    no array is built; one line naming the file otherwise."""
    bad = f"{path}: not a plain .npy array (rkdet writes C-order numeric arrays); {advice}"
    if not data.startswith(_NPY_MAGIC) or len(data) < 10:
        raise InputError(bad)
    major = data[6]
    if major == 1:
        hlen, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        hlen, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise InputError(bad)
    if hlen > 65536 or start + hlen > len(data):
        raise InputError(bad)
    try:
        header = ast.literal_eval(data[start:start + hlen].decode("latin1"))
        descr, shape, fortran = header["descr"], header["shape"], header["fortran_order"]
    except (ValueError, SyntaxError, KeyError, TypeError, MemoryError, RecursionError):
        raise InputError(bad) from None
    if (not isinstance(descr, str) or not _PLAIN_DESCR.fullmatch(descr) or fortran is not False or not isinstance(shape, tuple)
            or not all(type(d) is int and 0 <= d <= MAX_GOLDEN_INPUT for d in shape) or len(shape) > 32):
        raise InputError(bad)
    count = int(descr[2:])
    for d in shape:
        count *= d
        if count > MAX_GOLDEN_INPUT:
            raise InputError(bad)
    body = data[start + hlen:]
    if len(body) != count:
        raise InputError(f"{path}: its header declares {count} data bytes, the file holds {len(body)}; {advice}")
    return descr, shape, body


def _tensor_hash(path: Path, data: bytes) -> str:
    """`output_hash` of the .npy's tensor (sha256 of dtype.str | shape | C-order bytes), from its header
    and bytes: no unpickling, no array is built."""
    descr, shape, body = _npy_header(path, data)
    digest = hashlib.sha256((descr + "|" + ",".join(str(d) for d in shape) + "|").encode("ascii"))
    digest.update(body)
    return digest.hexdigest()


INPUTS_ADVICE = "an inputs folder holds only <name>.npy files of the tensor the build is fed (rkdet accuracy --save-inputs writes one)"


def stage_input_folder(folder: Path, dest: Path, descr: str, shape: tuple[int, ...]) -> tuple[Path, int]:
    """`deploy --inputs FOLDER`: copy the folder's `<name>.npy` files into `dest` (a fresh private folder),
    each checked as it is read, as golden inputs are: a regular file (no symlink followed, no FIFO waited
    on), a plain `.npy` of at most MAX_GOLDEN_INPUT bytes whose dtype and shape are the build's fed input
    (`descr`, `shape`); any other entry, or no `.npy` at all, is one line naming it. The board gets `dest`:
    the bytes that were checked, nothing else. Returns (dest, the number of inputs)."""
    folder, dest = Path(folder), Path(dest)
    try:
        st = os.stat(folder, follow_symlinks=False)
    except OSError as err:
        raise InputError(f"--inputs {folder}: cannot read ({err.strerror}); {INPUTS_ADVICE}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"--inputs {folder}: is {_kind(st.st_mode)}, not a folder; {INPUTS_ADVICE}")
    names = sorted(os.listdir(folder))
    if len(names) > MAX_TREE_FILES:
        raise InputError(f"--inputs {folder}: more than {MAX_TREE_FILES} entries; {INPUTS_ADVICE}")
    dest.mkdir(mode=0o700)
    for name in names:
        where = folder / name
        bad = (not name.endswith(".npy") or name.startswith(".") or len(name) <= 4
               or any(ord(c) < 32 or ord(c) == 127 for c in name))
        if bad:
            raise InputError(f"--inputs {where}: not a <name>.npy file; {INPUTS_ADVICE}")
        with open_inside(folder, name, INPUTS_ADVICE) as fd:
            data = _read_npy(where, fd, INPUTS_ADVICE)
        got_descr, got_shape, _ = _npy_header(where, data, INPUTS_ADVICE)
        if (got_descr, got_shape) != (descr, tuple(shape)):
            raise InputError(f"--inputs {where}: a {got_descr} {list(got_shape)} tensor, the build is fed {descr} "
                             f"{list(shape)}; {INPUTS_ADVICE}")
        fd_out = os.open(dest / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd_out, "wb") as f:
            f.write(data)
    if not names:
        raise InputError(f"--inputs {folder}: holds no .npy file; {INPUTS_ADVICE}")
    return dest, len(names)


__all__ = ["GoldenInput", "MAX_GOLDEN_INPUT", "golden_inputs", "open_inside", "regular_file", "regular_tree",
           "stage_golden_inputs", "stage_input_folder"]
