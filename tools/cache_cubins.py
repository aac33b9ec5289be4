#!/usr/bin/env python3
"""Writes the cubins of a conv3djit disk cache out as plain files, for cuobjdump -sass or nvdisasm.

    tools/cache_cubins.py CACHE OUT_DIR [TEXT]

CACHE is a cache folder (`conv3djit precompile --arch sm_90 --cache-dir CACHE` fills one without a
GPU). Every kernel entry whose key text contains TEXT (default: all) is written as
OUT_DIR/<the key's kernel part, its words joined by '_'>.<the cache file's name>.cubin; one line
each on stdout: the file, then the lowered kernel name. Entries that fail their checks (cache_files.parse) and tuned
records are skipped. Exit status 1 if no entry matched.

Where the toolkit has no cuobjdump (a build machine with NVRTC only), the `nvidia-cuda-cuobjdump`
wheel from PyPI carries one."""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cache_files  # noqa: E402


def file_name(key, entry):
    kernel = re.sub(r'[^A-Za-z0-9=.,+-]+', '_', key.split('|')[0]).strip('_')[:200]
    return f'{kernel}.{entry.stem}.cubin'  # the entry's name: keys of other arches or sources differ


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    cache, out_dir = pathlib.Path(argv[1]), pathlib.Path(argv[2])
    text = argv[3] if len(argv) == 4 else ''
    if not cache.is_dir():
        sys.stderr.write(f'cache_cubins.py: {cache}: no such folder\n')
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for key, name, cubin, entry in cache_files.kernels(cache):
        if text not in key:
            continue
        path = out_dir / file_name(key, entry)
        path.write_bytes(cubin)
        print(f'{path}  {name}')
        written += 1
    return 0 if written else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
