/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: rewrite(): the per-rank context, the event loop and its stops. */
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
    const char *names[] = {"pids", "first_ts", "gpu_like", "drop_cats", "keep_args", "decimal", "tids_seen", "neg_tids"};
    PyObject **slots[] = {&cx->pids,      &cx->first_ts, &cx->gpu_like,  &cx->drop_cats,
                          &cx->keep_args, &cx->decimal,  &cx->tids_seen, &cx->neg_tids};
    for (int j = 0; j < 8; j++) {
        v = PyObject_GetAttrString(o, names[j]);
        if (!v) return -1;
        *slots[j] = v;
        Py_DECREF(v);
    }
    if (!PyDict_Check(cx->pids) || !PyDict_Check(cx->first_ts) || !PySet_Check(cx->gpu_like) ||
        !PySet_Check(cx->tids_seen) || !PySet_Check(cx->neg_tids) ||
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

/* the span of the events written: the first ts and the last ts + dur (dur counted when
 * positive), in 1e-9 us, as plan/extent.scan_rank times a file (the run check) */
typedef struct {
    int timed;
    __int128 lo, hi;
} Written;

static inline void fold_span(Written *sp, const Ev *ev) {
    if (!ev->has_ts) return;
    __int128 end = ev->ts_nus + (ev->has_dur && ev->dur_nus > 0 ? ev->dur_nus : 0);
    if (!sp->timed || ev->ts_nus < sp->lo) sp->lo = ev->ts_nus;
    if (!sp->timed || end > sp->hi) sp->hi = end;
    sp->timed = 1;
}

typedef struct {
    Span cat;
    int dropped;
} CatMemo;

/* the threads (out pid << 32 | tid) this call has recorded already */
typedef struct {
    long long key[32];
    int n;
} TidMemo;

/* a kept event's thread: recorded in tids_seen (rules._new_thread); E_FALL when a
 * negative tid became the same thread (Python names the two) */
static int thread_seen(const Ctx *cx, TidMemo *tm, const Ev *ev) {
    long long key = (long long)((unsigned long long)ev->pid_out << 32) | ev->tid;
    for (int j = 0; j < tm->n; j++)
        if (tm->key[j] == key) return OK;
    PyObject *k = PyLong_FromLongLong(key);
    if (!k) return E_NOMEM;
    int neg = PySet_GET_SIZE(cx->neg_tids) ? PySet_Contains(cx->neg_tids, k) : 0;
    int r = neg < 0 ? E_NOMEM : neg ? E_FALL : OK;
    if (r == OK && PySet_Add(cx->tids_seen, k) < 0) r = E_NOMEM;
    Py_DECREF(k);
    if (r == OK && tm->n < 32) tm->key[tm->n++] = key;
    return r;
}

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
    if (load_ctx(ctx_obj, &cx) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    st_open(&st, &buf, pos, 0, buf.len + buf.len / 4 + 4096);
    if (!st.o) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    PidCache pc = {{0}, {0}, 0};
    CatMemo memo[8];
    int nmemo = 0;
    TidMemo tids = {{0}, 0};
    long long n_in = 0, n_drop = 0, n_out = 0;
    Written span = {0, 0, 0};
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
            } else if ((r = thread_seen(&cx, &tids, &ev)) == OK) {
                if ((r = after_kept(&st, &cx, &ev))) break;
                fold_span(&span, &ev);
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
    PyObject *lo = span.timed ? int128_to_py(span.lo) : Py_NewRef(Py_None);
    PyObject *hi = span.timed ? int128_to_py(span.hi) : Py_NewRef(Py_None);
    if (!lo || !hi) {
        Py_DECREF(out);
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        return NULL;
    }
    return Py_BuildValue("(NniniLLLNN)", out, consumed, status, skip_to, need_sep, n_in, n_drop, n_out, lo, hi);
}
