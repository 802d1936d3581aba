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
 * object: one file's at a time per worker. The segments and the Python type are in
 * csrc/timeline_rows.c. report/timeline.py's PyTimeline is the
 * same in Python (no kernel); tests/test_timeline.py compares the two.
 *
 * Timeline() -> t
 * t.add(kind, a_ns, b_ns, name, thread, dev)   one event Python decoded itself
 *   (kind 0 cpu_op, 1 user_annotation, 2 GPU; name, thread, dev: bytes keys)
 * t.segments(cuts, threads, devices) -> (names, [rows per thread], [rows per device])
 *   each unit's rows: bytes, 14 native int64 a row, in segment order:
 *         (seg, kind, name_id, ns, count, runs, piece_a, piece_b, span_a, span_b,
 *          first_a, first_b, last_a, last_b); kind 0 op, 1 outside_ops (name_id -1:
 *          outside every annotation), 2 kernel, 3 gpu_idle (name_id -1)
 * t.set_limit(ns)   hold no event starting at or after ns, from now on and already held
 *   (the step cap, analyze/step_cap.py: the steps past the kept ones are never read)
 * t.set_floor(ns)   hold no event ending before ns, likewise (the steps before a window)
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
    int has_limit, has_floor;
    int64_t limit; /* with has_limit: events starting at or after it are not held (set_limit) */
    int64_t floor; /* with has_floor: events ending before it are not held (set_floor) */
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

/* the slot of p[:n] (hash h) in a table with room: where it is, or the empty slot
 * where it would go */
static Py_ssize_t intern_slot(const Intern *t, const unsigned char *p, Py_ssize_t n, uint64_t h) {
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->cap - 1));
    while (t->hash[j]) {
        if (t->hash[j] == h) {
            int32_t id = t->slot_id[j];
            if (t->len[id] == n && memcmp(t->arena + t->off[id], p, (size_t)n) == 0) return j;
        }
        j = (j + 1) & (t->cap - 1);
    }
    return j;
}

/* the id of the bytes p[:n] (a new one the first time); -1: out of memory */
static int32_t intern(Intern *t, const unsigned char *p, Py_ssize_t n) {
    if ((t->n + 1) * 2 > t->cap && intern_rehash(t, t->cap ? t->cap * 2 : 256)) return -1;
    uint64_t h = fnv(p, n);
    Py_ssize_t j = intern_slot(t, p, n, h);
    if (t->hash[j]) return t->slot_id[j];
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
    if (GROW_TO(t->arena, t->acap, t->alen + n, 65536)) return -1;
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
    Py_ssize_t j = intern_slot(t, p, n, fnv(p, n));
    return t->hash[j] ? t->slot_id[j] : -1;
}

static int tl_push(Timeline *t, int kind, int64_t a, int64_t b, const unsigned char *name, Py_ssize_t name_n,
                   const unsigned char *thread, Py_ssize_t thread_n, const unsigned char *dev, Py_ssize_t dev_n) {
    if (t->has_limit && a >= t->limit) return OK; /* past the step cap's last step: never read */
    if (t->has_floor && b < t->floor) return OK;  /* before the window's first step: never read */
    if (GROW_TO(t->recs, t->cap, t->n + 1, 4096)) return E_NOMEM;
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

static void tl_drop_outside(Timeline *t) {
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < t->n; i++)
        if (!(t->has_limit && t->recs[i].a >= t->limit) && !(t->has_floor && t->recs[i].b < t->floor))
            t->recs[k++] = t->recs[i];
    t->n = k;
}

static PyObject *tl_set_limit(Timeline *t, PyObject *args) {
    long long ns;
    if (!PyArg_ParseTuple(args, "L", &ns)) return NULL;
    if (!t->has_limit || ns < t->limit) t->limit = ns;
    t->has_limit = 1;
    tl_drop_outside(t);
    Py_RETURN_NONE;
}

static PyObject *tl_set_floor(Timeline *t, PyObject *args) {
    long long ns;
    if (!PyArg_ParseTuple(args, "L", &ns)) return NULL;
    if (!t->has_floor || ns > t->floor) t->floor = ns;
    t->has_floor = 1;
    tl_drop_outside(t);
    Py_RETURN_NONE;
}

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

