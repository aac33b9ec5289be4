"""Reads the files of a conv3djit disk cache, as src/cache/cache_file.hpp lays them out: magic
"C3JCUBIN", u32 format version, u32 key size, the key text, u64 payload size, the payload, u64
FNV-1a of all bytes before it (integers little-endian). A kernel's payload is its lowered name, a
newline, then its cubin; a tuned record's payload is no cubin. Python 3 standard library only."""
import pathlib
import struct

MAGIC = b'C3JCUBIN'
FORMAT_VERSION = 1


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def parse(data):
    """(key text, payload) of one cache file's bytes, or None where any check fails."""
    if len(data) < 16 or not data.startswith(MAGIC):
        return None
    version, ksz = struct.unpack_from('<II', data, 8)
    if version != FORMAT_VERSION or len(data) < 24 + ksz:
        return None
    psz = struct.unpack_from('<Q', data, 16 + ksz)[0]
    end = 24 + ksz + psz
    if len(data) != end + 8 or struct.unpack_from('<Q', data, end)[0] != fnv1a64(data[:end]):
        return None
    return data[16:16 + ksz].decode(), data[24 + ksz:end]


def kernels(folder):
    """(key text, lowered name, cubin, path) of every valid kernel entry under folder, by path."""
    out = []
    for f in sorted(pathlib.Path(folder).rglob('*')):
        if not f.is_file() or f.name.startswith('.'):
            continue
        entry = parse(f.read_bytes())
        if entry is None:
            continue
        key, payload = entry
        name, _, cubin = payload.partition(b'\n')
        if cubin.startswith(b'\x7fELF'):
            out.append((key, name.decode(), cubin, f))
    return out
