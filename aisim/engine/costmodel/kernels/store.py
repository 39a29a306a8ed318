"""The packaged tables' file format: one LZMA-compressed `.npz` per GPU system.

A latency is stored as a 16-bit code of its base-2 logarithm in milliseconds,

    code = round((log2(ms) - LOG2_MS_FLOOR) x CODES_PER_OCTAVE),  1 <= code <= 65535,

so every stored time is within `MAX_RELATIVE_ERROR` (1.7e-4) of the measured one, far below the run-to-run
noise of a kernel timing; code 0 marks a grid cell that was not measured. The codes are kept as two byte
planes (high bytes, then low bytes): the high bytes of neighbouring cells repeat, which is what makes the
planes compress to 1.4 bytes a measured latency, keys and unmeasured cells included (3.6 MB for 2.57 million
latencies). Writing is deterministic: members in a fixed order, fixed
timestamps, no host metadata, so the same tables give the same bytes.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

LOG2_MS_FLOOR = -20.0
"""The smallest storable time: 2^-20 ms, 1 ns."""
CODES_PER_OCTAVE = 2048
"""Codes per doubling of time: 65,535 codes span 2^-20 .. 2^12 ms (1 ns .. 4 s)."""
SMALLEST_MS = 2.0 ** (LOG2_MS_FLOOR + 1 / CODES_PER_OCTAVE)
"""The time of code 1, the smallest storable."""
MAX_RELATIVE_ERROR = 2 ** (0.5 / CODES_PER_OCTAVE) - 1
"""The largest relative difference between a stored time and the measured one (half a code)."""
DATA = Path(__file__).parent / "data"
"""The packaged tables: `<system>.npz`, `manifest.json`, the licence and attribution."""
MANIFEST = "manifest.json"
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def encode_ms(milliseconds: np.ndarray) -> np.ndarray:
    """Codes of positive times in milliseconds; raises if one cannot be stored."""
    ms = np.asarray(milliseconds, dtype=np.float64)
    if not np.all(np.isfinite(ms)) or np.any(ms <= 0):
        raise ValueError("latencies must be finite and positive")
    codes = np.rint((np.log2(ms) - LOG2_MS_FLOOR) * CODES_PER_OCTAVE)
    if codes.min(initial=1) < 1 or codes.max(initial=1) > 65535:
        raise ValueError(f"latency outside the storable range ({ms.min()} .. {ms.max()} ms)")
    return codes.astype(np.uint16)


def decode_log2_ms(codes: np.ndarray) -> np.ndarray:
    """log2 of the stored times in milliseconds, NaN where the code is 0 (not measured)."""
    values = codes.astype(np.float64) / CODES_PER_OCTAVE + LOG2_MS_FLOOR
    values[codes == 0] = np.nan
    return values


def to_planes(codes: np.ndarray) -> np.ndarray:
    """uint16 codes as a (2, n) uint8 array: high bytes, then low bytes."""
    flat = np.ascontiguousarray(codes, dtype=np.uint16).ravel()
    return np.stack([(flat >> 8).astype(np.uint8), (flat & 0xFF).astype(np.uint8)])


def from_planes(planes: np.ndarray) -> np.ndarray:
    """The inverse of `to_planes` (flat)."""
    return (planes[0].astype(np.uint16) << 8) | planes[1]


def write(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    """Write `arrays` as an `.npz` (readable by `numpy.load`) with LZMA members, byte-for-byte reproducible."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_LZMA) as archive:
        for name in sorted(arrays):
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_LZMA
            info.external_attr = 0o644 << 16
            archive.writestr(info, member.getvalue())
    path.write_bytes(buffer.getvalue())


def read(path: Path) -> dict[str, np.ndarray]:
    """Every array of a file written by `write`."""
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}
