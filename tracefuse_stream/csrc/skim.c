/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the skim: the scan's selection without validating the text. */
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
    int token; /* the walk: all[0] is met as a whole string token (walk_needle) */
    Span names[8]; /* the walk: sel->name_contains, searched for in one pass (holds_any) */
    int n_names;   /* -1: more than 8 of them, or one shorter than 2 bytes: one pass each */
    int layout;    /* the walk: Kineto's member layout compared whole (walk.c kineto_key) */
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
