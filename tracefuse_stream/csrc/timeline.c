/* Part of tracefuse_stream/_kernel.c (one translation unit: _kernel.c #includes the
 * parts in order, so each sees the types and functions of the parts before it).
 * This part: the Timeline, the why's data gathered in info's single pass.
 *
 * Why: "why is rank R late" partitions a stretch of R's main thread (and of its GPU)
 * into operators, annotation gaps, kernels and idle time. Which stretches is known
 * only once every rank's collectives are matched, after the pass; a second pass over
 * every file cost more than the merge (issue 27, item 9). So the pass keeps each
 * operator / annotation / kernel event of the file as 32 bytes (names and threads
 * interned), and at the file's end Timeline.segments() partitions the step threads
 * and the collectives' GPUs once, cut at every step start and collective arrival of
 * the rank: aggregates per (segment, kind, name), from which any stretch from a step
 * start to an arrival is a sum (report/timeline.py). The records are freed with the
 * object: one file's at a time per worker. report/timeline.py's PyTimeline is the
 * same in Python (no kernel); tests/test_timeline.py compares the two.
 *
 * Timeline() -> t
 * t.add(kind, a_ns, b_ns, name, thread, dev)   one event Python decoded itself
 *   (kind 0 cpu_op, 1 user_annotation, 2 GPU; name, thread, dev: bytes keys)
 * t.segments(cuts, threads, devices) -> (names, [rows per thread], [rows per device])
 *   rows: (seg, kind, name_id, ns, count, runs, piece_a, piece_b, span_a, span_b,
 *          first_a, first_b, last_a, last_b); kind 0 op, 1 outside_ops (name_id -1:
 *          outside every annotation), 2 kernel, 3 gpu_idle (name_id -1)
 * len(t): the events held.
 */

typedef struct {
    int64_t a, b;
    int32_t name, thread, dev, kind;
} TRec;

typedef struct {
    uint64_t *hash; /* per slot; 0: empty */
    int32_t *slot_id;
    Py_ssize_t cap; /* slots, a power of two */
    char *arena;
    Py_ssize_t alen, acap;
    Py_ssize_t *off;
    int32_t *len;
    int32_t n, ncap;
} Intern;

typedef struct {
    PyObject_HEAD TRec *recs;
    Py_ssize_t n, cap;
    Intern names, keys;
    int32_t last_thread, last_dev; /* the last event's (most events are on the thread before theirs) */
} Timeline;

/* a hash of p[:n], 8 bytes a step (names run long: kernel names of 100+ bytes) */
static uint64_t fnv(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
        h ^= h >> 32;
    }
    uint64_t w = 0;
    memcpy(&w, p + i, (size_t)(n - i));
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    h ^= h >> 29;
    return h | 1; /* never 0 (the empty slot) */
}

static void intern_free(Intern *t) {
    PyMem_Free(t->hash);
    PyMem_Free(t->slot_id);
    PyMem_Free(t->arena);
    PyMem_Free(t->off);
    PyMem_Free(t->len);
    memset(t, 0, sizeof(*t));
}

static int intern_rehash(Intern *t, Py_ssize_t cap) {
    uint64_t *h = PyMem_Calloc((size_t)cap, sizeof(uint64_t));
    int32_t *ids = PyMem_Malloc((size_t)cap * sizeof(int32_t));
    if (!h || !ids) {
        PyMem_Free(h);
        PyMem_Free(ids);
        return E_NOMEM;
    }
    for (Py_ssize_t s = 0; s < t->cap; s++) {
        if (!t->hash[s]) continue;
        Py_ssize_t j = (Py_ssize_t)(t->hash[s] & (uint64_t)(cap - 1));
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = t->hash[s];
        ids[j] = t->slot_id[s];
    }
    PyMem_Free(t->hash);
    PyMem_Free(t->slot_id);
    t->hash = h;
    t->slot_id = ids;
    t->cap = cap;
    return OK;
}

/* the id of the bytes p[:n] (a new one the first time); -1: out of memory */
static int32_t intern(Intern *t, const unsigned char *p, Py_ssize_t n) {
    if ((t->n + 1) * 2 > t->cap && intern_rehash(t, t->cap ? t->cap * 2 : 256)) return -1;
    uint64_t h = fnv(p, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->hash[j]) {
        if (t->hash[j] == h) {
            int32_t id = t->slot_id[j];
            if (t->len[id] == n && memcmp(t->arena + t->off[id], p, (size_t)n) == 0) return id;
        }
        j = (j + 1) & (t->cap - 1);
    }
    if (t->n == t->ncap) {
        int32_t ncap = t->ncap ? t->ncap * 2 : 256;
        Py_ssize_t *off = PyMem_Realloc(t->off, (size_t)ncap * sizeof(Py_ssize_t));
        if (!off) return -1;
        t->off = off;
        int32_t *len = PyMem_Realloc(t->len, (size_t)ncap * sizeof(int32_t));
        if (!len) return -1;
        t->len = len;
        t->ncap = ncap;
    }
    if (t->alen + n > t->acap) {
        Py_ssize_t acap = t->acap ? t->acap * 2 : 65536;
        while (acap < t->alen + n) acap *= 2;
        char *arena = PyMem_Realloc(t->arena, (size_t)acap);
        if (!arena) return -1;
        t->arena = arena;
        t->acap = acap;
    }
    memcpy(t->arena + t->alen, p, (size_t)n);
    t->off[t->n] = t->alen;
    t->len[t->n] = (int32_t)n;
    t->alen += n;
    t->hash[j] = h;
    t->slot_id[j] = t->n;
    return t->n++;
}

/* the id of p[:n] if interned, else -1 */
static int32_t intern_find(const Intern *t, const unsigned char *p, Py_ssize_t n) {
    if (!t->cap) return -1;
    uint64_t h = fnv(p, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->hash[j]) {
        if (t->hash[j] == h) {
            int32_t id = t->slot_id[j];
            if (t->len[id] == n && memcmp(t->arena + t->off[id], p, (size_t)n) == 0) return id;
        }
        j = (j + 1) & (t->cap - 1);
    }
    return -1;
}

static int tl_push(Timeline *t, int kind, int64_t a, int64_t b, const unsigned char *name, Py_ssize_t name_n,
                   const unsigned char *thread, Py_ssize_t thread_n, const unsigned char *dev, Py_ssize_t dev_n) {
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 4096;
        TRec *r = PyMem_Realloc(t->recs, (size_t)cap * sizeof(TRec));
        if (!r) return E_NOMEM;
        t->recs = r;
        t->cap = cap;
    }
    int32_t nm = intern(&t->names, name, name_n), th, dv;
    const Intern *k = &t->keys;
    if (t->n > 0 && k->len[t->last_thread] == thread_n &&
        memcmp(k->arena + k->off[t->last_thread], thread, (size_t)thread_n) == 0 && k->len[t->last_dev] == dev_n &&
        memcmp(k->arena + k->off[t->last_dev], dev, (size_t)dev_n) == 0) {
        th = t->last_thread, dv = t->last_dev;
    } else {
        th = intern(&t->keys, thread, thread_n);
        dv = intern(&t->keys, dev, dev_n);
        if (th >= 0 && dv >= 0) t->last_thread = th, t->last_dev = dv;
    }
    if (nm < 0 || th < 0 || dv < 0) return E_NOMEM;
    TRec *r = &t->recs[t->n++];
    r->a = a;
    r->b = b;
    r->name = nm;
    r->thread = th;
    r->dev = dv;
    r->kind = kind;
    return OK;
}

/* the key of a pid or tid as report/timeline.py's _value_key spells it: 'i' and the
 * digits of an integer, 's' and the text of a string (4-byte little-endian length
 * first); 0: not written here (no value, too long, another kind: Python decides) */
static Py_ssize_t tl_value_key(unsigned char *out, Py_ssize_t room, int is_str, Span v) {
    if (v.n + 5 > room) return 0;
    out[0] = is_str ? 's' : 'i';
    uint32_t n = (uint32_t)v.n;
    out[1] = (unsigned char)(n & 0xff);
    out[2] = (unsigned char)((n >> 8) & 0xff);
    out[3] = (unsigned char)((n >> 16) & 0xff);
    out[4] = (unsigned char)((n >> 24) & 0xff);
    memcpy(out + 5, v.p, (size_t)v.n);
    return v.n + 5;
}

static PyObject *tl_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    (void)args;
    (void)kw;
    Timeline *t = (Timeline *)type->tp_alloc(type, 0);
    return (PyObject *)t;
}

static void tl_dealloc(Timeline *t) {
    PyMem_Free(t->recs);
    intern_free(&t->names);
    intern_free(&t->keys);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static Py_ssize_t tl_len(Timeline *t) { return t->n; }

static PyObject *tl_add(Timeline *t, PyObject *args) {
    int kind;
    long long a, b;
    Py_buffer name, thread, dev;
    if (!PyArg_ParseTuple(args, "iLLy*y*y*", &kind, &a, &b, &name, &thread, &dev)) return NULL;
    int r = (kind < 0 || kind > 2) ? E_FALL
                                   : tl_push(t, kind, a, b, name.buf, name.len, thread.buf, thread.len, dev.buf, dev.len);
    PyBuffer_Release(&name);
    PyBuffer_Release(&thread);
    PyBuffer_Release(&dev);
    if (r == E_NOMEM) return PyErr_NoMemory();
    if (r != OK) {
        PyErr_SetString(PyExc_ValueError, "Timeline.add: kind is 0, 1 or 2");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- segments ------------------------------------------------------------------ */

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
    PyObject *rows; /* list */
    int failed;
} TSeg;

static int tseg_open(TSeg *g, const int64_t *cuts, Py_ssize_t ncuts, PyObject *rows) {
    memset(g, 0, sizeof(*g));
    g->cuts = cuts;
    g->ncuts = ncuts;
    g->rows = rows;
    g->scap = 64;
    g->slots = PyMem_Malloc((size_t)g->scap * sizeof(int32_t));
    if (!g->slots) return E_NOMEM;
    for (Py_ssize_t j = 0; j < g->scap; j++) g->slots[j] = -1;
    return OK;
}

static void tseg_close(TSeg *g) {
    PyMem_Free(g->aggs);
    PyMem_Free(g->slots);
}

static int tseg_flush(TSeg *g) {
    for (Py_ssize_t j = 0; j < g->n; j++) {
        TAgg *x = &g->aggs[j];
        PyObject *row = Py_BuildValue("(niiLLLLLLLLLLL)", g->seg, x->kind, x->name, (long long)x->ns,
                                      (long long)x->count, (long long)x->runs, (long long)x->piece_a,
                                      (long long)x->piece_b, (long long)x->span_a, (long long)x->span_b,
                                      (long long)x->first_a, (long long)x->first_b, (long long)x->last_a,
                                      (long long)x->last_b);
        if (!row || PyList_Append(g->rows, row) < 0) {
            Py_XDECREF(row);
            return E_NOMEM;
        }
        Py_DECREF(row);
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

static TAgg *tseg_agg(TSeg *g, int32_t kind, int32_t name) {
    uint64_t h = ((uint64_t)(uint32_t)kind * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)(uint32_t)name * 0xC2B2AE3D27D4EB4FULL);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(g->scap - 1));
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
            TAgg *x = &g->aggs[k];
            uint64_t hk = ((uint64_t)(uint32_t)x->kind * 0x9E3779B97F4A7C15ULL) ^
                          ((uint64_t)(uint32_t)x->name * 0xC2B2AE3D27D4EB4FULL);
            Py_ssize_t m = (Py_ssize_t)(hk & (uint64_t)(scap - 1));
            while (slots[m] >= 0) m = (m + 1) & (scap - 1);
            slots[m] = (int32_t)k;
        }
        PyMem_Free(g->slots);
        g->slots = slots;
        g->scap = scap;
        return tseg_agg(g, kind, name);
    }
    if (g->n == g->cap) {
        Py_ssize_t cap = g->cap ? g->cap * 2 : 32;
        TAgg *aggs = PyMem_Realloc(g->aggs, (size_t)cap * sizeof(TAgg));
        if (!aggs) return NULL;
        g->aggs = aggs;
        g->cap = cap;
    }
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
    qsort(sel, (size_t)m, sizeof(TRec), gpu ? tl_gpu_cmp : tl_cpu_cmp);
    *out = sel;
    return m;
}

static PyObject *tl_unit_rows(Timeline *t, PyObject *keyb, int gpu, const int64_t *cuts, Py_ssize_t ncuts) {
    PyObject *rows = PyList_New(0);
    if (!rows) return NULL;
    if (!PyBytes_Check(keyb)) {
        Py_DECREF(rows);
        PyErr_SetString(PyExc_TypeError, "Timeline.segments: thread and device keys are bytes");
        return NULL;
    }
    int32_t key = intern_find(&t->keys, (const unsigned char *)PyBytes_AS_STRING(keyb), PyBytes_GET_SIZE(keyb));
    if (key < 0 || ncuts < 2) return rows;
    TRec *ev;
    Py_ssize_t n = tl_pick(t, key, gpu, &ev);
    TSeg g;
    int r = n < 0 ? E_NOMEM : tseg_open(&g, cuts, ncuts, rows);
    if (r == OK) {
        r = gpu ? tl_gpu(ev, n, &g) : tl_cpu(t, ev, n, &g);
        if (r == OK) r = tseg_flush(&g);
        tseg_close(&g);
    }
    if (n >= 0) PyMem_Free(ev);
    if (r != OK) {
        Py_DECREF(rows);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
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

static PyMethodDef tl_methods[] = {
    {"keys", (PyCFunction)tl_keys, METH_NOARGS, "keys() -> the thread and device keys, in the order first seen"},
    {"add", (PyCFunction)tl_add, METH_VARARGS, "add(kind, a_ns, b_ns, name, thread, dev): one event Python decoded"},
    {"segments", (PyCFunction)tl_segments, METH_VARARGS,
     "segments(cuts, threads, devices) -> (names, rows per thread, rows per device)"},
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
