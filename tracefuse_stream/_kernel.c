/* The compiled kernel: the merge's rewrite and the side passes' scan, on the JSON text.
 *
 * Why it exists: in Python, a merge spends most of its time building and freeing one
 * dict per event (issue 14's profile: msgspec decode, the per-event rules and the encode
 * cost 3x the tokenize-and-copy floor), and the side passes (--window, --steps,
 * --align collectives, info) build every event to look at a few. Here a rank's event
 * array is tokenised in place and nothing is built per event. It is optional
 * (tracefuse_stream/native.py): without it every stage runs its Python path.
 *
 * rewrite(ctx, buf, pos, need_sep, at_start) -> (out, pos, status, skip_to, need_sep,
 *     n_in, n_dropped, n_out, lo, hi)
 *   The straight line of rewrite/rules.py (RankRewriter.feed_batch): pids, flow and
 *   link ids, exact ts shifts, args trimming (--args), the rank arg, category and
 *   time-window filters, first ts and GPU work per pid, and the span of the events
 *   written (lo: first ts, hi: last ts + dur, in 1e-9 us of the input's own ts, None
 *   when none was timed; the run check's); ProfilerStep#... events go back to Python,
 *   which reads their step numbers. The contract that keeps it
 *   honest: every event it writes has exactly the bytes of the Python path (msgspec
 *   decode with exact numbers -> feed_batch -> msgspec encode). So it writes only
 *   events whose text needs no normalisation and hands every other event back to
 *   Python: M events, new or non-integer pids, odd tids and ids, link args that are
 *   not small integers, a "rank" arg, duplicate keys, escapes other than \" \\ \n \r
 *   \t \b \f, any non-ASCII byte, numbers with an exponent, "-0", decimals Python's
 *   Decimal prints in scientific notation, times it cannot shift or place exactly.
 *   Invalid JSON is never diagnosed here: it is handed back and Python reports it.
 *   Whatever it compares with the user's text (categories for --drop-cat, arg keys
 *   for --args) it compares decoded (span_text): "my\tcat" is my<TAB>cat, as in Python.
 *   The escapes it keeps spell one text each, so raw bytes may be compared with raw
 *   bytes (duplicate keys, the category memo) and with plain literals ("M", "X", the
 *   GPU categories, key names: these escapes spell only quotes, backslashes and
 *   control characters, which none of them holds).
 *
 * scan(sel, buf, pos, need_sep, at_start) -> (selected, pos, status, skip_to,
 *     need_sep, n_judged, lo, hi)
 *   For read/scan.py: the events matching sel (ph, cat, name prefix), and any it
 *   cannot judge, come back as JSON text for Python to decode; the others are only
 *   counted, and with sel.extremes their first ts and last ts + dur (exact, in units
 *   of 1e-9 us) folded into lo/hi. With sel.validate false (--align on a strict merge,
 *   which validates every byte itself right after) the others are only skimmed: see
 *   skim_event; with extremes too (info's single pass), walked: see walk_event.
 *
 * Both consume whole events from buf[pos:] (need_sep: a "," comes first; at_start:
 * right after the array's "[", where "]" is an empty array) and stop at the first
 * event they cannot finish: end of buffer (NEED_MORE), end of array (END, pos at the
 * "]"), anything else (FALLBACK, pos at the event; skip_to is the end of that event
 * when it is balanced, -1 when it is not complete in buf, -2 when the text between
 * events is not a separator). read/batches.EventBatches.mixed drives them.
 *
 * The source is split into parts of one job each (tracefuse_stream/csrc/: base.h,
 * tokens, rules, rewrite, scan, skim, timeline, timeline_rows, validate, walk), compiled as this one translation unit by
 * the #includes below: every function stays static and inlinable, as before.
 */
#include "csrc/base.h"
#include "csrc/tokens.c"
#include "csrc/rules.c"
#include "csrc/rewrite.c"
#include "csrc/scan.c"
#include "csrc/skim.c"
#include "csrc/timeline.c"
#include "csrc/timeline_steps.c"
#include "csrc/timeline_rows.c"
#include "csrc/validate.c"
#include "csrc/walk.c"

static PyMethodDef methods[] = {
    {"rewrite", kernel_rewrite, METH_VARARGS,
     "rewrite(ctx, buf, pos, need_sep, at_start) -> (out, pos, status, skip_to, need_sep, n_in, n_dropped, n_out)"},
    {"scan", kernel_scan, METH_VARARGS,
     "scan(sel, buf, pos, need_sep, at_start[, timeline]) -> (selected, pos, status, skip_to, need_sep, n_judged, lo, hi)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernel", "The compiled kernel (see _kernel.c).", -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernel(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "NEED_MORE", ST_NEED_MORE) < 0 || PyModule_AddIntConstant(m, "END", ST_END) < 0 ||
        PyModule_AddIntConstant(m, "FALLBACK", ST_FALLBACK) < 0 || PyType_Ready(&TimelineType) < 0 ||
        PyModule_AddObjectRef(m, "Timeline", (PyObject *)&TimelineType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
