/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: JSON tokens: white space, strings, numbers, literals, containers (validated, copied). */
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

/* the first STRING_STOP byte at or after s[i] (n: none before the end); 16 bytes at a
 * time (signed compare: bytes below 0x20 and from 0x80 are less than ' '), the table
 * for the last few. Every string reader of the kernel runs on it. */
static inline Py_ssize_t string_stop(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i stop = _mm_or_si128(_mm_cmplt_epi8(b, space),
                                    _mm_or_si128(_mm_cmpeq_epi8(b, quote), _mm_cmpeq_epi8(b, bslash)));
        unsigned m = (unsigned)_mm_movemask_epi8(stop);
        if (m) return i + __builtin_ctz(m);
    }
#endif
    while (i < n && !STRING_STOP[s[i]]) i++;
    return i;
}

/* a string token at st->i: copied verbatim (when out), its content span returned */
static int scan_string(St *st, Span *content, int out) {
    const unsigned char *s = st->s;
    Py_ssize_t i = st->i, n = st->len;
    if (i >= n) return E_MORE;
    if (s[i] != '"') return E_FALL;
    Py_ssize_t start = i++;
    for (;;) {
        i = string_stop(s, i, n);
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
    if (st->needle_n && content->n == st->needle_n && memcmp(content->p, st->needle, (size_t)st->needle_n) == 0)
        st->needle_found = 1;
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
            /* a repeated key matters only to the text written (Python keeps the last
             * value at the first key's place); a scan that writes nothing skips the check */
            if (st->nowrite) nkeys = 0;
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

/* An event's opening brace, copied, and the white space after it: OK with st->i at its
 * first member or its '}' (the rewrite and the scan each decide what an empty event is). */
static int enter_event(St *st) {
    int r;
    if (st->i >= st->len) return E_MORE;
    if (st->s[st->i] != '{') return E_FALL;
    st->i++;
    if ((r = putc1(st, '{'))) return r;
    skip_ws(st);
    return st->i >= st->len ? E_MORE : OK;
}
