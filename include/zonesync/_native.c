/* zonesync._native: the per-row hot loops of the replicator and the applier, in C.
 *
 * For bulk changes the replicator spent most of its CPU in Python per row: reading
 * the row image (rows.py's compiled reader), building a ChangeEvent, encoding it as
 * JSON (publish.py, event.py). For a rows event whose columns are all integers or
 * UTF-8 text and whose table has a one-integer primary key (the common bulk case),
 * this module does the same work straight from the event's bytes to each event's
 * JSON document, without a Python object per value:
 *
 *   walk_rows   at read time: checks that the row images end exactly at the event's
 *               end and that every text value is valid UTF-8; -1 sends the event to
 *               the Python reader (and from there to the library), as before.
 *   queue_rows  at commit: publish.queue_txn_events's loop for one rows event: LSN,
 *               partition (crc32 of the key's text, seeded with the table's hash),
 *               prev_lsn chain, is_retry, and the event's JSON as msgspec.Raw in its
 *               partition's queue (msgspec writes a Raw as it is, so a message is the
 *               same JSON array either way).
 *
 *
 * And for the applier:
 *
 *   render_rows the SQL tuples of new rows for a multi-row INSERT (apply/literals.py).
 *
 * The output is byte for byte what the Python path writes (msgspec's JSON of the
 * ChangeEvent it would build); tests/unit/test_native_rows.py compares the two. Any
 * table this module does not cover (other column types, other character sets, other
 * keys) keeps the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Column codes (rows.py native_spec): 1..10 fixed-width integers, 20 + n text with an
 * n-byte little-endian length prefix (n = 1..4). */
enum {
    C_I8 = 1, C_U8, C_I16, C_U16, C_I24, C_U24, C_I32, C_U32, C_I64, C_U64,
    C_TEXT = 20,
};
enum { OP_INSERT = 0, OP_UPDATE = 1, OP_DELETE = 2 };
#define ROW_BITS 15
#define MAX_ROWS_PER_EVENT ((1 << ROW_BITS) - 1)
#define MAX_COLUMNS 4096
#define LIT(s) s, sizeof(s) - 1

/* -- crc32, zlib's (events.partition_of uses zlib.crc32) --------------------------- */
static uint32_t crc_table[256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
}

static uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t n) {
    crc = ~crc;
    while (n--) crc = crc_table[(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* -- an output buffer ----------------------------------------------------------------- */
typedef struct {
    char *p;
    size_t len, cap;
} Buf;

static int buf_grow(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, size_t n) {
    if (buf_grow(b, n)) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

static int buf_bytes(Buf *b, PyObject *bytes) {
    return buf_put(b, PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes));
}

static int buf_i64(Buf *b, long long v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", v);
    return buf_put(b, tmp, (size_t)n);
}

static int buf_u64(Buf *b, unsigned long long v) {
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%llu", v);
    return buf_put(b, tmp, (size_t)n);
}

/* A JSON string, escaped as msgspec escapes it: quote, backslash and the control
 * characters (\b \t \n \f \r short, the others as \u00XX); everything else as is. */
static int buf_json_str(Buf *b, const unsigned char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (buf_grow(b, n * 6 + 2)) return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\t': *o++ = 't'; break;
        case '\n': *o++ = 'n'; break;
        case '\f': *o++ = 'f'; break;
        case '\r': *o++ = 'r'; break;
        default:
            *o++ = 'u'; *o++ = '0'; *o++ = '0';
            *o++ = hex[c >> 4]; *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->p);
    return 0;
}

/* -- the column spec ------------------------------------------------------------------ */
typedef struct {
    const unsigned char *codes;
    Py_ssize_t count;
    PyObject *names; /* tuple of bytes: each column's JSON key and colon, `"name":` */
} Spec;

static int spec_from(PyObject *codes, PyObject *names, Spec *spec) {
    if (!PyBytes_Check(codes) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) != PyBytes_GET_SIZE(codes)) {
        PyErr_SetString(PyExc_TypeError, "spec: codes (bytes) and names (tuple of bytes) of one length");
        return -1;
    }
    spec->codes = (const unsigned char *)PyBytes_AS_STRING(codes);
    spec->count = PyBytes_GET_SIZE(codes);
    spec->names = names;
    if (spec->count == 0 || spec->count > MAX_COLUMNS) {
        PyErr_SetString(PyExc_ValueError, "spec: 1 to 4096 columns");
        return -1;
    }
    for (Py_ssize_t i = 0; i < spec->count; i++) {
        if (!PyBytes_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "spec: names must be bytes");
            return -1;
        }
    }
    return 0;
}

static int fixed_size(int code) {
    switch (code) {
    case C_I8: case C_U8: return 1;
    case C_I16: case C_U16: return 2;
    case C_I24: case C_U24: return 3;
    case C_I32: case C_U32: return 4;
    case C_I64: case C_U64: return 8;
    }
    return 0;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static int64_t sign_extend(uint64_t v, int bytes) {
    int shift = 64 - 8 * bytes;
    return shift ? (int64_t)(v << shift) >> shift : (int64_t)v;
}

/* What reading one image yields besides its JSON. */
typedef struct {
    int pk_null, pk_unsigned;
    uint64_t pk;
    int origin_set, version_set;
    int64_t origin, version; /* (unsigned values past INT64_MAX: see value_i64) */
} Picked;

/* One full row image at *pos: its JSON object into out (when out is not NULL), the
 * key, origin and version columns into picked. 0, or -1 when it does not fit before
 * end or a text value is not UTF-8 (no Python error set: the caller falls back). */
static int read_image(const Spec *spec, const unsigned char *buf, Py_ssize_t *pos, Py_ssize_t end, Buf *out,
                      Py_ssize_t pk_idx, Py_ssize_t origin_idx, Py_ssize_t version_idx, Picked *picked) {
    Py_ssize_t p = *pos, null_bytes = (spec->count + 7) / 8;
    if (p + null_bytes > end) return -1;
    const unsigned char *nulls = buf + p;
    p += null_bytes;
    if (out && buf_put(out, "{", 1)) return -2;
    for (Py_ssize_t i = 0; i < spec->count; i++) {
        int code = spec->codes[i];
        if (out) {
            if (i && buf_put(out, ",", 1)) return -2;
            if (buf_bytes(out, PyTuple_GET_ITEM(spec->names, i))) return -2;
        }
        if (nulls[i >> 3] & (1 << (i & 7))) {
            if (out && buf_put(out, "null", 4)) return -2;
            if (i == pk_idx) picked->pk_null = 1;
            continue;
        }
        int size = fixed_size(code);
        if (size) {
            if (p + size > end) return -1;
            uint64_t raw = le(buf + p, size);
            p += size;
            int is_unsigned = code == C_U8 || code == C_U16 || code == C_U24 || code == C_U32 || code == C_U64;
            int64_t sv = is_unsigned ? (int64_t)raw : sign_extend(raw, size);
            if (out && (is_unsigned ? buf_u64(out, raw) : buf_i64(out, sv))) return -2;
            if (i == pk_idx) {
                picked->pk = is_unsigned ? raw : (uint64_t)sv;
                picked->pk_unsigned = is_unsigned;
            }
            /* (an unsigned BIGINT past INT64_MAX in _zs_origin or _zs_version is left to
             * the Python path: queue_rows refuses the event before this point) */
            if (i == origin_idx) {
                picked->origin = sv;
                picked->origin_set = 1;
            }
            if (i == version_idx) {
                picked->version = sv;
                picked->version_set = 1;
            }
            continue;
        }
        int prefix = code - C_TEXT;
        if (prefix < 1 || prefix > 4) return -1;
        if (p + prefix > end) return -1;
        Py_ssize_t n = (Py_ssize_t)le(buf + p, prefix);
        p += prefix;
        if (n > end - p) return -1;
        const unsigned char *s = buf + p;
        for (Py_ssize_t k = 0; k < n; k++) {
            if (s[k] & 0x80) { /* non-ASCII: exactly Python's strict UTF-8 check */
                PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
                if (!text) {
                    PyErr_Clear();
                    return -1;
                }
                Py_DECREF(text);
                break;
            }
        }
        if (out && buf_json_str(out, s, (size_t)n)) return -2;
        p += n;
    }
    if (out && buf_put(out, "}", 1)) return -2;
    *pos = p;
    return 0;
}

static int parse_op(int op) {
    if (op < OP_INSERT || op > OP_DELETE) {
        PyErr_SetString(PyExc_ValueError, "op: 0 insert, 1 update, 2 delete");
        return -1;
    }
    return 0;
}

/* walk_rows(codes, names, data, pos, end, op) -> number of rows, or -1 */
static PyObject *walk_rows(PyObject *self, PyObject *args) {
    PyObject *codes, *names;
    Py_buffer data;
    Py_ssize_t pos, end;
    int op;
    if (!PyArg_ParseTuple(args, "OOy*nni", &codes, &names, &data, &pos, &end, &op)) return NULL;
    Spec spec;
    long rows = 0;
    if (spec_from(codes, names, &spec) || parse_op(op)) goto error;
    if (pos < 0 || end > data.len || pos > end) {
        rows = -1;
        goto done;
    }
    const unsigned char *buf = data.buf;
    int images = op == OP_UPDATE ? 2 : 1;
    while (pos < end) {
        for (int k = 0; k < images; k++) {
            Picked picked = {0};
            if (read_image(&spec, buf, &pos, end, NULL, -1, -1, -1, &picked)) {
                rows = -1;
                goto done;
            }
        }
        rows++;
    }
done:
    PyBuffer_Release(&data);
    return PyLong_FromLong(rows);
error:
    PyBuffer_Release(&data);
    return NULL;
}

/* queue_rows(codes, names, data, pos, end, op, pk_idx, origin_idx, version_idx, zone_id,
 *            base_lsn, seed, partitions, p1, p2, p3, p4, index, count, commit_ts,
 *            partition_lsns, partition_counts, hwm, retry_partitions, pending, full, raw_type, max_events)
 *   -> (index, hwm)
 *
 * publish.queue_txn_events's loop for one rows event (see there for what each step
 * means). p1..p4 are the event document's constant parts around the per-row values:
 *   {"lsn":L,"prev_lsn":P <p1> O <p2> PK <p3> OLD,"new":NEW,"version":V <p4> I
 *   ,"row_count":C,"commit_ts":T,"partition":N,"is_retry":B,"txn_end":false}
 * (txn_end is set on a transaction's last row per partition once the whole transaction
 * is queued: publish.close_txn)
 */
static PyObject *queue_rows(PyObject *self, PyObject *args) {
    PyObject *codes, *names, *p1, *p2, *p3, *p4, *partition_lsns, *counts, *retry, *pending, *full, *raw_type;
    Py_buffer data;
    Py_ssize_t pos, end, pk_idx, origin_idx, version_idx, index, count, max_events;
    int op;
    long long zone_id, base_lsn, commit_ts, hwm;
    unsigned long seed;
    long partitions;
    if (!PyArg_ParseTuple(args, "OOy*nninnnLLklSSSSnnLOOLOOOOn", &codes, &names, &data, &pos, &end, &op, &pk_idx,
                          &origin_idx, &version_idx, &zone_id, &base_lsn, &seed, &partitions, &p1, &p2, &p3, &p4,
                          &index, &count, &commit_ts, &partition_lsns, &counts, &hwm, &retry, &pending, &full,
                          &raw_type, &max_events))
        return NULL;
    Spec spec;
    Buf ev = {0}, old = {0}, new_ = {0};
    PyObject *result = NULL;
    if (spec_from(codes, names, &spec) || parse_op(op)) goto out;
    if (!PyDict_Check(partition_lsns) || !PyDict_Check(counts) || !PyDict_Check(pending) ||
        (retry != Py_None && !PyAnySet_Check(retry))) {
        PyErr_SetString(PyExc_TypeError,
                        "partition_lsns, partition_counts and pending are dicts, retry_partitions a set or None");
        goto out;
    }
    if (pk_idx < 0 || pk_idx >= spec.count || spec.codes[pk_idx] >= C_TEXT || partitions <= 0 || pos < 0 ||
        end > data.len || pos > end) {
        PyErr_SetString(PyExc_ValueError, "queue_rows: bad key column, partition count or range");
        goto out;
    }
    const unsigned char *buf = data.buf;
    long long bump = op == OP_DELETE ? 1 : 0;
    for (Py_ssize_t i = 0; pos < end; i++) {
        Picked po = {0}, pn = {0};
        old.len = new_.len = 0;
        int rc = 0;
        if (op != OP_INSERT) rc = read_image(&spec, buf, &pos, end, &old, pk_idx, origin_idx, version_idx, &po);
        if (!rc && op != OP_DELETE) rc = read_image(&spec, buf, &pos, end, &new_, pk_idx, origin_idx, version_idx, &pn);
        if (rc) {
            if (rc == -1) PyErr_SetString(PyExc_ValueError, "row images do not match their table map");
            goto out;
        }
        Picked *image = op == OP_DELETE ? &po : &pn;
        if (i > MAX_ROWS_PER_EVENT) {
            PyErr_SetString(PyExc_OverflowError, "row index does not fit an LSN");
            goto out;
        }
        /* the key's text, as pk_text writes a one-integer key, and its partition */
        char text[32];
        int tn = image->pk_null ? snprintf(text, sizeof text, "[null]")
                 : image->pk_unsigned ? snprintf(text, sizeof text, "[%llu]", (unsigned long long)image->pk)
                                      : snprintf(text, sizeof text, "[%lld]", (long long)(int64_t)image->pk);
        long partition = (long)(crc32_update((uint32_t)seed, (const unsigned char *)text, (size_t)tn) % (uint32_t)partitions);
        long long lsn = base_lsn | (long long)i;
        int is_retry = lsn <= hwm;
        PyObject *pkey = PyLong_FromLong(partition);
        if (!pkey) goto out;
        PyObject *prev_obj = PyDict_GetItemWithError(partition_lsns, pkey); /* borrowed */
        long long prev = 0;
        if (prev_obj) {
            prev = PyLong_AsLongLong(prev_obj);
            if (prev == -1 && PyErr_Occurred()) {
                Py_DECREF(pkey);
                goto out;
            }
        } else if (PyErr_Occurred()) {
            Py_DECREF(pkey);
            goto out;
        }
        PyObject *lsn_obj = PyLong_FromLongLong(lsn);
        if (!lsn_obj || PyDict_SetItem(partition_lsns, pkey, lsn_obj)) {
            Py_XDECREF(lsn_obj);
            Py_DECREF(pkey);
            goto out;
        }
        Py_DECREF(lsn_obj);
        /* the partition's count of events published since its chain began (reconcile.py) */
        PyObject *count_obj = PyDict_GetItemWithError(counts, pkey); /* borrowed */
        long long published = 0;
        if (count_obj) {
            published = PyLong_AsLongLong(count_obj);
            if (published == -1 && PyErr_Occurred()) {
                Py_DECREF(pkey);
                goto out;
            }
        } else if (PyErr_Occurred()) {
            Py_DECREF(pkey);
            goto out;
        }
        count_obj = PyLong_FromLongLong(published + 1);
        if (!count_obj || PyDict_SetItem(counts, pkey, count_obj)) {
            Py_XDECREF(count_obj);
            Py_DECREF(pkey);
            goto out;
        }
        Py_DECREF(count_obj);
        if (is_retry && retry != Py_None) {
            int member = PySet_Contains(retry, pkey);
            if (member < 0) {
                Py_DECREF(pkey);
                goto out;
            }
            if (!member) {
                Py_DECREF(pkey);
                index++;
                continue;
            }
        }
        long long origin = image->origin_set && image->origin ? image->origin : zone_id;
        long long version = (image->version_set ? image->version : 0) + bump;
        ev.len = 0;
        if (buf_put(&ev, LIT("{\"lsn\":")) || buf_i64(&ev, lsn) || buf_put(&ev, LIT(",\"prev_lsn\":")) ||
            buf_i64(&ev, prev) || buf_bytes(&ev, p1) || buf_i64(&ev, origin) || buf_bytes(&ev, p2) ||
            buf_put(&ev, text + 1, (size_t)tn - 2) || buf_bytes(&ev, p3) ||
            (op == OP_INSERT ? buf_put(&ev, LIT("null")) : buf_put(&ev, old.p, old.len)) ||
            buf_put(&ev, LIT(",\"new\":")) ||
            (op == OP_DELETE ? buf_put(&ev, LIT("null")) : buf_put(&ev, new_.p, new_.len)) ||
            buf_put(&ev, LIT(",\"version\":")) || buf_i64(&ev, version) || buf_bytes(&ev, p4) ||
            buf_i64(&ev, (long long)index) || buf_put(&ev, LIT(",\"row_count\":")) || buf_i64(&ev, (long long)count) ||
            buf_put(&ev, LIT(",\"commit_ts\":")) || buf_i64(&ev, commit_ts) || buf_put(&ev, LIT(",\"partition\":")) ||
            buf_i64(&ev, partition) || (is_retry ? buf_put(&ev, LIT(",\"is_retry\":true,\"txn_end\":false}"))
                                        : buf_put(&ev, LIT(",\"is_retry\":false,\"txn_end\":false}")))) {
            Py_DECREF(pkey);
            goto out;
        }
        index++;
        PyObject *doc = PyBytes_FromStringAndSize(ev.p, (Py_ssize_t)ev.len);
        PyObject *raw = doc ? PyObject_CallOneArg(raw_type, doc) : NULL;
        Py_XDECREF(doc);
        if (!raw) {
            Py_DECREF(pkey);
            goto out;
        }
        PyObject *queue = PyDict_GetItemWithError(pending, pkey); /* borrowed */
        int failed = 0;
        if (!queue) {
            if (PyErr_Occurred()) {
                failed = 1;
            } else {
                PyObject *fresh = PyList_New(1);
                if (!fresh) {
                    failed = 1;
                } else {
                    PyList_SET_ITEM(fresh, 0, raw);
                    raw = NULL;
                    failed = PyDict_SetItem(pending, pkey, fresh) != 0;
                    Py_DECREF(fresh);
                }
            }
        } else {
            Py_INCREF(queue);
            failed = PyList_Append(queue, raw) != 0;
            if (!failed && PyList_GET_SIZE(queue) >= max_events) {
                failed = PyDict_DelItem(pending, pkey) != 0;
                if (!failed) {
                    PyObject *r = PyObject_CallFunctionObjArgs(full, pkey, queue, NULL);
                    failed = r == NULL;
                    Py_XDECREF(r);
                }
            }
            Py_DECREF(queue);
        }
        Py_XDECREF(raw);
        Py_DECREF(pkey);
        if (failed) goto out;
        if (lsn > hwm) hwm = lsn;
    }
    result = Py_BuildValue("nL", index, hwm);
out:
    PyMem_Free(ev.p);
    PyMem_Free(old.p);
    PyMem_Free(new_.p);
    PyBuffer_Release(&data);
    return result;
}

/* -- the applier: rows as SQL tuples or as LOAD DATA text ------------------------------ */

/* How one of the two renderings writes a row. */
typedef struct {
    const char *row_open, *row_open_next, *sep, *null, *row_close;
    char quote;           /* around text, or 0 */
    int big_ints;         /* integers past a BIGINT: their decimal text (1) or refused (0) */
    const char *escapes;  /* 256 entries: the letter after a backslash, or 0 for as-is */
} Style;

static char sql_escapes[256], tsv_escapes[256];

static void escapes_init(void) {
    /* pymysql's escape_string */
    sql_escapes['\0'] = '0'; sql_escapes['\\'] = '\\'; sql_escapes['\n'] = 'n'; sql_escapes['\r'] = 'r';
    sql_escapes['\032'] = 'Z'; sql_escapes['\''] = '\''; sql_escapes['"'] = '"';
    /* LOAD DATA's default FIELDS ESCAPED BY '\\' */
    tsv_escapes['\0'] = '0'; tsv_escapes['\\'] = '\\'; tsv_escapes['\n'] = 'n'; tsv_escapes['\r'] = 'r';
    tsv_escapes['\t'] = 't';
}

static const Style SQL_STYLE = {"(", ", (", ", ", "NULL", ")", '\'', 1, sql_escapes};
static const Style TSV_STYLE = {"", "", "\t", "\\N", "\n", 0, 0, tsv_escapes};

/* The rows (dicts of `width` values, with the keys `columns` in order when it is not
 * NULL) of integers, text and NULLs in `style`: 1 written, 0 a value or row it does not
 * render, -1 a Python error. */
static int render(const Style *style, PyObject *rows, Py_ssize_t width, PyObject *columns, Buf *out) {
    Py_ssize_t n = PyList_GET_SIZE(rows);
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!PyDict_CheckExact(row) || PyDict_GET_SIZE(row) != width) return 0;
        const char *open = r ? style->row_open_next : style->row_open;
        if (buf_put(out, open, strlen(open))) return -1;
        Py_ssize_t at = 0, k = 0;
        PyObject *key, *value;
        while (PyDict_Next(row, &at, &key, &value)) {
            if (columns) {
                PyObject *column = PyTuple_GET_ITEM(columns, k);
                if (key != column) { /* (decoded rows share their key objects: mostly the same pointer) */
                    int same = PyObject_RichCompareBool(key, column, Py_EQ);
                    if (same <= 0) return same;
                }
            }
            if (k++ && buf_put(out, style->sep, strlen(style->sep))) return -1;
            if (value == Py_None) {
                if (buf_put(out, style->null, strlen(style->null))) return -1;
            } else if (PyLong_CheckExact(value)) {
                int overflow = 0;
                long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
                if (v == -1 && PyErr_Occurred()) return -1;
                if (!overflow) {
                    if (buf_i64(out, v)) return -1;
                    continue;
                }
                if (!style->big_ints) return 0;
                PyObject *text = PyObject_Str(value);
                Py_ssize_t len;
                const char *s = text ? PyUnicode_AsUTF8AndSize(text, &len) : NULL;
                int failed = !s || buf_put(out, s, (size_t)len);
                Py_XDECREF(text);
                if (failed) return -1;
            } else if (PyUnicode_CheckExact(value)) {
                Py_ssize_t len;
                const char *s = PyUnicode_AsUTF8AndSize(value, &len);
                if (!s || buf_grow(out, (size_t)len * 2 + 2)) return -1;
                char *o = out->p + out->len;
                if (style->quote) *o++ = style->quote;
                for (Py_ssize_t i = 0; i < len; i++) {
                    char e = style->escapes[(unsigned char)s[i]];
                    if (e) *o++ = '\\', *o++ = e;
                    else *o++ = s[i];
                }
                if (style->quote) *o++ = style->quote;
                out->len = (size_t)(o - out->p);
            } else {
                return 0;
            }
        }
        if (buf_put(out, style->row_close, strlen(style->row_close))) return -1;
    }
    return 1;
}

/* render_rows(rows, width) -> "(v, ...), (v, ...)" or None
 *
 * apply/literals.py row_tuples in C, for rows (dicts of `width` values) of integers,
 * text and NULLs, on a session with backslash escapes: text escaped as pymysql's
 * escape_string escapes it. Any other value (and any row of another width) gives
 * None: the caller renders the rows in Python. */
static PyObject *render_rows(PyObject *self, PyObject *args) {
    PyObject *rows;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &rows, &width)) return NULL;
    Buf out = {0};
    int rc = render(&SQL_STYLE, rows, width, NULL, &out);
    PyObject *result = rc < 0 ? NULL
                       : rc == 0 ? Py_NewRef(Py_None)
                                 : PyUnicode_DecodeUTF8(out.p ? out.p : "", (Py_ssize_t)out.len, "strict");
    PyMem_Free(out.p);
    return result;
}

/* render_tsv(rows, columns) -> bytes or None
 *
 * The rows as LOAD DATA's default text format (tab between fields, newline after each
 * row, NULL as \N, backslash escapes), for rows (dicts) of integers that fit a
 * BIGINT, text and NULLs whose keys are `columns`, in that order (apply/load_data.py).
 * Anything else gives None: the caller sends an INSERT. */
static PyObject *render_tsv(PyObject *self, PyObject *args) {
    PyObject *rows, *columns;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &rows, &PyTuple_Type, &columns)) return NULL;
    Buf out = {0};
    int rc = render(&TSV_STYLE, rows, PyTuple_GET_SIZE(columns), columns, &out);
    PyObject *result = rc < 0 ? NULL
                       : rc == 0 ? Py_NewRef(Py_None)
                                 : PyBytes_FromStringAndSize(out.p ? out.p : "", (Py_ssize_t)out.len);
    PyMem_Free(out.p);
    return result;
}

static PyMethodDef methods[] = {
    {"walk_rows", walk_rows, METH_VARARGS, "Rows of a rows event this module can read, or -1."},
    {"queue_rows", queue_rows, METH_VARARGS, "One rows event's rows as queued event documents."},
    {"render_tsv", render_tsv, METH_VARARGS, "Rows of integers, text and NULLs as LOAD DATA text, or None."},
    {"render_rows", render_rows, METH_VARARGS, "Rows of integers, text and NULLs as SQL tuples, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "zonesync._native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    escapes_init();
    return PyModule_Create(&module);
}
