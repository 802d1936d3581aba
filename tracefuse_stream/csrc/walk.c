/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the walk (info's single pass) and the scan() entry point. */
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
    unsigned seen; /* keys met: ph 1, cat 2, name 4, ts 8, dur 16, pid 32, tid 64 */
    Span id[2];    /* pid, tid: their text (with a Timeline) */
    int id_kind[2]; /* 1 a plain integer, 2 a plain string, 3 anything else */
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
    /* In valid JSON text without a backslash (an escape: the event is judged anyway),
     * '"x"' occurs only as a string token x, or after a closing quote, where only white
     * space , : ] } may follow: when x starts with none of those, the text holds the
     * needle exactly when one of its string tokens is x. */
    nd->token = t.n > 2 && !strchr(" \t\n\r,:]}", t.p[1]);
    return 1;
}

/* which of the keys the walk reads k is: ph 1, cat 2, name 4, ts 8, dur 16, pid 32,
 * tid 64, other 0 (by length, then bytes: a chain of span_is cost a memcmp call each
 * time the lengths agree) */
static inline int walk_key_bit(Span k) {
    const unsigned char *p = k.p;
    switch (k.n) {
    case 2:
        return p[0] == 'p' && p[1] == 'h' ? 1 : p[0] == 't' && p[1] == 's' ? 8 : 0;
    case 3:
        if (p[1] == 'i' && p[2] == 'd') return p[0] == 'p' ? 32 : p[0] == 't' ? 64 : 0;
        if (p[0] == 'c' && p[1] == 'a' && p[2] == 't') return 2;
        return p[0] == 'd' && p[1] == 'u' && p[2] == 'r' ? 16 : 0;
    case 4:
        return p[0] == 'n' && p[1] == 'a' && p[2] == 'm' && p[3] == 'e' ? 4 : 0;
    default:
        return 0;
    }
}

/* Kineto's layout, compared whole: it writes an event's members as
 *     {\n    "ph": "X", "cat": "..", "name": "..", "pid": 1, "tid": 2,\n    "ts": .., "dur": ..,\n    "args": {..}
 * and a flow's as .., "id": 3, "pid": .., "bp": "e". Where the text after a value is
 * exactly a comma, one space (or a newline and four), a key of that list in quotes, a
 * colon and one space, the walk takes the key whole: the same bytes the generic path
 * reads token by token (white space, the comma, the key string, the colon), with the
 * same outcome; anything else is read the generic way. Off (nd->layout 0) when the
 * needle is one of those keys (the generic path compares every key with it). */
static const char *const KINETO_KEYS[] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s"};
#define N_KINETO_KEYS ((int)(sizeof(KINETO_KEYS) / sizeof(KINETO_KEYS[0])))

/* the key at s[q] (just past its opening quote) followed by '": ', then the value's
 * first byte: its walk bit (walk_key_bit), with *i at the value; -1 when not one. A
 * switch of constant comparisons (a loop over KINETO_KEYS was 30% slower). */
static inline int kineto_key(const unsigned char *s, Py_ssize_t q, Py_ssize_t *i) {
#define KEY_IS(lit)                                                                             \
    if (memcmp(s + q, lit "\": ", sizeof(lit) + 2) == 0 && s[q + sizeof(lit) + 2] > ' ') {         \
        *i = q + (Py_ssize_t)sizeof(lit) + 2;                                                    \
        return walk_key_bit((Span){(const unsigned char *)lit, (Py_ssize_t)sizeof(lit) - 1}); \
    }
    switch (s[q]) {
    case 'p':
        KEY_IS("pid")
        KEY_IS("ph")
        break;
    case 't':
        KEY_IS("tid")
        KEY_IS("ts")
        break;
    case 'n':
        KEY_IS("name")
        break;
    case 'c':
        KEY_IS("cat")
        break;
    case 'd':
        KEY_IS("dur")
        break;
    case 'a':
        KEY_IS("args")
        break;
    case 'i':
        KEY_IS("id")
        break;
    case 'b':
        KEY_IS("bp")
        break;
    case 's':
        KEY_IS("s")
        break;
    }
    return -1;
#undef KEY_IS
}

/* after a member's value at s[*i]: the next member's key in Kineto's layout */
static inline int kineto_next_key(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i) {
    Py_ssize_t j = *i;
    if (j + 24 > n || s[j] != ',') return -1; /* 24: the longest key and its separators */
    if (s[j + 1] == ' ' && s[j + 2] == '"') return kineto_key(s, j + 3, i);
    if (s[j + 1] == '\n' && memcmp(s + j + 2, "    \"", 5) == 0) return kineto_key(s, j + 7, i);
    return -1;
}

/* an event's first member in Kineto's layout: {\n    "ph": */
static inline int kineto_first_key(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i) {
    Py_ssize_t j = *i;
    if (j + 24 > n || memcmp(s + j, "{\n    \"", 7) != 0) return -1;
    return kineto_key(s, j + 7, i);
}

static void walk_layout(Needles *nd) {
    nd->layout = 1;
    if (!nd->n_all) return;
    Span w = {nd->all[0].p + 1, nd->all[0].n - 2}; /* the needle's content */
    for (int k = 0; k < N_KINETO_KEYS; k++)
        if ((Py_ssize_t)strlen(KINETO_KEYS[k]) == w.n && memcmp(KINETO_KEYS[k], w.p, (size_t)w.n) == 0) nd->layout = 0;
}

/* the walk's names to search for (nd->names, holds_any): sel->name_contains when there
 * are at most 8 of them, each 2 bytes or more (-1 otherwise: one holds() each) */
static void walk_names(const Sel *sel, Needles *nd) {
    nd->n_names = 0;
    if (sel->name_contains == Py_None) return;
    Py_ssize_t count = PyTuple_GET_SIZE(sel->name_contains);
    if (count > 8) {
        nd->n_names = -1;
        return;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        Span w = bytes_span(PyTuple_GET_ITEM(sel->name_contains, j));
        if (w.n < 2) {
            nd->n_names = -1;
            return;
        }
        nd->names[nd->n_names++] = w;
    }
}

/* a plain ASCII string without escapes at s[*i] == '"' (E_FALL: anything else, for the
 * validating scan: an escape, a control byte, non-ASCII); the needle's content compared with it */
static inline int walk_string(const unsigned char *s, Py_ssize_t n, Py_ssize_t *i, Span *v, const Needles *nd,
                              Walk *w) {
    Py_ssize_t j = *i + 1, e = string_stop(s, j, n); /* tokens.c: names run long, 16 bytes a step */
    if (e >= n) return E_MORE;
    if (s[e] != '"') return E_FALL;
    v->p = s + j;
    v->n = e - j;
    if (nd->n_all && v->n == nd->all[0].n - 2 && memcmp(v->p, nd->all[0].p + 1, (size_t)v->n) == 0) w->found = 1;
    *i = e + 1;
    return OK;
}

/* one member's value at s[*i] (bit: which of ph 1, cat 2, name 4, ts 8, dur 16 it is) */
static int walk_value(St *st, Py_ssize_t *i, int bit, const Needles *nd, Walk *w) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len;
    unsigned char c = s[*i];
    Span v;
    if (bit == 16 && c != '-' && (c < '0' || c > '9')) return E_FALL; /* a dur not a number: malformed */
    int idk = bit == 32 ? 0 : bit == 64 ? 1 : -1;
    if (idk >= 0) w->id_kind[idk] = 3;
    if (c == '"') {
        int r = walk_string(s, n, i, &v, nd, w);
        if (r == OK && (bit & 7)) w->f[bit >> 1] = v;
        if (r == OK && idk >= 0) w->id[idk] = v, w->id_kind[idk] = 2;
        return r;
    }
    if (bit & 7) return E_FALL; /* ph, cat or name not a string: the scan decides */
    if (c == '{' || c == '[') {
        /* validated as the merge validates it (bad literals, leading zeros, control
         * bytes: E_FALL, and the validating scan hands the event to Python, which names
         * the problem); nothing is written */
        st->i = *i;
        /* the needle met as a whole string token while the value is read (nd->token:
         * the same answer as searching its text, see walk_needle) */
        if (nd->token) st->needle = nd->all[0].p + 1, st->needle_n = nd->all[0].n - 2, st->needle_found = 0;
        int escaped = 0, r = valid_nested(st, &escaped); /* csrc/validate.c: copy_value's answer */
        st->needle_n = 0;
        if (r) return r;
        Span text = {s + *i, st->i - *i};
        if (escaped) w->escaped = 1;
        if (nd->token ? st->needle_found : (nd->n_all && holds(text, nd->all[0]))) w->found = 1;
        *i = st->i;
        return OK;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Num num;
        st->i = *i;
        int r = scan_number(st, &num);
        if (r) return r;
        if (idk >= 0 && !num.has_frac && !(num.neg && num.ip.n == 1 && num.ip.p[0] == '0')) {
            w->id[idk].p = s + *i; /* an integer as Python prints it (not -0) */
            w->id[idk].n = st->i - *i;
            w->id_kind[idk] = 1;
        }
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
static int walk_selects(const Sel *sel, const Needles *nd, const Walk *w, Span text, int quoted,
                        const unsigned char *limit) {
    int match = 1;
    if (sel->ph != Py_None) match = match && (w->seen & 1) && bytes_match(sel->ph, w->f[0], 0);
    if (sel->cat != Py_None) match = match && (w->seen & 2) && cat_match(sel->cat, w->f[1]);
    if (sel->name_prefix != Py_None) match = match && (w->seen & 4) && bytes_match(sel->name_prefix, w->f[2], 1);
    if (sel->ph == Py_None && sel->cat == Py_None && sel->name_prefix == Py_None) match = 0;
    if (!match || (sel->name_contains == Py_None && sel->text_contains == Py_None)) return match;
    if (sel->name_contains != Py_None && (w->seen & 4)) {
        /* one pass for all the needles; which one, and whether it counts in this
         * event's category, only when the name holds one */
        int any = nd->n_names > 0 ? holds_any(w->f[2], limit, nd->names, nd->n_names) : nd->n_names < 0;
        if (any && nd->n_names > 0 && sel->name_cats == Py_None) return 1;
        if (any)
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(sel->name_contains); j++)
                if (needle_cat_ok(sel, j, w->f[1], w->seen & 2) &&
                    holds(w->f[2], bytes_span(PyTuple_GET_ITEM(sel->name_contains, j))))
                    return 1;
    }
    if (sel->text_contains == Py_None || !text_cat_ok(sel, w->f[1], w->seen & 2)) return 0;
    return w->escaped || (quoted ? w->found : holds(text, bytes_span(sel->text_contains)));
}

/* the walked event into the Timeline when it is one (csrc/timeline.c): OK, E_FALL
 * (Python decides: an odd pid or tid), E_NOMEM */
static int walk_record(Timeline *tl, const Walk *w) {
    if (!(w->seen & 1) || !IS(w->f[0], "X") || !(w->seen & 2) || !(w->seen & 4) || !w->ts_ok || !w->dur_ok) return OK;
    Span cat = w->f[1];
    int kind = IS(cat, "cpu_op")            ? 0
               : IS(cat, "user_annotation") ? 1
               : (IS(cat, "kernel") || IS(cat, "gpu_memcpy") || IS(cat, "gpu_memset")) ? 2
                                                                                       : -1;
    if (kind < 0 || w->dur < 0) return OK;
    if (!(w->seen & 32) || !(w->seen & 64)) return OK; /* no thread: no part of any */
    if (w->id_kind[0] == 3 || w->id_kind[1] == 3) return E_FALL;
    unsigned char key[512];
    Py_ssize_t kp = tl_value_key(key, 256, w->id_kind[0] == 2, w->id[0]);
    Py_ssize_t kt = kp ? tl_value_key(key + kp, 256, w->id_kind[1] == 2, w->id[1]) : 0;
    if (!kp || !kt) return E_FALL;
    /* 1e-9 us (1e6 of them a ns) -> ns, each truncated toward zero (as int(Decimal) is), end = start + dur */
    int64_t a = (int64_t)(w->ts / 1000000), b = a + (int64_t)(w->dur / 1000000);
    return tl_push(tl, kind, a, b, w->f[2].p, w->f[2].n, key, kp + kt, key, kp);
}

static int walk_event(St *st, const Sel *sel, const Needles *nd, ScanEv *ev, Timeline *tl) {
    const unsigned char *s = st->s;
    Py_ssize_t n = st->len, start = st->i, i = st->i;
    Walk w;
    int r = OK;
    /* only the flags: every other field is read only after its flag or seen bit is set
     * (two memsets were ~5% of the walk) */
    w.seen = 0;
    w.id_kind[0] = w.id_kind[1] = 0;
    w.escaped = w.found = w.ts_ok = w.dur_ok = 0;
    ev->sure = ev->selected = ev->timed = 0;
    if (i >= n) return E_MORE;
    if (s[i] != '{') return E_FALL;
    int bit = nd->layout ? kineto_first_key(s, n, &i) : -1;
    if (bit >= 0) goto have_key;
    i = ws_end(s, i + 1, n);
    if (i >= n) return E_MORE;
    if (s[i] == '}') i++;
    else
        for (;;) {
            Span k;
            if (s[i] != '"') goto judge;
            if ((r = walk_string(s, n, &i, &k, nd, &w))) goto fail;
            i = ws_end(s, i, n);
            if (i >= n) return E_MORE;
            if (s[i] != ':') goto judge;
            i = ws_end(s, i + 1, n);
            if (i >= n) return E_MORE;
            bit = walk_key_bit(k);
        have_key:
            if (w.seen & (unsigned)bit) goto judge; /* repeated: the scan refuses it */
            w.seen |= (unsigned)bit;
            if ((r = walk_value(st, &i, bit, nd, &w))) goto fail;
            if (nd->layout && (bit = kineto_next_key(s, n, &i)) >= 0) goto have_key;
            i = ws_end(s, i, n);
            if (i >= n) return E_MORE;
            unsigned char c = s[i++];
            if (c == '}') break;
            if (c != ',') goto judge;
            i = ws_end(s, i, n);
            if (i >= n) return E_MORE;
        }
    Span text = {s + start, i - start};
    if (walk_selects(sel, nd, &w, text, nd->n_all, s + n)) goto judge; /* selected: its text decodes as in the scan */
    if (tl) {
        r = walk_record(tl, &w);
        if (r == E_NOMEM) return r;
        if (r != OK) goto judge;
    }
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
    r = scan_event(st, sel, ev);
    if (r == OK && tl && !ev->selected) {
        ev->selected = 1; /* with a Timeline, Python records every event it judges */
        ev->sure = 0;
    }
    return r;
}

static PyObject *kernel_scan(PyObject *self, PyObject *args) {
    PyObject *sel_obj;
    Py_buffer buf;
    Py_ssize_t pos;
    int need_sep, at_start;
    (void)self;
    PyObject *tl_obj = Py_None;
    if (!PyArg_ParseTuple(args, "Oy*npp|O", &sel_obj, &buf, &pos, &need_sep, &at_start, &tl_obj)) return NULL;
    Timeline *tl = NULL;
    if (tl_obj != Py_None) {
        if (!PyObject_TypeCheck(tl_obj, &TimelineType)) {
            PyBuffer_Release(&buf);
            PyErr_SetString(PyExc_TypeError, "scan: the timeline is a Timeline or None");
            return NULL;
        }
        tl = (Timeline *)tl_obj;
    }
    Sel sel;
    enum { NSEL = 7 };
    PyObject *held[NSEL] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const char *names[NSEL] = {"ph",          "cat",      "name_prefix",      "text_contains",
                               "text_cat",    "name_contains", "name_cats"};
    PyObject **slots[NSEL] = {&sel.ph,       &sel.cat,           &sel.name_prefix, &sel.text_contains,
                              &sel.text_cat, &sel.name_contains, &sel.name_cats};
    for (int j = 0; j < NSEL; j++) {
        held[j] = PyObject_GetAttrString(sel_obj, names[j]);
        /* 0-4 bytes (cat: or a tuple of bytes, one of them), 5-6 a tuple (of bytes; 6: or None each) */
        int ok = held[j] && (held[j] == Py_None || (j < 5 ? PyBytes_Check(held[j]) : PyTuple_Check(held[j])) ||
                             (j == 1 && PyTuple_Check(held[j])));
        if (ok && (j >= 5 || j == 1) && held[j] != Py_None && PyTuple_Check(held[j]))
            for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(held[j]); m++) {
                PyObject *item = PyTuple_GET_ITEM(held[j], m);
                ok = ok && (PyBytes_Check(item) || (j == 6 && item == Py_None));
            }
        if (ok && j == 6 && held[j] != Py_None &&
            (sel.name_contains == Py_None || PyTuple_GET_SIZE(held[j]) != PyTuple_GET_SIZE(sel.name_contains)))
            ok = 0; /* one category (or None) for each of name_contains */
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
    if (tl && !walk) {
        for (int j = 0; j < NSEL; j++) Py_DECREF(held[j]);
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "scan: a timeline needs the walk (extremes, validate false)");
        return NULL;
    }
    if (walk) walk_needle(&sel, &nd), walk_names(&sel, &nd), walk_layout(&nd); /* the walk's own needles */
    else if (skim && (PyTuple_Check(sel.cat) || sel.name_cats != Py_None || sel.text_cat != Py_None ||
                      !skim_needles(&sel, &nd)))
        skim = 0; /* several cats, or needles of a category: scan */
    if (PyErr_Occurred()) {
        for (int j = 0; j < NSEL; j++) Py_DECREF(held[j]);
        PyBuffer_Release(&buf);
        return NULL;
    }
    St st;
    st_open(&st, &buf, pos, 1, 65536);
    int r = st.o ? OK : E_NOMEM, status = ST_NEED_MORE, timed = 0;
    Py_ssize_t consumed = pos, skip_to = -1;
    long long n_sure = 0;
    __int128 lo = 0, hi = 0;
    while (r == OK && next_event(&st, &need_sep, &at_start, &consumed, &status, &skip_to)) {
        Py_ssize_t ev_start = st.i, out_start = st.olen;
        ScanEv ev;
        int e = walk   ? walk_event(&st, &sel, &nd, &ev, tl)
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
