/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the types every part shares (St, Span, Num, Ctx, ...) and the output buffer. */
#ifndef TRACEFUSE_KERNEL_BASE_H
#define TRACEFUSE_KERNEL_BASE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum { ST_NEED_MORE = 0, ST_END = 1, ST_FALLBACK = 2 };
enum { OK = 0, E_MORE = 1, E_FALL = 2, E_NOMEM = 3 };

#define MAX_KEYS 64
#define MAX_DEPTH 32
#define ID_LIMIT (((long long)1) << 32)

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} Span;

typedef struct {
    /* input */
    const unsigned char *s;
    Py_ssize_t len, i;
    /* output */
    char *o;
    Py_ssize_t olen, ocap;
    int nowrite; /* the scan: tokenise and validate only, write nothing */
    /* the walk's needle inside nested values: a string token whose content is
     * needle[0:needle_n] sets needle_found (scan_string; needle_n 0: none) */
    const unsigned char *needle;
    Py_ssize_t needle_n;
    int needle_found;
} St;

typedef struct {
    int neg;
    Span ip, fp; /* integer and fraction digits */
    int has_frac;
} Num;

/* the per-rank context, read once per call from the Python object */
typedef struct {
    long long id_off;
    long long shift_ns;
    int shifting;
    long long shift_coef; /* shift in us = shift_coef * 10**shift_exp */
    int shift_exp;        /* 0, -1, -2 or -3 */
    PyObject *pids;       /* dict: original pid (int) -> output pid (int) */
    PyObject *first_ts;   /* dict: output pid -> first ts (int or Decimal) */
    PyObject *gpu_like;   /* set of output pids with GPU work */
    PyObject *tids_seen;  /* set of out pid << 32 | tid written as they are */
    PyObject *neg_tids;   /* set of out pid << 32 | tid made from a negative tid */
    PyObject *drop_cats;  /* frozenset of dropped categories */
    PyObject *keep_args;  /* frozenset of kept arg keys, or None */
    PyObject *decimal;    /* decimal.Decimal */
    char rank_txt[32];
    int rank_len;
    int window; /* --window/--steps: keep events meeting [win_lo, win_hi] (absolute ns) */
    long long abs_base_ns, win_lo, win_hi;
} Ctx;

/* ---- output ---------------------------------------------------------------- */
/* A state reading buf from pos, with an output buffer of cap bytes (NULL when out of
 * memory: the caller reports it). The one setup of both entry points. */
static void st_open(St *st, const Py_buffer *buf, Py_ssize_t pos, int nowrite, Py_ssize_t cap) {
    st->s = (const unsigned char *)buf->buf;
    st->len = buf->len;
    st->i = pos;
    st->olen = 0;
    st->nowrite = nowrite;
    st->needle = NULL;
    st->needle_n = 0;
    st->needle_found = 0;
    st->ocap = cap;
    st->o = PyMem_Malloc(cap);
}

static int grow(St *st, Py_ssize_t need) {
    if (st->olen + need <= st->ocap) return OK;
    Py_ssize_t cap = st->ocap * 2;
    if (cap < st->olen + need) cap = st->olen + need + 4096;
    char *o = PyMem_Realloc(st->o, cap);
    if (!o) return E_NOMEM;
    st->o = o;
    st->ocap = cap;
    return OK;
}

/* room for `need` elements in the array *p of *cap elements of `size` bytes: its
 * capacity doubled (from `first`) until they fit; E_NOMEM leaves it as it was. The
 * Timeline's records, names and rows all grow this way (GROW_TO). */
static int grow_to(void **p, Py_ssize_t *cap, Py_ssize_t need, size_t size, Py_ssize_t first) {
    if (need <= *cap) return OK;
    Py_ssize_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    void *q = PyMem_Realloc(*p, (size_t)c * size);
    if (!q) return E_NOMEM;
    *p = q;
    *cap = c;
    return OK;
}
#define GROW_TO(ptr, cap, need, first) grow_to((void **)&(ptr), &(cap), (need), sizeof(*(ptr)), (first))

static inline int put(St *st, const void *p, Py_ssize_t n) {
    if (st->nowrite) return OK;
    if (st->olen + n > st->ocap && grow(st, n)) return E_NOMEM;
    memcpy(st->o + st->olen, p, n);
    st->olen += n;
    return OK;
}

static inline int putc1(St *st, char c) {
    if (st->nowrite) return OK;
    if (st->olen + 1 > st->ocap && grow(st, 1)) return E_NOMEM;
    st->o[st->olen++] = c;
    return OK;
}

/* write a non-negative integer, at least min_digits digits (zero-padded); 64-bit
 * arithmetic when it fits (128-bit division is a slow library call) */
static int put_u128(St *st, unsigned __int128 v, int min_digits) {
    char tmp[48];
    int k = 0;
    while (v > (unsigned __int128)UINT64_MAX && k < 47) {
        tmp[k++] = (char)('0' + (int)(v % 10));
        v /= 10;
    }
    unsigned long long w = (unsigned long long)v;
    do {
        tmp[k++] = (char)('0' + (int)(w % 10));
        w /= 10;
    } while (w && k < 47);
    while (k < min_digits && k < 47) tmp[k++] = '0';
    if (grow(st, k)) return E_NOMEM;
    for (int j = k - 1; j >= 0; j--) st->o[st->olen++] = tmp[j];
    return OK;
}

static int put_ll(St *st, long long v) {
    if (v < 0) {
        if (putc1(st, '-')) return E_NOMEM;
        return put_u128(st, (unsigned __int128)(-(__int128)v), 1);
    }
    return put_u128(st, (unsigned __int128)v, 1);
}

#endif
