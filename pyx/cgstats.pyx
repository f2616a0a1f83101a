# cython: language_level=3
"""cgroup (v1, v2) and /proc stats parsers in C speed.

Same interface and the very same parsing rules as kubelet/stats/reference.py
(read that module's docstring for them). Files are read with open/read into
one reusable buffer and parsed in place: no Python string is made per line or
per key; a whole batch of cgroup directories is parsed in one call.
"""

from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memcmp, strlen
from posix.fcntl cimport open, O_RDONLY, O_CLOEXEC
from posix.unistd cimport read, close, pread
from libc.errno cimport errno, ENODEV

import os

from cython.parallel cimport parallel, prange

from kubelet.stats.types import CgroupStats, FIELDS, V2_FILES, masks

cdef extern from "fcntl.h" nogil:
    int openat(int dirfd, const char *pathname, int flags, ...)
    enum: O_DIRECTORY

cdef extern from "sys/stat.h" nogil:
    struct stat:
        unsigned long st_nlink
    int fstat(int fd, stat* buf)

cdef extern from "sys/vfs.h" nogil:
    struct statfs_t "statfs":
        long f_type
    int c_statfs "statfs"(const char* path, statfs_t* buf)

cdef extern from "sys/statvfs.h" nogil:
    ctypedef unsigned long fsblkcnt_t
    ctypedef unsigned long fsfilcnt_t
    struct statvfs:
        unsigned long f_bsize
        unsigned long f_frsize
        fsblkcnt_t f_blocks
        fsblkcnt_t f_bfree
        fsblkcnt_t f_bavail
        fsfilcnt_t f_files
        fsfilcnt_t f_ffree
    int c_statvfs "statvfs"(const char *path, statvfs *buf)

ctypedef long long i64
ctypedef unsigned long long u64

cdef i64 MAXV = 9223372036854775807
cdef i64 USER_HZ_NS = 10000000
cdef i64 V1_UNLIMITED = 4611686018427387904  # 2**62
# A value slot: ABSENT unless a valid number was parsed.
cdef i64 ABSENT = -1


cdef struct Buf:
    # A growable read buffer, one per thread, reused for every file it reads.
    char* data
    Py_ssize_t cap
    Py_ssize_t n


cdef Buf* buf_new() noexcept nogil:
    cdef Buf* b = <Buf*>malloc(sizeof(Buf))
    if b == NULL:
        return NULL
    b.cap = 65536
    b.n = 0
    b.data = <char*>malloc(b.cap)
    if b.data == NULL:
        free(b)
        return NULL
    return b


cdef void buf_free(Buf* b) noexcept nogil:
    if b != NULL:
        free(b.data)
        free(b)


cdef bint buf_load_fd(Buf* b, int fd) noexcept nogil:
    cdef Py_ssize_t r
    cdef char* grown
    if fd < 0:
        return False
    b.n = 0
    while True:
        if b.n == b.cap:
            grown = <char*>realloc(b.data, b.cap * 2)
            if grown == NULL:
                close(fd)
                return False
            b.data = grown
            b.cap *= 2
        r = read(fd, b.data + b.n, b.cap - b.n)
        if r < 0:
            close(fd)
            return False
        b.n += r
        # A short read is the end of a regular or cgroup (seq_file) file:
        # skip the extra read() that would only return 0.
        if r == 0 or b.n < b.cap:
            break
    close(fd)
    return True


cdef int buf_pread(Buf* b, int fd) noexcept nogil:
    """Read a kept descriptor from offset 0 (a cgroup file regenerates its
    contents on a read at offset 0). 1: read; 0: failed; -1: ENODEV, the
    cgroup behind the descriptor was removed (kernfs deactivates its files)."""
    cdef Py_ssize_t r
    cdef char* grown
    b.n = 0
    while True:
        if b.n == b.cap:
            grown = <char*>realloc(b.data, b.cap * 2)
            if grown == NULL:
                return 0
            b.data = grown
            b.cap *= 2
        r = pread(fd, b.data + b.n, b.cap - b.n, b.n)
        if r < 0:
            return -1 if errno == ENODEV else 0
        b.n += r
        if r == 0 or b.n < b.cap:
            return 1


cdef bint buf_load(Buf* b, const char* path) noexcept nogil:
    return buf_load_fd(b, open(path, O_RDONLY | O_CLOEXEC))


cdef bint buf_load_at(Buf* b, int dirfd, const char* name) noexcept nogil:
    """Read a file relative to an open directory: no full path walk per file."""
    if dirfd < 0:
        return False
    return buf_load_fd(b, openat(dirfd, name, O_RDONLY | O_CLOEXEC))


cdef inline i64 num(const char* s, Py_ssize_t n) noexcept nogil:
    """1 to 19 ASCII digits, value <= 2**63-1; else ABSENT."""
    cdef u64 v = 0
    cdef Py_ssize_t i
    cdef char ch
    if n < 1 or n > 19:
        return ABSENT
    for i in range(n):
        ch = s[i]
        if ch < 48 or ch > 57:
            return ABSENT
        v = v * 10 + <u64>(ch - 48)
    if v > <u64>MAXV:
        return ABSENT
    return <i64>v


cdef inline i64 single(const char* s, Py_ssize_t n) noexcept nogil:
    if n > 0 and s[n - 1] == 10:
        n -= 1
    return num(s, n)


cdef inline bint is_max(const char* s, Py_ssize_t n) noexcept nogil:
    if n > 0 and s[n - 1] == 10:
        n -= 1
    return n == 3 and s[0] == 109 and s[1] == 97 and s[2] == 120


cdef inline i64 scale(i64 v, i64 factor) noexcept nogil:
    if v == ABSENT or v > MAXV // factor:
        return ABSENT
    return v * factor


cdef inline void add(i64* acc, i64 v) noexcept nogil:
    # acc: 0.. = running sum, ABSENT = nothing yet, -2 = overflowed
    if acc[0] == -2:
        return
    if acc[0] == ABSENT:
        acc[0] = v
    elif acc[0] > MAXV - v:
        acc[0] = -2
    else:
        acc[0] += v


def _cpath(p):
    """p as the bytes open() is given, encoded like os.open does (so names that
    are not UTF-8 read as in the reference), or None when it holds a NUL: the C
    string would end there and name another file, where os.open refuses it."""
    b = os.fsencode(p)
    return None if b"\x00" in b else b


cdef inline object opt(i64 v):
    return None if v < 0 else v


cdef inline Py_ssize_t line_end(const char* s, Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    while i < n and s[i] != 10:
        i += 1
    return i


cdef void kv(const char* s, Py_ssize_t n, const char** keys, Py_ssize_t* klen,
             i64* out, int nkeys) noexcept nogil:
    """Flat-keyed file: out[k] = the first valid "key number" line for keys[k]."""
    cdef Py_ssize_t i = 0, e, sp, k
    cdef i64 v
    cdef bint seen[16]
    for k in range(nkeys):
        out[k] = ABSENT
        seen[k] = False
    while i <= n:
        e = line_end(s, i, n)
        sp = i
        while sp < e and s[sp] != 32:
            sp += 1
        if sp < e and sp > i:
            for k in range(nkeys):
                if not seen[k] and sp - i == klen[k] and memcmp(s + i, keys[k], klen[k]) == 0:
                    v = num(s + sp + 1, e - sp - 1)
                    if v != ABSENT:
                        out[k] = v
                        seen[k] = True
                    break
        i = e + 1


cdef const char* CPU2_KEYS[6]
cdef Py_ssize_t CPU2_LEN[6]
cdef const char* MEM2_KEYS[5]
cdef Py_ssize_t MEM2_LEN[5]
cdef const char* OOM_KEYS[1]
cdef Py_ssize_t OOM_LEN[1]
cdef const char* ACCT_KEYS[2]
cdef Py_ssize_t ACCT_LEN[2]
cdef const char* CPU1_KEYS[3]
cdef Py_ssize_t CPU1_LEN[3]
cdef const char* MEM1_KEYS[12]
cdef Py_ssize_t MEM1_LEN[12]
cdef const char* STAT_KEYS[4]
cdef Py_ssize_t STAT_LEN[4]


cdef void _set(const char** keys, Py_ssize_t* lens, int i, const char* k) noexcept:
    keys[i] = k
    lens[i] = strlen(k)


_set(CPU2_KEYS, CPU2_LEN, 0, b"usage_usec")
_set(CPU2_KEYS, CPU2_LEN, 1, b"user_usec")
_set(CPU2_KEYS, CPU2_LEN, 2, b"system_usec")
_set(CPU2_KEYS, CPU2_LEN, 3, b"nr_periods")
_set(CPU2_KEYS, CPU2_LEN, 4, b"nr_throttled")
_set(CPU2_KEYS, CPU2_LEN, 5, b"throttled_usec")
_set(MEM2_KEYS, MEM2_LEN, 0, b"anon")
_set(MEM2_KEYS, MEM2_LEN, 1, b"file")
_set(MEM2_KEYS, MEM2_LEN, 2, b"inactive_file")
_set(MEM2_KEYS, MEM2_LEN, 3, b"pgfault")
_set(MEM2_KEYS, MEM2_LEN, 4, b"pgmajfault")
_set(OOM_KEYS, OOM_LEN, 0, b"oom_kill")
_set(ACCT_KEYS, ACCT_LEN, 0, b"user")
_set(ACCT_KEYS, ACCT_LEN, 1, b"system")
_set(CPU1_KEYS, CPU1_LEN, 0, b"nr_periods")
_set(CPU1_KEYS, CPU1_LEN, 1, b"nr_throttled")
_set(CPU1_KEYS, CPU1_LEN, 2, b"throttled_time")
_set(MEM1_KEYS, MEM1_LEN, 0, b"total_rss")
_set(MEM1_KEYS, MEM1_LEN, 1, b"total_cache")
_set(MEM1_KEYS, MEM1_LEN, 2, b"total_inactive_file")
_set(MEM1_KEYS, MEM1_LEN, 3, b"total_pgfault")
_set(MEM1_KEYS, MEM1_LEN, 4, b"total_pgmajfault")
_set(MEM1_KEYS, MEM1_LEN, 5, b"rss")
_set(MEM1_KEYS, MEM1_LEN, 6, b"cache")
_set(MEM1_KEYS, MEM1_LEN, 7, b"inactive_file")
_set(MEM1_KEYS, MEM1_LEN, 8, b"pgfault")
_set(MEM1_KEYS, MEM1_LEN, 9, b"pgmajfault")
_set(MEM1_KEYS, MEM1_LEN, 10, b"total_swap")
_set(MEM1_KEYS, MEM1_LEN, 11, b"swap")
_set(STAT_KEYS, STAT_LEN, 0, b"ctxt")
_set(STAT_KEYS, STAT_LEN, 1, b"processes")
_set(STAT_KEYS, STAT_LEN, 2, b"procs_running")
_set(STAT_KEYS, STAT_LEN, 3, b"procs_blocked")


cdef void io_stat(const char* s, Py_ssize_t n, i64* out) noexcept nogil:
    """v2 io.stat: sums of rbytes, wbytes, rios, wios over devices."""
    cdef Py_ssize_t i = 0, e, a, b, eq, k, kl
    cdef i64 v
    cdef const char* names[4]
    names[0] = b"rbytes"; names[1] = b"wbytes"; names[2] = b"rios"; names[3] = b"wios"
    cdef Py_ssize_t lens[4]
    lens[0] = 6; lens[1] = 6; lens[2] = 4; lens[3] = 4
    for k in range(4):
        out[k] = ABSENT
    while i <= n:
        e = line_end(s, i, n)
        a = i
        while a < e and s[a] != 32:  # the device: skipped
            a += 1
        while a < e:
            a += 1  # past the space
            b = a
            while b < e and s[b] != 32:
                b += 1
            eq = a
            while eq < b and s[eq] != 61:
                eq += 1
            if eq < b and eq > a:
                kl = eq - a
                for k in range(4):
                    if kl == lens[k] and memcmp(s + a, names[k], kl) == 0:
                        v = num(s + eq + 1, b - eq - 1)
                        if v != ABSENT:
                            add(&out[k], v)
                        break
            a = b
        i = e + 1


cdef void blkio(const char* s, Py_ssize_t n, i64* out) noexcept nogil:
    """v1 blkio throttle file: sums of the Read and Write lines ("dev Op N")."""
    cdef Py_ssize_t i = 0, e, p1, p2, p3
    cdef i64 v
    out[0] = ABSENT
    out[1] = ABSENT
    while i <= n:
        e = line_end(s, i, n)
        p1 = i
        while p1 < e and s[p1] != 32:
            p1 += 1
        if p1 < e:
            p2 = p1 + 1
            while p2 < e and s[p2] != 32:
                p2 += 1
            if p2 < e:
                p3 = p2 + 1
                while p3 < e and s[p3] != 32:
                    p3 += 1
                if p3 == e:  # exactly three items
                    v = num(s + p2 + 1, e - p2 - 1)
                    if v != ABSENT:
                        if p2 - p1 - 1 == 4 and memcmp(s + p1 + 1, b"Read", 4) == 0:
                            add(&out[0], v)
                        elif p2 - p1 - 1 == 5 and memcmp(s + p1 + 1, b"Write", 5) == 0:
                            add(&out[1], v)
        i = e + 1


cdef inline Py_ssize_t lit(const char* s, Py_ssize_t i, Py_ssize_t e, const char* w,
                           Py_ssize_t wl) noexcept nogil:
    """i past the literal w at s[i], or -1."""
    if i < 0 or e - i < wl or memcmp(s + i, w, wl) != 0:
        return -1
    return i + wl


cdef inline Py_ssize_t hundredths(const char* s, Py_ssize_t i, Py_ssize_t e,
                                  i64* out) noexcept nogil:
    """W.FF with 1-9 digits W: out = W*100+FF; returns the index after, or -1."""
    cdef Py_ssize_t j = i
    cdef i64 w = 0
    if i < 0:
        return -1
    while j < e and s[j] >= 48 and s[j] <= 57 and j - i < 10:
        w = w * 10 + (s[j] - 48)
        j += 1
    if j == i or j - i > 9 or e - j < 3 or s[j] != 46:
        return -1
    if s[j + 1] < 48 or s[j + 1] > 57 or s[j + 2] < 48 or s[j + 2] > 57:
        return -1
    out[0] = w * 100 + (s[j + 1] - 48) * 10 + (s[j + 2] - 48)
    return j + 3


cdef void psi(const char* s, Py_ssize_t n, i64* out) noexcept nogil:
    """out[0:4] some, out[4:8] full: avg10, avg60, avg300 in hundredths and total;
    out[k*4] == ABSENT when that line is missing."""
    cdef Py_ssize_t i = 0, e, j
    cdef i64 a10, a60, a300, total
    cdef int k
    out[0] = ABSENT
    out[4] = ABSENT
    while i <= n:
        e = line_end(s, i, n)
        j = -1
        k = 0
        if e - i >= 5 and memcmp(s + i, b"some ", 5) == 0:
            j = i + 5
        elif e - i >= 5 and memcmp(s + i, b"full ", 5) == 0:
            j = i + 5
            k = 1
        j = lit(s, j, e, b"avg10=", 6)
        j = hundredths(s, j, e, &a10)
        j = lit(s, j, e, b" avg60=", 7)
        j = hundredths(s, j, e, &a60)
        j = lit(s, j, e, b" avg300=", 8)
        j = hundredths(s, j, e, &a300)
        j = lit(s, j, e, b" total=", 7)
        if j >= 0:
            total = num(s + j, e - j)
            if total != ABSENT and out[k * 4] == ABSENT:
                out[k * 4] = a10
                out[k * 4 + 1] = a60
                out[k * 4 + 2] = a300
                out[k * 4 + 3] = total
        i = e + 1


cdef inline i64 working_set(i64 usage, i64 inactive) noexcept nogil:
    if usage == ABSENT:
        return ABSENT
    if inactive == ABSENT:
        inactive = 0
    return usage - inactive if usage > inactive else 0


# Field slots of CG.v, in kubelet.stats.types.FIELDS order (PSI kept apart).
cdef enum:
    F_CPU_USAGE, F_CPU_USER, F_CPU_SYSTEM, F_NR_PERIODS, F_NR_THROTTLED, F_THROTTLED,
    F_MEM_USAGE, F_WORKING_SET, F_RSS, F_CACHE, F_INACTIVE, F_LIMIT, F_OOM_KILL,
    F_PGFAULT, F_PGMAJFAULT, F_IO_RB, F_IO_WB, F_IO_RIO, F_IO_WIO, F_PIDS, F_PIDS_MAX,
    F_SWAP, F_SWAP_MAX, NF


cdef struct CG:
    i64 v[23]
    i64 psi[24]  # 3 files x (some, full) x 4
    bint psi_file[3]


cdef void clear(CG* cg) noexcept nogil:
    cdef int k
    for k in range(NF):
        cg.v[k] = ABSENT
    for k in range(3):
        cg.psi_file[k] = False


# v2 file numbers: bits of a file mask, in kubelet.stats.types.V2_FILES order.
cdef enum:
    V_CPU, V_MEMSTAT, V_MEMCUR, V_MEMMAX, V_MEMEVENTS, V_IO, V_PIDS, V_PIDSMAX,
    V_CPUP, V_MEMP, V_IOP, V_SWAPCUR, V_SWAPMAX, NV2

cdef const char* V2_NAMES[13]
V2_NAMES[0] = b"cpu.stat"
V2_NAMES[1] = b"memory.stat"
V2_NAMES[2] = b"memory.current"
V2_NAMES[3] = b"memory.max"
V2_NAMES[4] = b"memory.events"
V2_NAMES[5] = b"io.stat"
V2_NAMES[6] = b"pids.current"
V2_NAMES[7] = b"pids.max"
V2_NAMES[8] = b"cpu.pressure"
V2_NAMES[9] = b"memory.pressure"
V2_NAMES[10] = b"io.pressure"
V2_NAMES[11] = b"memory.swap.current"
V2_NAMES[12] = b"memory.swap.max"


cdef struct Entry:
    # The kept descriptors of one cgroup v2 directory, -1 where not open.
    int fd[13]


cdef struct Src:
    # Where one cgroup's files come from during one parse.
    const char* dir  # the directory path
    int dfd  # its descriptor, opened on first need; -1 before
    bint dir_failed
    Entry* entry  # kept descriptors, or NULL: open each file and close it
    int keep  # the files (bits) that are kept open when entry is set
    bint stale  # a kept descriptor answered ENODEV


cdef bint src_dir(Src* s) noexcept nogil:
    if s.dfd < 0 and not s.dir_failed:
        s.dfd = open(s.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        s.dir_failed = s.dfd < 0
    return s.dfd >= 0


cdef bint load_v2(Buf* b, Src* s, int k) noexcept nogil:
    """File k of the cgroup into b: through its kept descriptor (opened and
    kept on first use), or open + read + close."""
    cdef int fd, r
    if s.entry == NULL or not (s.keep >> k) & 1:
        return src_dir(s) and buf_load_at(b, s.dfd, V2_NAMES[k])
    fd = s.entry.fd[k]
    if fd < 0:
        if not src_dir(s):
            return False
        fd = openat(s.dfd, V2_NAMES[k], O_RDONLY | O_CLOEXEC)
        if fd < 0:
            return False  # missing now; tried again next pass, as the reference does
        s.entry.fd[k] = fd
    r = buf_pread(b, fd)
    if r < 0:
        s.stale = True
    return r == 1


cdef void parse_v2_src(Buf* buf, Src* s, CG* cg, int files) noexcept nogil:
    cdef i64 cpu[6]
    cdef i64 mem[5]
    cdef i64 io[4]
    cdef i64 oom[1]
    cdef int k
    clear(cg)
    if files & (1 << V_CPU) and load_v2(buf, s, V_CPU):
        kv(buf.data, buf.n, CPU2_KEYS, CPU2_LEN, cpu, 6)
        cg.v[F_CPU_USAGE] = scale(cpu[0], 1000)
        cg.v[F_CPU_USER] = scale(cpu[1], 1000)
        cg.v[F_CPU_SYSTEM] = scale(cpu[2], 1000)
        cg.v[F_NR_PERIODS] = cpu[3]
        cg.v[F_NR_THROTTLED] = cpu[4]
        cg.v[F_THROTTLED] = scale(cpu[5], 1000)
    if files & (1 << V_MEMSTAT) and load_v2(buf, s, V_MEMSTAT):
        kv(buf.data, buf.n, MEM2_KEYS, MEM2_LEN, mem, 5)
        cg.v[F_RSS] = mem[0]
        cg.v[F_CACHE] = mem[1]
        cg.v[F_INACTIVE] = mem[2]
        cg.v[F_PGFAULT] = mem[3]
        cg.v[F_PGMAJFAULT] = mem[4]
    if files & (1 << V_MEMCUR) and load_v2(buf, s, V_MEMCUR):
        cg.v[F_MEM_USAGE] = single(buf.data, buf.n)
    cg.v[F_WORKING_SET] = working_set(cg.v[F_MEM_USAGE], cg.v[F_INACTIVE])
    if files & (1 << V_MEMMAX) and load_v2(buf, s, V_MEMMAX):
        cg.v[F_LIMIT] = ABSENT if is_max(buf.data, buf.n) else single(buf.data, buf.n)
    if files & (1 << V_MEMEVENTS) and load_v2(buf, s, V_MEMEVENTS):
        kv(buf.data, buf.n, OOM_KEYS, OOM_LEN, oom, 1)
        cg.v[F_OOM_KILL] = oom[0]
    if files & (1 << V_IO) and load_v2(buf, s, V_IO):
        io_stat(buf.data, buf.n, io)
        for k in range(4):
            cg.v[F_IO_RB + k] = io[k]
    if files & (1 << V_PIDS) and load_v2(buf, s, V_PIDS):
        cg.v[F_PIDS] = single(buf.data, buf.n)
    if files & (1 << V_PIDSMAX) and load_v2(buf, s, V_PIDSMAX):
        cg.v[F_PIDS_MAX] = ABSENT if is_max(buf.data, buf.n) else single(buf.data, buf.n)
    if files & (1 << V_CPUP) and load_v2(buf, s, V_CPUP):
        cg.psi_file[0] = True
        psi(buf.data, buf.n, &cg.psi[0])
    if files & (1 << V_MEMP) and load_v2(buf, s, V_MEMP):
        cg.psi_file[1] = True
        psi(buf.data, buf.n, &cg.psi[8])
    if files & (1 << V_IOP) and load_v2(buf, s, V_IOP):
        cg.psi_file[2] = True
        psi(buf.data, buf.n, &cg.psi[16])
    if files & (1 << V_SWAPCUR) and load_v2(buf, s, V_SWAPCUR):
        cg.v[F_SWAP] = single(buf.data, buf.n)
    if files & (1 << V_SWAPMAX) and load_v2(buf, s, V_SWAPMAX):
        cg.v[F_SWAP_MAX] = ABSENT if is_max(buf.data, buf.n) else single(buf.data, buf.n)


cdef void parse_v2(Buf* buf, const char* d, CG* cg, int files) noexcept nogil:
    cdef Src s
    s.dir = d
    s.dfd = -1
    s.dir_failed = False
    s.entry = NULL
    s.keep = 0
    s.stale = False
    parse_v2_src(buf, &s, cg, files)
    if s.dfd >= 0:
        close(s.dfd)


cdef void entry_close(Entry* e) noexcept nogil:
    cdef int k
    for k in range(NV2):
        if e.fd[k] >= 0:
            close(e.fd[k])
            e.fd[k] = -1


cdef void parse_kept(Buf* buf, const char* d, Entry* e, CG* cg, int files, int keep,
                     bint kernfs) noexcept nogil:
    """Read a cgroup through its kept descriptors. A descriptor never outlives
    its cgroup's directory: on cgroupfs (kernfs) every file of a removed cgroup
    answers ENODEV, so a removal (and any re-creation under the same name) is
    seen on the read itself at no extra cost, and the whole cgroup is read
    again by path. Elsewhere (a tree of regular files, as in the tests and
    benchmarks) a removed directory's files are unlinked: one fstat of a kept
    descriptor seeing no links tells it."""
    cdef Src s
    cdef stat st
    cdef int k
    s.dir = d
    s.dfd = -1
    s.dir_failed = False
    s.entry = e
    s.keep = keep
    s.stale = False
    if not kernfs:
        for k in range(NV2):
            if e.fd[k] >= 0:
                if fstat(e.fd[k], &st) != 0 or st.st_nlink == 0:
                    entry_close(e)
                break
    parse_v2_src(buf, &s, cg, files)
    if s.stale:
        entry_close(e)
        if s.dfd >= 0:
            close(s.dfd)  # may be the old directory's, opened before the ENODEV
        s.dfd = -1
        s.dir_failed = False
        s.stale = False
        parse_v2_src(buf, &s, cg, files)
        if s.stale:  # removed again in between: report it as gone
            entry_close(e)
            clear(cg)
    if s.dfd >= 0:
        close(s.dfd)


cdef inline i64 pick(i64 total, i64 plain) noexcept nogil:
    return total if total != ABSENT else plain


cdef int open_dir(char* tmp, const char* root, const char* ctrl, const char* path) noexcept nogil:
    """open(<root>/<ctrl>/<path>) as a directory, or -1."""
    cdef size_t lr = strlen(root), lc = strlen(ctrl), lp = strlen(path)
    if lr + lc + lp + 3 > 4096:
        return -1
    memcpy(tmp, root, lr)
    tmp[lr] = 47
    memcpy(tmp + lr + 1, ctrl, lc)
    tmp[lr + 1 + lc] = 47
    memcpy(tmp + lr + 2 + lc, path, lp)
    tmp[lr + 2 + lc + lp] = 0
    return open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC)


cdef void parse_v1(Buf* buf, const char* root, const char* path, CG* cg, int files) noexcept nogil:
    cdef i64 acct[2]
    cdef i64 cpu[3]
    cdef i64 mem[12]
    cdef i64 oom[1]
    cdef i64 rw[2]
    cdef char tmp[4096]
    cdef int fd
    cdef int k
    cdef int mfiles
    clear(cg)
    for k in range(12):
        mem[k] = ABSENT
    fd = open_dir(tmp, root, b"cpuacct", path) if files & (1 << V_CPU) else -1
    if fd >= 0:
        if buf_load_at(buf, fd, b"cpuacct.usage"):
            cg.v[F_CPU_USAGE] = single(buf.data, buf.n)
        if buf_load_at(buf, fd, b"cpuacct.stat"):
            kv(buf.data, buf.n, ACCT_KEYS, ACCT_LEN, acct, 2)
            cg.v[F_CPU_USER] = scale(acct[0], USER_HZ_NS)
            cg.v[F_CPU_SYSTEM] = scale(acct[1], USER_HZ_NS)
        close(fd)
    fd = open_dir(tmp, root, b"cpu", path) if files & (1 << V_CPU) else -1
    if fd >= 0:
        if buf_load_at(buf, fd, b"cpu.stat"):
            kv(buf.data, buf.n, CPU1_KEYS, CPU1_LEN, cpu, 3)
            cg.v[F_NR_PERIODS] = cpu[0]
            cg.v[F_NR_THROTTLED] = cpu[1]
            cg.v[F_THROTTLED] = cpu[2]
        close(fd)
    mfiles = files & ((1 << V_MEMSTAT) | (1 << V_MEMCUR) | (1 << V_MEMMAX) | (1 << V_MEMEVENTS)
                      | (1 << V_SWAPCUR) | (1 << V_SWAPMAX))
    fd = open_dir(tmp, root, b"memory", path) if mfiles else -1
    if fd >= 0:
        # memory.stat also holds v1's swap usage.
        if (files & ((1 << V_MEMSTAT) | (1 << V_SWAPCUR))
                and buf_load_at(buf, fd, b"memory.stat")):
            kv(buf.data, buf.n, MEM1_KEYS, MEM1_LEN, mem, 12)
        if files & (1 << V_MEMCUR) and buf_load_at(buf, fd, b"memory.usage_in_bytes"):
            cg.v[F_MEM_USAGE] = single(buf.data, buf.n)
        if files & (1 << V_MEMMAX) and buf_load_at(buf, fd, b"memory.limit_in_bytes"):
            cg.v[F_LIMIT] = single(buf.data, buf.n)
            if cg.v[F_LIMIT] >= V1_UNLIMITED:
                cg.v[F_LIMIT] = ABSENT
        if files & (1 << V_MEMEVENTS) and buf_load_at(buf, fd, b"memory.oom_control"):
            kv(buf.data, buf.n, OOM_KEYS, OOM_LEN, oom, 1)
            cg.v[F_OOM_KILL] = oom[0]
        if files & (1 << V_SWAPMAX) and buf_load_at(buf, fd, b"memory.memsw.limit_in_bytes"):
            cg.v[F_SWAP_MAX] = single(buf.data, buf.n)
            if cg.v[F_SWAP_MAX] >= V1_UNLIMITED:
                cg.v[F_SWAP_MAX] = ABSENT
        close(fd)
    if files & (1 << V_SWAPCUR):
        cg.v[F_SWAP] = pick(mem[10], mem[11])
    cg.v[F_RSS] = pick(mem[0], mem[5])
    cg.v[F_CACHE] = pick(mem[1], mem[6])
    cg.v[F_INACTIVE] = pick(mem[2], mem[7])
    cg.v[F_PGFAULT] = pick(mem[3], mem[8])
    cg.v[F_PGMAJFAULT] = pick(mem[4], mem[9])
    cg.v[F_WORKING_SET] = working_set(cg.v[F_MEM_USAGE], cg.v[F_INACTIVE])
    fd = open_dir(tmp, root, b"blkio", path) if files & (1 << V_IO) else -1
    if fd >= 0:
        if buf_load_at(buf, fd, b"blkio.throttle.io_service_bytes"):
            blkio(buf.data, buf.n, rw)
            cg.v[F_IO_RB] = rw[0]
            cg.v[F_IO_WB] = rw[1]
        if buf_load_at(buf, fd, b"blkio.throttle.io_serviced"):
            blkio(buf.data, buf.n, rw)
            cg.v[F_IO_RIO] = rw[0]
            cg.v[F_IO_WIO] = rw[1]
        close(fd)
    fd = open_dir(tmp, root, b"pids", path) if files & ((1 << V_PIDS) | (1 << V_PIDSMAX)) else -1
    if fd >= 0:
        if files & (1 << V_PIDS) and buf_load_at(buf, fd, b"pids.current"):
            cg.v[F_PIDS] = single(buf.data, buf.n)
        if files & (1 << V_PIDSMAX) and buf_load_at(buf, fd, b"pids.max"):
            cg.v[F_PIDS_MAX] = ABSENT if is_max(buf.data, buf.n) else single(buf.data, buf.n)
        close(fd)
    # A hybrid host's unified tree holds the same cgroups, with their pressure.
    mfiles = files & ((1 << V_CPUP) | (1 << V_MEMP) | (1 << V_IOP))
    fd = open_dir(tmp, root, b"unified", path) if mfiles else -1
    if fd >= 0:
        for k in range(3):
            if files & (1 << (V_CPUP + k)) and buf_load_at(buf, fd, V2_NAMES[V_CPUP + k]):
                cg.psi_file[k] = True
                psi(buf.data, buf.n, &cg.psi[k * 8])
        close(fd)


cdef object psi_obj(CG* cg, int r):
    cdef i64* p
    if not cg.psi_file[r]:
        return None
    p = &cg.psi[r * 8]
    some = None if p[0] == ABSENT else (p[0] / 100.0, p[1] / 100.0, p[2] / 100.0, p[3])
    full = None if p[4] == ABSENT else (p[4] / 100.0, p[5] / 100.0, p[6] / 100.0, p[7])
    return (some, full)


cdef int ALL_F = (1 << 26) - 1


cdef object to_stats(CG* cg, int fm):
    """The stats object; fields outside the field mask fm (FIELDS order) are None."""
    cdef i64* v = cg.v
    cdef int k
    if fm != ALL_F:
        for k in range(NF):
            if not (fm >> k) & 1:
                v[k] = ABSENT
        for k in range(3):
            if not (fm >> (NF + k)) & 1:
                cg.psi_file[k] = False
    return CgroupStats(
        opt(v[0]), opt(v[1]), opt(v[2]), opt(v[3]), opt(v[4]), opt(v[5]), opt(v[6]),
        opt(v[7]), opt(v[8]), opt(v[9]), opt(v[10]), opt(v[11]), opt(v[12]), opt(v[13]),
        opt(v[14]), opt(v[15]), opt(v[16]), opt(v[17]), opt(v[18]), opt(v[19]), opt(v[20]),
        opt(v[21]), opt(v[22]), psi_obj(cg, 0), psi_obj(cg, 1), psi_obj(cg, 2),
    )


cdef int _threads(int threads, Py_ssize_t n):
    if n < 64:
        return 1  # not worth waking threads for
    return threads if threads > 0 else min(4, os.cpu_count() or 1)


def _fieldset(fields):
    return masks(None if fields is None else frozenset(fields))


def parse_cgroups(paths, int version, root="/sys/fs/cgroup", int threads=0, fields=None):
    """Stats of each cgroup path (relative to the hierarchy root), in order.

    v2: files under <root>/<path>/; v1: under <root>/<controller>/<path>/.
    fields: the CgroupStats fields wanted (None: all); only the files they
    need are read (kubelet.stats.types.masks) and the other fields are None.
    Files are read and parsed without the GIL, on up to `threads` threads
    (0: one per CPU, at most 4); only the result objects are built with it.
    """
    if version != 1 and version != 2:
        raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
    cdef int fm, files
    fm, files = _fieldset(fields)
    cdef Py_ssize_t n = len(paths), i
    cdef bytes rootb = os.fsencode(root)
    cdef const char* croot = rootb
    if version == 2:
        keep = [_cpath(rootb + b"/" + os.fsencode(p)) for p in paths]
    else:
        keep = [None if b"\x00" in rootb else _cpath(p) for p in paths]
    cdef const char** cpaths = <const char**>malloc(max(n, 1) * sizeof(char*))
    cdef CG* res = <CG*>malloc(max(n, 1) * sizeof(CG))
    cdef Buf* b
    cdef int nt = _threads(threads, n)
    if cpaths == NULL or res == NULL:
        free(cpaths)
        free(res)
        raise MemoryError()
    for i in range(n):
        cpaths[i] = NULL if keep[i] is None else <const char*><bytes>keep[i]
    try:
        with nogil, parallel(num_threads=nt):
            b = buf_new()
            for i in prange(n, schedule="static"):
                if b == NULL or cpaths[i] == NULL:
                    clear(&res[i])
                elif version == 2:
                    parse_v2(b, cpaths[i], &res[i], files)
                else:
                    parse_v1(b, croot, cpaths[i], &res[i], files)
            buf_free(b)
        return [to_stats(&res[i], fm) for i in range(n)]
    finally:
        free(cpaths)
        free(res)


cdef long CGROUP2_MAGIC = 0x63677270
cdef long CGROUP1_MAGIC = 0x27e0eb


def _popcount(int x):
    return bin(x).count("1")


cdef class CgroupReader:
    """Reads the same cgroups again and again (v2) through descriptors kept
    open between reads, one pread at offset 0 per file, for as many cgroups as
    `max_fds` allows (in the order they are first asked for); the others are
    opened, read and closed every time, as parse_cgroups does. Only the files
    of `keep` (a subset of `fields`; None: all of them) are kept open: the
    budget goes further on the files every consumer reads. Results equal
    parse_cgroups(paths, 2, root, fields=...) read at the same moment (see
    parse_kept for why a removed or re-created cgroup is never read through a
    descriptor of its former self).

    retain(paths) closes the descriptors of every cgroup not named (pods that
    are gone) and gives their budget to cgroups read later. v1 keeps nothing
    open (its files sit in one directory per controller). One caller at a
    time: a reader is not to be shared by threads without a lock.
    """

    cdef int version, fm, files, nfiles, threads, keep
    cdef bint kernfs
    cdef Py_ssize_t slots
    cdef bytes rootb
    cdef dict index  # path -> slot
    cdef dict enc  # path -> the C path (None: unusable), kept with the slots
    cdef list free_slots
    cdef Entry* entries
    cdef readonly object fields

    def __cinit__(self):
        self.entries = NULL

    def __init__(self, int version, root="/sys/fs/cgroup", fields=None, int max_fds=0,
                 int threads=0, keep=None):
        cdef statfs_t sf
        cdef Py_ssize_t i
        cdef int k
        if version != 1 and version != 2:
            raise ValueError(f"cgroup version must be 1 or 2, not {version!r}")
        self.version = version
        self.fields = None if fields is None else frozenset(fields)
        self.fm, self.files = masks(self.fields)
        self.keep = self.files if keep is None else _fieldset(keep)[1]
        if self.keep | self.files != self.files:
            raise ValueError("keep: fields outside the reader's own field set")
        self.nfiles = _popcount(self.keep)
        self.threads = threads
        self.rootb = os.fsencode(root)
        self.kernfs = False
        if b"\x00" not in self.rootb and c_statfs(self.rootb, &sf) == 0:
            self.kernfs = sf.f_type == CGROUP2_MAGIC or sf.f_type == CGROUP1_MAGIC
        self.slots = max(0, max_fds) // self.nfiles if version == 2 and self.nfiles else 0
        self.index = {}
        self.enc = {}
        self.free_slots = list(range(self.slots - 1, -1, -1))
        self.entries = <Entry*>malloc(max(self.slots, 1) * sizeof(Entry))
        if self.entries == NULL:
            raise MemoryError()
        for i in range(self.slots):
            for k in range(NV2):
                self.entries[i].fd[k] = -1

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.entries != NULL:
            for i in range(self.slots):
                entry_close(&self.entries[i])
            free(self.entries)
            self.entries = NULL

    def close(self):
        """Close every kept descriptor (the reader stays usable)."""
        cdef Py_ssize_t s
        for s in self.index.values():
            entry_close(&self.entries[s])
        self.index.clear()
        self.enc.clear()
        self.free_slots = list(range(self.slots - 1, -1, -1))

    @property
    def kept(self):
        """The cgroup paths that hold a place in the descriptor budget."""
        return frozenset(self.index)

    def retain(self, paths):
        """Close the descriptors of the kept cgroups not in paths."""
        cdef Py_ssize_t s
        index = self.index
        wanted = paths if isinstance(paths, (set, frozenset, dict)) else set(paths)
        for p in [p for p in index if p not in wanted]:
            s = index.pop(p)
            entry_close(&self.entries[s])
            self.free_slots.append(s)
        if len(self.enc) > len(index):
            self.enc = {p: self.enc[p] for p in index if p in self.enc}

    @property
    def capacity(self):
        """How many cgroups the descriptor budget can keep."""
        return self.slots

    @property
    def open_fds(self):
        cdef Py_ssize_t s
        cdef int k, n = 0
        for s in self.index.values():
            for k in range(NV2):
                if self.entries[s].fd[k] >= 0:
                    n += 1
        return n

    cdef _assign(self, paths, Py_ssize_t* slot_of):
        """Give free slots to new cgroups, first asked first served;
        slot_of[i] = the slot of paths[i] or -1."""
        cdef Py_ssize_t i
        index = self.index
        seen = set()
        for i, p in enumerate(paths):
            slot = index.get(p)
            if slot is None and self.free_slots:
                slot = self.free_slots.pop()
                index[p] = slot
            if slot is None or p in seen:
                slot_of[i] = -1  # a second copy in one batch reads by path
            else:
                slot_of[i] = slot
                seen.add(p)

    def read(self, paths, fields=None):
        """Stats of each cgroup path, in order. fields: a subset of the reader's
        fields for this read only (None: the reader's own)."""
        cdef int fm = self.fm, files = self.files
        cdef Py_ssize_t n = len(paths), i
        cdef int version = self.version
        cdef bint kernfs = self.kernfs
        cdef bytes rootb = self.rootb
        cdef const char* croot = rootb
        if fields is not None:
            fm, files = _fieldset(fields)
            if (self.fm | fm) != self.fm:
                raise ValueError("fields outside the reader's own field set")
        if version == 2:
            keep = self._encode(paths)
        else:
            keep = [None if b"\x00" in rootb else _cpath(p) for p in paths]
        cdef const char** cpaths = <const char**>malloc(max(n, 1) * sizeof(char*))
        cdef Py_ssize_t* slot_of = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        cdef CG* res = <CG*>malloc(max(n, 1) * sizeof(CG))
        cdef Buf* b
        cdef Entry* entries = self.entries
        cdef int kmask = self.keep
        cdef int nt = _threads(self.threads, n)
        if cpaths == NULL or res == NULL or slot_of == NULL:
            free(cpaths)
            free(res)
            free(slot_of)
            raise MemoryError()
        try:
            for i in range(n):
                cpaths[i] = NULL if keep[i] is None else <const char*><bytes>keep[i]
                slot_of[i] = -1
            if self.slots:
                self._assign(paths, slot_of)
            with nogil, parallel(num_threads=nt):
                b = buf_new()
                for i in prange(n, schedule="static"):
                    if b == NULL or cpaths[i] == NULL:
                        clear(&res[i])
                    elif slot_of[i] >= 0:
                        parse_kept(b, cpaths[i], &entries[slot_of[i]], &res[i], files, kmask,
                                   kernfs)
                    elif version == 2:
                        parse_v2(b, cpaths[i], &res[i], files)
                    else:
                        parse_v1(b, croot, cpaths[i], &res[i], files)
                buf_free(b)
            return [to_stats(&res[i], fm) for i in range(n)]
        finally:
            free(cpaths)
            free(res)
            free(slot_of)

    cdef list _encode(self, paths):
        """C paths of a batch; those of kept cgroups are remembered (a path
        encoded once per cgroup, not once per read)."""
        enc = self.enc
        index = self.index
        rootb = self.rootb
        out = []
        for p in paths:
            b = enc.get(p, False)
            if b is False:
                b = _cpath(rootb + b"/" + os.fsencode(p))
                if p in index or len(index) < self.slots:
                    enc[p] = b
            out.append(b)
        return out

    def floor(self, paths):
        """The no-parse floor of read(paths) once its descriptors are open: one
        pread per kept file, open + read + close for the rest; no parsing, no
        removal check, no result objects. Returns the bytes read."""
        cdef Py_ssize_t n = len(paths), i, total = 0
        cdef int files = self.files, kmask = self.keep, k
        cdef Entry* e
        cdef Buf* b
        cdef Py_ssize_t* slot_of = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        keep = [_cpath(self.rootb + b"/" + os.fsencode(p)) for p in paths]
        cdef const char** cpaths = <const char**>malloc(max(n, 1) * sizeof(char*))
        cdef int nt = _threads(self.threads, n)
        if cpaths == NULL or slot_of == NULL:
            free(cpaths)
            free(slot_of)
            raise MemoryError()
        try:
            for i in range(n):
                cpaths[i] = NULL if keep[i] is None else <const char*><bytes>keep[i]
                slot_of[i] = self.index.get(paths[i], -1)
            with nogil, parallel(num_threads=nt):
                b = buf_new()
                for i in prange(n, schedule="static"):
                    if b == NULL or cpaths[i] == NULL:
                        continue
                    if slot_of[i] < 0:
                        total += floor_one(b, cpaths[i], files)
                        continue
                    e = &self.entries[slot_of[i]]
                    for k in range(NV2):
                        if kmask & (1 << k) and e.fd[k] >= 0 and buf_pread(b, e.fd[k]) == 1:
                            total += b.n
                    if files & ~kmask:
                        total += floor_one(b, cpaths[i], files & ~kmask)
                buf_free(b)
            return total
        finally:
            free(cpaths)
            free(slot_of)


cdef Py_ssize_t floor_one(Buf* b, const char* d, int files) noexcept nogil:
    cdef int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    cdef int k
    cdef Py_ssize_t got = 0
    if dfd < 0:
        return 0
    for k in range(NV2):
        if files & (1 << k) and buf_load_at(b, dfd, V2_NAMES[k]):
            got += b.n
    close(dfd)
    return got


def floor_read(paths, root="/sys/fs/cgroup", fields=None, int threads=0):
    """The no-parse floor of parse_cgroups(paths, 2, root, threads, fields):
    the same open of each directory, openat + read + close of exactly the same
    files into the same per-thread buffers, on the same threads; no parsing
    and no result objects. Returns the bytes read."""
    cdef int fm, files
    fm, files = _fieldset(fields)
    cdef Py_ssize_t n = len(paths), i, total = 0
    cdef bytes rootb = os.fsencode(root)
    keep = [_cpath(rootb + b"/" + os.fsencode(p)) for p in paths]
    cdef const char** cpaths = <const char**>malloc(max(n, 1) * sizeof(char*))
    cdef Buf* b
    cdef int nt = _threads(threads, n)
    if cpaths == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            cpaths[i] = NULL if keep[i] is None else <const char*><bytes>keep[i]
        with nogil, parallel(num_threads=nt):
            b = buf_new()
            for i in prange(n, schedule="static"):
                if b != NULL and cpaths[i] != NULL:
                    total += floor_one(b, cpaths[i], files)
            buf_free(b)
        return total
    finally:
        free(cpaths)


def read_psi(path):
    """One pressure file (/proc/pressure/<resource>, or a cgroup's): (some, full)."""
    cdef CG cg
    p = _cpath(path)
    if p is None:
        return None
    cdef Buf* buf = buf_new()
    if buf == NULL:
        raise MemoryError()
    try:
        if not buf_load(buf, p):
            return None
        cg.psi_file[0] = True
        psi(buf.data, buf.n, &cg.psi[0])
        return psi_obj(&cg, 0)
    finally:
        buf_free(buf)


def read_proc_stat(path="/proc/stat"):
    """cpu: (user, nice, system, idle, iowait, irq, softirq, steal) ticks; and counters."""
    cdef i64 vals[4]
    cdef i64 cpu[8]
    p = _cpath(path)
    if p is None:
        return None
    cdef Buf* buf = buf_new()
    if buf == NULL:
        raise MemoryError()
    try:
        return _proc_stat(buf, p, vals, cpu)
    finally:
        buf_free(buf)


cdef object _proc_stat(Buf* buf, bytes path, i64* vals, i64* cpu):
    cdef Py_ssize_t i = 0, e, a, b, k
    cdef const char* s
    cdef bint ok
    if not buf_load(buf, path):
        return None
    s = buf.data
    kv(s, buf.n, STAT_KEYS, STAT_LEN, vals, 4)
    out = {"cpu": None}
    while i <= buf.n:
        e = line_end(s, i, buf.n)
        if e - i >= 4 and memcmp(s + i, b"cpu ", 4) == 0:
            a = i + 4
            while a < e and s[a] == 32:
                a += 1
            ok = True
            for k in range(8):
                b = a
                while b < e and s[b] != 32:
                    b += 1
                if a > e:
                    ok = False
                    break
                cpu[k] = num(s + a, b - a)
                if cpu[k] == ABSENT:
                    ok = False
                    break
                a = b + 1
            if ok:
                out["cpu"] = tuple(cpu[k] for k in range(8))
            break
        i = e + 1
    out["ctxt"] = opt(vals[0])
    out["processes"] = opt(vals[1])
    out["procs_running"] = opt(vals[2])
    out["procs_blocked"] = opt(vals[3])
    return out


MEMINFO = ("MemTotal", "MemFree", "MemAvailable", "Buffers", "Cached", "SwapTotal", "SwapFree")


def read_meminfo(path="/proc/meminfo"):
    """The main /proc/meminfo fields in bytes (lines "Key:<spaces>N kB")."""
    p = _cpath(path)
    if p is None:
        return None
    cdef Buf* buf = buf_new()
    if buf == NULL:
        raise MemoryError()
    try:
        return _meminfo(buf, p)
    finally:
        buf_free(buf)


cdef object _meminfo(Buf* buf, bytes path):
    cdef Py_ssize_t i = 0, e, colon, a, k
    cdef const char* s
    cdef i64 v
    cdef i64 found[7]
    cdef bint seen[7]
    cdef const char* keys[7]
    cdef Py_ssize_t lens[7]
    keys[0] = b"MemTotal"; keys[1] = b"MemFree"; keys[2] = b"MemAvailable"
    keys[3] = b"Buffers"; keys[4] = b"Cached"; keys[5] = b"SwapTotal"; keys[6] = b"SwapFree"
    for k in range(7):
        lens[k] = strlen(keys[k])
        found[k] = ABSENT
        seen[k] = False
    if not buf_load(buf, path):
        return None
    s = buf.data
    while i <= buf.n:
        e = line_end(s, i, buf.n)
        colon = i
        while colon < e and s[colon] != 58:
            colon += 1
        if colon < e and colon > i:
            for k in range(7):
                if not seen[k] and colon - i == lens[k] and memcmp(s + i, keys[k], lens[k]) == 0:
                    seen[k] = True
                    a = colon + 1
                    while a < e and s[a] == 32:
                        a += 1
                    if e - a >= 3 and memcmp(s + e - 3, b" kB", 3) == 0:
                        found[k] = scale(num(s + a, e - 3 - a), 1024)
                    break
        i = e + 1
    return {MEMINFO[k]: opt(found[k]) for k in range(7)}


def read_loadavg(path="/proc/loadavg"):
    p = _cpath(path)
    if p is None:
        return None
    cdef Buf* buf = buf_new()
    if buf == NULL:
        raise MemoryError()
    try:
        return _loadavg(buf, p)
    finally:
        buf_free(buf)


cdef object _loadavg(Buf* buf, bytes path):
    cdef const char* s
    cdef Py_ssize_t n, j, a
    cdef i64 l1, l5, l15, running, total, last
    if not buf_load(buf, path):
        return None
    s = buf.data
    n = buf.n
    if n > 0 and s[n - 1] == 10:
        n -= 1
    j = hundredths(s, 0, n, &l1)
    j = lit(s, j, n, b" ", 1)
    j = hundredths(s, j, n, &l5)
    j = lit(s, j, n, b" ", 1)
    j = hundredths(s, j, n, &l15)
    j = lit(s, j, n, b" ", 1)
    if j < 0:
        return None
    a = j
    while j < n and s[j] != 47:
        j += 1
    if j >= n:
        return None
    running = num(s + a, j - a)
    a = j + 1
    j = a
    while j < n and s[j] != 32:
        j += 1
    if j >= n:
        return None
    total = num(s + a, j - a)
    last = num(s + j + 1, n - j - 1)
    if running == ABSENT or total == ABSENT or last == ABSENT:
        return None
    return (l1 / 100.0, l5 / 100.0, l15 / 100.0, running, total)


PID_FIELDS = (("utime", 11), ("stime", 12), ("num_threads", 17), ("starttime", 19),
              ("vsize", 20), ("rss", 21))


def read_pid_stat(int pid, proc="/proc"):
    """utime/stime (ticks), num_threads, starttime (ticks), vsize (bytes), rss (pages)."""
    p = _cpath(f"{proc}/{pid}/stat")
    if p is None:
        return None
    cdef Buf* buf = buf_new()
    if buf == NULL:
        raise MemoryError()
    try:
        return _pid_stat(buf, p)
    finally:
        buf_free(buf)


cdef object _pid_stat(Buf* buf, bytes path):
    cdef const char* s
    cdef Py_ssize_t n, close_at, a, b, idx, k
    cdef i64 vals[22]
    if not buf_load(buf, path):
        return None
    s = buf.data
    n = buf.n
    close_at = n - 1
    while close_at >= 0 and s[close_at] != 41:
        close_at -= 1
    if close_at < 0:
        return None
    a = close_at + 1
    # strip(b" \n") on both ends, then split on single spaces
    while a < n and (s[a] == 32 or s[a] == 10):
        a += 1
    while n > a and (s[n - 1] == 32 or s[n - 1] == 10):
        n -= 1
    for k in range(22):
        vals[k] = -3  # not present at all
    idx = 0
    while idx < 22:
        b = a
        while b < n and s[b] != 32:
            b += 1
        vals[idx] = num(s + a, b - a)
        idx += 1
        if b >= n:
            break
        a = b + 1
    return {name: (None if vals[i] < 0 else vals[i]) for name, i in PID_FIELDS}


def fs_usage(path):
    """Capacity, available and used bytes and inodes of the filesystem holding path."""
    cdef statvfs st
    p = _cpath(path)
    if p is None or c_statvfs(<bytes>p, &st) != 0:
        return None
    return {
        "capacity": st.f_blocks * st.f_frsize,
        "available": st.f_bavail * st.f_frsize,
        "used": (st.f_blocks - st.f_bfree) * st.f_frsize,
        "inodes": st.f_files,
        "inodes_free": st.f_ffree,
        "inodes_used": st.f_files - st.f_ffree,
    }
