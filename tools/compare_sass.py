#!/usr/bin/env python3
"""Compares the machine code of the cubins in two conv3djit disk caches, entry by entry.

    tools/compare_sass.py BASE_CACHE NEW_CACHE

Fill each cache with `conv3djit precompile --manifest M --arch sm_90 --cache-dir DIR` from the
two builds (no GPU needed). Entries are matched by (kernel, class, shape, configuration), whatever
the key text's format, and compared by the bytes of their .text sections (the instructions; a
section's name carries the mangled kernel name, which may differ) and the sizes of their static
shared memory. Exit status 1 if any entry differs or has no partner.

NVRTC is not deterministic for every kernel: two compiles of one source can give different PTX,
and for a few grouped kernels with long unrolled tap loops different machine code (4-5 of 324
grouped kernels, a few instructions each, between two runs of one build). Fill a second base cache
from the same build and compare the two to see that noise before reading a DIFF."""
import pathlib, re, struct, sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cache_files  # noqa: E402  (the cache's file format)

# Kernel names of key texts before the families had their own names.
OLD = {'direct_fp32': 'direct', 'direct_tiled_fp32': 'direct_tiled', 'grouped_fp32': 'grouped',
       'depthwise_fp32': 'depthwise', 'igemm_tf32': 'igemm_sm80', 'sm90_weights': 'igemm_sm90_weights'}

def entries(folder):
    return {normalize(key.split('|')[0]): (key, cubin) for key, _, cubin, _ in cache_files.kernels(folder)}

def normalize(text):
    if ';' in text:  # old: name;class;cg=..;k=AxBxC;s=..;d=..;cfg=a,b,...
        parts = text.split(';')
        name = OLD.get(parts[0], parts[0])
        cls = parts[1]
        nums = [int(x) for x in re.findall(r'-?\d+', ';'.join(parts[2:6]))]
        cfg = [int(x) for x in parts[6][4:].split(',')]
        if name in ('pitch_rows', 'reference_fp64'):
            return (name,)
        if name == 'igemm_sm90_weights':
            return (name, cls, tuple(nums[:4]), tuple(cfg[:2]))
        while cfg and cfg[-1] == 0 and len(cfg) > 0: cfg.pop()
        return (name, cls, tuple(nums), tuple(cfg))
    words = [w for w in text.split() if w != 'groups=1']  # keys without the field are ungrouped
    name = words[0]
    # The element types and layout ("fp32 ncdhw", "bf16 ndhwc out=fp32"; the oldest texts have none).
    types = tuple(w for w in words[1:3] if '=' not in w) + tuple(w for w in words if w.startswith('out='))
    if name in ('pitch_rows', 'reference_fp64', 'channels_last'):
        return (name,) + types + tuple(w for w in words if w.startswith('weights='))
    cls = next(w[6:] for w in words if w.startswith('class='))
    labels = tuple(w for w in words if re.match(r'^(epi|pad)=', w))  # the epilogue, a padding mode
    shape = []
    for w in words:
        if re.match(r'^(cg|k|s|d)=', w):
            shape += [int(x) for x in re.findall(r'\d+', w.split('=')[1])]
    cfg = [int(w.split('=')[1]) for w in words[3:] if '=' in w and not re.match(r'^(class|epi|pad|out|cg|k|s|d)=', w)]
    if name != 'igemm_sm90_weights':
        while cfg and cfg[-1] == 0: cfg.pop()
    return (name, cls) + types + labels + (tuple(shape), tuple(cfg))

def sections(cubin):
    # ELF64: section headers at e_shoff, e_shentsize, e_shnum, names in e_shstrndx
    shoff = struct.unpack_from('<Q', cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', cubin, 0x3a)
    heads = []
    for i in range(shnum):
        name, typ, flags, addr, off, size = struct.unpack_from('<IIQQQQ', cubin, shoff + i * shentsize)
        heads.append((name, off, size, typ))
    stro, strs = heads[shstrndx][1], heads[shstrndx][2]
    names = cubin[stro:stro + strs]
    out = {}
    for name, off, size, typ in heads:
        n = names[name:names.index(b'\0', name)].decode()
        out[n] = cubin[off:off + size] if typ != 8 else b''
    return out

def sass(cubin):
    # The instructions: the bytes of the kernel's .text section (its name carries the mangled
    # kernel name, which the traits struct changed); with the registers and shared memory the
    # kernel's .nv.info records, which sits beside it.
    s = sections(cubin)
    text = [v for k, v in sorted(s.items()) if k.startswith('.text.')]
    shared = [len(v) for k, v in sorted(s.items()) if k.startswith('.nv.shared.')]
    return (text, shared)

a, b = entries(sys.argv[1]), entries(sys.argv[2])
same = diff = 0
for k in sorted(set(a) | set(b), key=str):
    if k not in a or k not in b:
        print('only in', 'base' if k in a else 'new', k); diff += 1; continue
    sa, sb = sass(a[k][1]), sass(b[k][1])
    if sa == sb:
        same += 1; print('same  %6d instructions  %s' % (sum(len(x) for x in sa[0]) // 16, ' '.join(map(str, k))))
    else:
        diff += 1; print('DIFF  %6d vs %6d  %s' % (sum(len(x) for x in sa[0]) // 16, sum(len(x) for x in sb[0]) // 16, ' '.join(map(str, k))))
print(f'{same} identical, {diff} different or unmatched')
sys.exit(1 if diff else 0)
