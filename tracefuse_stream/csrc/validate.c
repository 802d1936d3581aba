/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the walk's validation of a nested value (an event's args), writing nothing.
 *
 * Why a second validator: the walk (walk.c) must accept exactly the nested text the
 * merge accepts (issue 28: info and merge give one answer), and it used copy_value for
 * that, the merge's copier with its writes switched off: one call per token, each
 * through skip_ws, the Num record, the canonical-number test and a put that writes
 * nothing. Those calls were a third of the walk. Here one loop with an explicit stack
 * reads the same grammar and refuses (E_FALL) exactly what copy_value refuses:
 *
 * - strings: printable ASCII, escapes \" \\ \n \r \t \b \f only (\u and \/ are
 *   Python's to judge), no control byte; a key too;
 * - numbers: -?(0|[1-9][0-9]*)(.[0-9]+)?, no exponent, none Python prints otherwise
 *   (number_is_canonical: not -0, not 0.000000x, not 0.0000000);
 * - true, false, null; objects of "key": value members, arrays; no trailing comma;
 * - at most MAX_DEPTH levels counting the value itself as level 1.
 *
 * Repeated keys are not refused (the walk writes nothing: see copy_container).
 * E_MORE: the text ends first (the caller reads more and walks the event again).
 * The needle (st->needle, when set) is compared with every string token, keys too, as
 * scan_string compares it; *escaped is set when a string holds a backslash.
 * tests/test_info_walk.py and tests/test_one_answer.py hold it to copy_value's answer. */

/* the end of the white space at s[i]: a byte above ' ' is none, and most separators
 * are followed by none or one space (the 16-byte test for those made the walk 30%
 * slower); a longer run (Kineto indents its events and args: a fifth of a trace's
 * bytes, in runs of ~5) is found 16 bytes a step, not a branch a byte */
static inline Py_ssize_t ws_end(const unsigned char *s, Py_ssize_t i, Py_ssize_t n) {
    if (i < n && s[i] > ' ') return i;
    if (i + 1 < n && s[i + 1] > ' ' && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) return i + 1;
#ifdef __SSE2__
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), cr = _mm_set1_epi8('\r'), tab = _mm_set1_epi8('\t');
    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(s + i));
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(b, sp), _mm_cmpeq_epi8(b, nl)),
                                  _mm_or_si128(_mm_cmpeq_epi8(b, cr), _mm_cmpeq_epi8(b, tab)));
        unsigned other = ~(unsigned)_mm_movemask_epi8(ws) & 0xFFFFu;
        if (other) return i + __builtin_ctz(other);
    }
#endif
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) i++;
    return i;
}

/* a string token at s[i] == '"': OK with *end after its closing quote */
static inline int v_string(St *st, Py_ssize_t i, Py_ssize_t *end, int *escaped) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len, start = ++i;
    for (;;) {
        i = string_stop(s, i, n);
        if (i >= n) return E_MORE;
        unsigned char c = s[i];
        if (c == '"') break;
        if (c != '\\') return E_FALL; /* a control byte, or non-ASCII */
        if (i + 1 >= n) return E_MORE;
        unsigned char e = s[i + 1];
        if (e != '"' && e != '\\' && e != 'n' && e != 'r' && e != 't' && e != 'b' && e != 'f') return E_FALL;
        *escaped = 1;
        i += 2;
    }
    if (st->needle_n && i - start == st->needle_n && memcmp(s + start, st->needle, (size_t)st->needle_n) == 0)
        st->needle_found = 1;
    *end = i + 1;
    return OK;
}

/* a number at s[i]: OK with *end after it, when copy_number would copy it */
static inline int v_number(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, Py_ssize_t *end) {
    int neg = 0;
    if (s[i] == '-') {
        neg = 1;
        if (++i >= n) return E_MORE;
    }
    unsigned char c = s[i];
    if (c < '0' || c > '9') return E_FALL;
    int int_zero = c == '0';
    i++;
    if (!int_zero)
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    if (i >= n) return E_MORE;
    if (s[i] == '.') {
        Py_ssize_t f = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9') i++;
        if (i >= n) return E_MORE;
        Py_ssize_t fn = i - f;
        if (fn == 0) return E_FALL;
        if (int_zero) { /* 0.xxx: Decimal's adjusted exponent must stay >= -6 */
            Py_ssize_t z = 0;
            while (z < fn && s[f + z] == '0') z++;
            if (z == fn ? fn > 6 : z >= 6) return E_FALL;
        }
    } else if (neg && int_zero) {
        return E_FALL; /* "-0" becomes "0" */
    }
    if (s[i] == 'e' || s[i] == 'E' || (s[i] >= '0' && s[i] <= '9')) return E_FALL;
    *end = i;
    return OK;
}

/* a literal word at s[i] (its first byte already matched) */
static inline int v_word(const unsigned char *s, Py_ssize_t n, Py_ssize_t i, const char *word, Py_ssize_t wn,
                         Py_ssize_t *end) {
    for (Py_ssize_t k = 1; k < wn; k++) {
        if (i + k >= n) return E_MORE;
        if (s[i + k] != (unsigned char)word[k]) return E_FALL;
    }
    *end = i + wn;
    return OK;
}

/* the nested value at st->s[st->i] ('{' or '['): OK with st->i after it */
static int valid_nested(St *st, int *escaped) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len, i = st->i;
    unsigned char closer[MAX_DEPTH];
    int d = 0, r;
    unsigned char c = s[i];
open:
    /* s[i] opens a container at level d + 1 */
    if (d == MAX_DEPTH) return E_FALL;
    closer[d++] = c == '{' ? '}' : ']';
    i++;
    i = ws_end(s, i, n);
    if (i >= n) return E_MORE;
    if (s[i] == closer[d - 1]) {
        i++;
        goto closed;
    }
member:
    /* s[i]: the first byte of a member (object: its key) or of an element */
    if (closer[d - 1] == '}') {
        if (s[i] != '"') return E_FALL;
        if ((r = v_string(st, i, &i, escaped))) return r;
        i = ws_end(s, i, n);
        if (i >= n) return E_MORE;
        if (s[i] != ':') return E_FALL;
        i++;
        i = ws_end(s, i, n);
        if (i >= n) return E_MORE;
    }
    c = s[i];
    switch (c) {
    case '"':
        r = v_string(st, i, &i, escaped);
        break;
    case '{':
    case '[':
        goto open;
    case 't':
        r = v_word(s, n, i, "true", 4, &i);
        break;
    case 'f':
        r = v_word(s, n, i, "false", 5, &i);
        break;
    case 'n':
        r = v_word(s, n, i, "null", 4, &i);
        break;
    default:
        if (c != '-' && (c < '0' || c > '9')) return E_FALL;
        r = v_number(s, n, i, &i);
    }
    if (r) return r;
after:
    /* after a member or element: a comma and the next one, or the container's end */
    i = ws_end(s, i, n);
    if (i >= n) return E_MORE;
    c = s[i++];
    if (c == ',') {
        i = ws_end(s, i, n);
        if (i >= n) return E_MORE;
        goto member;
    }
    if (c != closer[d - 1]) return E_FALL;
closed:
    if (--d > 0) goto after;
    st->i = i;
    return OK;
}
