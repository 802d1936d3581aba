/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the Timeline's segments (csrc/timeline.c holds its records) -- each
 * step thread's events partitioned by the innermost op / annotation that holds each
 * instant, each GPU's by the kernel that holds it, aggregated per (segment, kind,
 * name) between the cuts -- and the Python type. Rows as csrc/timeline.c lists them;
 * report/timeline.py's PyTimeline is the same rule in Python.
 */

typedef struct {
    int32_t kind, name;
    int64_t ns, count, runs;
    int64_t piece_a, piece_b, span_a, span_b, first_a, first_b, last_a, last_b;
    int has_run;
} TAgg;

/* one unit's aggregates of the current segment (a table over (kind, name)) */
typedef struct {
    TAgg *aggs;
    Py_ssize_t n, cap;
    int32_t *slots; /* index into aggs, -1 empty */
    Py_ssize_t scap;
    const int64_t *cuts;
    Py_ssize_t ncuts, seg;
    int64_t *out; /* the rows written: ROW_FIELDS int64 each */
    Py_ssize_t on, ocap;
} TSeg;

/* a row: seg, kind, name, ns, count, runs, piece a/b, span a/b, first a/b, last a/b */
#define ROW_FIELDS 14

static int tseg_open(TSeg *g, const int64_t *cuts, Py_ssize_t ncuts) {
    memset(g, 0, sizeof(*g));
    g->cuts = cuts;
    g->ncuts = ncuts;
    g->scap = 64;
    g->slots = PyMem_Malloc((size_t)g->scap * sizeof(int32_t));
    if (!g->slots) return E_NOMEM;
    for (Py_ssize_t j = 0; j < g->scap; j++) g->slots[j] = -1;
    return OK;
}

static void tseg_close(TSeg *g) {
    PyMem_Free(g->aggs);
    PyMem_Free(g->slots);
    PyMem_Free(g->out);
}

static int tseg_flush(TSeg *g) {
    if (GROW_TO(g->out, g->ocap, g->on + g->n * ROW_FIELDS, 64 * ROW_FIELDS)) return E_NOMEM;
    for (Py_ssize_t j = 0; j < g->n; j++) {
        TAgg *x = &g->aggs[j];
        int64_t *o = g->out + g->on;
        o[0] = (int64_t)g->seg, o[1] = x->kind, o[2] = x->name, o[3] = x->ns, o[4] = x->count, o[5] = x->runs;
        o[6] = x->piece_a, o[7] = x->piece_b, o[8] = x->span_a, o[9] = x->span_b;
        o[10] = x->first_a, o[11] = x->first_b, o[12] = x->last_a, o[13] = x->last_b;
        g->on += ROW_FIELDS;
    }
    g->n = 0;
    for (Py_ssize_t j = 0; j < g->scap; j++) g->slots[j] = -1;
    return OK;
}

/* move to the segment holding time t (flushing the one left) */
static int tseg_at(TSeg *g, int64_t t) {
    Py_ssize_t seg = g->seg;
    while (seg + 2 < g->ncuts && g->cuts[seg + 1] <= t) seg++;
    if (seg != g->seg) {
        if (tseg_flush(g)) return E_NOMEM;
        g->seg = seg;
    }
    return OK;
}

static inline uint64_t tseg_hash(int32_t kind, int32_t name) {
    return ((uint64_t)(uint32_t)kind * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)(uint32_t)name * 0xC2B2AE3D27D4EB4FULL);
}

static TAgg *tseg_agg(TSeg *g, int32_t kind, int32_t name) {
    Py_ssize_t j = (Py_ssize_t)(tseg_hash(kind, name) & (uint64_t)(g->scap - 1));
    while (g->slots[j] >= 0) {
        TAgg *x = &g->aggs[g->slots[j]];
        if (x->kind == kind && x->name == name) return x;
        j = (j + 1) & (g->scap - 1);
    }
    if ((g->n + 1) * 2 > g->scap) { /* grow the table, then look again */
        Py_ssize_t scap = g->scap * 2;
        int32_t *slots = PyMem_Malloc((size_t)scap * sizeof(int32_t));
        if (!slots) return NULL;
        for (Py_ssize_t k = 0; k < scap; k++) slots[k] = -1;
        for (Py_ssize_t k = 0; k < g->n; k++) {
            Py_ssize_t m = (Py_ssize_t)(tseg_hash(g->aggs[k].kind, g->aggs[k].name) & (uint64_t)(scap - 1));
            while (slots[m] >= 0) m = (m + 1) & (scap - 1);
            slots[m] = (int32_t)k;
        }
        PyMem_Free(g->slots);
        g->slots = slots;
        g->scap = scap;
        return tseg_agg(g, kind, name);
    }
    if (GROW_TO(g->aggs, g->cap, g->n + 1, 32)) return NULL;
    TAgg *x = &g->aggs[g->n];
    memset(x, 0, sizeof(*x));
    x->kind = kind;
    x->name = name;
    g->slots[j] = (int32_t)g->n++;
    return x;
}

/* [a, b) of one key, split at the cuts (a never before the last given a) */
static int tseg_give(TSeg *g, int64_t a, int64_t b, int32_t kind, int32_t name) {
    while (b > a) {
        if (tseg_at(g, a)) return E_NOMEM;
        int64_t end = g->cuts[g->seg + 1];
        int64_t e = b < end ? b : end;
        TAgg *x = tseg_agg(g, kind, name);
        if (!x) return E_NOMEM;
        x->ns += e - a;
        if (x->has_run && x->last_b == a) {
            x->last_b = e;
            if (x->runs == 1) x->first_b = e;
        } else {
            x->runs++;
            x->last_a = a;
            x->last_b = e;
            if (!x->has_run) x->first_a = a, x->first_b = e;
            if (!x->has_run) x->span_a = a;
            x->has_run = 1;
        }
        x->span_b = e;
        if (x->last_b - x->last_a > x->piece_b - x->piece_a) x->piece_a = x->last_a, x->piece_b = x->last_b;
        a = e;
    }
    return OK;
}

static int tseg_count(TSeg *g, int64_t a, int32_t kind, int32_t name) {
    if (tseg_at(g, a)) return E_NOMEM;
    TAgg *x = tseg_agg(g, kind, name);
    if (!x) return E_NOMEM;
    x->count++;
    return OK;
}

static const Timeline *tl_sorting; /* the order's names (qsort has no context argument) */

static int tl_name_cmp(int32_t x, int32_t y) {
    const Intern *t = &tl_sorting->names;
    Py_ssize_t nx = t->len[x], ny = t->len[y];
    int c = memcmp(t->arena + t->off[x], t->arena + t->off[y], (size_t)(nx < ny ? nx : ny));
    return c ? c : (nx > ny) - (nx < ny);
}

/* a thread's events: by start, longer first, annotations before operators, by name */
static int tl_cpu_cmp(const void *p, const void *q) {
    const TRec *x = p, *y = q;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b > y->b ? -1 : 1;
    if (x->kind != y->kind) return x->kind > y->kind ? -1 : 1;
    return tl_name_cmp(x->name, y->name);
}

/* a GPU's kernels: by start, end, name */
static int tl_gpu_cmp(const void *p, const void *q) {
    const TRec *x = p, *y = q;
    if (x->a != y->a) return x->a < y->a ? -1 : 1;
    if (x->b != y->b) return x->b < y->b ? -1 : 1;
    return tl_name_cmp(x->name, y->name);
}

#define TL_STEP "ProfilerStep#"

typedef struct {
    int64_t end;
    int32_t kind, name;
} TOwner;

/* one thread, [cuts[0], cuts[-1]] into the innermost operator or annotation gap */
static int tl_cpu(const Timeline *t, TRec *ev, Py_ssize_t n, TSeg *g) {
    int64_t lo = g->cuts[0], hi = g->cuts[g->ncuts - 1], tt = lo;
    TOwner *stack = PyMem_Malloc((size_t)(n + 1) * sizeof(TOwner));
    if (!stack) return E_NOMEM;
    Py_ssize_t sp = 0;
    int r = OK;
    const Py_ssize_t step_n = (Py_ssize_t)strlen(TL_STEP);
    for (Py_ssize_t k = 0; k < n && r == OK; k++) {
        int64_t a0 = ev[k].a, b0 = ev[k].b;
        if (a0 >= hi) break;
        if (b0 <= lo) continue;
        int64_t a = a0 > lo ? a0 : lo, b = b0 < hi ? b0 : hi;
        while (sp && stack[sp - 1].end <= a && r == OK) {
            TOwner o = stack[--sp];
            r = tseg_give(g, tt, o.end, o.kind, o.name);
            if (o.end > tt) tt = o.end;
        }
        if (r) break;
        TOwner owner = sp ? stack[sp - 1] : (TOwner){0, 1, -1};
        if ((r = tseg_give(g, tt, a, owner.kind, owner.name))) break;
        if (a > tt) tt = a;
        if (sp && b > stack[sp - 1].end) b = stack[sp - 1].end; /* overlaps its parent's end: clipped */
        TOwner key = {b, 0, ev[k].name};
        if (ev[k].kind == 0) {
            if (a0 >= lo && (r = tseg_count(g, a0, 0, ev[k].name))) break;
        } else if (owner.kind == 0) {
            key.kind = owner.kind, key.name = owner.name; /* an annotation inside an operator: the operator's */
        } else {
            const Intern *nm = &t->names;
            int is_step = nm->len[ev[k].name] >= step_n && memcmp(nm->arena + nm->off[ev[k].name], TL_STEP, (size_t)step_n) == 0;
            key.kind = 1;
            key.name = is_step ? -1 : ev[k].name;
        }
        stack[sp++] = key;
    }
    while (sp && r == OK) {
        TOwner o = stack[--sp];
        r = tseg_give(g, tt, o.end, o.kind, o.name);
        if (o.end > tt) tt = o.end;
    }
    if (r == OK) r = tseg_give(g, tt, hi, 1, -1);
    PyMem_Free(stack);
    return r;
}

/* one GPU (all its streams), [cuts[0], cuts[-1]] into the most recently started
 * kernel at each instant, or idle */
static int tl_gpu(TRec *ev, Py_ssize_t n, TSeg *g) {
    int64_t lo = g->cuts[0], hi = g->cuts[g->ncuts - 1], tt = lo;
    Py_ssize_t *stack = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t)), sp = 0, i = 0;
    if (!stack) return E_NOMEM;
    int r = OK;
    while (tt < hi && r == OK) {
        for (; i < n && ev[i].a <= tt; i++) {
            if (ev[i].b <= ev[i].a || ev[i].b <= lo) continue;
            if (ev[i].a >= lo && (r = tseg_count(g, ev[i].a, 2, ev[i].name))) break;
            if (ev[i].b > tt) stack[sp++] = i;
        }
        if (r) break;
        while (sp && ev[stack[sp - 1]].b <= tt) sp--;
        int64_t next = i < n ? ev[i].a : hi, t1;
        if (next > hi) next = hi;
        if (sp) {
            const TRec *top = &ev[stack[sp - 1]];
            t1 = top->b < next ? top->b : next;
            r = tseg_give(g, tt, t1, 2, top->name);
        } else {
            t1 = next;
            r = tseg_give(g, tt, t1, 3, -1);
        }
        tt = t1;
    }
    PyMem_Free(stack);
    return r;
}

/* the unit's events (thread or device key id; kinds cpu or gpu), sorted */
static Py_ssize_t tl_pick(Timeline *t, int32_t key, int gpu, TRec **out) {
    Py_ssize_t m = 0;
    TRec *sel = PyMem_Malloc((size_t)(t->n + 1) * sizeof(TRec));
    if (!sel) return -1;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        const TRec *x = &t->recs[k];
        if (gpu ? (x->kind == 2 && x->dev == key) : (x->kind != 2 && x->thread == key)) sel[m++] = *x;
    }
    tl_sorting = t;
    int (*cmp)(const void *, const void *) = gpu ? tl_gpu_cmp : tl_cpu_cmp;
    /* a trace lists a thread's events almost in this order (by start): the few out of
     * place are moved into place one by one (qsort was a third of segments()), within
     * a budget of moves; past it (events far out of order) qsort takes the rest */
    Py_ssize_t moves = 0, budget = 4 * m + 64, k = 1;
    for (; k < m && moves <= budget; k++) {
        if (cmp(&sel[k - 1], &sel[k]) <= 0) continue;
        TRec x = sel[k];
        Py_ssize_t j = k;
        for (; j > 0 && cmp(&sel[j - 1], &x) > 0; j--) sel[j] = sel[j - 1];
        sel[j] = x;
        moves += k - j;
    }
    if (k < m) qsort(sel, (size_t)m, sizeof(TRec), cmp);
    *out = sel;
    return m;
}

/* one unit's rows as bytes: ROW_FIELDS native int64 each, in segment order */
static PyObject *tl_unit_rows(Timeline *t, PyObject *keyb, int gpu, const int64_t *cuts, Py_ssize_t ncuts) {
    if (!PyBytes_Check(keyb)) {
        PyErr_SetString(PyExc_TypeError, "Timeline.segments: thread and device keys are bytes");
        return NULL;
    }
    int32_t key = intern_find(&t->keys, (const unsigned char *)PyBytes_AS_STRING(keyb), PyBytes_GET_SIZE(keyb));
    if (key < 0 || ncuts < 2) return PyBytes_FromStringAndSize(NULL, 0);
    TRec *ev;
    Py_ssize_t n = tl_pick(t, key, gpu, &ev);
    TSeg g;
    PyObject *rows = NULL;
    int r = n < 0 ? E_NOMEM : tseg_open(&g, cuts, ncuts);
    if (r == OK) {
        r = gpu ? tl_gpu(ev, n, &g) : tl_cpu(t, ev, n, &g);
        if (r == OK) r = tseg_flush(&g);
        PyMem_Free(ev); /* before the rows' copy: not three copies at once (issue 38) */
        ev = NULL;
        if (r == OK) rows = PyBytes_FromStringAndSize((const char *)g.out, g.on * (Py_ssize_t)sizeof(int64_t));
        tseg_close(&g);
    }
    if (n >= 0) PyMem_Free(ev);
    if (!rows && !PyErr_Occurred()) PyErr_NoMemory();
    return rows;
}

static PyObject *tl_segments(Timeline *t, PyObject *args) {
    PyObject *cuts_obj, *threads, *devices;
    if (!PyArg_ParseTuple(args, "OO!O!", &cuts_obj, &PyList_Type, &threads, &PyList_Type, &devices)) return NULL;
    PyObject *seq = PySequence_Fast(cuts_obj, "Timeline.segments: cuts is a sequence of ints");
    if (!seq) return NULL;
    Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq);
    int64_t *cuts = PyMem_Malloc((size_t)(nc + 1) * sizeof(int64_t));
    if (!cuts) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t j = 0; j < nc; j++) {
        cuts[j] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, j));
        if (j && cuts[j] <= cuts[j - 1] && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Timeline.segments: cuts are increasing");
        if (PyErr_Occurred()) {
            PyMem_Free(cuts);
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    PyObject *out_t = PyList_New(0), *out_d = PyList_New(0), *names = PyList_New(0), *res = NULL;
    if (!out_t || !out_d || !names) goto done;
    for (int gpu = 0; gpu < 2; gpu++) {
        PyObject *units = gpu ? devices : threads, *into = gpu ? out_d : out_t;
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(units); j++) {
            PyObject *rows = tl_unit_rows(t, PyList_GET_ITEM(units, j), gpu, cuts, nc);
            if (!rows) goto done;
            int bad = PyList_Append(into, rows);
            Py_DECREF(rows);
            if (bad) goto done;
        }
    }
    for (int32_t id = 0; id < t->names.n; id++) {
        PyObject *b = PyBytes_FromStringAndSize(t->names.arena + t->names.off[id], t->names.len[id]);
        if (!b || PyList_Append(names, b) < 0) {
            Py_XDECREF(b);
            goto done;
        }
        Py_DECREF(b);
    }
    res = PyTuple_Pack(3, names, out_t, out_d);
done:
    PyMem_Free(cuts);
    Py_XDECREF(out_t);
    Py_XDECREF(out_d);
    Py_XDECREF(names);
    return res;
}

static PyObject *tl_keys(Timeline *t, PyObject *unused) {
    (void)unused;
    PyObject *out = PyList_New(0);
    for (int32_t id = 0; out && id < t->keys.n; id++) {
        PyObject *b = PyBytes_FromStringAndSize(t->keys.arena + t->keys.off[id], t->keys.len[id]);
        if (!b || PyList_Append(out, b) < 0) {
            Py_XDECREF(b);
            Py_CLEAR(out);
        } else {
            Py_DECREF(b);
        }
    }
    return out;
}

/* t.records(kind) -> (keys, packed): the records of one kind in the order added, as
 * 4 native int64 each (a, b, name id, key index); the key is the device for GPU
 * records (kind 2), the thread for operators and annotations; key index into
 * ``keys``, in the order first seen among these records. What the step-time figures
 * (analyze/step_time.py) are computed from at the file's end, in Python for both paths. */
static PyObject *tl_records(Timeline *t, PyObject *args) {
    int kind;
    if (!PyArg_ParseTuple(args, "i", &kind)) return NULL;
    if (kind < 0 || kind > 2) {
        PyErr_SetString(PyExc_ValueError, "Timeline.records: kind is 0, 1 or 2");
        return NULL;
    }
    int32_t *local = PyMem_Malloc((size_t)(t->keys.n + 1) * sizeof(int32_t));
    int64_t *out = NULL;
    Py_ssize_t m = 0, ocap = 0;
    PyObject *keys = PyList_New(0), *packed = NULL, *res = NULL;
    if (!local || !keys) goto done;
    for (int32_t j = 0; j < t->keys.n; j++) local[j] = -1;
    for (Py_ssize_t k = 0; k < t->n; k++) {
        const TRec *x = &t->recs[k];
        if (x->kind != kind) continue;
        int32_t key = kind == 2 ? x->dev : x->thread;
        if (local[key] < 0) {
            PyObject *b = PyBytes_FromStringAndSize(t->keys.arena + t->keys.off[key], t->keys.len[key]);
            if (!b || PyList_Append(keys, b) < 0) {
                Py_XDECREF(b);
                goto done;
            }
            Py_DECREF(b);
            local[key] = (int32_t)(PyList_GET_SIZE(keys) - 1);
        }
        if (GROW_TO(out, ocap, m + 4, 4096)) {
            PyErr_NoMemory();
            goto done;
        }
        out[m++] = x->a, out[m++] = x->b, out[m++] = x->name, out[m++] = local[key];
    }
    packed = PyBytes_FromStringAndSize((const char *)out, m * (Py_ssize_t)sizeof(int64_t));
    if (packed) res = PyTuple_Pack(2, keys, packed);
done:
    if (!local && !PyErr_Occurred()) PyErr_NoMemory();
    PyMem_Free(local);
    PyMem_Free(out);
    Py_XDECREF(keys);
    Py_XDECREF(packed);
    return res;
}

static PyMethodDef tl_methods[] = {
    {"gpu_windows", (PyCFunction)tl_gpu_windows, METH_VARARGS,
     "gpu_windows(dev, windows, classes, kernel_wait_ns) -> (dev, figures, names): see csrc/timeline_steps.c"},
    {"records", (PyCFunction)tl_records, METH_VARARGS,
     "records(kind) -> (keys, packed): one kind's records, 4 int64 each (a, b, name id, key index)"},
    {"keys", (PyCFunction)tl_keys, METH_NOARGS, "keys() -> the thread and device keys, in the order first seen"},
    {"add", (PyCFunction)tl_add, METH_VARARGS, "add(kind, a_ns, b_ns, name, thread, dev): one event Python decoded"},
    {"set_limit", (PyCFunction)tl_set_limit, METH_VARARGS,
     "set_limit(ns): hold no event starting at or after ns (the step cap), from now on and already held"},
    {"set_floor", (PyCFunction)tl_set_floor, METH_VARARGS,
     "set_floor(ns): hold no event ending before ns (the step cap's window), from now on and already held"},
    {"segments", (PyCFunction)tl_segments, METH_VARARGS,
     "segments(cuts, threads, devices) -> (names, rows per thread, rows per device): rows as bytes of 14 int64 each"},
    {NULL, NULL, 0, NULL}};

static PySequenceMethods tl_as_seq = {.sq_length = (lenfunc)tl_len};

static PyTypeObject TimelineType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracefuse_stream._kernel.Timeline",
    .tp_basicsize = sizeof(Timeline),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The why's events of one file (see csrc/timeline.c).",
    .tp_new = tl_new,
    .tp_dealloc = (destructor)tl_dealloc,
    .tp_methods = tl_methods,
    .tp_as_sequence = &tl_as_seq,
};
