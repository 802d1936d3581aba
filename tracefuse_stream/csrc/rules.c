/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the merge's rules on one event: ts shifts, times, categories, link ids, args, pids. */
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
static const uint64_t POW10_U64[19] = {1ULL,
                                        10ULL,
                                        100ULL,
                                        1000ULL,
                                        10000ULL,
                                        100000ULL,
                                        1000000ULL,
                                        10000000ULL,
                                        100000000ULL,
                                        1000000000ULL,
                                        10000000000ULL,
                                        100000000000ULL,
                                        1000000000000ULL,
                                        10000000000000ULL,
                                        100000000000000ULL,
                                        1000000000000000ULL,
                                        10000000000000000ULL,
                                        100000000000000000ULL,
                                        1000000000000000000ULL};

static int num_scaled(const Num *num, int decimals, Py_ssize_t max_int, __int128 *out) {
    if (num->fp.n > decimals || num->ip.n > max_int) return 0;
    if (num->ip.n <= 18 && decimals <= 18) {
        /* the common case (a timestamp): each part in 64 bits, one 128-bit product
         * (the digit loop below in 128 bits was a fifth of info's walk) */
        uint64_t a = 0, f = 0;
        for (Py_ssize_t k = 0; k < num->ip.n; k++) a = a * 10 + (uint64_t)(num->ip.p[k] - '0');
        for (Py_ssize_t k = 0; k < num->fp.n; k++) f = f * 10 + (uint64_t)(num->fp.p[k] - '0');
        __int128 v = (__int128)a * POW10_U64[decimals] + (__int128)(f * POW10_U64[decimals - num->fp.n]);
        *out = num->neg ? -v : v;
        return 1;
    }
    __int128 v = 0;
    for (Py_ssize_t k = 0; k < num->ip.n; k++) v = v * 10 + (num->ip.p[k] - '0');
    for (Py_ssize_t k = 0; k < decimals; k++) v = v * 10 + (k < num->fp.n ? num->fp.p[k] - '0' : 0);
    *out = num->neg ? -v : v;
    return 1;
}

/* microseconds in ns, exactly (timeunits.us_to_ns); 0 when more than 3 decimals
 * (sub-ns rounding: Python's call) */
static int num_to_ns(const Num *num, __int128 *ns) { return num_scaled(num, 3, 24, ns); }

/* a time in units of 1e-9 us, exactly (0: more than 9 decimals); the scan's lo/hi and
 * the rewrite's span of the written events */
static int num_to_nano_us(const Num *num, __int128 *out) { return num_scaled(num, 9, 20, out); }

/* an exact 128-bit integer as a Python int */
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
    /* >= 2**32 could equal another rank's rewritten id: Python refuses it (rules._beyond_ids) */
    if (strict || v >= ID_LIMIT) return E_FALL;
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
    long long pid_out, tid;
    int pid_known;
    Py_ssize_t ts_out_start, ts_out_end; /* the written ts text, for first_ts */
    int ts_null;
    int ts_ns_ok, dur_state; /* for the window: ts in ns; dur 0 absent/null, 1 in dur_ns */
    __int128 ts_ns, dur_ns;
    int has_ts, has_dur;   /* the written span (rewrite.c fold_span): ts, dur in 1e-9 us */
    __int128 ts_nus, dur_nus;
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
    if ((r = enter_event(st))) return r;
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
            ev->tid = tid;
            ev->has_tid = 1;
        } else if (IS(k, "ts")) {
            if (c == 'n') {
                return E_FALL; /* a null ts is malformed: Python names the event */
            } else {
                Num num;
                Py_ssize_t start = st->i;
                if ((r = scan_number(st, &num))) return r;
                if (!number_is_canonical(&num) || beyond_clock(&num, cx->abs_base_ns)) return E_FALL;
                if (!num_to_nano_us(&num, &ev->ts_nus)) return E_FALL; /* sub-1e-9 us: Python's span */
                ev->has_ts = 1;
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
            if (!num_to_nano_us(&num, &ev->dur_nus)) return E_FALL; /* sub-1e-9 us: Python's span */
            ev->has_dur = 1;
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
        } else if (IS(k, "name") && c == '"') {
            /* a step: Python reads its number (the steps each rank wrote: the run check) */
            Span v;
            if ((r = scan_string(st, &v, 1))) return r;
            if (v.n >= 13 && memcmp(v.p, "ProfilerStep#", 13) == 0) return E_FALL;
        } else if (IS(k, "id2")) {
            return E_FALL; /* an async id2 {global|local}: Python makes it rank-unique */
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
