/* The compiled kernel: the merge's rewrite and the side passes' scan, on the JSON text.
 *
 * Why it exists: in Python, a merge spends most of its time building and freeing one
 * dict per event (issue 14's profile: msgspec decode, the per-event rules and the encode
 * cost 3x the tokenize-and-copy floor), and the side passes (--window, --steps,
 * --align collectives, info) build every event to look at a few. Here a rank's event
 * array is tokenised in place and nothing is built per event. It is optional
 * (tracefuse_stream/native.py): without it every stage runs its Python path.
 *
 * rewrite(ctx, buf, pos, need_sep, at_start) -> (out, pos, status, skip_to, need_sep,
 *     n_in, n_dropped, n_out)
 *   The straight line of rewrite/rules.py (RankRewriter.feed_batch): pids, flow and
 *   link ids, exact ts shifts, args trimming (--args), the rank arg, category and
 *   time-window filters, first ts and GPU work per pid. The contract that keeps it
 *   honest: every event it writes has exactly the bytes of the Python path (msgspec
 *   decode with exact numbers -> feed_batch -> msgspec encode). So it writes only
 *   events whose text needs no normalisation and hands every other event back to
 *   Python: M events, new or non-integer pids, odd tids and ids, link args that are
 *   not small integers, a "rank" arg, duplicate keys, escapes other than \" \\ \n \r
 *   \t \b \f, any non-ASCII byte, numbers with an exponent, "-0", decimals Python's
 *   Decimal prints in scientific notation, times it cannot shift or place exactly.
 *   Invalid JSON is never diagnosed here: it is handed back and Python reports it.
 *   Whatever it compares with the user's text (categories for --drop-cat, arg keys
 *   for --args) it compares decoded (span_text): "my\tcat" is my<TAB>cat, as in Python.
 *   The escapes it keeps spell one text each, so raw bytes may be compared with raw
 *   bytes (duplicate keys, the category memo) and with plain literals ("M", "X", the
 *   GPU categories, key names: these escapes spell only quotes, backslashes and
 *   control characters, which none of them holds).
 *
 * scan(sel, buf, pos, need_sep, at_start) -> (selected, pos, status, skip_to,
 *     need_sep, n_judged, lo, hi)
 *   For read/scan.py: the events matching sel (ph, cat, name prefix), and any it
 *   cannot judge, come back as JSON text for Python to decode; the others are only
 *   counted, and with sel.extremes their first ts and last ts + dur (exact, in units
 *   of 1e-9 us) folded into lo/hi. With sel.validate false (--align on a strict merge,
 *   which validates every byte itself right after) the others are only skimmed: see
 *   skim_event; with extremes too (info's single pass), walked: see walk_event.
 *
 * Both consume whole events from buf[pos:] (need_sep: a "," comes first; at_start:
 * right after the array's "[", where "]" is an empty array) and stop at the first
 * event they cannot finish: end of buffer (NEED_MORE), end of array (END, pos at the
 * "]"), anything else (FALLBACK, pos at the event; skip_to is the end of that event
 * when it is balanced, -1 when it is not complete in buf, -2 when the text between
 * events is not a separator). read/batches.EventBatches.mixed drives them.
 */
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
    PyObject *drop_cats;  /* frozenset of dropped categories */
    PyObject *keep_args;  /* frozenset of kept arg keys, or None */
    PyObject *decimal;    /* decimal.Decimal */
    char rank_txt[32];
    int rank_len;
    int window; /* --window/--steps: keep events meeting [win_lo, win_hi] (absolute ns) */
    long long abs_base_ns, win_lo, win_hi;
} Ctx;

/* ---- output ---------------------------------------------------------------- */
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

/* ---- tokens ---------------------------------------------------------------- */
static inline void skip_ws(St *st) {
    const unsigned char *s = st->s;
    Py_ssize_t i = st->i, n = st->len;
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    st->i = i;
}

/* bytes that end a run of plain string characters: the quote, the backslash, control
 * characters (invalid in JSON strings) and non-ASCII (handed back to Python) */
static const unsigned char STRING_STOP[256] = {[0 ... 0x1f] = 1, ['"'] = 1, ['\\'] = 1, [0x80 ... 0xff] = 1};

/* a string token at st->i: copied verbatim (when out), its content span returned */
static int scan_string(St *st, Span *content, int out) {
    const unsigned char *s = st->s;
    Py_ssize_t i = st->i, n = st->len;
    if (i >= n) return E_MORE;
    if (s[i] != '"') return E_FALL;
    Py_ssize_t start = i++;
    for (;;) {
        while (i < n && !STRING_STOP[s[i]]) i++;
        if (i >= n) return E_MORE;
        unsigned char c = s[i];
        if (c == '"') break;
        if (c == '\\') {
            if (i + 1 >= n) return E_MORE;
            unsigned char e = s[i + 1];
            if (e != '"' && e != '\\' && e != 'n' && e != 'r' && e != 't' && e != 'b' && e != 'f')
                return E_FALL; /* \u, \/ and invalid escapes: Python's text differs */
            i += 2;
            continue;
        }
        if (c < 0x20 || c >= 0x80) return E_FALL;
        i++;
    }
    content->p = s + start + 1;
    content->n = i - start - 1;
    i++;
    st->i = i;
    if (out) return put(st, s + start, i - start);
    return OK;
}

static int scan_number(St *st, Num *num) {
    const unsigned char *s = st->s;
    Py_ssize_t i = st->i, n = st->len;
    num->neg = 0;
    num->has_frac = 0;
    num->fp.n = 0;
    if (i < n && s[i] == '-') {
        num->neg = 1;
        i++;
    }
    if (i >= n) return E_MORE;
    if (s[i] < '0' || s[i] > '9') return E_FALL;
    num->ip.p = s + i;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    }
    num->ip.n = (s + i) - num->ip.p;
    if (i >= n) return E_MORE;
    if (s[i] == '.') {
        i++;
        num->fp.p = s + i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i >= n) return E_MORE;
        num->fp.n = (s + i) - num->fp.p;
        if (num->fp.n == 0) return E_FALL;
        num->has_frac = 1;
    }
    if (s[i] == 'e' || s[i] == 'E') return E_FALL; /* Python writes exponents its own way */
    if (s[i] >= '0' && s[i] <= '9') return E_FALL;  /* a leading zero followed by digits */
    st->i = i;
    return OK;
}

/* Would Python write this number with the same text? (int -> str(int), other -> str(Decimal)) */
static int number_is_canonical(const Num *num) {
    int int_zero = num->ip.n == 1 && num->ip.p[0] == '0';
    if (!num->has_frac) return !(num->neg && int_zero); /* "-0" becomes "0" */
    if (!int_zero) return 1;
    /* 0.xxx: Decimal's adjusted exponent must stay >= -6 */
    Py_ssize_t z = 0;
    while (z < num->fp.n && num->fp.p[z] == '0') z++;
    if (z == num->fp.n) return num->fp.n <= 6;
    return z < 6;
}

static int copy_number(St *st) {
    Py_ssize_t start = st->i;
    Num num;
    int r = scan_number(st, &num);
    if (r) return r;
    if (!number_is_canonical(&num)) return E_FALL;
    return put(st, st->s + start, st->i - start);
}

/* an integer token's value (E_FALL when not an integer that fits in 63 bits) */
static int scan_int(St *st, long long *v, Span *text) {
    Py_ssize_t start = st->i;
    Num num;
    int r = scan_number(st, &num);
    if (r) return r;
    if (num.has_frac || !number_is_canonical(&num) || num.ip.n > 18) return E_FALL;
    long long x = 0;
    for (Py_ssize_t k = 0; k < num.ip.n; k++) x = x * 10 + (num.ip.p[k] - '0');
    *v = num.neg ? -x : x;
    text->p = st->s + start;
    text->n = st->i - start;
    return OK;
}

static int literal(St *st, const char *word, Py_ssize_t wn) {
    Py_ssize_t i = st->i, n = st->len;
    for (Py_ssize_t k = 0; k < wn; k++) {
        if (i + k >= n) return E_MORE;
        if (st->s[i + k] != (unsigned char)word[k]) return E_FALL;
    }
    st->i = i + wn;
    return put(st, word, wn);
}

static int copy_value(St *st, int depth);

static int key_is_dup(Span *keys, int nkeys, Span k) {
    for (int j = 0; j < nkeys; j++)
        if (keys[j].n == k.n && memcmp(keys[j].p, k.p, k.n) == 0) return 1;
    return 0;
}

/* one object member's key and colon: the key copied, refused when it repeats an
 * earlier key of the object (Python keeps the last value at the first key's place) */
static int member_key(St *st, Span *keys, int *nkeys, Span *k) {
    int r;
    skip_ws(st);
    if ((r = scan_string(st, k, 1))) return r;
    if (*nkeys == MAX_KEYS || key_is_dup(keys, *nkeys, *k)) return E_FALL;
    keys[(*nkeys)++] = *k;
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] != ':') return E_FALL;
    st->i++;
    return putc1(st, ':');
}

/* after a member or element: a comma, copied (*more = 1: another follows), or the
 * closing byte (*more = 0, not copied) */
static int member_end(St *st, unsigned char close, int *more) {
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    unsigned char c = st->s[st->i++];
    if (c == ',') {
        *more = 1;
        return putc1(st, ',');
    }
    *more = 0;
    return c == close ? OK : E_FALL;
}

/* an object or array nested in a value: copied without white space */
static int copy_container(St *st, int depth) {
    if (depth > MAX_DEPTH) return E_FALL;
    unsigned char open = st->s[st->i];
    unsigned char close = open == '{' ? '}' : ']';
    Span keys[MAX_KEYS];
    int nkeys = 0, r;
    st->i++;
    if ((r = putc1(st, (char)open))) return r;
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] == close) {
        st->i++;
        return putc1(st, (char)close);
    }
    for (;;) {
        if (open == '{') {
            Span k;
            if ((r = member_key(st, keys, &nkeys, &k))) return r;
        }
        if ((r = copy_value(st, depth + 1))) return r;
        int more;
        if ((r = member_end(st, close, &more))) return r;
        if (!more) return putc1(st, (char)close);
    }
}

static int copy_value(St *st, int depth) {
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    unsigned char c = st->s[st->i];
    Span ignored;
    switch (c) {
    case '"':
        return scan_string(st, &ignored, 1);
    case '{':
    case '[':
        return copy_container(st, depth);
    case 't':
        return literal(st, "true", 4);
    case 'f':
        return literal(st, "false", 5);
    case 'n':
        return literal(st, "null", 4);
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return copy_number(st);
        return E_FALL;
    }
}

/* ---- the rules ------------------------------------------------------------- */
static inline int span_is(Span k, const char *lit, Py_ssize_t n) {
    return k.n == n && memcmp(k.p, lit, n) == 0;
}
#define IS(k, lit) span_is((k), lit, (Py_ssize_t)(sizeof(lit) - 1))

/* ts + shift, written as Python writes the result (rules.TimeShifter) */
static int put_shifted_ts(St *st, const Ctx *cx, const Num *num) {
    if (num->ip.n + num->fp.n > 30 || num->fp.n > 9) return E_FALL; /* |shift| < 1e18 ns: no overflow */
    __int128 v = 0;
    for (Py_ssize_t k = 0; k < num->ip.n; k++) v = v * 10 + (num->ip.p[k] - '0');
    for (Py_ssize_t k = 0; k < num->fp.n; k++) v = v * 10 + (num->fp.p[k] - '0');
    if (num->neg) v = -v;
    int f = (int)num->fp.n; /* ts = v * 10**-f */
    if (!num->has_frac && cx->shift_exp == 0) {
        /* int + whole-microsecond shift: a Python int */
        __int128 r = v + cx->shift_coef;
        if (r < 0) return E_FALL; /* before the output base: Python notes it (rules._early) */
        return put_u128(st, (unsigned __int128)r, 1);
    }
    /* Decimal addition: exact, exponent = min of the two exponents */
    int e = f > -cx->shift_exp ? f : -cx->shift_exp;
    __int128 a = v, b = cx->shift_coef;
    for (int k = f; k < e; k++) a *= 10;
    for (int k = -cx->shift_exp; k < e; k++) b *= 10;
    __int128 r = a + b;
    if (r < 0) return E_FALL; /* before the output base: Python notes it (rules._early) */
    unsigned __int128 m = (unsigned __int128)r;
    if (m > (unsigned __int128)UINT64_MAX) return E_FALL; /* beyond any real trace: Python's call */
    unsigned long long m64 = (unsigned long long)m, t = m64, p10 = 1;
    /* Decimal's str() switches to scientific notation below an adjusted exponent of -6 */
    int digits = 0;
    do {
        digits++;
        t /= 10;
    } while (t);
    if (-e + digits - 1 < -6) return E_FALL;
    if (r < 0 && putc1(st, '-')) return E_NOMEM;
    for (int k = 0; k < e; k++) p10 *= 10;
    if (put_u128(st, m64 / p10, 1)) return E_NOMEM;
    if (e > 0) {
        if (putc1(st, '.')) return E_NOMEM;
        if (put_u128(st, m64 % p10, e)) return E_NOMEM;
    }
    return OK;
}

/* a number as an exact integer of 10**-decimals of its unit (0: more decimals than
 * that, or more than max_int integer digits) */
static int num_scaled(const Num *num, int decimals, Py_ssize_t max_int, __int128 *out) {
    if (num->fp.n > decimals || num->ip.n > max_int) return 0;
    __int128 v = 0;
    for (Py_ssize_t k = 0; k < num->ip.n; k++) v = v * 10 + (num->ip.p[k] - '0');
    for (Py_ssize_t k = 0; k < decimals; k++) v = v * 10 + (k < num->fp.n ? num->fp.p[k] - '0' : 0);
    *out = num->neg ? -v : v;
    return 1;
}

/* microseconds in ns, exactly (timeunits.us_to_ns); 0 when more than 3 decimals
 * (sub-ns rounding: Python's call) */
static int num_to_ns(const Num *num, __int128 *ns) { return num_scaled(num, 3, 24, ns); }

/* a ts/dur Python refuses as beyond any clock (timeunits.time_problem: int64 ns, for a
 * ts also once added to the rank's base): such events go back to Python, which names
 * them (or --salvage drops them) */
static int beyond_clock(const Num *num, __int128 base) {
    __int128 ns;
    if (!num_to_ns(num, &ns)) return num->ip.n > 15; /* sub-ns digits: only large ones can be */
    const __int128 lim = (__int128)1 << 63;
    return ns >= lim || ns < -lim || ns + base >= lim || ns + base < -lim;
}

/* a time info's span leaves to Python: one that could be beyond the clock once the
 * rank's base (any within 2**62 ns of the epoch) is added; Python knows the base */
static int time_unsure(const Num *num) {
    const __int128 far = (__int128)1 << 62;
    return beyond_clock(num, far) || beyond_clock(num, -far);
}

static int is_gpu_cat(Span c) {
    return IS(c, "kernel") || IS(c, "gpu_memcpy") || IS(c, "gpu_memset") || IS(c, "gpu_user_annotation") ||
           IS(c, "Kernel") || IS(c, "Memcpy") || IS(c, "Memset");
}

/* a string token's content (as scan_string accepts it: ASCII, escapes \" \\ \n \r \t
 * \b \f only) as the Python str it decodes to: sets of categories and arg keys hold
 * decoded text, so "my\tcat" must be looked up with its tab, not its backslash */
static PyObject *span_text(Span k) {
    if (!memchr(k.p, '\\', k.n)) return PyUnicode_DecodeASCII((const char *)k.p, k.n, NULL);
    char *d = PyMem_Malloc(k.n ? k.n : 1);
    if (!d) return PyErr_NoMemory();
    Py_ssize_t m = 0;
    for (Py_ssize_t j = 0; j < k.n; j++) {
        unsigned char c = k.p[j];
        if (c == '\\' && j + 1 < k.n) {
            c = k.p[++j];
            c = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c == 'b' ? '\b' : c == 'f' ? '\f' : c;
        }
        d[m++] = (char)c;
    }
    PyObject *u = PyUnicode_DecodeASCII(d, m, NULL);
    PyMem_Free(d);
    return u;
}

static int set_has_text(PyObject *set, Span k, int *has) {
    PyObject *u = span_text(k);
    if (!u) return E_NOMEM;
    int c = PySet_Contains(set, u);
    Py_DECREF(u);
    if (c < 0) return E_NOMEM;
    *has = c;
    return OK;
}

/* the value of a link-id arg: small ints get the rank's id offset; others go to Python
 * unless the Python rule keeps them as they are (null; sentinels of non-strict keys) */
static int link_value(St *st, const Ctx *cx, int strict, int common) {
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    unsigned char c = st->s[st->i];
    if (c == 'n') {
        if (strict && !common) return E_FALL; /* map_id(None) raises */
        return literal(st, "null", 4);
    }
    if (c != '-' && (c < '0' || c > '9')) return E_FALL;
    long long v;
    Span text;
    int r = scan_int(st, &v, &text);
    if (r) return r;
    if (v >= 0 && v < ID_LIMIT) return put_ll(st, v + cx->id_off);
    if (strict) return E_FALL;
    return put(st, text.p, text.n);
}

static int rewrite_args(St *st, const Ctx *cx) {
    Span keys[MAX_KEYS];
    int nkeys = 0, r, kept = 0;
    st->i++; /* '{' */
    if ((r = putc1(st, '{'))) return r;
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    int empty = st->s[st->i] == '}';
    if (empty) st->i++;
    while (!empty) {
        Py_ssize_t member_out = st->olen;
        Span k;
        if (kept && (r = putc1(st, ','))) return r;
        if ((r = member_key(st, keys, &nkeys, &k))) return r;
        if (IS(k, "rank")) return E_FALL; /* Python overwrites it in place */
        int keep = 1;
        if (cx->keep_args != Py_None && (r = set_has_text(cx->keep_args, k, &keep))) return r;
        if (IS(k, "correlation") || IS(k, "External id"))
            r = link_value(st, cx, 1, 1);
        else if (IS(k, "external id"))
            r = link_value(st, cx, 1, 0);
        else if (IS(k, "wait_on_cuda_event_record_corr_id") || IS(k, "wait_on_cuda_event_id") ||
                 IS(k, "Python id") || IS(k, "Python parent id"))
            r = link_value(st, cx, 0, 0);
        else
            r = copy_value(st, 1);
        if (r) return r;
        if (keep)
            kept++;
        else
            st->olen = member_out; /* --args slim/none: not kept */
        skip_ws(st);
        if (st->i >= st->len) return E_MORE;
        unsigned char c = st->s[st->i++];
        if (c == '}') break;
        if (c != ',') return E_FALL;
    }
    if (kept && (r = putc1(st, ','))) return r;
    if ((r = put(st, cx->rank_txt, cx->rank_len))) return r;
    return putc1(st, '}');
}

typedef struct {
    Span ph, cat;
    int has_ph, has_cat, has_pid, has_tid, has_id, has_args;
    long long pid_out;
    int pid_known;
    Py_ssize_t ts_out_start, ts_out_end; /* the written ts text, for first_ts */
    int ts_null;
    int ts_ns_ok, dur_state; /* for the window: ts in ns; dur 0 absent/null, 1 in dur_ns */
    __int128 ts_ns, dur_ns;
} Ev;

/* one pid lookup: small C cache in front of the rewriter's dict */
typedef struct {
    long long orig[4], out[4];
    int n;
} PidCache;

static int lookup_pid(const Ctx *cx, PidCache *pc, long long pid, long long *out, int *known) {
    for (int j = 0; j < pc->n; j++)
        if (pc->orig[j] == pid) {
            *out = pc->out[j];
            *known = 1;
            return OK;
        }
    PyObject *k = PyLong_FromLongLong(pid);
    if (!k) return E_NOMEM;
    PyObject *v = PyDict_GetItemWithError(cx->pids, k);
    Py_DECREF(k);
    if (!v) {
        if (PyErr_Occurred()) return E_NOMEM;
        *known = 0;
        return OK;
    }
    long long o = PyLong_AsLongLong(v);
    if (o == -1 && PyErr_Occurred()) return E_NOMEM;
    if (pc->n < 4) {
        pc->orig[pc->n] = pid;
        pc->out[pc->n] = o;
        pc->n++;
    }
    *out = o;
    *known = 1;
    return OK;
}

static int rewrite_event(St *st, const Ctx *cx, PidCache *pc, Ev *ev) {
    Span keys[MAX_KEYS];
    int nkeys = 0, r;
    memset(ev, 0, sizeof(*ev));
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] != '{') return E_FALL;
    st->i++;
    if ((r = putc1(st, '{'))) return r;
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] == '}') return E_FALL; /* {}: no pid */
    for (;;) {
        Span k;
        if ((r = member_key(st, keys, &nkeys, &k))) return r;
        skip_ws(st);
        if (st->i >= st->len) return E_MORE;
        unsigned char c = st->s[st->i];
        if (IS(k, "ph") || IS(k, "cat")) {
            Span v;
            if ((r = scan_string(st, &v, 1))) return r; /* a non-string ph/cat: Python's call */
            if (IS(k, "ph")) {
                if (IS(v, "M")) return E_FALL; /* metadata is buffered for the labels */
                ev->ph = v;
                ev->has_ph = 1;
            } else {
                ev->cat = v;
                ev->has_cat = 1;
            }
        } else if (IS(k, "pid")) {
            long long pid;
            Span text;
            if ((r = scan_int(st, &pid, &text))) return r;
            if ((r = lookup_pid(cx, pc, pid, &ev->pid_out, &ev->pid_known))) return r;
            /* a new pid: Python allocates its slot, if the event is kept (the filters
             * come first: events dropped before a pid's first kept one stay here) */
            if (ev->pid_known && (r = put_ll(st, ev->pid_out))) return r;
            ev->has_pid = 1;
        } else if (IS(k, "tid")) {
            long long tid;
            Span text;
            if ((r = scan_int(st, &tid, &text))) return r;
            if (tid < 0 || tid >= ID_LIMIT) return E_FALL;
            if ((r = put(st, text.p, text.n))) return r;
            ev->has_tid = 1;
        } else if (IS(k, "ts")) {
            if (c == 'n') {
                return E_FALL; /* a null ts is malformed: Python names the event */
            } else {
                Num num;
                Py_ssize_t start = st->i;
                if ((r = scan_number(st, &num))) return r;
                if (!number_is_canonical(&num) || beyond_clock(&num, cx->abs_base_ns)) return E_FALL;
                ev->ts_ns_ok = num_to_ns(&num, &ev->ts_ns);
                if (cx->window && !ev->ts_ns_ok) return E_FALL;
                ev->ts_out_start = st->olen;
                if (!cx->shifting && num.neg) return E_FALL; /* below the base: rules._early */
                if (cx->shifting)
                    r = put_shifted_ts(st, cx, &num);
                else
                    r = put(st, st->s + start, st->i - start);
                if (r) return r;
                ev->ts_out_end = st->olen;
            }
        } else if (IS(k, "dur")) {
            /* null, strings, booleans (scan_number refuses them) and times beyond any
             * clock are malformed: Python names the event */
            Num num;
            Py_ssize_t start = st->i;
            if ((r = scan_number(st, &num))) return r;
            if (beyond_clock(&num, 0) || !number_is_canonical(&num)) return E_FALL; /* "-0": Python writes 0 */
            if (cx->window) {
                if (!num_to_ns(&num, &ev->dur_ns)) return E_FALL;
                ev->dur_state = 1;
            }
            if ((r = put(st, st->s + start, st->i - start))) return r;
        } else if (IS(k, "id") || IS(k, "bind_id")) {
            long long v;
            Span text;
            if ((r = scan_int(st, &v, &text))) return r;
            if (v < 0 || v >= ID_LIMIT) return E_FALL;
            if ((r = put_ll(st, v + cx->id_off))) return r;
            if (IS(k, "id")) ev->has_id = 1;
        } else if (IS(k, "args")) {
            if (c == '{') {
                if ((r = rewrite_args(st, cx))) return r;
            } else if (c == 'n') {
                Py_ssize_t at = st->olen;
                if ((r = literal(st, "null", 4))) return r;
                st->olen = at; /* args null: Python replaces it in place */
                if ((r = putc1(st, '{')) || (r = put(st, cx->rank_txt, cx->rank_len)) || (r = putc1(st, '}')))
                    return r;
            } else {
                return E_FALL;
            }
            ev->has_args = 1;
        } else {
            if ((r = copy_value(st, 1))) return r;
        }
        int more;
        if ((r = member_end(st, '}', &more))) return r;
        if (!more) break;
    }
    if (!ev->has_args) {
        /* Python appends args {"rank": r} as the last key */
        if ((r = putc1(st, ',')) || (r = put(st, "\"args\":{", 8)) || (r = put(st, cx->rank_txt, cx->rank_len)) ||
            (r = putc1(st, '}')))
            return r;
    }
    return putc1(st, '}');
}

/* the end of the value at st->i, without judging it (E_MORE/E_FALL when unbalanced) */
static Py_ssize_t balanced_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    int depth = 0;
    if (i >= n || s[i] != '{') return -1;
    for (; i < n; i++) {
        unsigned char c = s[i];
        if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
            if (i >= n) return -1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return i + 1;
        }
    }
    return -1;
}

static int load_ctx(PyObject *o, Ctx *cx) {
    PyObject *v;
#define GETLL(name, field)                                          \
    v = PyObject_GetAttrString(o, name);                            \
    if (!v) return -1;                                              \
    cx->field = PyLong_AsLongLong(v);                               \
    Py_DECREF(v);                                                   \
    if (cx->field == -1 && PyErr_Occurred()) return -1;
    long long rank, shifting, shift_exp;
    GETLL("id_off", id_off)
    GETLL("shift_ns", shift_ns)
    GETLL("shift_coef", shift_coef)
    GETLL("window", window)
    GETLL("abs_base_ns", abs_base_ns)
    GETLL("win_lo", win_lo)
    GETLL("win_hi", win_hi)
    v = PyObject_GetAttrString(o, "shift_exp");
    if (!v) return -1;
    shift_exp = PyLong_AsLongLong(v);
    Py_DECREF(v);
    v = PyObject_GetAttrString(o, "shifting");
    if (!v) return -1;
    shifting = PyObject_IsTrue(v);
    Py_DECREF(v);
    v = PyObject_GetAttrString(o, "rank");
    if (!v) return -1;
    rank = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (PyErr_Occurred()) return -1;
    cx->shift_exp = (int)shift_exp;
    cx->shifting = (int)shifting;
    cx->rank_len = snprintf(cx->rank_txt, sizeof(cx->rank_txt), "\"rank\":%lld", rank);
#undef GETLL
    /* borrowed for the call: the context object keeps them alive */
    const char *names[] = {"pids", "first_ts", "gpu_like", "drop_cats", "keep_args", "decimal"};
    PyObject **slots[] = {&cx->pids, &cx->first_ts, &cx->gpu_like, &cx->drop_cats, &cx->keep_args, &cx->decimal};
    for (int j = 0; j < 6; j++) {
        v = PyObject_GetAttrString(o, names[j]);
        if (!v) return -1;
        *slots[j] = v;
        Py_DECREF(v);
    }
    if (!PyDict_Check(cx->pids) || !PyDict_Check(cx->first_ts) || !PySet_Check(cx->gpu_like) ||
        !PyAnySet_Check(cx->drop_cats) || (cx->keep_args != Py_None && !PyAnySet_Check(cx->keep_args))) {
        PyErr_SetString(PyExc_TypeError, "kernel context has the wrong types");
        return -1;
    }
    return 0;
}

/* record what labels need of a kept event: its pid's first ts, GPU work on the pid */
static int after_kept(St *st, const Ctx *cx, const Ev *ev) {
    PyObject *pid = PyLong_FromLongLong(ev->pid_out);
    if (!pid) return E_NOMEM;
    int r = OK;
    int has = PyDict_Contains(cx->first_ts, pid);
    if (has < 0) r = E_NOMEM;
    if (!r && !has) {
        PyObject *ts;
        if (ev->ts_out_end == 0 || ev->ts_null) {
            ts = PyLong_FromLong(0);
        } else {
            const char *t = st->o + ev->ts_out_start;
            Py_ssize_t n = ev->ts_out_end - ev->ts_out_start;
            PyObject *text = PyUnicode_DecodeASCII(t, n, NULL);
            ts = NULL;
            if (text) {
                ts = memchr(t, '.', n) ? PyObject_CallOneArg(cx->decimal, text) : PyLong_FromUnicodeObject(text, 10);
                Py_DECREF(text);
            }
        }
        if (!ts || PyDict_SetItem(cx->first_ts, pid, ts) < 0) r = E_NOMEM;
        Py_XDECREF(ts);
    }
    if (!r && ev->has_cat && is_gpu_cat(ev->cat) && PySet_Add(cx->gpu_like, pid) < 0) r = E_NOMEM;
    Py_DECREF(pid);
    return r;
}

typedef struct {
    Span cat;
    int dropped;
} CatMemo;

/* Between events: the separator and the array's end. 1: an event starts at st->i;
 * 0: the call stops here, and status, consumed and skip_to say why and where (the end
 * of the buffer leaves them as they are: NEED_MORE). */
static int next_event(St *st, int *need_sep, int *at_start, Py_ssize_t *consumed, int *status, Py_ssize_t *skip_to) {
    skip_ws(st);
    if (st->i >= st->len) return 0;
    if (*need_sep) {
        unsigned char c = st->s[st->i];
        if (c == ']') {
            *status = ST_END;
            *consumed = st->i;
            return 0;
        }
        if (c != ',') {
            *status = ST_FALLBACK; /* no separator: invalid JSON, Python's reader reports it */
            *skip_to = -2;
            return 0;
        }
        st->i++;
        *consumed = st->i;
        *need_sep = 0;
        skip_ws(st);
        if (st->i >= st->len) return 0;
    }
    if (st->s[st->i] == ']') {
        if (*at_start) {
            *status = ST_END;
            *consumed = st->i;
        } else {
            *status = ST_FALLBACK; /* "[...,]": invalid, Python's reader reports it */
            *skip_to = -2;
        }
        return 0;
    }
    *at_start = 0;
    return 1;
}

/* An event the call cannot finish: its partial output is dropped and the call stops
 * before it, to wait for more input (E_MORE) or to hand it back (E_FALL, with the end
 * of its text when that is complete). */
static void stop_before(St *st, int e, Py_ssize_t ev_start, Py_ssize_t out_start, int *status,
                        Py_ssize_t *skip_to, Py_ssize_t *consumed) {
    st->olen = out_start;
    if (e == E_FALL) {
        *status = ST_FALLBACK;
        *skip_to = balanced_end(st->s, ev_start, st->len);
    }
    *consumed = ev_start;
}

/* a call's output as bytes, its buffer freed (NULL with an exception: no memory) */
static PyObject *output_bytes(St *st, int r) {
    if (r == E_NOMEM) {
        PyMem_Free(st->o);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(st->o, st->olen);
    PyMem_Free(st->o);
    return out;
}

static PyObject *kernel_rewrite(PyObject *self, PyObject *args) {
    PyObject *ctx_obj;
    Py_buffer buf;
    Py_ssize_t pos;
    int need_sep, at_start;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*npp", &ctx_obj, &buf, &pos, &need_sep, &at_start)) return NULL;
    Ctx cx;
    St st;
    st.o = NULL;
    if (load_ctx(ctx_obj, &cx) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    st.s = (const unsigned char *)buf.buf;
    st.len = buf.len;
    st.i = pos;
    st.olen = 0;
    st.nowrite = 0;
    st.ocap = buf.len + buf.len / 4 + 4096;
    st.o = PyMem_Malloc(st.ocap);
    if (!st.o) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    PidCache pc = {{0}, {0}, 0};
    CatMemo memo[8];
    int nmemo = 0;
    long long n_in = 0, n_drop = 0, n_out = 0;
    int status = ST_NEED_MORE, r = OK;
    Py_ssize_t consumed = pos, skip_to = -1;
    while (next_event(&st, &need_sep, &at_start, &consumed, &status, &skip_to)) {
        Py_ssize_t ev_start = st.i, out_start = st.olen;
        if (n_out && (r = put(&st, ",\n", 2))) break;
        Ev ev;
        r = rewrite_event(&st, &cx, &pc, &ev);
        if (r == OK) {
            int dropped = 0;
            if (ev.has_cat) {
                int found = 0;
                for (int j = 0; j < nmemo; j++)
                    if (memo[j].cat.n == ev.cat.n && memcmp(memo[j].cat.p, ev.cat.p, ev.cat.n) == 0) {
                        dropped = memo[j].dropped;
                        found = 1;
                        break;
                    }
                if (!found) {
                    if ((r = set_has_text(cx.drop_cats, ev.cat, &dropped))) break;
                    if (nmemo < 8) {
                        memo[nmemo].cat = ev.cat;
                        memo[nmemo].dropped = dropped;
                        nmemo++;
                    }
                }
            }
            if (!dropped && cx.window) {
                /* RankRewriter._in_window on the unshifted ts: no time, no place in a window */
                if (ev.ts_out_end == 0 || ev.ts_null) {
                    dropped = 1;
                } else {
                    __int128 start = (__int128)cx.abs_base_ns + ev.ts_ns;
                    __int128 dur = (ev.dur_state == 1 && ev.has_ph && IS(ev.ph, "X")) ? ev.dur_ns : 0;
                    if (dur < 0) dur = 0;
                    dropped = !(start <= cx.win_hi && start + dur >= cx.win_lo);
                }
            }
            if (dropped) {
                st.olen = out_start;
                n_drop++;
            } else if (!ev.has_pid || !ev.pid_known || !ev.has_tid ||
                       (ev.has_ph && !ev.has_id && ev.ph.n == 1 &&
                        (ev.ph.p[0] == 's' || ev.ph.p[0] == 't' || ev.ph.p[0] == 'f')) ||
                       (cx.window && ev.has_cat && IS(ev.cat, "Trace"))) {
                /* Python appends pid/tid, names the flow without an id, or decides
                 * whether Kineto's profiler span fits the window (select/spans.py) */
                r = E_FALL;
            } else {
                if ((r = after_kept(&st, &cx, &ev))) break;
                n_out++;
            }
        }
        if (r == E_NOMEM) break;
        if (r != OK) {
            stop_before(&st, r, ev_start, out_start, &status, &skip_to, &consumed);
            r = OK;
            break;
        }
        n_in++;
        consumed = st.i;
        need_sep = 1;
    }
    PyBuffer_Release(&buf);
    PyObject *out = output_bytes(&st, r);
    if (!out) return NULL;
    return Py_BuildValue("(NniniLLL)", out, consumed, status, skip_to, need_sep, n_in, n_drop, n_out);
}


/* ---- side passes: count, time and select events without building them ------- */
typedef struct {
    PyObject *ph, *cat, *name_prefix; /* bytes or None: what a selected event must have */
    PyObject *name_contains;          /* tuple of bytes or None: ... and a name holding one, */
    PyObject *text_contains;          /* bytes or None: ... or an event text holding this */
    int extremes;                     /* fold first ts / last end of unselected events */
} Sel;

static inline Span bytes_span(PyObject *b) {
    Span sp = {(const unsigned char *)PyBytes_AS_STRING(b), PyBytes_GET_SIZE(b)};
    return sp;
}

/* the text holds the needle: a search that tests 16 positions at a time for the
 * needle's first two bytes (glibc's memmem costs more on short texts) */
static int holds(Span text, Span w) {
    const unsigned char *p = text.p;
    Py_ssize_t n = text.n, i = 0;
    if (n < w.n) return 0;
    if (w.n <= 1) return w.n == 0 || memchr(p, w.p[0], n) != NULL;
#ifdef __SSE2__
    const __m128i c0 = _mm_set1_epi8((char)w.p[0]), c1 = _mm_set1_epi8((char)w.p[1]);
    for (; i + 17 <= n; i += 16) {
        __m128i a = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), c0);
        __m128i b = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i + 1)), c1);
        for (unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(a, b)); m; m &= m - 1) {
            Py_ssize_t at = i + __builtin_ctz(m);
            if (at + w.n <= n && memcmp(p + at + 2, w.p + 2, w.n - 2) == 0) return 1;
        }
    }
#endif
    for (; i + w.n <= n; i++)
        if (p[i] == w.p[0] && memcmp(p + i, w.p, w.n) == 0) return 1;
    return 0;
}

/* microseconds as an exact integer of 1e-9 us (0: more than 9 decimals) */
static int num_to_nano_us(const Num *num, __int128 *out) { return num_scaled(num, 9, 20, out); }

static int bytes_match(PyObject *want, Span got, int prefix) {
    Py_ssize_t n = PyBytes_GET_SIZE(want);
    if (prefix ? got.n < n : got.n != n) return 0;
    return memcmp(PyBytes_AS_STRING(want), got.p, n) == 0;
}

typedef struct {
    int sure, selected, timed;
    __int128 ts, end;
} ScanEv;

/* One event, tokenised and validated (nothing written: the caller copies the text of a
 * selected one); sure = judged here; selected = for Python. */
static int scan_event(St *st, const Sel *sel, ScanEv *ev) {
    Py_ssize_t ev_start = st->i;
    Span keys[MAX_KEYS], ph = {NULL, 0}, cat = {NULL, 0}, name = {NULL, 0};
    int nkeys = 0, r, has_ph = 0, has_cat = 0, has_name = 0, unsure = 0, ts_ok = 0, dur_ok = 0;
    __int128 ts = 0, dur = 0;
    memset(ev, 0, sizeof(*ev));
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] != '{') return E_FALL;
    st->i++;
    if ((r = putc1(st, '{'))) return r;
    skip_ws(st);
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] == '}') {
        st->i++;
        if ((r = putc1(st, '}'))) return r;
    } else {
        for (;;) {
            Span k;
            if ((r = member_key(st, keys, &nkeys, &k))) return r;
            skip_ws(st);
            if (st->i >= st->len) return E_MORE;
            unsigned char c = st->s[st->i];
            int is_ph = IS(k, "ph"), is_cat = IS(k, "cat"), is_name = IS(k, "name");
            if ((is_ph || is_cat || is_name) && c == '"') {
                Span v;
                if ((r = scan_string(st, &v, 1))) return r;
                for (Py_ssize_t j = 0; j < v.n; j++)
                    if (v.p[j] == '\\') unsure = 1; /* the decoded text differs: Python compares */
                if (is_ph) ph = v, has_ph = 1;
                if (is_cat) cat = v, has_cat = 1;
                if (is_name) name = v, has_name = 1;
            } else if (is_ph || is_cat || is_name) {
                if ((r = copy_value(st, 1))) return r;
                unsure = 1; /* not a string: Python's comparison decides */
            } else if ((IS(k, "ts") || IS(k, "dur")) && (c == '-' || (c >= '0' && c <= '9'))) {
                Num num;
                Py_ssize_t start = st->i;
                __int128 v;
                if ((r = scan_number(st, &num))) return r;
                if ((r = put(st, st->s + start, st->i - start))) return r;
                if (!num_to_nano_us(&num, &v) || beyond_clock(&num, 0) || (sel->extremes && time_unsure(&num)))
                    return E_FALL; /* Python judges */
                if (IS(k, "ts")) ts = v, ts_ok = 1;
                else dur = v, dur_ok = 1;
            } else {
                if (sel->extremes && IS(k, "dur")) return E_FALL; /* malformed: Python leaves it out of the span */
                if ((r = copy_value(st, 1))) return r;
            }
            int more;
            if ((r = member_end(st, '}', &more))) return r;
            if (!more) break;
        }
        if ((r = putc1(st, '}'))) return r;
    }
    if (unsure) {
        ev->selected = 1; /* Python judges it whole */
        return OK;
    }
    int match = 1;
    if (sel->ph != Py_None) match = match && has_ph && bytes_match(sel->ph, ph, 0);
    if (sel->cat != Py_None) match = match && has_cat && bytes_match(sel->cat, cat, 0);
    if (sel->name_prefix != Py_None) match = match && has_name && bytes_match(sel->name_prefix, name, 1);
    if (sel->ph == Py_None && sel->cat == Py_None && sel->name_prefix == Py_None) match = 0;
    if (match && (sel->name_contains != Py_None || sel->text_contains != Py_None)) {
        int more = 0;
        if (sel->name_contains != Py_None && has_name) {
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sel->name_contains) && !more; j++) {
                PyObject *b = PyTuple_GET_ITEM(sel->name_contains, j);
                more = holds(name, bytes_span(b));
            }
        }
        if (!more && sel->text_contains != Py_None) {
            Span text = {st->s + ev_start, st->i - ev_start};
            more = holds(text, bytes_span(sel->text_contains)) ||
                   memchr(text.p, '\\', text.n) != NULL; /* an escape could spell it: Python looks */
        }
        match = more;
    }
    ev->selected = match;
    ev->sure = !match;
    if (!match && sel->extremes && !(has_ph && IS(ph, "M")) && ts_ok) {
        ev->timed = 1;
        ev->ts = ts;
        ev->end = (dur_ok && dur > 0) ? ts + dur : ts;
    }
    return OK;
}

static PyObject *int128_to_py(__int128 v) {
    char tmp[64];
    int k = 0, neg = v < 0;
    unsigned __int128 m = neg ? (unsigned __int128)(-v) : (unsigned __int128)v;
    do {
        tmp[k++] = (char)('0' + (int)(m % 10));
        m /= 10;
    } while (m);
    char txt[66];
    int j = 0;
    if (neg) txt[j++] = '-';
    while (k) txt[j++] = tmp[--k];
    txt[j] = 0;
    return PyLong_FromString(txt, NULL, 10);
}


/* ---- skim: the scan's selection without validating the text ---------------------
 * For passes whose input the merge itself reads and validates right after (--align on
 * a strict merge: an invalid file fails the merge whatever the pass found), events are
 * only delimited: strings with their escapes, and nesting (64 bytes at a time with
 * SSE2, byte tables elsewhere: 4-5x less work per byte than the validating scan,
 * which was the pass's cost). The selection is by plain substrings of the event's
 * text, a superset of the scan's: an event goes to Python when its text holds every
 * given field as a JSON string would spell it (ph and cat as "value", the name prefix
 * as "prefix: compared where strings start) and, when name_contains or text_contains
 * are given, one of them anywhere (searched for in those events only); or whenever
 * the text has an escape (it could spell any of them). Such a candidate (a few per mille
 * of the events) then goes through the validating scan, so what is handed over is
 * judged and decodes exactly as there. A non-object is handed back, an event cut by
 * the end of the buffer waits for more input, as in the scan. */
static const unsigned char SKIM_OUTSIDE[256] = {['"'] = 1, ['{'] = 1, ['}'] = 1, ['['] = 1, [']'] = 1};
static const unsigned char SKIM_INSIDE[256] = {['"'] = 1, ['\\'] = 1};

/* what the skim looks for: plain substrings of an event's text, built once a call */
typedef struct {
    char buf[512];
    Span all[3]; /* each must be there: "ph", "cat", "name prefix */
    int n_all;
    Span any[8]; /* one of them must be there (none given: no condition), searched for
                  * in the events that have all of the others (few) */
    int n_any;
} Needles;

/* the needles for sel, 0 when they do not fit (the validating scan is used instead) */
static int skim_needles(const Sel *sel, Needles *nd) {
    PyObject *all[3] = {sel->ph, sel->cat, sel->name_prefix};
    Py_ssize_t used = 0;
    nd->n_all = nd->n_any = 0;
    for (int j = 0; j < 3; j++) {
        if (all[j] == Py_None) continue;
        Py_ssize_t n = PyBytes_GET_SIZE(all[j]), closed = j < 2;
        if (used + n + 2 > (Py_ssize_t)sizeof(nd->buf)) return 0;
        char *p = nd->buf + used;
        p[0] = '"';
        memcpy(p + 1, PyBytes_AS_STRING(all[j]), n);
        if (closed) p[n + 1] = '"';
        nd->all[nd->n_all].p = (const unsigned char *)p;
        nd->all[nd->n_all++].n = n + 1 + closed;
        used += n + 2;
    }
    PyObject *anys = sel->name_contains;
    Py_ssize_t k = anys == Py_None ? 0 : PyTuple_GET_SIZE(anys);
    if (k + 1 > 8) return 0;
    for (Py_ssize_t j = 0; j <= k; j++) {
        PyObject *v = j < k ? PyTuple_GET_ITEM(anys, j) : sel->text_contains;
        if (v == Py_None) continue;
        nd->any[nd->n_any].p = (const unsigned char *)PyBytes_AS_STRING(v);
        nd->any[nd->n_any].n = PyBytes_GET_SIZE(v);
        nd->n_any++;
    }
    return 1;
}

/* the needle w (starting with its quote) is at s[at] */
static inline int starts_here(const unsigned char *s, Py_ssize_t at, Py_ssize_t n, Span w) {
    return n - at >= w.n && (w.n < 2 || s[at + 1] == w.p[1]) && memcmp(s + at, w.p, w.n) == 0;
}


/* where one event's skim is: the next byte to read, the nesting depth, whether that
 * byte is inside a string (its opening quote already read), and what was found */
typedef struct {
    Py_ssize_t i;
    int depth, in_string, escaped;
    unsigned found;
} Skim;

static inline void skim_quote(const unsigned char *s, Py_ssize_t at, Py_ssize_t n, const Needles *nd, Skim *k) {
    /* the quoted needles ("kernel", "ProfilerStep#) can only start at a quote that
     * opens a string: compared there, not searched for */
    for (int j = 0; j < nd->n_all; j++)
        if (!(k->found >> j & 1) && starts_here(s, at, n, nd->all[j])) k->found |= 1u << j;
}

/* byte by byte (two tables) to the end of the event: 1 done, 0 the buffer ended first */
static int skim_bytes(const unsigned char *s, Py_ssize_t n, const Needles *nd, Skim *k) {
    Py_ssize_t i = k->i;
    for (;;) {
        if (!k->in_string) {
            while (i < n && !SKIM_OUTSIDE[s[i]]) i++;
            if (i >= n) return 0;
            unsigned char c = s[i++];
            if (c == '{' || c == '[') {
                k->depth++;
            } else if (c != '"') {
                if (--k->depth == 0) break;
            } else {
                skim_quote(s, i - 1, n, nd, k);
                k->in_string = 1;
            }
            continue;
        }
        while (i < n && !SKIM_INSIDE[s[i]]) i++;
        if (i >= n) return 0;
        if (s[i] == '\\') {
            k->escaped = 1;
            i += 2;
            continue;
        }
        i++;
        k->in_string = 0;
    }
    k->i = i;
    return 1;
}

#ifdef __SSE2__
/* 64 bytes at a time (SSE2, every x86-64): bit masks of quotes, backslashes, openers
 * and closers; the string mask is the prefix XOR of the quotes (a block with a
 * backslash goes byte by byte, as in simdjson's first stage without its escape
 * arithmetic: Kineto writes almost none). About 3x the byte tables' speed. */
static inline uint64_t eq64(const unsigned char *p, __m128i c) {
    uint64_t m = 0;
    for (int k = 0; k < 4; k++)
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * k)), c))
             << (16 * k);
    return m;
}

static inline uint64_t prefix_xor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* the quoted needles whose second byte follows one of the opening quotes in oq */
static inline void skim_block_quotes(const unsigned char *s, Py_ssize_t b, Py_ssize_t n, uint64_t oq,
                                     const Needles *nd, Skim *k) {
    for (int j = 0; j < nd->n_all; j++) {
        if (k->found >> j & 1) continue;
        Span w = nd->all[j];
        uint64_t c = w.n < 2 ? oq : oq & eq64(s + b + 1, _mm_set1_epi8((char)w.p[1]));
        for (; c && !(k->found >> j & 1); c &= c - 1)
            if (starts_here(s, b + __builtin_ctzll(c), n, w)) k->found |= 1u << j;
    }
}

/* whole blocks while 65 bytes are left: 1 the event ended, 0 stopped at a block start
 * (a backslash in it, or the end of the buffer near) with k as the bytes need it */
static int skim_blocks(const unsigned char *s, Py_ssize_t n, const Needles *nd, Skim *k) {
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}'), low = _mm_set1_epi8(0x20);
    Py_ssize_t b = k->i;
    while (b + 65 <= n) {
        uint64_t q = 0, bs = 0, op = 0, cl = 0;
        for (int j = 0; j < 4; j++) {
            __m128i v = _mm_loadu_si128((const __m128i *)(s + b + 16 * j));
            __m128i folded = _mm_or_si128(v, low); /* '[' -> '{', ']' -> '}' */
            q |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) << (16 * j);
            bs |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, bslash)) << (16 * j);
            op |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, open)) << (16 * j);
            cl |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(folded, close)) << (16 * j);
        }
        if (bs) break;
        uint64_t inside = prefix_xor(q) ^ (k->in_string ? ~(uint64_t)0 : 0);
        uint64_t oq = q & inside; /* opening quotes */
        uint64_t structural = (op | cl) & ~inside;
        for (; structural; structural &= structural - 1) {
            int at = __builtin_ctzll(structural);
            if (op >> at & 1) {
                k->depth++;
            } else if (--k->depth == 0) {
                uint64_t upto = at == 63 ? ~(uint64_t)0 : (((uint64_t)1 << (at + 1)) - 1);
                if (oq & upto) skim_block_quotes(s, b, n, oq & upto, nd, k);
                k->i = b + at + 1;
                k->in_string = 0;
                return 1;
            }
        }
        if (oq) skim_block_quotes(s, b, n, oq, nd, k);
        k->in_string = (int)(inside >> 63);
        b += 64;
    }
    k->i = b;
    return 0;
}
#endif

static int skim_event(St *st, const Sel *sel, const Needles *nd, ScanEv *ev) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len;
    Skim k = {st->i, 0, 0, 0, 0};
    memset(ev, 0, sizeof(*ev));
    if (k.i >= n) return E_MORE;
    if (s[k.i] != '{') return E_FALL;
    int done = 0;
#ifdef __SSE2__
    done = skim_blocks(s, n, nd, &k);
#endif
    if (!done && !skim_bytes(s, n, nd, &k)) return E_MORE;
    Span text = {s + st->i, k.i - st->i};
    unsigned want = (1u << nd->n_all) - 1;
    int match = nd->n_all > 0 && k.found == want;
    if (match && nd->n_any) {
        int any = 0;
        for (int j = 0; j < nd->n_any && !any; j++) any = holds(text, nd->any[j]);
        match = any;
    }
    if (!match && !k.escaped) {
        st->i = k.i;
        ev->sure = 1;
        return OK;
    }
    return scan_event(st, sel, ev); /* a candidate: the validating scan judges it (and its text decodes) */
}

/* ---- walk: the skim with times (info's single pass) --------------------------------
 * info counts every event, finds the first ts and last ts + dur, and keeps a few (the
 * collectives, the steps): the validating scan read every byte of every event for that,
 * about as much work as the merge. The walk reads an event's top level token by token
 * (keys, strings, numbers, literals, separators; ts and dur exactly as the scan reads
 * them) and only delimits what is nested (args), with the skim's blocks. Its selection
 * is the scan's, on the same ph, cat and name; a text_contains spelled as a JSON string
 * ("Collective name" in quotes) is compared where strings start (in text without
 * escapes it can start nowhere else), any other is searched for in the event's text.
 * An escape in a top-level string, a repeated ph/cat/name/ts/dur key, or anything it
 * does not expect: the validating scan judges that event, so odd events go where they
 * went before (a selected one goes through it too, for its text to decode exactly).
 * Not checked: the text nested in an event (the merge validates it). */

/* time_unsure's bound in the walk's unit (1e-9 us): 2**62 ns */
#define WALK_FAR ((((__int128)1) << 62) * 1000000)

/* what the walk found in one event */
typedef struct {
    Span f[3]; /* ph, cat, name */
    unsigned seen; /* keys met: ph 1, cat 2, name 4, ts 8, dur 16 */
    int escaped, found, ts_ok, dur_ok;
    __int128 ts, dur;
} Walk;

/* the walk's needle: text_contains when it is a quoted string without quotes or
 * backslashes inside (0: it is searched for in the event's text instead) */
static int walk_needle(const Sel *sel, Needles *nd) {
    memset(nd, 0, sizeof(*nd));
    if (sel->text_contains == Py_None) return 0;
    Span t = bytes_span(sel->text_contains);
    if (t.n < 2 || t.p[0] != '"' || t.p[t.n - 1] != '"') return 0;
    for (Py_ssize_t j = 1; j + 1 < t.n; j++)
        if (t.p[j] == '"' || t.p[j] == '\\') return 0;
    nd->all[0] = t;
    nd->n_all = 1;
    return 1;
}

/* a string without escapes at s[*i] == '"' (E_FALL: it has one); the needle's
 * content compared with it */
static inline int walk_string(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i, Span *v, const Needles *nd,
                              Walk *w) {
    Py_ssize_t j = *i + 1, e = j;
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\');
    for (; e + 16 <= n; e += 16) { /* names run long: 16 bytes at a time */
        __m128i b = _mm_loadu_si128((const __m128i *)(s + e));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(b, quote), _mm_cmpeq_epi8(b, bslash)));
        if (m) {
            e += __builtin_ctz(m);
            break;
        }
    }
#endif
    while (e < n && !SKIM_INSIDE[s[e]]) e++;
    if (e >= n) return E_MORE;
    if (s[e] == '\\') return E_FALL;
    v->p = s + j;
    v->n = e - j;
    if (nd->n_all && v->n == nd->all[0].n - 2 && memcmp(v->p, nd->all[0].p + 1, (size_t)v->n) == 0) w->found = 1;
    *i = e + 1;
    return OK;
}

static inline Py_ssize_t walk_ws(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    return i;
}

/* one member's value at s[*i] (bit: which of ph 1, cat 2, name 4, ts 8, dur 16 it is) */
static int walk_value(St *st, Py_ssize_t *i, int bit, const Needles *nd, Walk *w) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len;
    unsigned char c = s[*i];
    Span v;
    if (bit == 16 && c != '-' && (c < '0' || c > '9')) return E_FALL; /* a dur not a number: malformed */
    if (c == '"') {
        int r = walk_string(s, n, i, &v, nd, w);
        if (r == OK && (bit & 7)) w->f[bit >> 1] = v;
        return r;
    }
    if (bit & 7) return E_FALL; /* ph, cat or name not a string: the scan decides */
    if (c == '{' || c == '[') {
        Skim k = {*i, 0, 0, 0, 0};
        int done = 0;
#ifdef __SSE2__
        done = skim_blocks(s, n, nd, &k);
#endif
        if (!done && !skim_bytes(s, n, nd, &k)) return E_MORE;
        w->escaped |= k.escaped;
        w->found |= k.found != 0;
        *i = k.i;
        return OK;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Num num;
        st->i = *i;
        int r = scan_number(st, &num);
        if (r) return r;
        *i = st->i;
        if (bit & 24) {
            __int128 *v = bit == 8 ? &w->ts : &w->dur;
            if (!num_to_nano_us(&num, v) || *v >= WALK_FAR || *v <= -WALK_FAR) return E_FALL;
            *(bit == 8 ? &w->ts_ok : &w->dur_ok) = 1;
        }
        return OK;
    }
    const char *word = c == 't' ? "true" : c == 'f' ? "false" : c == 'n' ? "null" : NULL;
    if (!word) return E_FALL;
    Py_ssize_t wn = (Py_ssize_t)strlen(word);
    if (n - *i < wn) return memcmp(s + *i, word, (size_t)(n - *i)) ? E_FALL : E_MORE;
    if (memcmp(s + *i, word, (size_t)wn)) return E_FALL;
    *i += wn;
    return OK;
}

/* the scan's selection (scan_event) on a walked event */
static int walk_selects(const Sel *sel, const Walk *w, Span text, int quoted) {
    int match = 1;
    if (sel->ph != Py_None) match = match && (w->seen & 1) && bytes_match(sel->ph, w->f[0], 0);
    if (sel->cat != Py_None) match = match && (w->seen & 2) && bytes_match(sel->cat, w->f[1], 0);
    if (sel->name_prefix != Py_None) match = match && (w->seen & 4) && bytes_match(sel->name_prefix, w->f[2], 1);
    if (sel->ph == Py_None && sel->cat == Py_None && sel->name_prefix == Py_None) match = 0;
    if (!match || (sel->name_contains == Py_None && sel->text_contains == Py_None)) return match;
    if (sel->name_contains != Py_None && (w->seen & 4))
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sel->name_contains); j++)
            if (holds(w->f[2], bytes_span(PyTuple_GET_ITEM(sel->name_contains, j)))) return 1;
    if (sel->text_contains == Py_None) return 0;
    return w->escaped || (quoted ? w->found : holds(text, bytes_span(sel->text_contains)));
}

static int walk_event(St *st, const Sel *sel, const Needles *nd, ScanEv *ev) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len, start = st->i, i = st->i;
    Walk w;
    int r = OK;
    memset(&w, 0, sizeof(w));
    memset(ev, 0, sizeof(*ev));
    if (i >= n) return E_MORE;
    if (s[i] != '{') return E_FALL;
    i = walk_ws(s, i + 1, n);
    if (i >= n) return E_MORE;
    if (s[i] == '}') i++;
    else
        for (;;) {
            Span k;
            if (s[i] != '"') goto judge;
            if ((r = walk_string(s, n, &i, &k, nd, &w))) goto fail;
            i = walk_ws(s, i, n);
            if (i >= n) return E_MORE;
            if (s[i] != ':') goto judge;
            i = walk_ws(s, i + 1, n);
            if (i >= n) return E_MORE;
            int bit = IS(k, "ph") ? 1 : IS(k, "cat") ? 2 : IS(k, "name") ? 4 : IS(k, "ts") ? 8 : IS(k, "dur") ? 16 : 0;
            if (w.seen & (unsigned)bit) goto judge; /* repeated: the scan refuses it */
            w.seen |= (unsigned)bit;
            if ((r = walk_value(st, &i, bit, nd, &w))) goto fail;
            i = walk_ws(s, i, n);
            if (i >= n) return E_MORE;
            unsigned char c = s[i++];
            if (c == '}') break;
            if (c != ',') goto judge;
            i = walk_ws(s, i, n);
            if (i >= n) return E_MORE;
        }
    Span text = {s + start, i - start};
    if (walk_selects(sel, &w, text, nd->n_all)) goto judge; /* selected: its text decodes as in the scan */
    st->i = i;
    ev->sure = 1;
    if (sel->extremes && !((w.seen & 1) && IS(w.f[0], "M")) && w.ts_ok) {
        ev->timed = 1;
        ev->ts = w.ts;
        ev->end = (w.dur_ok && w.dur > 0) ? w.ts + w.dur : w.ts;
    }
    return OK;
fail:
    if (r != E_FALL) return r;
judge:
    st->i = start;
    return scan_event(st, sel, ev);
}

static PyObject *kernel_scan(PyObject *self, PyObject *args) {
    PyObject *sel_obj;
    Py_buffer buf;
    Py_ssize_t pos;
    int need_sep, at_start;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oy*npp", &sel_obj, &buf, &pos, &need_sep, &at_start)) return NULL;
    Sel sel;
    enum { NSEL = 5 };
    PyObject *held[NSEL] = {NULL, NULL, NULL, NULL, NULL};
    const char *names[NSEL] = {"ph", "cat", "name_prefix", "text_contains", "name_contains"};
    PyObject **slots[NSEL] = {&sel.ph, &sel.cat, &sel.name_prefix, &sel.text_contains, &sel.name_contains};
    for (int j = 0; j < NSEL; j++) {
        held[j] = PyObject_GetAttrString(sel_obj, names[j]);
        int ok = held[j] && (held[j] == Py_None || (j < 4 ? PyBytes_Check(held[j]) : PyTuple_Check(held[j])));
        if (ok && j == 4 && held[j] != Py_None)
            for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(held[j]); m++)
                ok = ok && PyBytes_Check(PyTuple_GET_ITEM(held[j], m));
        if (!ok) {
            if (held[j]) PyErr_SetString(PyExc_TypeError, "scan selection: bytes, a tuple of bytes, or None");
            for (int m = 0; m <= j; m++) Py_XDECREF(held[m]);
            PyBuffer_Release(&buf);
            return NULL;
        }
        *slots[j] = held[j];
    }
    PyObject *ex = PyObject_GetAttrString(sel_obj, "extremes");
    sel.extremes = ex ? PyObject_IsTrue(ex) : 0;
    Py_XDECREF(ex);
    PyObject *va = PyObject_GetAttrString(sel_obj, "validate");
    int skim = va ? !PyObject_IsTrue(va) : 0, walk = skim && sel.extremes; /* timing: the walk reads the numbers */
    Py_XDECREF(va);
    Needles nd;
    if (walk) walk_needle(&sel, &nd); /* the walk's own needle, when it has one */
    else if (skim && !skim_needles(&sel, &nd)) skim = 0;
    if (PyErr_Occurred()) {
        for (int j = 0; j < NSEL; j++) Py_DECREF(held[j]);
        PyBuffer_Release(&buf);
        return NULL;
    }
    St st;
    st.s = (const unsigned char *)buf.buf;
    st.len = buf.len;
    st.i = pos;
    st.olen = 0;
    st.nowrite = 1;
    st.ocap = 65536;
    st.o = PyMem_Malloc(st.ocap);
    int r = st.o ? OK : E_NOMEM, status = ST_NEED_MORE, timed = 0;
    Py_ssize_t consumed = pos, skip_to = -1;
    long long n_sure = 0;
    __int128 lo = 0, hi = 0;
    while (r == OK && next_event(&st, &need_sep, &at_start, &consumed, &status, &skip_to)) {
        Py_ssize_t ev_start = st.i, out_start = st.olen;
        ScanEv ev;
        int e = walk   ? walk_event(&st, &sel, &nd, &ev)
                : skim ? skim_event(&st, &sel, &nd, &ev)
                       : scan_event(&st, &sel, &ev);
        if (e == E_NOMEM) {
            r = e;
            break;
        }
        if (e != OK) {
            stop_before(&st, e, ev_start, out_start, &status, &skip_to, &consumed);
            break;
        }
        if (ev.selected) {
            /* its text as written, for Python to decode */
            st.nowrite = 0;
            if ((out_start && (r = putc1(&st, ','))) || (r = put(&st, st.s + ev_start, st.i - ev_start))) break;
            st.nowrite = 1;
        } else {
            n_sure++;
            if (ev.timed) {
                if (!timed || ev.ts < lo) lo = ev.ts;
                if (!timed || ev.end > hi) hi = ev.end;
                timed = 1;
            }
        }
        consumed = st.i;
        need_sep = 1;
    }
    PyBuffer_Release(&buf);
    for (int j = 0; j < NSEL; j++) Py_DECREF(held[j]);
    PyObject *out = output_bytes(&st, r);
    if (!out) return NULL;
    PyObject *plo = timed ? int128_to_py(lo) : Py_NewRef(Py_None);
    PyObject *phi = timed ? int128_to_py(hi) : Py_NewRef(Py_None);
    if (!plo || !phi) {
        Py_DECREF(out);
        Py_XDECREF(plo);
        Py_XDECREF(phi);
        return NULL;
    }
    return Py_BuildValue("(NniniLNN)", out, consumed, status, skip_to, need_sep, n_sure, plo, phi);
}

static PyMethodDef methods[] = {
    {"rewrite", kernel_rewrite, METH_VARARGS,
     "rewrite(ctx, buf, pos, need_sep, at_start) -> (out, pos, status, skip_to, need_sep, n_in, n_dropped, n_out)"},
    {"scan", kernel_scan, METH_VARARGS,
     "scan(sel, buf, pos, need_sep, at_start) -> (selected, pos, status, skip_to, need_sep, n_judged, lo, hi)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The compiled kernel (see _kernel.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "NEED_MORE", ST_NEED_MORE) < 0 || PyModule_AddIntConstant(m, "END", ST_END) < 0 ||
        PyModule_AddIntConstant(m, "FALLBACK", ST_FALLBACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
