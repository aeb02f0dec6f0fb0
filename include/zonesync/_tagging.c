/* zonesync._tagging: the tagger's per-event loop for the common event, in C.
 *
 * tagging/extract.py's TagBatch.add turns each decoded change event into a tag entry:
 * idx (the row's unique-key values as JSON) -> version * 2 + deleted, in the batch's
 * dict for the row's table and entity. At the replication rate the Python loop was the
 * tagger's largest cost; this module does the same for the event most of a bulk load
 * is made of: an insert into a registered table with a one-column integer unique key
 * and an integer or text entity. It stops at the first event it does not cover (an
 * update, a delete, another key shape, a missing value) and returns its index: the
 * Python loop handles that one and calls back, so events are still taken in order (on
 * equal versions the later entry wins, as in Python).
 *
 * The entries are exactly those the Python loop makes; tests/unit/test_tag_extract.py
 * runs its checks through both.
 *
 * render_segments writes a batch's segments as the LOAD DATA text tag_store.py sends
 * (the same bytes as its Python rendering; tests/unit/test_tag_extract.py compares).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define MAX_ENTITY_ID 128

static PyObject *s_table, *s_op, *s_new, *s_version, *s_insert, *s_delete;

/* The entity's dict of idx entries in by_entity (made when missing), borrowed; NULL on error. */
static PyObject *group_of(PyObject *by_entity, PyObject *entity) {
    PyObject *group = PyDict_GetItemWithError(by_entity, entity);
    if (group || PyErr_Occurred()) return group;
    group = PyDict_New();
    if (!group) return NULL;
    int rc = PyDict_SetItem(by_entity, entity, group);
    Py_DECREF(group); /* by_entity holds it */
    return rc < 0 ? NULL : group;
}

/* tag_inserts(events, start, tables) -> (index, entries added)
 *
 * events: the TagEvents of one message; start: the first to take; tables: table name ->
 * (key attribute, entity attribute, by_entity, multi) as TagBatch keeps them (the
 * attributes are those of the decoded row image; by_entity: entity -> {idx: packed}).
 * Events of other tables are skipped. Returns the index of the first event left to the
 * caller (len(events) when none) and how many new idx entries were added. */
static PyObject *tag_inserts(PyObject *self, PyObject *args) {
    PyObject *events, *tables;
    Py_ssize_t i;
    if (!PyArg_ParseTuple(args, "O!nO!", &PyList_Type, &events, &i, &PyDict_Type, &tables)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(events), added = 0;
    for (; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(events, i);
        PyObject *table = PyObject_GetAttr(e, s_table);
        if (!table) return NULL;
        PyObject *spec = PyDict_GetItemWithError(tables, table); /* borrowed */
        Py_DECREF(table);
        if (!spec) {
            if (PyErr_Occurred()) return NULL;
            continue; /* not a registered table */
        }
        if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 4 || !PyDict_Check(PyTuple_GET_ITEM(spec, 2))) {
            PyErr_SetString(PyExc_TypeError, "tables: (key attribute, entity attribute, by_entity, multi) per table");
            return NULL;
        }
        if (PyTuple_GET_ITEM(spec, 3) != Py_False) break;
        PyObject *op = PyObject_GetAttr(e, s_op);
        if (!op) return NULL;
        int insert = op == s_insert || (PyUnicode_Check(op) && PyUnicode_Compare(op, s_insert) == 0);
        Py_DECREF(op);
        if (!insert) break;
        PyObject *image = PyObject_GetAttr(e, s_new);
        if (!image) return NULL;
        if (image == Py_None) { /* (an insert without a row: the Python loop names it) */
            Py_DECREF(image);
            break;
        }
        PyObject *value = PyObject_GetAttr(image, PyTuple_GET_ITEM(spec, 0));
        PyObject *entity = value ? PyObject_GetAttr(image, PyTuple_GET_ITEM(spec, 1)) : NULL;
        Py_DECREF(image);
        PyObject *version = entity ? PyObject_GetAttr(e, s_version) : NULL;
        if (!version) {
            Py_XDECREF(value);
            Py_XDECREF(entity);
            return NULL;
        }
        int overflow = 0, covered = PyLong_CheckExact(value) && PyLong_CheckExact(version) &&
                                    (PyLong_CheckExact(entity) || (PyUnicode_CheckExact(entity) &&
                                                                   PyUnicode_GET_LENGTH(entity) <= MAX_ENTITY_ID));
        long long ver = covered ? PyLong_AsLongLongAndOverflow(version, &overflow) : 0;
        Py_DECREF(version);
        if (!covered || overflow || ver < 0 || ver > (LLONG_MAX >> 1)) {
            Py_DECREF(value);
            Py_DECREF(entity);
            if (PyErr_Occurred()) return NULL;
            break; /* the Python loop takes it */
        }
        PyObject *idx = value; /* an idx of one integer is kept as the integer (TagBatch) */
        PyObject *group = group_of(PyTuple_GET_ITEM(spec, 2), entity);
        Py_DECREF(entity);
        PyObject *seen = group ? PyDict_GetItemWithError(group, idx) : NULL;
        int rc = group && !PyErr_Occurred() ? 0 : -1;
        if (rc == 0 && seen) { /* replaced unless it is newer */
            int big = 0;
            long long was = PyLong_AsLongLongAndOverflow(seen, &big);
            rc = was == -1 && PyErr_Occurred() ? -1 : big > 0 || (was >> 1) > ver ? 1 : 0;
        }
        if (rc == 0) {
            PyObject *packed = PyLong_FromLongLong(ver << 1);
            rc = packed ? PyDict_SetItem(group, idx, packed) : -1;
            Py_XDECREF(packed);
            added += rc == 0 && !seen;
        }
        Py_DECREF(value);
        if (rc < 0) return NULL;
    }
    return Py_BuildValue("nn", i, added);
}

/* rows_present(events) -> bool: every insert and update carries its new row (what the
 * tagger's narrow decoder cannot say by itself; a message failing it goes to the full
 * decoder, which names the fault). */
static PyObject *rows_present(PyObject *self, PyObject *events) {
    if (!PyList_Check(events)) {
        PyErr_SetString(PyExc_TypeError, "rows_present: a list of events");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(events); k++) {
        PyObject *e = PyList_GET_ITEM(events, k);
        PyObject *image = PyObject_GetAttr(e, s_new);
        if (!image) return NULL;
        int missing = image == Py_None;
        Py_DECREF(image);
        if (!missing) continue;
        PyObject *op = PyObject_GetAttr(e, s_op);
        if (!op) return NULL;
        int is_delete = PyUnicode_Check(op) && PyUnicode_Compare(op, s_delete) == 0;
        Py_DECREF(op);
        if (!is_delete) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* -- render_segments ------------------------------------------------------------ */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1 << 16;
    while (cap < b->len + more) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

/* `n` bytes as (part of) a LOAD DATA field: backslash, tab and newline escaped. */
static int put_escaped(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_grow(b, (size_t)n * 2) < 0) return -1;
    char *o = b->p + b->len;
    for (Py_ssize_t k = 0; k < n; k++) {
        char c = s[k];
        if (c == '\\') {
            *o++ = '\\';
            *o++ = '\\';
        } else if (c == '\t' || c == '\n') {
            *o++ = '\\';
            *o++ = c == '\t' ? 't' : 'n';
        } else {
            *o++ = c;
        }
    }
    b->len = (size_t)(o - b->p);
    return 0;
}

static int put_text(Buf *b, PyObject *text) {
    Py_ssize_t n;
    const char *s = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "segments: text expected");
        return -1;
    }
    return put_escaped(b, s, n);
}

/* A 64-bit integer in decimal (room for it reserved by the caller: 21 bytes). */
static void put_uint(Buf *b, unsigned long long u) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n) b->p[b->len++] = digits[--n];
}

static void put_int(Buf *b, long long v) {
    if (v < 0) b->p[b->len++] = '-';
    put_uint(b, v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v);
}

static int put_raw(Buf *b, const char *s, size_t n) {
    if (buf_grow(b, n) < 0) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static int put_segment(Buf *b, PyObject *segment, PyObject *repo, const char *batch, int batch_len) {
    PyObject *key, *entries;
    if (!PyTuple_Check(segment) || PyTuple_GET_SIZE(segment) != 2 || !PyTuple_Check(key = PyTuple_GET_ITEM(segment, 0)) ||
        PyTuple_GET_SIZE(key) != 3 || !PyDict_Check(entries = PyTuple_GET_ITEM(segment, 1))) {
        PyErr_SetString(PyExc_TypeError, "segments: ((entity type, entity id, table), {idx: packed}) each");
        return -1;
    }
    if (put_text(b, PyTuple_GET_ITEM(key, 0)) < 0 || put_raw(b, "\t", 1) < 0 ||
        put_text(b, PyTuple_GET_ITEM(key, 1)) < 0 || put_raw(b, "\t", 1) < 0 || put_text(b, repo) < 0 ||
        put_raw(b, "\t", 1) < 0 || put_text(b, PyTuple_GET_ITEM(key, 2)) < 0 || put_raw(b, "\t", 1) < 0 ||
        put_raw(b, batch, (size_t)batch_len) < 0 || put_raw(b, "\t", 1) < 0)
        return -1;
    Py_ssize_t pos = 0;
    PyObject *idx, *packed;
    int first = 1;
    while (PyDict_Next(entries, &pos, &idx, &packed)) {
        int big = 0;
        unsigned long long p = PyLong_Check(packed) ? PyLong_AsUnsignedLongLong(packed) : (unsigned long long)-1;
        if (p == (unsigned long long)-1) { /* (and a BIGINT version's is below it) */
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "segments: entries are version * 2 + deleted");
            return -1;
        }
        if (buf_grow(b, 64) < 0) return -1;
        if (!first) {
            memcpy(b->p + b->len, "\\n", 2);
            b->len += 2;
        }
        first = 0;
        long long key = 0;
        if (PyLong_CheckExact(idx) && (key = PyLong_AsLongLongAndOverflow(idx, &big), !big) &&
            !(key == -1 && PyErr_Occurred())) { /* an integer key: the idx `[key]` */
            b->p[b->len++] = '[';
            put_int(b, key);
            b->p[b->len++] = ']';
        } else if (PyLong_CheckExact(idx)) { /* beyond 64 bits */
            PyErr_Clear();
            PyObject *digits = PyObject_Str(idx);
            int rc = digits && put_raw(b, "[", 1) == 0 ? put_text(b, digits) : -1;
            Py_XDECREF(digits);
            if (rc < 0 || put_raw(b, "]", 1) < 0) return -1;
        } else if (put_text(b, idx) < 0) {
            return -1;
        }
        if (buf_grow(b, 48) < 0) return -1;
        memcpy(b->p + b->len, "\\t", 2);
        b->len += 2;
        put_uint(b, p >> 1);
        memcpy(b->p + b->len, (p & 1) ? "\\t1" : "\\t0", 3);
        b->len += 3;
    }
    return put_raw(b, "\n", 1);
}

/* render_segments(segments, repo, batch_no) -> bytes
 *
 * Each ((entity type, entity id, table), {idx: version * 2 + deleted}) as one line of
 * LOAD DATA text: entity type, entity id, repo, table, batch_no and the entries (`idx
 * <tab> version <tab> deleted` lines), tab-separated, escaped as LOAD DATA reads them. */
static PyObject *render_segments(PyObject *self, PyObject *args) {
    PyObject *segments, *repo;
    long long batch_no;
    if (!PyArg_ParseTuple(args, "O!UL", &PyList_Type, &segments, &repo, &batch_no)) return NULL;
    char batch[32];
    int batch_len = snprintf(batch, sizeof batch, "%lld", batch_no);
    Buf b = {0};
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(segments); k++) {
        if (put_segment(&b, PyList_GET_ITEM(segments, k), repo, batch, batch_len) < 0) {
            PyMem_Free(b.p);
            return NULL;
        }
    }
    PyObject *out = PyBytes_FromStringAndSize(b.p ? b.p : "", (Py_ssize_t)b.len);
    PyMem_Free(b.p);
    return out;
}

static PyMethodDef methods[] = {
    {"tag_inserts", tag_inserts, METH_VARARGS, "Tag entries of the inserts from events[start:], up to one it leaves."},
    {"render_segments", render_segments, METH_VARARGS, "A batch's segments as LOAD DATA text."},
    {"rows_present", rows_present, METH_O, "Whether every insert and update carries its new row."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "zonesync._tagging", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tagging(void) {
    s_table = PyUnicode_InternFromString("table");
    s_op = PyUnicode_InternFromString("op");
    s_new = PyUnicode_InternFromString("new");
    s_version = PyUnicode_InternFromString("version");
    s_insert = PyUnicode_InternFromString("insert");
    s_delete = PyUnicode_InternFromString("delete");
    if (!s_table || !s_op || !s_new || !s_version || !s_insert || !s_delete) return NULL;
    return PyModule_Create(&module);
}
