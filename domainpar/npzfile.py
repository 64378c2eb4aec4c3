"""Reproducible ``.npz`` archives: the same arrays give the same bytes.

``np.savez`` stamps every member with the current time, so two runs that compute identical arrays write different
files. :func:`write_npz` writes the same standard zip archive ``np.load`` reads, with a fixed timestamp and the
members in the order given; each member's zip CRC-32 is verified as it is read.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, Mapping

import numpy as np

from domainpar.signals import hold_stops

#: Timestamp of every member (the earliest a zip file can record).
_EPOCH = (1980, 1, 1, 0, 0, 0)


#: Bytes of a member's data that :func:`write_npz` deflates to decide whether deflating the member pays.
SAMPLE_BYTES = 1 << 20
#: A member whose sample deflates to more than this share of its size is stored as is: float features barely
#: shrink for seconds of zlib; indices and labels shrink to a few percent.
STORE_ABOVE = 0.8


def _deflates(value: np.ndarray, level: int) -> bool:
    """Whether deflating ``value``'s bytes saves enough to pay for it (judged on their first :data:`SAMPLE_BYTES`)."""
    if value.nbytes <= SAMPLE_BYTES or value.dtype.hasobject:
        return True  # small: deflating it costs little whatever it saves
    head = value[: max(1, -(-value.shape[0] * SAMPLE_BYTES // value.nbytes))]  # leading rows: no copy of the rest
    sample = np.ascontiguousarray(head).reshape(-1).view(np.uint8)[:SAMPLE_BYTES]
    return len(zlib.compress(sample.tobytes(), level)) <= STORE_ABOVE * sample.size


def write_npz(path: str | os.PathLike, arrays: Mapping[str, np.ndarray], *, compress: bool = False, level: int = 6) -> Path:
    """Write ``arrays`` to ``path`` as an ``.npz`` archive whose bytes depend only on the arrays.

    Not atomic by itself: write to a temporary path and rename (see :mod:`domainpar.atomic`).

    Args:
        path: destination file.
        arrays: member name (without ``.npy``) → array; no object arrays (nothing is pickled).
        compress: deflate the members that deflating shrinks (:data:`STORE_ABOVE`, judged on a sample of their
            bytes: the same arrays make the same choice); the others are stored as they are.
        level: zlib level when compressing.

    Returns:
        ``path``.
    """
    path = Path(path)
    # A stop signal waits for the end of the member being written: raised inside zipfile's own bookkeeping it
    # leaves the archive unable to close ("Exception ignored in ZipFile.__del__"). Between members it is consistent.
    with hold_stops() as held, zipfile.ZipFile(
        path, "w", compression=zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED, allowZip64=True
    ) as archive:
        for name, value in arrays.items():
            value = np.asanyarray(value)
            deflate = compress and _deflates(value, level)
            method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = method
            info.external_attr = 0o644 << 16
            if deflate:
                # The per-member level (zipfile ignores the archive's default for members opened by ZipInfo).
                setattr(info, "compress_level" if hasattr(info, "compress_level") else "_compresslevel", level)
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, value, allow_pickle=False)
            held.answer()
    return path


def stored_member(fh: BinaryIO, info: zipfile.ZipInfo, file_size: int) -> tuple[int, int, tuple, bool, np.dtype] | None:
    """Where an uncompressed member's array starts and what it holds: ``(start, header bytes, shape, fortran order,
    dtype)``; None for a ``.npy`` version other than 1.0 and 2.0.

    Raises:
        zipfile.BadZipFile, ValueError: a damaged member, or one that holds Python objects.
    """
    fh.seek(info.header_offset)
    local = fh.read(30)
    if len(local) != 30 or local[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"bad local header of member {info.filename}")
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.file_size > file_size:
        raise zipfile.BadZipFile(f"member {info.filename} runs past the end of the file")
    fh.seek(start)
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(fh)
    elif version == (2, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(fh)
    else:
        return None
    if dtype.hasobject:
        raise ValueError(f"member {info.filename} holds Python objects, which are never unpickled")
    header_len = fh.tell() - start
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if header_len + count * dtype.itemsize != info.file_size:
        raise zipfile.BadZipFile(f"member {info.filename}: header says {shape} {dtype}, which is not its {info.file_size} bytes")
    return start, header_len, shape, fortran_order, dtype


def _read_stored_member(fh: BinaryIO, info: zipfile.ZipInfo, file_size: int, verify: bool) -> np.ndarray | None:
    """An uncompressed member read straight into its array (one read, no chunk copies); None: read it by zipfile."""
    layout = stored_member(fh, info, file_size)
    if layout is None:
        return None
    start, header_len, shape, fortran_order, dtype = layout
    array = np.empty(shape[::-1] if fortran_order else shape, dtype=dtype)
    flat = array.reshape(-1).view(np.uint8)
    if fh.readinto(flat) != flat.size:
        raise zipfile.BadZipFile(f"member {info.filename} is truncated")
    if verify:
        fh.seek(start)
        crc = zlib.crc32(flat, zlib.crc32(fh.read(header_len)))
        if crc != info.CRC:
            raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return array.T if fortran_order else array


def read_npz(
    path: str | os.PathLike | BinaryIO, names: Iterable[str] | None = None, *, verify: bool = True, missing_ok: bool = False
) -> dict[str, np.ndarray]:
    """Read members of an ``.npz`` archive (never unpickling), faster than ``np.load`` for uncompressed ones.

    Uncompressed members are read with one ``readinto`` each into their final array; their zip CRC-32 is checked
    unless ``verify`` is False. Compressed members go through ``zipfile``, which checks the CRC itself.

    Args:
        path: the archive, or a seekable binary file object holding it (e.g. the bytes of a file whose
            digest was just checked, so the file is read once).
        names: members to read (without ``.npy``); None reads all.
        verify: check every member's CRC-32 (a corrupted file raises ``zipfile.BadZipFile``).
        missing_ok: leave out requested members that are absent instead of raising ``KeyError``.

    Returns:
        name → array, in archive order.

    Raises:
        KeyError: a requested member is absent.
        zipfile.BadZipFile, ValueError, OSError, EOFError: damaged file, object arrays, I/O errors.
    """
    with (contextlib.nullcontext(path) if hasattr(path, "read") else open(path, "rb")) as fh, zipfile.ZipFile(fh) as archive:
        fh.seek(0, io.SEEK_END)
        file_size = fh.tell()
        infos = {info.filename[:-4]: info for info in archive.infolist() if info.filename.endswith(".npy")}
        wanted = list(infos) if names is None else list(names)
        out: dict[str, np.ndarray] = {}
        for name in wanted:
            if missing_ok and name not in infos:
                continue
            info = infos[name]
            array = None
            if info.compress_type == zipfile.ZIP_STORED and not info.flag_bits & 0x1:
                array = _read_stored_member(fh, info, file_size, verify)
            if array is None:
                with archive.open(info) as member:
                    array = np.lib.format.read_array(member, allow_pickle=False)
            out[name] = array
        return out


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, as 64 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_digest(path: str | os.PathLike) -> str:
    """A digest of a zip archive's content from its central directory alone: every member's name, size and CRC-32.

    Cheap (no member is decompressed), and it changes with any member's bytes, so it identifies a graph file's
    content. Files that are not zip archives get the SHA-256 of their bytes.

    Returns:
        ``"zip:<sha256 hex>"`` or ``"sha256:<hex>"``.

    Raises:
        OSError: the file cannot be read.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as archive:
            digest = hashlib.sha256()
            for info in sorted(archive.infolist(), key=lambda i: i.filename):
                digest.update(f"{info.filename}\0{info.file_size}\0{info.CRC:08x}\n".encode("utf-8", "surrogatepass"))
            return "zip:" + digest.hexdigest()
    except zipfile.BadZipFile:
        pass
    return "sha256:" + file_sha256(path)
