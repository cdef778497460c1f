/* The wire-walking kernel of the XSpace reader in C: lines' fields, events' headers and stats, and
 * the texts of TensorFlow's memcpy_details stat.
 *
 * It computes exactly what the numpy code computes (tfprof_towers/xplane/layout.py:read_lines,
 * events.py:decode_event_ranges with values=True, trace/copies.py:parse_details), element for element
 * and in the same order, and rejects the same malformed input; the numpy code is the fallback and the
 * oracle its tests compare against.  Arrays come in and go out through the buffer protocol (no numpy
 * headers): inputs are C-contiguous int64 / int8 arrays, outputs are arrays the caller allocated,
 * bytearrays, or columns this module allocated (Column), all viewed with numpy.frombuffer.  The GIL
 * is let go of while bytes are walked.
 *
 * Every read is bounded by the end of the message it belongs to, which is at most the data size;
 * the buffer holds at least PAD (16) readable bytes after the data, so the one look past a message
 * end -- an 8-byte load holding a varint that starts before it -- stays inside the buffer.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PAD 16

#if defined(__GNUC__)
#define HOT inline __attribute__((always_inline))
#define LOWEST_BIT(x) __builtin_ctzll(x)
#else
#define HOT inline
static int LOWEST_BIT(uint64_t x) {
    int n = 0;
    while (!(x & 1)) {
        x >>= 1;
        n++;
    }
    return n;
}
#endif


static PyObject *WireError;
/* The one message a kernel gives for a failed allocation: raised as MemoryError, every other as Error. */
static const char OOM[] = "out of memory";

/* A kernel's error message as the Python exception it stands for (called with the GIL held). */
static void raise_error(const char *err) {
    if (err == OOM) PyErr_NoMemory();
    else PyErr_SetString(WireError, err);
}

typedef struct {
    const uint8_t *b;
    int64_t size; /* bytes of data; b holds at least size + PAD bytes */
} Buf;

static inline uint64_t load64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v; /* little-endian hosts only (checked at import) */
}

/* A varint at *p that must end by `end`: at most ten bytes (the tenth adds its lowest bit, as numpy's
 * uint64 shift does); -1 when it runs past `end` or is longer.  Up to eight bytes come from one
 * 8-byte load (inside the buffer: *p < end <= size, and PAD bytes follow the data), the bytes
 * packed with three shift-and-mask steps, no branch per byte. */
static HOT int rd_varint(const uint8_t *b, int64_t *p, int64_t end, uint64_t *out) {
    int64_t q = *p;
    if (q >= end) return -1;
    if (b[q] < 0x80) {
        *out = b[q];
        *p = q + 1;
        return 0;
    }
    uint64_t w = load64(b + q);
    uint64_t stop = ~w & 0x8080808080808080ULL;
    if (stop) {
        int bits = LOWEST_BIT(stop); /* the terminating byte's high bit: 8k + 7 */
        int64_t len = (bits >> 3) + 1;
        if (len > end - q) return -1;
        uint64_t x = w & ((2ULL << bits) - 1) & 0x7F7F7F7F7F7F7F7FULL;
        x = ((x & 0x7F007F007F007F00ULL) >> 1) | (x & 0x007F007F007F007FULL);
        x = ((x & 0x3FFF00003FFF0000ULL) >> 2) | (x & 0x00003FFF00003FFFULL);
        x = ((x & 0x0FFFFFFF00000000ULL) >> 4) | (x & 0x000000000FFFFFFFULL);
        *out = x;
        *p = q + len;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (q >= end) return -1;
        uint8_t c = b[q++];
        v |= (uint64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = v;
            *p = q;
            return 0;
        }
    }
    return -1;
}

static inline uint32_t load32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

typedef struct {
    uint64_t tag;
    uint64_t value;   /* varint value, fixed bits, or payload length */
    int64_t payload;  /* payload start of a length-delimited field, else -1 */
    int64_t next;
} Field;

/* One field at p (< end) as wire.read_fields reads it: -1 when it is not a well-formed field
 * ending by `end`.  `max_tag`: tags at or above it are not well-formed either (0: no limit). */
static HOT int rd_field(const Buf *buf, int64_t p, int64_t end, uint64_t max_tag, Field *f) {
    const uint8_t *b = buf->b;
    int64_t q = p;
    uint64_t tag;
    if (b[q] < 0x80) {
        tag = b[q++];
    } else if (rd_varint(b, &q, end, &tag)) {
        return -1;
    }
    if (max_tag && tag >= max_tag) return -1;
    unsigned wire = (unsigned)(tag & 7);
    if ((tag >> 3) == 0 || wire == 3 || wire == 4 || wire > 5) return -1;
    f->tag = tag;
    f->payload = -1;
    if (wire == 0) {
        if (rd_varint(b, &q, end, &f->value)) return -1;
    } else if (wire == 2) {
        uint64_t len;
        if (rd_varint(b, &q, end, &len)) return -1;
        if (len > (uint64_t)buf->size || len > (uint64_t)(end - q)) return -1;
        f->value = len;
        f->payload = q;
        q += (int64_t)len;
    } else if (wire == 1) {
        if (end - q < 8) return -1;
        f->value = load64(b + q);
        q += 8;
    } else {
        if (end - q < 4) return -1;
        f->value = load32(b + q);
        q += 4;
    }
    f->next = q;
    return 0;
}

/* ------------------------------------------------------------------------------------------- */
/* Buffers from Python */

typedef struct {
    Py_buffer view;
    int held;
} View;

static int get_view(PyObject *obj, View *v, int writable, Py_ssize_t itemsize, Py_ssize_t count,
                    const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &v->view, flags) < 0) return -1;
    v->held = 1;
    if (v->view.len % itemsize || (count >= 0 && v->view.len != count * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd items of %zd bytes", what, count, itemsize);
        return -1;
    }
    return 0;
}

static void drop_view(View *v) {
    if (v->held) PyBuffer_Release(&v->view);
    v->held = 0;
}

static int get_buf(View *v, Py_ssize_t size, Buf *buf) {
    if (size < 0 || v->view.len < size + PAD) {
        PyErr_SetString(PyExc_ValueError, "buffer: fewer than size + 16 bytes");
        return -1;
    }
    buf->b = (const uint8_t *)v->view.buf;
    buf->size = size;
    return 0;
}

static int check_ranges(const int64_t *start, const int64_t *end, Py_ssize_t n, int64_t size) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i] < 0 || end[i] > size) return -1;
    }
    return 0;
}

/* A column the kernel allocated, handed to Python through the buffer protocol (freed with it). */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t len;
} Column;

static int column_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    Column *c = (Column *)self;
    return PyBuffer_FillInfo(view, self, c->data, c->len, 0, flags);
}

static void column_dealloc(PyObject *self) {
    free(((Column *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs column_buffer = {column_getbuffer, NULL};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_wirec.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_buffer = &column_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of bytes the kernel wrote (view it with numpy.frombuffer).",
};

/* A Column owning `data` (taken over: freed with the column, or here on failure). */
static PyObject *column_of(void *data, Py_ssize_t len) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) {
        free(data);
        return NULL;
    }
    c->data = data;
    c->len = len;
    return (PyObject *)c;
}

/* A tuple of the n objects, which it takes (each slot set to NULL); NULL on failure, the objects left
   to the caller to drop. */
static PyObject *tuple_of(PyObject **items, int n) {
    PyObject *res = PyTuple_New(n);
    if (!res) return NULL;
    for (int k = 0; k < n; k++) {
        PyTuple_SET_ITEM(res, k, items[k]);
        items[k] = NULL;
    }
    return res;
}

/* ------------------------------------------------------------------------------------------- */
/* Lines: the fields of XLine messages (layout.read_lines) */

#define XLINE_EVENTS_TAG ((4 << 3) | 2)

/* A growing int64 column. */
typedef struct {
    int64_t *data;
    size_t n, cap;
} Grow;

static int grow_push(Grow *g, int64_t v) {
    if (g->n == g->cap) {
        size_t cap = g->cap ? 2 * g->cap : 1024;
        int64_t *p = realloc(g->data, cap * sizeof(int64_t));
        if (!p) return -1;
        g->data = p;
        g->cap = cap;
    }
    g->data[g->n++] = v;
    return 0;
}

enum { L_EV_START, L_EV_END, L_OWNER, L_TAG, L_VALUE, L_PAYLOAD, N_LINE_COLS };

/* Walk every line once: each event field's payload range, each line's event count, and every other
 * field as (line, tag, value -- varint or length, 0 for fixed widths --, payload start or -1). */
static const char *walk_lines(const Buf *buf, const int64_t *start, const int64_t *end, Py_ssize_t n,
                              int64_t *counts, Grow *out) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = start[i], e = end[i], count = 0;
        while (p < e) {
            Field f;
            if (rd_field(buf, p, e, (uint64_t)1 << 32, &f)) return "a field runs past the end of its message";
            if (f.tag == XLINE_EVENTS_TAG) {
                if (grow_push(&out[L_EV_START], f.payload) ||
                    grow_push(&out[L_EV_END], f.payload + (int64_t)f.value))
                    return OOM;
                count++;
            } else {
                unsigned wire = (unsigned)(f.tag & 7);
                if (grow_push(&out[L_OWNER], i) || grow_push(&out[L_TAG], (int64_t)f.tag) ||
                    grow_push(&out[L_VALUE], (wire == 0 || wire == 2) ? (int64_t)f.value : 0) ||
                    grow_push(&out[L_PAYLOAD], f.payload))
                    return OOM;
            }
            p = f.next;
        }
        counts[i] = count;
    }
    return NULL;
}

static PyObject *py_walk_lines(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_buf, *o_start, *o_end, *o_counts;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "OnOOO", &o_buf, &size, &o_start, &o_end, &o_counts)) return NULL;
    View vb = {0}, vs = {0}, ve = {0}, vc = {0};
    PyObject *res = NULL;
    PyObject *arrays[N_LINE_COLS] = {0};
    Grow out[N_LINE_COLS] = {{0}};
    Buf buf;
    if (get_view(o_buf, &vb, 0, 1, -1, "buffer") || get_buf(&vb, size, &buf)) goto done;
    if (get_view(o_start, &vs, 0, 8, -1, "start")) goto done;
    Py_ssize_t n = vs.view.len / 8;
    if (get_view(o_end, &ve, 0, 8, n, "end") || get_view(o_counts, &vc, 1, 8, n, "counts")) goto done;
    const int64_t *start = vs.view.buf, *end = ve.view.buf;
    if (check_ranges(start, end, n, buf.size)) {
        PyErr_SetString(PyExc_ValueError, "line ranges outside the buffer");
        goto done;
    }
    const char *err;
    Py_BEGIN_ALLOW_THREADS
    int64_t bytes = 0; /* a first guess at the events' count: a field of 32 bytes on average */
    for (Py_ssize_t i = 0; i < n; i++) bytes += end[i] > start[i] ? end[i] - start[i] : 0;
    size_t guess = (size_t)(bytes / 32) + 16;
    err = NULL;
    for (int k = L_EV_START; k <= L_EV_END && !err; k++) {
        out[k].data = malloc(guess * sizeof(int64_t));
        out[k].cap = guess;
        if (!out[k].data) err = OOM;
    }
    if (!err) err = walk_lines(&buf, start, end, n, vc.view.buf, out);
    for (int k = 0; k < N_LINE_COLS && !err; k++) { /* give back what the guess left unused */
        if (out[k].n && out[k].n < out[k].cap) {
            int64_t *p = realloc(out[k].data, out[k].n * sizeof(int64_t));
            if (p) out[k].data = p;
        }
    }
    Py_END_ALLOW_THREADS
    if (err) {
        raise_error(err);
        goto done;
    }
    for (int k = 0; k < N_LINE_COLS; k++) {
        void *data = out[k].data ? (void *)out[k].data : malloc(8);
        out[k].data = NULL;
        if (!data) {
            PyErr_NoMemory();
            goto done;
        }
        arrays[k] = column_of(data, (Py_ssize_t)(out[k].n * sizeof(int64_t)));
        if (!arrays[k]) goto done;
    }
    res = tuple_of(arrays, N_LINE_COLS);
done:
    for (int k = 0; k < N_LINE_COLS; k++) {
        Py_XDECREF(arrays[k]);
        free(out[k].data);
    }
    drop_view(&vb);
    drop_view(&vs);
    drop_view(&ve);
    drop_view(&vc);
    return res;
}

/* ------------------------------------------------------------------------------------------- */
/* Events: header fields, the stats a filter keeps, and their values (events.decode_event_ranges) */

#define EVENT_STATS_TAG ((4 << 3) | 2)
#define STAT_MD_TAG (1 << 3)

/* The kept stats' columns, in the numpy decoder's order: by key -- the r-th stat of an event's
 * leading run of stats has key r (run keys first), the k-th field after that run rest key k --
 * then by event.  Walked twice: the first pass counts the stats of each key (and checks the
 * messages), the second writes each at the next slot of its key. */
enum { C_OWNER, C_START, C_END, C_MD, C_LABEL, C_KIND, C_NUM, C_SSTART, C_SLEN, N_COLS };
static const size_t COL_SIZE[N_COLS] = {8, 8, 8, 8, 1, 1, 8, 8, 8};

typedef struct {
    int write;             /* 0: count per key; 1: write each kept stat at its key's next slot */
    int64_t *run, *rest;   /* per key: a count (first pass), then the next slot (second pass) */
    size_t nrun, nrest;    /* their lengths */
    int64_t *resume;       /* per event: where its stats start (first pass), -1 if it keeps none */
    size_t total;          /* kept stats (known after the first pass) */
    void *col[N_COLS];
} Out;

/* A stat's value, as the last value field of its expected wire type says (kind 0: none). */
typedef struct {
    int8_t kind;
    uint64_t num;
    int64_t str_start, str_len;
} Value;

/* The count of key `k` in `*arr` (grown with zeros to hold it); NULL when out of memory. */
static int64_t *key_slot(int64_t **arr, size_t *len, size_t k) {
    if (k >= *len) {
        size_t grown = *len ? *len : 16;
        while (grown <= k) grown *= 2;
        int64_t *p = realloc(*arr, grown * sizeof(int64_t));
        if (!p) return NULL;
        memset(p + *len, 0, (grown - *len) * sizeof(int64_t));
        *arr = p;
        *len = grown;
    }
    return *arr + k;
}

/* XStat field number -> the wire type of its value (-1: not a value field). */
static const int EXPECTED_WIRE[8] = {-1, -1, 1, 0, 0, 2, 2, 0};

/* Every field of the XStat at [s, e): the last metadata_id (0 if none) and the last value field of
 * its expected wire type (kind 0: none).  -1 when the message is not well-formed. */
static int read_stat(const Buf *buf, int64_t s, int64_t e, Value *st, int64_t *md) {
    int64_t p = s;
    *md = 0;
    st->kind = 0;
    st->num = 0;
    st->str_start = -1;
    st->str_len = 0;
    while (p < e) {
        Field f;
        if (rd_field(buf, p, e, 0, &f)) return -1;
        uint64_t number = f.tag >> 3;
        int wire = (int)(f.tag & 7);
        if (number == 1 && wire == 0) {
            *md = (int64_t)f.value;
        } else if (number >= 2 && number <= 7 && wire == EXPECTED_WIRE[number]) {
            st->kind = (int8_t)number;
            if (wire == 2) {
                st->num = 0;
                st->str_start = f.payload;
                st->str_len = (int64_t)f.value;
            } else {
                st->num = f.value;
                st->str_start = -1;
                st->str_len = 0;
            }
        }
        p = f.next;
    }
    return 0;
}

typedef struct {
    const int64_t *group; /* per event, or NULL: keep every stat with label 0 */
    const int8_t *table;  /* [groups, width] */
    int64_t groups, width;
} Keep;

static inline int label_of(const Keep *k, int64_t g, int64_t md) {
    if (!k->group) return 0;
    if (md < 0 || md >= k->width) return -1;
    return k->table[g * k->width + md];
}

typedef struct {
    int64_t *md, *offset, *duration;
} Header;

/* A kept stat: counted (first pass), or read -- which checks it -- and written at its slot (second). */
static HOT const char *kept(const Buf *buf, Out *out, int rest, size_t key, int64_t owner, int64_t s,
                            int64_t e, int64_t md, int label) {
    if (!out->write) {
        int64_t *c = rest ? key_slot(&out->rest, &out->nrest, key) : key_slot(&out->run, &out->nrun, key);
        if (!c) return OOM;
        ++*c;
        return NULL;
    }
    Value v;
    int64_t ignored;
    if (read_stat(buf, s, e, &v, &ignored)) return "bad stat";
    size_t keys = rest ? out->nrest : out->nrun;
    if (key >= keys) return "internal: the passes disagree";
    int64_t i = (rest ? out->rest : out->run)[key]++;
    if (i < 0 || (size_t)i >= out->total) return "internal: the passes disagree";
    ((int64_t *)out->col[C_OWNER])[i] = owner;
    ((int64_t *)out->col[C_START])[i] = s;
    ((int64_t *)out->col[C_END])[i] = e;
    ((int64_t *)out->col[C_MD])[i] = md;
    ((int8_t *)out->col[C_LABEL])[i] = (int8_t)label;
    ((int8_t *)out->col[C_KIND])[i] = v.kind;
    ((uint64_t *)out->col[C_NUM])[i] = v.num;
    ((int64_t *)out->col[C_SSTART])[i] = v.str_start;
    ((int64_t *)out->col[C_SLEN])[i] = v.str_len;
    return NULL;
}

/* One pass over the events (see Out); the second starts each event with kept stats where its stats
 * start, and skips the others.  Every message the numpy decoder checks is checked here:
 * each event's fields, and each stat's fields where the stat is kept or its metadata_id is not in
 * the usual first place; a stat skipped by its one-byte metadata_id is not read further. */
static const char *decode_events(const Buf *buf, const int64_t *start, const int64_t *end, Py_ssize_t n,
                                 const Keep *keep, int64_t first, Header *h, Out *out) {
    const uint8_t *b = buf->b;
    const char *err;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t p = start[i], e = end[i];
        int64_t g = keep->group ? keep->group[i] : 0;
        int64_t owner = first + i;
        int64_t hv[3] = {0, 0, 0}; /* metadata_id, offset_ps, duration_ps */
        if (out->write) { /* the second pass: only the events with kept stats, from their stats */
            if (out->resume[i] < 0) continue;
            p = out->resume[i];
        } else {
            for (int k = 0; k < 3; k++) { /* optional, one-byte tags, in this order */
                if (p < e && b[p] == (uint8_t)((k + 1) << 3)) {
                    uint64_t v;
                    int64_t q = p + 1;
                    if (rd_varint(b, &q, e, &v)) return "varint runs past the end of its message";
                    hv[k] = (int64_t)v;
                    p = q;
                }
            }
            out->resume[i] = p;
        }
        int any = 0; /* kept stats in this event */
        size_t r = 0;
        while (p < e && b[p] == EVENT_STATS_TAG) { /* the run of stats: round r reads the r-th */
            uint64_t len;
            int64_t payload;
            int slow = 0;
            if (b[p + 1] >= 0x80) {
                int64_t q = p + 1;
                if (rd_varint(b, &q, e, &len)) return "varint runs past the end of its message";
                if (len > (uint64_t)buf->size) return "length out of range";
                payload = q;
                slow = 1;
            } else {
                len = b[p + 1];
                payload = p + 2;
            }
            if (payload > e || len > (uint64_t)(e - payload)) return "stat runs past the end of its event";
            int64_t nxt = payload + (int64_t)len;
            if (!slow && len >= 2 && b[p + 2] == STAT_MD_TAG && b[p + 3] < 0x80) {
                /* the usual layout: metadata_id from its one byte; the rest read only if kept */
                int64_t md = b[p + 3];
                int label = label_of(keep, g, md);
                if (label >= 0) {
                    if ((err = kept(buf, out, 0, r, owner, payload, nxt, md, label))) return err;
                    any = 1;
                }
            } else {
                Value v;
                int64_t md;
                if (read_stat(buf, payload, nxt, &v, &md)) return "bad stat";
                int label = label_of(keep, g, md);
                if (label >= 0) {
                    if ((err = kept(buf, out, 0, r, owner, payload, nxt, md, label))) return err;
                    any = 1;
                }
            }
            p = nxt;
            r++;
        }
        size_t k = 0;
        while (p < e) { /* anything else, field by field: the last one wins */
            Field f;
            if (rd_field(buf, p, e, 0, &f)) return "bad field";
            uint64_t number = f.tag >> 3;
            int wire = (int)(f.tag & 7);
            if (wire == 0) {
                if (number == 1) hv[0] = (int64_t)f.value;
                else if (number == 2) hv[1] = (int64_t)f.value;
                else if (number == 3) hv[2] = (int64_t)f.value;
                else if (number == 5) hv[1] = 0; /* num_occurrences: the oneof's other member */
            } else if (number == 4 && wire == 2) {
                Value v;
                int64_t md, s = f.payload, se = f.payload + (int64_t)f.value;
                if (read_stat(buf, s, se, &v, &md)) return "bad stat";
                int label = label_of(keep, g, md);
                if (label >= 0) {
                    if ((err = kept(buf, out, 1, k, owner, s, se, md, label))) return err;
                    any = 1;
                }
            }
            p = f.next;
            k++;
        }
        if (!out->write) {
            h->md[i] = hv[0];
            h->offset[i] = hv[1];
            h->duration[i] = hv[2];
            if (!any) out->resume[i] = -1;
        }
    }
    return NULL;
}

/* The whole decode: count, place, write.  On success the columns are in out->col. */
static const char *decode_all(const Buf *buf, const int64_t *start, const int64_t *end, Py_ssize_t n,
                              const Keep *keep, int64_t first, Header *h, Out *out, size_t *total) {
    out->resume = malloc((n ? (size_t)n : 1) * sizeof(int64_t));
    if (!out->resume) return OOM;
    const char *err = decode_events(buf, start, end, n, keep, first, h, out);
    if (err) return err;
    int64_t sum = 0;
    for (size_t j = 0; j < out->nrun; j++) {
        int64_t c = out->run[j];
        out->run[j] = sum;
        sum += c;
    }
    for (size_t j = 0; j < out->nrest; j++) {
        int64_t c = out->rest[j];
        out->rest[j] = sum;
        sum += c;
    }
    *total = out->total = (size_t)sum;
    for (int k = 0; k < N_COLS; k++) {
        out->col[k] = malloc(sum ? (size_t)sum * COL_SIZE[k] : 8);
        if (!out->col[k]) return OOM;
    }
    out->write = 1;
    return decode_events(buf, start, end, n, keep, first, h, out);
}

static void free_out(Out *out) {
    free(out->run);
    free(out->rest);
    free(out->resume);
    for (int k = 0; k < N_COLS; k++) free(out->col[k]);
    memset(out, 0, sizeof(*out));
}


static PyObject *py_decode_events(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_buf, *o_start, *o_end, *o_md, *o_off, *o_dur, *o_group, *o_table;
    Py_ssize_t size, width;
    long long first;
    if (!PyArg_ParseTuple(args, "OnOOOOOOOnL", &o_buf, &size, &o_start, &o_end, &o_md, &o_off, &o_dur,
                          &o_group, &o_table, &width, &first))
        return NULL;
    View vb = {0}, vs = {0}, ve = {0}, vm = {0}, vo = {0}, vd = {0}, vg = {0}, vt = {0};
    PyObject *res = NULL, *arrays[N_COLS] = {0};
    Out out = {0};
    Buf buf;
    if (get_view(o_buf, &vb, 0, 1, -1, "buffer") || get_buf(&vb, size, &buf)) goto done;
    if (get_view(o_start, &vs, 0, 8, -1, "start")) goto done;
    Py_ssize_t n = vs.view.len / 8;
    if (get_view(o_end, &ve, 0, 8, n, "end") || get_view(o_md, &vm, 1, 8, n, "metadata_id") ||
        get_view(o_off, &vo, 1, 8, n, "offset_ps") || get_view(o_dur, &vd, 1, 8, n, "duration_ps"))
        goto done;
    const int64_t *start = vs.view.buf, *end = ve.view.buf;
    if (check_ranges(start, end, n, buf.size)) {
        PyErr_SetString(PyExc_ValueError, "event ranges outside the buffer");
        goto done;
    }
    Keep keep = {0};
    if (o_group != Py_None) {
        if (get_view(o_group, &vg, 0, 8, n, "group") || get_view(o_table, &vt, 0, 1, -1, "table")) goto done;
        if (width <= 0 || vt.view.len % width) {
            PyErr_SetString(PyExc_ValueError, "table: not a whole number of rows");
            goto done;
        }
        keep.group = vg.view.buf;
        keep.table = vt.view.buf;
        keep.width = width;
        keep.groups = vt.view.len / width;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (keep.group[i] < 0 || keep.group[i] >= keep.groups) {
                PyErr_SetString(PyExc_ValueError, "group: past the table");
                goto done;
            }
        }
    }
    Header h = {vm.view.buf, vo.view.buf, vd.view.buf};
    const char *err;
    size_t total = 0;
    Py_BEGIN_ALLOW_THREADS
    err = decode_all(&buf, start, end, n, &keep, (int64_t)first, &h, &out, &total);
    Py_END_ALLOW_THREADS
    if (err) {
        raise_error(err);
        goto done;
    }
    for (int k = 0; k < N_COLS; k++) {
        arrays[k] = column_of(out.col[k], (Py_ssize_t)(total * COL_SIZE[k]));
        out.col[k] = NULL;
        if (!arrays[k]) goto done;
    }
    res = tuple_of(arrays, N_COLS);
done:
    for (int k = 0; k < N_COLS; k++) Py_XDECREF(arrays[k]);
    free_out(&out);
    drop_view(&vb);
    drop_view(&vs);
    drop_view(&ve);
    drop_view(&vm);
    drop_view(&vo);
    drop_view(&vd);
    drop_view(&vg);
    drop_view(&vt);
    return res;
}

/* ------------------------------------------------------------------------------------------- */
/* memcpy_details texts: size, dest and memory kinds (trace/copies.py:parse_details) */

static inline int is_space(uint8_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static const char *const DETAIL_KEYS[4] = {"size", "dest", "kind_src", "kind_dst"};
static const size_t DETAIL_KEY_LEN[4] = {4, 4, 8, 8};

/* The decimal integer that is the whole token at [v, e): 1 to 19 digits ending at e or at whitespace. */
static int token_integer(const uint8_t *d, int64_t v, int64_t e, uint64_t *out) {
    uint64_t value = 0;
    int64_t j = 0;
    while (v + j < e && d[v + j] >= '0' && d[v + j] <= '9') {
        if (j == 19) return 0;
        value = value * 10 + (uint64_t)(d[v + j] - '0');
        j++;
    }
    if (j == 0 || (v + j < e && !is_space(d[v + j]))) return 0;
    *out = value;
    return 1;
}

static const char *const MEMORY_KINDS[6] = {"device", "array", "pageable", "pinned", "host", "managed"};
static const int8_t MEMORY_KIND_OF[6] = {1, 1, 0, 0, 0, 0};

/* 0 host memory, 1 device memory, -1 other: the whole token at [v, e), case-insensitive. */
static int8_t token_memory_kind(const uint8_t *d, int64_t v, int64_t e) {
    for (int k = 0; k < 6; k++) {
        int64_t len = (int64_t)strlen(MEMORY_KINDS[k]);
        if (e - v < len || (e - v > len && !is_space(d[v + len]))) continue;
        int64_t j = 0;
        while (j < len && (uint8_t)(d[v + j] | 0x20) == (uint8_t)MEMORY_KINDS[k][j]) j++;
        if (j == len) return MEMORY_KIND_OF[k];
    }
    return -1;
}

/* Each row's last `key:value` token of each key (a token starts the row or follows whitespace; its
 * value is not empty and starts with no whitespace), its value read as parse_details reads it. */
static void parse_rows(const uint8_t *d, const int64_t *start, const int64_t *end, Py_ssize_t n,
                       const uint8_t *want_dest, const uint8_t *want_kinds, int64_t *size, int64_t *dest,
                       int8_t *src, int8_t *dst) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = start[i], e = end[i];
        int64_t last[4] = {-1, -1, -1, -1};
        for (int64_t c = s; c < e; c++) {
            const uint8_t *colon = memchr(d + c, ':', (size_t)(e - c));
            if (!colon) break;
            c = colon - d;
            if (c + 1 >= e || is_space(d[c + 1])) continue;
            for (int k = 0; k < 4; k++) {
                int64_t at = c - (int64_t)DETAIL_KEY_LEN[k];
                if (at < s || (at > s && !is_space(d[at - 1]))) continue;
                if (!memcmp(d + at, DETAIL_KEYS[k], DETAIL_KEY_LEN[k])) last[k] = c + 1;
            }
        }
        uint64_t v;
        size[i] = (last[0] >= 0 && token_integer(d, last[0], e, &v) && v < ((uint64_t)1 << 62)) ? (int64_t)v : 0;
        dest[i] = -1;
        if ((!want_dest || want_dest[i]) && last[1] >= 0 && token_integer(d, last[1], e, &v) && v < (1 << 20)) {
            dest[i] = (int64_t)v;
        }
        src[i] = dst[i] = -1;
        if (!want_kinds || want_kinds[i]) {
            if (last[2] >= 0) src[i] = token_memory_kind(d, last[2], e);
            if (last[3] >= 0) dst[i] = token_memory_kind(d, last[3], e);
        }
    }
}

static PyObject *py_parse_details(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o_data, *o_start, *o_end, *o_wd, *o_wk, *o_size, *o_dest, *o_src, *o_dst;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o_data, &o_start, &o_end, &o_wd, &o_wk, &o_size, &o_dest,
                          &o_src, &o_dst))
        return NULL;
    View vd = {0}, vs = {0}, ve = {0}, vwd = {0}, vwk = {0}, vsz = {0}, vde = {0}, vsr = {0}, vds = {0};
    PyObject *res = NULL;
    if (get_view(o_data, &vd, 0, 1, -1, "data") || get_view(o_start, &vs, 0, 8, -1, "start")) goto done;
    Py_ssize_t n = vs.view.len / 8;
    if (get_view(o_end, &ve, 0, 8, n, "end") || get_view(o_size, &vsz, 1, 8, n, "size") ||
        get_view(o_dest, &vde, 1, 8, n, "dest") || get_view(o_src, &vsr, 1, 1, n, "src") ||
        get_view(o_dst, &vds, 1, 1, n, "dst"))
        goto done;
    if ((o_wd != Py_None && get_view(o_wd, &vwd, 0, 1, n, "want_dest")) ||
        (o_wk != Py_None && get_view(o_wk, &vwk, 0, 1, n, "want_kinds")))
        goto done;
    const int64_t *start = vs.view.buf, *end = ve.view.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (start[i] < 0 || end[i] < start[i] || end[i] > vd.view.len) {
            PyErr_SetString(PyExc_ValueError, "rows outside the data");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS
    parse_rows(vd.view.buf, start, end, n, vwd.held ? vwd.view.buf : NULL, vwk.held ? vwk.view.buf : NULL,
               vsz.view.buf, vde.view.buf, vsr.view.buf, vds.view.buf);
    Py_END_ALLOW_THREADS
    res = Py_None;
    Py_INCREF(res);
done:
    drop_view(&vd);
    drop_view(&vs);
    drop_view(&ve);
    drop_view(&vwd);
    drop_view(&vwk);
    drop_view(&vsz);
    drop_view(&vde);
    drop_view(&vsr);
    drop_view(&vds);
    return res;
}

static PyMethodDef methods[] = {
    {"walk_lines", py_walk_lines, METH_VARARGS,
     "walk_lines(buf, size, start, end, counts) -> (ev_start, ev_end, owner, tag, value, payload): the fields "
     "of the XLine messages at buf[start:end] (bytearrays of int64; value uint64); counts: events per line."},
    {"decode_events", py_decode_events, METH_VARARGS,
     "decode_events(buf, size, start, end, md, offset, duration, group, table, width, first) -> columns of "
     "the kept stats (owner, start, end, md, label, kind, num, str_start, str_len) as bytearrays."},
    {"parse_details", py_parse_details, METH_VARARGS,
     "parse_details(data, start, end, want_dest, want_kinds, size, dest, src, dst): each memcpy_details "
     "text data[start:end] parsed into size (int64), dest (int64) and memory kinds (int8) as "
     "trace/copies.py:parse_details does; want_*: uint8 per row or None (every row)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_wirec",
                                    "The XSpace reader's wire-walking kernel (see xplane/native.py).", -1,
                                    methods};

PyMODINIT_FUNC PyInit__wirec(void) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one != 1) {
        PyErr_SetString(PyExc_ImportError, "_wirec: little-endian hosts only");
        return NULL;
    }
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    WireError = PyErr_NewException("_wirec.Error", PyExc_ValueError, NULL);
    if (!WireError || PyModule_AddObject(m, "Error", WireError) < 0) {
        Py_XDECREF(WireError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(WireError);
    return m;
}
