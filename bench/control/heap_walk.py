#!/usr/bin/python3
"""Where a process's glibc main-arena heap keeps resident pages: heap_walk.py PID.

Reads the page map first (which pages are resident), then the heap's bytes through /proc/PID/mem,
and walks its chunks (glibc's layout: a chunk's size in the word before its data, whether it is in
use in the next chunk's PREV_INUSE bit). Prints the resident pages by how full of chunks in use
they are, the free bytes on resident pages, and on the nearly empty resident pages the chunks that
look in use but carry the tcache key in their second word (freed into a thread's cache; with the
caches on, most of those on the master's sparse pages after a join storm: docs/benchmarks.md "The
master's memory per worker, a sixth time"). Root, or the process's owner with ptrace rights; the process keeps running, so a
busy one gives a blurred picture. Reading the heap maps its untouched pages: run it once per
process state."""
import collections
import struct
import sys

PAGE = 4096


def main(pid):
    start = end = None
    for line in open(f"/proc/{pid}/maps"):
        if line.rstrip().endswith("[heap]"):
            a, b = line.split()[0].split("-")
            start, end = int(a, 16), int(b, 16)
    if start is None:
        sys.exit(f"heap_walk: process {pid} has no [heap] mapping")
    npages = (end - start) // PAGE
    with open(f"/proc/{pid}/pagemap", "rb") as pm:  # before the read below maps untouched pages
        pm.seek(start // PAGE * 8)
        raw = pm.read(npages * 8)
    present = [(struct.unpack_from("<Q", raw, i * 8)[0] >> 63) & 1 for i in range(npages)]
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(start)
        data = mem.read(end - start)
    chunks, walked = [], 0
    while walked + 16 <= len(data):
        size = struct.unpack_from("<Q", data, walked + 8)[0] & ~7
        if size < 16 or walked + size > len(data):
            break
        chunks.append((walked, size))
        walked += size
    used = [0] * npages
    free = [0] * npages
    in_use = []
    for i, (a, size) in enumerate(chunks):
        busy = i + 1 < len(chunks) and struct.unpack_from("<Q", data, chunks[i + 1][0] + 8)[0] & 1
        in_use.append(busy)
        p = a
        while p < a + size:
            e = min(a + size, (p // PAGE + 1) * PAGE)
            (used if busy else free)[p // PAGE] += e - p
            p = e
    resident = [i for i in range(npages) if present[i]]
    print(f"heap {len(data) >> 10} KiB, {len(chunks)} chunks walked over {walked >> 10} KiB; resident "
          f"{len(resident) * PAGE >> 10} KiB: in use {sum(used[i] for i in resident) >> 10} KiB, free "
          f"{sum(free[i] for i in resident) >> 10} KiB")
    tenths = collections.Counter(min(used[i] * 10 // PAGE, 10) for i in resident)
    print("resident pages by tenths in use:", sorted(tenths.items()))
    # The tcache key: the value most second words of small in-use chunks on sparse pages share.
    sparse = {i for i in resident if used[i] * 10 // PAGE == 0}
    words = collections.Counter()
    for (a, size), busy in zip(chunks, in_use):
        if busy and size < PAGE and a // PAGE in sparse and a + 32 <= len(data):
            words[struct.unpack_from("<Q", data, a + 24)[0]] += 1
    cached = words.most_common(1)[0][1] if words else 0
    cached = cached if cached > 1 else 0  # one chunk alone is no shared key
    print(f"nearly empty resident pages: {len(sparse)} ({len(sparse) * PAGE >> 10} KiB); small chunks "
          f"on them that look in use: {sum(words.values())}, of which {cached} carry the same second "
          f"word (the tcache key: freed into a thread's cache)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: heap_walk.py PID")
    main(int(sys.argv[1]))
