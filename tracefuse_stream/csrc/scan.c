/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: scan(): the side passes' validating event scan. */
/* ---- side passes: count, time and select events without building them ------- */
typedef struct {
    PyObject *ph, *cat, *name_prefix; /* bytes or None (cat: or a tuple of bytes, any of them) */
    PyObject *name_contains;          /* tuple of bytes or None: ... and a name holding one, */
    PyObject *text_contains;          /* bytes or None: ... or an event text holding this */
    PyObject *name_cats; /* tuple (bytes or None each) or None: name_contains[j] counts only
                          * in an event of category name_cats[j] (None: any) */
    PyObject *text_cat;  /* bytes or None: text_contains counts only in an event of it */
    int extremes;        /* fold first ts / last end of unselected events */
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

/* the text holds one of the needles (each at least 2 bytes, at most 8 of them): one
 * pass that tests 16 positions at a time for every needle's first two bytes, where
 * holds() made a pass per needle (four a name for info's selection: ~9% of the walk) */
static int holds_any(Span text, const unsigned char *limit, const Span *w, int nw) {
    /* limit: the end of the buffer that holds text; the 16-byte loads may read up to
     * there (a name is followed by its quote and the rest of its event), so a short
     * name takes one load, not the byte loop */
    const unsigned char *p = text.p;
    Py_ssize_t n = text.n, i = 0, shortest = w[0].n;
    for (int k = 1; k < nw; k++)
        if (w[k].n < shortest) shortest = w[k].n;
    if (n < shortest) return 0;
#ifdef __SSE2__
    __m128i c0[8], c1[8];
    for (int k = 0; k < nw; k++) c0[k] = _mm_set1_epi8((char)w[k].p[0]), c1[k] = _mm_set1_epi8((char)w[k].p[1]);
    for (; i + 1 < n && p + i + 17 <= limit; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(p + i)), b = _mm_loadu_si128((const __m128i *)(p + i + 1));
        __m128i hit = _mm_and_si128(_mm_cmpeq_epi8(a, c0[0]), _mm_cmpeq_epi8(b, c1[0]));
        for (int k = 1; k < nw; k++)
            hit = _mm_or_si128(hit, _mm_and_si128(_mm_cmpeq_epi8(a, c0[k]), _mm_cmpeq_epi8(b, c1[k])));
        for (unsigned m = (unsigned)_mm_movemask_epi8(hit); m; m &= m - 1) {
            Py_ssize_t at = i + __builtin_ctz(m);
            for (int k = 0; k < nw; k++)
                if (at + w[k].n <= n && p[at] == w[k].p[0] && p[at + 1] == w[k].p[1] &&
                    memcmp(p + at + 2, w[k].p + 2, (size_t)w[k].n - 2) == 0)
                    return 1;
        }
    }
#endif
    for (; i + shortest <= n; i++)
        for (int k = 0; k < nw; k++)
            if (p[i] == w[k].p[0] && i + w[k].n <= n && memcmp(p + i, w[k].p, (size_t)w[k].n) == 0) return 1;
    return 0;
}

static int bytes_match(PyObject *want, Span got, int prefix) {
    Py_ssize_t n = PyBytes_GET_SIZE(want);
    if (prefix ? got.n < n : got.n != n) return 0;
    const unsigned char *w = (const unsigned char *)PyBytes_AS_STRING(want);
    if (n <= 8) { /* ph "X", short categories: no call */
        for (Py_ssize_t j = 0; j < n; j++)
            if (w[j] != got.p[j]) return 0;
        return 1;
    }
    return memcmp(w, got.p, n) == 0;
}

/* needle j of name_contains counts in an event of category cat (has: it has one) */
static int needle_cat_ok(const Sel *sel, Py_ssize_t j, Span cat, int has) {
    if (sel->name_cats == Py_None) return 1;
    PyObject *c = PyTuple_GET_ITEM(sel->name_cats, j);
    return c == Py_None || (has && bytes_match(c, cat, 0));
}

/* text_contains counts in an event of category cat */
static int text_cat_ok(const Sel *sel, Span cat, int has) {
    return sel->text_cat == Py_None || (has && bytes_match(sel->text_cat, cat, 0));
}

/* the selection's cat (bytes, or a tuple of bytes: any of them) is the event's */
static int cat_match(PyObject *want, Span got) {
    if (!PyTuple_Check(want)) return bytes_match(want, got, 0);
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(want); j++)
        if (bytes_match(PyTuple_GET_ITEM(want, j), got, 0)) return 1;
    return 0;
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
    if ((r = enter_event(st))) return r;
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
    if (sel->cat != Py_None) match = match && has_cat && cat_match(sel->cat, cat);
    if (sel->name_prefix != Py_None) match = match && has_name && bytes_match(sel->name_prefix, name, 1);
    if (sel->ph == Py_None && sel->cat == Py_None && sel->name_prefix == Py_None) match = 0;
    if (match && (sel->name_contains != Py_None || sel->text_contains != Py_None)) {
        int more = 0;
        if (sel->name_contains != Py_None && has_name) {
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sel->name_contains) && !more; j++) {
                PyObject *b = PyTuple_GET_ITEM(sel->name_contains, j);
                more = needle_cat_ok(sel, j, cat, has_cat) && holds(name, bytes_span(b));
            }
        }
        if (!more && sel->text_contains != Py_None && text_cat_ok(sel, cat, has_cat)) {
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

