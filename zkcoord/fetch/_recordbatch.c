/* The compiled record-batch decoder: Kafka record batches (magic 2) straight
 * into Arrow-layout column buffers, one pass, no Python object per record.
 *
 * zkcoord/fetch/records.py holds the pure-Python decoder that does the same
 * work; that module documents the contract (arguments, the returned buffers,
 * errors) and tests/unit/test_record_decoder.py pins the two together byte for
 * byte. Decompression and the CRC are Python callables passed in, so every
 * codec and the checksum have one implementation shared by both decoders.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *corrupt_error = NULL; /* set by configure(): CorruptRecordsError */

/* A growable byte buffer. */
typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra)
        cap *= 2;
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static void buf_free(Buf *b) {
    PyMem_Free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static PyObject *buf_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len);
}

/* A nullable binary column in Arrow's layout: validity bitmap (LSB first),
 * int32 offsets starting at 0, and the data. */
typedef struct {
    Buf validity;
    Buf offsets;
    Buf data;
    Py_ssize_t rows;
    Py_ssize_t nulls;
} BinaryColumn;

static int column_init(BinaryColumn *c) {
    int32_t zero = 0;
    memset(c, 0, sizeof(*c));
    return buf_put(&c->offsets, &zero, 4);
}

static void column_free(BinaryColumn *c) {
    buf_free(&c->validity);
    buf_free(&c->offsets);
    buf_free(&c->data);
}

/* Append one value; ptr == NULL appends a null. */
static int column_append(BinaryColumn *c, const char *ptr, Py_ssize_t n) {
    if (c->rows % 8 == 0) {
        char zero = 0;
        if (buf_put(&c->validity, &zero, 1) < 0)
            return -1;
    }
    if (ptr != NULL) {
        c->validity.data[c->rows / 8] |= (char)(1 << (c->rows % 8));
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(corrupt_error, "decoded records exceed 2 GiB in one call");
            return -1;
        }
        if (buf_put(&c->data, ptr, n) < 0)
            return -1;
    } else {
        c->nulls++;
    }
    int32_t end = (int32_t)c->data.len;
    c->rows++;
    return buf_put(&c->offsets, &end, 4);
}

static PyObject *column_validity(BinaryColumn *c) {
    if (c->nulls == 0)
        Py_RETURN_NONE;
    return buf_bytes(&c->validity);
}

/* Everything decoded so far. */
typedef struct {
    Buf offsets;     /* int64 per record */
    Buf timestamps;  /* int64 ms per record */
    Buf ts_types;    /* int32 per record: 0 CreateTime, 1 LogAppendTime */
    BinaryColumn keys;
    BinaryColumn values;
    Buf header_offsets; /* int32, rows + 1: where each record's headers begin */
    BinaryColumn header_keys;
    BinaryColumn header_values;
    Py_ssize_t rows;
    int32_t headers;
} Columns;

static int columns_init(Columns *c) {
    int32_t zero = 0;
    memset(c, 0, sizeof(*c));
    if (column_init(&c->keys) < 0 || column_init(&c->values) < 0 || column_init(&c->header_keys) < 0 ||
        column_init(&c->header_values) < 0)
        return -1;
    return buf_put(&c->header_offsets, &zero, 4);
}

static void columns_free(Columns *c) {
    buf_free(&c->offsets);
    buf_free(&c->timestamps);
    buf_free(&c->ts_types);
    column_free(&c->keys);
    column_free(&c->values);
    buf_free(&c->header_offsets);
    column_free(&c->header_keys);
    column_free(&c->header_values);
}

/* A cursor over the bytes of one batch's records. */
typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cursor;

static int corrupt(const char *what, long long offset) {
    PyErr_Format(corrupt_error, "corrupt record batch at offset %lld: %s", offset, what);
    return -1;
}

/* A zigzag varint of at most max_bytes bytes (5 for int32, 10 for int64). */
static int read_varint(Cursor *c, int max_bytes, int64_t *out) {
    uint64_t value = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end)
            return -1;
        unsigned char byte = *c->p++;
        value |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(value >> 1) ^ -(int64_t)(value & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

/* A length-prefixed field: -1 is null, anything else must fit in the record. */
static int read_field(Cursor *c, const char **ptr, Py_ssize_t *len) {
    int64_t n;
    if (read_varint(c, 5, &n) < 0)
        return -1;
    if (n == -1) {
        *ptr = NULL;
        *len = 0;
        return 0;
    }
    if (n < 0 || n > c->end - c->p)
        return -1;
    *ptr = (const char *)c->p;
    *len = (Py_ssize_t)n;
    c->p += n;
    return 0;
}

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

enum { DONE_BATCH = 0, DONE_ALL = 1 };

/* The type of a control batch's marker (0 abort, 1 commit, or any other
 * int16: Kafka's other control records, and types it may add) into *type:
 * the int16 after the version in its first record's key. Returns 0, or -1
 * with an exception set when the marker is malformed (the type goes apart
 * from the status: every int16, -1 and -2 too, is a type).
 * records.py's _marker_type. */
static int marker_type(const unsigned char *p, Py_ssize_t n, int64_t base_offset, int *type) {
    Cursor c = {p, p + n};
    int64_t length, ignored;
    const char *key;
    Py_ssize_t key_len;
    if (read_varint(&c, 5, &length) < 0 || length < 0 || length > c.end - c.p)
        return corrupt("a transaction marker is malformed", base_offset), -1;
    c.end = c.p + length;
    c.p++; /* attributes */
    if (read_varint(&c, 10, &ignored) < 0 || read_varint(&c, 5, &ignored) < 0 ||
        read_field(&c, &key, &key_len) < 0 || key == NULL || key_len < 4)
        return corrupt("a transaction marker is malformed", base_offset), -1;
    *type = (int16_t)be((const unsigned char *)key + 2, 2);
    return 0;
}

/* Which batches of a read_committed fetch are of aborted transactions:
 * records.py's _AbortedTransactions, whose docstring has the rule. */
typedef struct {
    int64_t *producers; /* the aborted transactions, by first offset */
    int64_t *firsts;
    Py_ssize_t count;
    Py_ssize_t next;   /* the first not yet reached */
    int64_t *open;     /* producers whose aborted transaction is under way */
    Py_ssize_t open_count;
} Aborted;

static void aborted_free(Aborted *a) {
    PyMem_Free(a->producers);
    PyMem_Free(a->firsts);
    PyMem_Free(a->open);
    memset(a, 0, sizeof(*a));
}

/* From a sequence of (producer id, first offset) pairs sorted by first offset. */
static int aborted_init(Aborted *a, PyObject *pairs) {
    memset(a, 0, sizeof(*a));
    PyObject *seq = PySequence_Fast(pairs, "aborted transactions must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    a->producers = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    a->firsts = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    a->open = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (!a->producers || !a->firsts || !a->open) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long producer, first;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "LL", &producer, &first)) {
            Py_DECREF(seq);
            return -1;
        }
        a->producers[i] = producer;
        a->firsts[i] = first;
    }
    a->count = n;
    Py_DECREF(seq);
    return 0;
}

static int aborted_skips(Aborted *a, int64_t producer, int64_t last_offset, int transactional, int abort_marker) {
    for (; a->next < a->count && a->firsts[a->next] <= last_offset; a->next++) {
        int known = 0;
        for (Py_ssize_t i = 0; i < a->open_count; i++)
            known |= a->open[i] == a->producers[a->next];
        if (!known)
            a->open[a->open_count++] = a->producers[a->next];
    }
    Py_ssize_t found = -1;
    for (Py_ssize_t i = 0; i < a->open_count; i++)
        if (a->open[i] == producer)
            found = i;
    if (abort_marker) {
        if (found >= 0)
            a->open[found] = a->open[--a->open_count];
        return 0;
    }
    return transactional && found >= 0;
}

/* Decode the records of one batch; returns DONE_BATCH, DONE_ALL (reached
 * `end`) or -1 with an exception set. */
static int decode_records(Columns *out, const unsigned char *p, Py_ssize_t n, int64_t count, int64_t base_offset,
                          int64_t first_timestamp, int64_t max_timestamp, int32_t ts_type, int64_t start,
                          int64_t end) {
    Cursor c = {p, p + n};
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, header_count;
        if (read_varint(&c, 5, &length) < 0 || length < 0 || length > c.end - c.p)
            return corrupt("a record's length runs past the batch", base_offset);
        Cursor r = {c.p, c.p + length};
        c.p += length;
        if (r.p >= r.end)
            return corrupt("an empty record", base_offset);
        r.p++; /* attributes: unused */
        if (read_varint(&r, 10, &ts_delta) < 0 || read_varint(&r, 5, &offset_delta) < 0)
            return corrupt("a record's timestamp or offset delta is malformed", base_offset);
        int64_t offset;
        if (__builtin_add_overflow(base_offset, offset_delta, &offset))
            return corrupt("an offset or timestamp overflows", base_offset);
        if (end >= 0 && offset >= end)
            return DONE_ALL;
        int wanted = offset >= start;
        const char *key, *value;
        Py_ssize_t key_len, value_len;
        if (read_field(&r, &key, &key_len) < 0 || read_field(&r, &value, &value_len) < 0 ||
            read_varint(&r, 5, &header_count) < 0 || header_count < 0)
            return corrupt("a record's key, value or header count is malformed", offset);
        for (int64_t h = 0; h < header_count; h++) {
            const char *hkey, *hvalue;
            Py_ssize_t hkey_len, hvalue_len;
            if (read_field(&r, &hkey, &hkey_len) < 0 || hkey == NULL || read_field(&r, &hvalue, &hvalue_len) < 0)
                return corrupt("a record header is malformed", offset);
            if (wanted) {
                if (column_append(&out->header_keys, hkey, hkey_len) < 0 ||
                    column_append(&out->header_values, hvalue, hvalue_len) < 0)
                    return -1;
                if (out->headers == INT32_MAX)
                    return corrupt("too many headers", offset);
                out->headers++;
            }
        }
        if (r.p != r.end)
            return corrupt("a record has bytes past its last header", offset);
        if (!wanted)
            continue;
        int64_t timestamp = max_timestamp;
        if (ts_type != 1 && __builtin_add_overflow(first_timestamp, ts_delta, &timestamp))
            return corrupt("an offset or timestamp overflows", offset);
        if (buf_put(&out->offsets, &offset, 8) < 0 || buf_put(&out->timestamps, &timestamp, 8) < 0 ||
            buf_put(&out->ts_types, &ts_type, 4) < 0 || column_append(&out->keys, key, key_len) < 0 ||
            column_append(&out->values, value, value_len) < 0 ||
            buf_put(&out->header_offsets, &out->headers, 4) < 0)
            return -1;
        out->rows++;
    }
    if (c.p != c.end)
        return corrupt("a batch has bytes past its last record", base_offset);
    return DONE_BATCH;
}

/* The batch header's layout: zkcoord/broker/formats.py names the same numbers. */
#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define CRC_START 21

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long start, end;
    PyObject *decompress, *check_crc, *aborted_pairs;
    if (corrupt_error == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*LLOOO", &view, &start, &end, &decompress, &check_crc, &aborted_pairs))
        return NULL;
    Columns out;
    Aborted aborted; /* read_committed only: aborted_pairs is not None */
    int read_committed = aborted_pairs != Py_None;
    PyObject *result = NULL;
    memset(&aborted, 0, sizeof(aborted));
    if (columns_init(&out) < 0 || (read_committed && aborted_init(&aborted, aborted_pairs) < 0))
        goto done;
    const unsigned char *data = view.buf;
    Py_ssize_t size = view.len, pos = 0;
    int64_t next_offset = start;
    while (size - pos >= LOG_OVERHEAD + 5) { /* enough to see the length and magic */
        const unsigned char *b = data + pos;
        int64_t base_offset = (int64_t)be(b, 8);
        int64_t batch_length = (int32_t)be(b + 8, 4);
        int magic = (signed char)b[16];
        if (magic != 2) {
            PyErr_Format(corrupt_error, "record batch at offset %lld has magic %d; only magic 2 is read",
                         (long long)base_offset, magic);
            goto done;
        }
        if (batch_length < HEADER_SIZE - LOG_OVERHEAD) {
            corrupt("its length is shorter than a batch header", base_offset);
            goto done;
        }
        if (size - pos < LOG_OVERHEAD + batch_length)
            break; /* a partial batch at the end of a fetch: not an error */
        uint32_t crc = (uint32_t)be(b + 17, 4);
        int attributes = (int)be(b + 21, 2);
        int64_t last_offset_delta = (int32_t)be(b + 23, 4);
        int64_t first_timestamp = (int64_t)be(b + 27, 8);
        int64_t max_timestamp = (int64_t)be(b + 35, 8);
        int64_t count = (int32_t)be(b + 57, 4);
        Py_ssize_t batch_end = pos + LOG_OVERHEAD + batch_length;
        if (check_crc != Py_None) {
            PyObject *region = PyMemoryView_FromMemory((char *)b + CRC_START, LOG_OVERHEAD + batch_length - CRC_START,
                                                       PyBUF_READ);
            if (region == NULL)
                goto done;
            PyObject *actual = PyObject_CallOneArg(check_crc, region);
            Py_DECREF(region);
            if (actual == NULL)
                goto done;
            unsigned long value = PyLong_AsUnsignedLong(actual);
            Py_DECREF(actual);
            if (value == (unsigned long)-1 && PyErr_Occurred())
                goto done;
            if ((uint32_t)value != crc) {
                PyErr_Format(corrupt_error, "record batch at offset %lld fails its CRC (stored %u, computed %u)",
                             (long long)base_offset, crc, (uint32_t)value);
                goto done;
            }
        }
        if (count < 0) {
            corrupt("a negative record count", base_offset);
            goto done;
        }
        int64_t batch_next;
        if (__builtin_add_overflow(base_offset, last_offset_delta + 1, &batch_next)) {
            corrupt("an offset or timestamp overflows", base_offset);
            goto done;
        }
        int control = attributes & 0x20;
        int codec = attributes & 0x07;
        int32_t ts_type = (attributes & 0x08) ? 1 : 0;
        int stop = DONE_BATCH;
        int aborted_batch = 0;
        int64_t producer = (int64_t)be(b + 43, 8);
        if (read_committed && producer >= 0) {
            int type = -1, status = 0;
            if (control && count > 0) { /* the cleaner leaves empty control batches: no marker */
                const unsigned char *records = b + HEADER_SIZE;
                Py_ssize_t records_len = LOG_OVERHEAD + batch_length - HEADER_SIZE;
                if (codec == 0) {
                    status = marker_type(records, records_len, base_offset, &type);
                } else {
                    PyObject *payload = PyMemoryView_FromMemory((char *)records, records_len, PyBUF_READ);
                    PyObject *plain = payload ? PyObject_CallFunction(decompress, "iO", codec, payload) : NULL;
                    Py_XDECREF(payload);
                    Py_buffer inner;
                    if (plain == NULL || PyObject_GetBuffer(plain, &inner, PyBUF_SIMPLE) < 0) {
                        Py_XDECREF(plain);
                        goto done;
                    }
                    status = marker_type(inner.buf, inner.len, base_offset, &type);
                    PyBuffer_Release(&inner);
                    Py_DECREF(plain);
                }
                if (status < 0)
                    goto done;
            }
            aborted_batch = aborted_skips(&aborted, producer, batch_next - 1, attributes & 0x10, type == 0);
        }
        /* Control batches (transaction markers) hold no application records,
         * and a batch wholly below `start` needs no decompressing. */
        if (!control && !aborted_batch && batch_next > start) {
            const unsigned char *records = b + HEADER_SIZE;
            Py_ssize_t records_len = LOG_OVERHEAD + batch_length - HEADER_SIZE;
            if (codec == 0) {
                stop = decode_records(&out, records, records_len, count, base_offset, first_timestamp,
                                      max_timestamp, ts_type, start, end);
            } else {
                PyObject *payload = PyMemoryView_FromMemory((char *)records, records_len, PyBUF_READ);
                if (payload == NULL)
                    goto done;
                PyObject *plain = PyObject_CallFunction(decompress, "iO", codec, payload);
                Py_DECREF(payload);
                if (plain == NULL)
                    goto done;
                Py_buffer inner;
                if (PyObject_GetBuffer(plain, &inner, PyBUF_SIMPLE) < 0) {
                    Py_DECREF(plain);
                    goto done;
                }
                stop = decode_records(&out, inner.buf, inner.len, count, base_offset, first_timestamp,
                                      max_timestamp, ts_type, start, end);
                PyBuffer_Release(&inner);
                Py_DECREF(plain);
            }
            if (stop < 0)
                goto done;
        }
        pos = batch_end;
        if (stop == DONE_ALL || (end >= 0 && batch_next >= end)) {
            next_offset = end;
            break;
        }
        if (batch_next > next_offset)
            next_offset = batch_next;
    }
    /* The order of fields in records.py's RawColumns. */
    result = Py_BuildValue("(nNNN" "NnNN" "NnNN" "N" "NN" "NnNN" "Ln)",
                           out.rows, buf_bytes(&out.offsets), buf_bytes(&out.timestamps), buf_bytes(&out.ts_types),
                           column_validity(&out.keys), out.keys.nulls, buf_bytes(&out.keys.offsets),
                           buf_bytes(&out.keys.data),
                           column_validity(&out.values), out.values.nulls, buf_bytes(&out.values.offsets),
                           buf_bytes(&out.values.data),
                           buf_bytes(&out.header_offsets),
                           buf_bytes(&out.header_keys.offsets), buf_bytes(&out.header_keys.data),
                           column_validity(&out.header_values), out.header_values.nulls,
                           buf_bytes(&out.header_values.offsets), buf_bytes(&out.header_values.data),
                           (long long)next_offset, pos);
done:
    columns_free(&out);
    aborted_free(&aborted);
    PyBuffer_Release(&view);
    return result;
}

/* One binary cell of a column as bytes, or None where the validity bitmap says null. */
static PyObject *binary_cell(const Py_buffer *validity, const int32_t *offsets, const char *data, Py_ssize_t row) {
    if (validity->buf != NULL && !(((const unsigned char *)validity->buf)[row >> 3] & (1 << (row & 7))))
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(data + offsets[row], offsets[row + 1] - offsets[row]);
}

/* records(record_type, topic, partition, offsets, timestamps, key_validity,
 * key_offsets, key_data, value_validity, value_offsets, value_data, begin, end):
 * rows [begin, end) as instances of record_type, a tuple subclass of
 * (topic, partition, offset, key, value, timestamp). records.py's
 * RecordColumns.records() is the contract and the pure-Python equal. */
static PyObject *records(PyObject *self, PyObject *args) {
    PyTypeObject *record_type;
    PyObject *topic, *partition, *key_validity_obj, *value_validity_obj;
    Py_buffer offsets, timestamps, key_offsets, key_data, value_offsets, value_data;
    Py_buffer key_validity = {0}, value_validity = {0};
    Py_ssize_t begin, end;
    if (!PyArg_ParseTuple(args, "O!UOy*y*Oy*y*Oy*y*nn", &PyType_Type, &record_type, &topic, &partition, &offsets,
                          &timestamps, &key_validity_obj, &key_offsets, &key_data, &value_validity_obj,
                          &value_offsets, &value_data, &begin, &end))
        return NULL;
    PyObject *result = NULL;
    if (!PyType_IsSubtype(record_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "record_type must be a tuple subclass");
        goto done;
    }
    if (key_validity_obj != Py_None && PyObject_GetBuffer(key_validity_obj, &key_validity, PyBUF_SIMPLE) < 0)
        goto done;
    if (value_validity_obj != Py_None && PyObject_GetBuffer(value_validity_obj, &value_validity, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t rows = offsets.len / 8;
    if (begin < 0 || end < begin || end > rows || timestamps.len / 8 < rows || key_offsets.len / 4 < rows + 1 ||
        value_offsets.len / 4 < rows + 1 || (key_validity.buf && key_validity.len * 8 < rows) ||
        (value_validity.buf && value_validity.len * 8 < rows)) {
        PyErr_SetString(PyExc_ValueError, "records(): rows out of range of the column buffers");
        goto done;
    }
    const int64_t *offset = offsets.buf, *timestamp = timestamps.buf;
    const int32_t *koff = key_offsets.buf, *voff = value_offsets.buf;
    result = PyList_New(end - begin);
    if (result == NULL)
        goto done;
    for (Py_ssize_t row = begin; row < end; row++) {
        PyObject *record = record_type->tp_alloc(record_type, 6);
        if (record == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, row - begin, record);
        PyTuple_SET_ITEM(record, 0, Py_NewRef(topic));
        PyTuple_SET_ITEM(record, 1, Py_NewRef(partition));
        PyObject *items[4] = {PyLong_FromLongLong(offset[row]), binary_cell(&key_validity, koff, key_data.buf, row),
                              binary_cell(&value_validity, voff, value_data.buf, row),
                              PyLong_FromLongLong(timestamp[row])};
        for (int i = 0; i < 4; i++)
            PyTuple_SET_ITEM(record, 2 + i, items[i]);
        if (!items[0] || !items[1] || !items[2] || !items[3]) {
            Py_CLEAR(result);
            goto done;
        }
    }
done:
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&timestamps);
    PyBuffer_Release(&key_offsets);
    PyBuffer_Release(&key_data);
    PyBuffer_Release(&value_offsets);
    PyBuffer_Release(&value_data);
    if (key_validity.buf)
        PyBuffer_Release(&key_validity);
    if (value_validity.buf)
        PyBuffer_Release(&value_validity);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *error_class) {
    if (!PyType_Check(error_class) || !PyType_IsSubtype((PyTypeObject *)error_class, (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes an exception class");
        return NULL;
    }
    Py_XSETREF(corrupt_error, Py_NewRef(error_class));
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, "decode(data, start, end, decompress, check_crc, aborted) -> tuple of column buffers"},
    {"records", records, METH_VARARGS, "records(record_type, topic, partition, ...column buffers, begin, end) -> list"},
    {"configure", configure, METH_O, "configure(error_class): the exception raised for corrupt records"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recordbatch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordbatch(void) { return PyModule_Create(&module); }
