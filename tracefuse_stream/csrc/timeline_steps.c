/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the step-time figures of one GPU (analyze/step_time.py), from the
 * Timeline's records (csrc/timeline.c), at the file's end.
 *
 * Why in C: the rule is analyze/gpu_union.py's (its Python twin, PyTimeline.gpu_windows,
 * runs that module's code); done in Python per kernel it cost info --collectives 1.4x
 * its time on the 8 x 20 MB benchmark.
 *
 * t.gpu_windows(dev, windows, classes, kernel_wait_ns) -> (dev, figures, names)
 *   dev: a device key (bytes), or None: the device with the most GPU records (ties:
 *   the smallest key); windows: [lo0, hi0, lo1, hi1, ...] ns, sorted by lo; classes:
 *   bytes, the class of name id k at [k] (0 compute, 1 communication, 2 memory;
 *   beyond its end: compute). figures: 8 native int64 a window (compute, comm,
 *   comm_exposed, memcpy, idle, idle_host_wait, idle_kernel_wait, idle_other);
 *   names: 4 int64 a row (window, name id, ns clipped to it, events starting in it),
 *   by window then name id. dev None and no GPU record: (None, b"", b"").
 */

typedef struct {
    int64_t t;
    int32_t d, c;
} TPoint;

static int tp_cmp(const void *p, const void *q) {
    const TPoint *x = p, *y = q;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    if (x->d != y->d) return x->d < y->d ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

typedef struct {
    int64_t a, b;
    int32_t state, comm;
} TPiece;

typedef struct {
    int64_t w, name, ns, count;
} TNameSum;

static int tns_cmp(const void *p, const void *q) {
    const TNameSum *x = p, *y = q;
    if (x->w != y->w) return x->w < y->w ? -1 : 1;
    return (x->name > y->name) - (x->name < y->name);
}

/* gpu_union.py's _pieces: maximal pieces of one state (0 compute, 1 comm, 2 memory) */
static Py_ssize_t tl_pieces(const TRec *ev, Py_ssize_t n, const unsigned char *cls, Py_ssize_t ncls, TPiece **out) {
    TPoint *pt = PyMem_Malloc((size_t)(2 * n + 1) * sizeof(TPoint));
    TPiece *pc = PyMem_Malloc((size_t)(2 * n + 1) * sizeof(TPiece));
    if (!pt || !pc) {
        PyMem_Free(pt);
        PyMem_Free(pc);
        return -1;
    }
    Py_ssize_t m = 0, np = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (ev[k].b <= ev[k].a) continue;
        int32_t c = ev[k].name < ncls ? cls[ev[k].name] : 0;
        if (c < 0 || c > 2) c = 0;
        pt[m++] = (TPoint){ev[k].a, 1, c};
        pt[m++] = (TPoint){ev[k].b, -1, c};
    }
    qsort(pt, (size_t)m, sizeof(TPoint), tp_cmp);
    int64_t cnt[3] = {0, 0, 0};
    Py_ssize_t i = 0;
    while (i < m) {
        int64_t t = pt[i].t;
        while (i < m && pt[i].t == t) cnt[pt[i].c] += pt[i].d, i++;
        if (i == m) break;
        int32_t state = cnt[0] ? 0 : cnt[1] ? 1 : cnt[2] ? 2 : 3, comm = cnt[1] ? 1 : 0;
        int64_t nxt = pt[i].t;
        if (state == 3) continue;
        if (np && pc[np - 1].b == t && pc[np - 1].state == state && pc[np - 1].comm == comm) {
            pc[np - 1].b = nxt;
        } else {
            pc[np++] = (TPiece){t, nxt, state, comm};
        }
    }
    PyMem_Free(pt);
    *out = pc;
    return np;
}

static void tl_idle(int64_t *f, int64_t a, int64_t b, int after, int before, int64_t kwait) {
    int64_t d = b - a;
    f[4] += d;
    if (after && before)
        f[d <= kwait ? 6 : 5] += d;
    else
        f[7] += d;
}

/* gpu_union.py's window_figures */
static void tl_window(const TPiece *pc, Py_ssize_t np, int64_t lo, int64_t hi, int64_t kwait, int64_t *f) {
    memset(f, 0, 8 * sizeof(int64_t));
    Py_ssize_t lo_k = 0, hi_k = np; /* the first piece whose end is past lo */
    while (lo_k < hi_k) {
        Py_ssize_t mid = (lo_k + hi_k) / 2;
        if (pc[mid].b <= lo) lo_k = mid + 1;
        else hi_k = mid;
    }
    int64_t at = lo;
    int seen = 0;
    for (Py_ssize_t k = lo_k; k < np && pc[k].a < hi; k++) {
        int64_t a = pc[k].a > lo ? pc[k].a : lo, b = pc[k].b < hi ? pc[k].b : hi;
        if (a > at) tl_idle(f, at, a, seen, 1, kwait);
        int64_t d = b - a;
        f[pc[k].state == 0 ? 0 : pc[k].state == 1 ? 2 : 3] += d;
        if (pc[k].comm) f[1] += d;
        at = b, seen = 1;
    }
    if (hi > at) tl_idle(f, at, hi, seen, 0, kwait);
}

/* the device key id: the given one, or the one with the most GPU records (ties: the
 * smallest key's bytes); -1: none */
static int32_t tl_busiest(const Timeline *t) {
    int64_t *cnt = PyMem_Calloc((size_t)t->keys.n + 1, sizeof(int64_t));
    if (!cnt) return -2;
    for (Py_ssize_t k = 0; k < t->n; k++)
        if (t->recs[k].kind == 2) cnt[t->recs[k].dev]++;
    int32_t best = -1;
    const Intern *ks = &t->keys;
    for (int32_t j = 0; j < ks->n; j++) {
        if (!cnt[j]) continue;
        int better = best < 0 || cnt[j] > cnt[best];
        if (!better && cnt[j] == cnt[best]) {
            Py_ssize_t nj = ks->len[j], nb = ks->len[best];
            int c = memcmp(ks->arena + ks->off[j], ks->arena + ks->off[best], (size_t)(nj < nb ? nj : nb));
            better = c < 0 || (c == 0 && nj < nb);
        }
        if (better) best = j;
    }
    PyMem_Free(cnt);
    return best;
}

/* name sums per window (gpu_union.py's name_sums), sorted by window and name id */
static Py_ssize_t tl_name_sums(const TRec *ev, Py_ssize_t n, const int64_t *win, Py_ssize_t nw, TNameSum **out) {
    Py_ssize_t cap = n + 16, m = 0;
    TNameSum *s = PyMem_Malloc((size_t)cap * sizeof(TNameSum));
    if (!s) return -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t a = ev[k].a, b = ev[k].b, reach = b > a + 1 ? b : a + 1;
        Py_ssize_t lo = 0, hi = nw; /* bisect_right(los, a) - 1 */
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (win[2 * mid] <= a) lo = mid + 1;
            else hi = mid;
        }
        for (Py_ssize_t w = lo > 0 ? lo - 1 : 0; w < nw && win[2 * w] < reach; w++) {
            int64_t wl = win[2 * w], wh = win[2 * w + 1];
            int64_t d = (b < wh ? b : wh) - (a > wl ? a : wl);
            int starts = wl <= a && a < wh;
            if (d <= 0 && !starts) continue;
            if (m == cap && GROW_TO(s, cap, m + 1, 64)) {
                PyMem_Free(s);
                return -1;
            }
            s[m++] = (TNameSum){w, ev[k].name, d > 0 ? d : 0, starts};
        }
    }
    qsort(s, (size_t)m, sizeof(TNameSum), tns_cmp);
    Py_ssize_t j = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        if (j && s[j - 1].w == s[k].w && s[j - 1].name == s[k].name) {
            s[j - 1].ns += s[k].ns;
            s[j - 1].count += s[k].count;
        } else {
            s[j++] = s[k];
        }
    }
    *out = s;
    return j;
}

static PyObject *tl_gpu_windows(Timeline *t, PyObject *args) {
    PyObject *devb, *wins;
    Py_buffer cls;
    long long kwait;
    if (!PyArg_ParseTuple(args, "OOy*L", &devb, &wins, &cls, &kwait)) return NULL;
    PyObject *res = NULL, *seq = NULL;
    int64_t *win = NULL;
    TRec *ev = NULL;
    TPiece *pc = NULL;
    TNameSum *ns = NULL;
    int64_t *figs = NULL;
    int32_t dev;
    if (devb == Py_None) {
        dev = tl_busiest(t);
        if (dev == -2) {
            PyErr_NoMemory();
            goto done;
        }
        if (dev < 0) {
            res = Py_BuildValue("(Oy#y#)", Py_None, "", (Py_ssize_t)0, "", (Py_ssize_t)0);
            goto done;
        }
    } else if (PyBytes_Check(devb)) {
        dev = intern_find(&t->keys, (const unsigned char *)PyBytes_AS_STRING(devb), PyBytes_GET_SIZE(devb));
    } else {
        PyErr_SetString(PyExc_TypeError, "Timeline.gpu_windows: dev is bytes or None");
        goto done;
    }
    seq = PySequence_Fast(wins, "Timeline.gpu_windows: windows is a sequence of ints");
    if (!seq) goto done;
    Py_ssize_t nv = PySequence_Fast_GET_SIZE(seq), nw = nv / 2;
    if (nv % 2) {
        PyErr_SetString(PyExc_ValueError, "Timeline.gpu_windows: windows are lo, hi pairs");
        goto done;
    }
    win = PyMem_Malloc((size_t)(nv + 1) * sizeof(int64_t));
    figs = PyMem_Malloc((size_t)(8 * nw + 1) * sizeof(int64_t));
    ev = PyMem_Malloc((size_t)(t->n + 1) * sizeof(TRec));
    if (!win || !figs || !ev) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < nv; j++) {
        win[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
        if (PyErr_Occurred()) goto done;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t k = 0; dev >= 0 && k < t->n; k++)
        if (t->recs[k].kind == 2 && t->recs[k].dev == dev) ev[n++] = t->recs[k];
    Py_ssize_t np = tl_pieces(ev, n, cls.buf, cls.len, &pc);
    Py_ssize_t nn = np < 0 ? -1 : tl_name_sums(ev, n, win, nw, &ns);
    if (np < 0 || nn < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t w = 0; w < nw; w++) tl_window(pc, np, win[2 * w], win[2 * w + 1], kwait, figs + 8 * w);
    PyObject *key = dev >= 0 ? PyBytes_FromStringAndSize(t->keys.arena + t->keys.off[dev], t->keys.len[dev]) : NULL;
    if (dev >= 0 && !key) goto done;
    res = Py_BuildValue("(Ny#y#)", key ? key : Py_NewRef(devb), (const char *)figs, (Py_ssize_t)(8 * nw * sizeof(int64_t)),
                        (const char *)ns, (Py_ssize_t)(nn * (Py_ssize_t)sizeof(TNameSum)));
done:
    PyBuffer_Release(&cls);
    Py_XDECREF(seq);
    PyMem_Free(win);
    PyMem_Free(figs);
    PyMem_Free(ev);
    PyMem_Free(pc);
    PyMem_Free(ns);
    return res;
}
