/*
 * Wire codec, decoding side (SPEC §8.1, §10): a strict msgpack reader and
 * the XferReq / XferAck decoders built on it.
 *
 * The reader is our own rather than msgpack-c's unpacker because the
 * unpacker allocates an object tree sized by the headers it reads: five
 * bytes claiming a 2^32-entry array make it ask for ~100 GB before it
 * notices the input is short.  Here every length is checked against the
 * bytes that are left and against the field's limit before anything is
 * allocated, nesting in ignored values is bounded, and the only allocation
 * is the decoded message's arena, made once everything has been validated.
 *
 * Decoding runs in two passes over the input.  The first validates the whole
 * map and records, per known key, where its value lies.  The second sizes
 * one arena for every string, blob and block index, and copies them in, so
 * a decoded message is all-or-nothing and independent of the input buffer.
 *
 * Strictness, decided for peers that may be hostile or buggy: "type" may
 * appear anywhere in the map but must be present and right; a known key
 * (or "type") given twice is refused, because two decoders could disagree
 * on which copy wins; keys must be strings; unknown keys are skipped
 * whatever their value.  No locking: no shared state.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/error.h"
#include "common/utf8.h"
#include "proto/wire.h"

/* Ignored values may nest this deep; the seed never nests at all. */
#define MAX_DEPTH 32

typedef enum kind {
    K_NIL,
    K_BOOL,
    K_INT,
    K_FLOAT,
    K_STR,
    K_BIN,
    K_ARRAY,
    K_MAP,
    K_EXT,
} kind_t;

static const char *const kind_names[] = {"nil", "bool",  "int", "float", "str",
                                         "bin", "array", "map", "ext"};
/* The same with an article, for "is a str, expected an int". */
static const char *const kind_phrases[] = {"nil",   "a bool",   "an int", "a float", "a str",
                                           "a bin", "an array", "a map",  "an ext"};

/* One msgpack header.  Scalars and byte payloads are consumed whole; for an
 * array or map only the header is, and n counts its entries. */
typedef struct tok {
    kind_t kind;
    bool neg;             /* K_INT: negative, value in i; otherwise in u */
    uint64_t u;           /* K_INT, non-negative */
    int64_t i;            /* K_INT, negative */
    uint32_t n;           /* bytes of a str/bin/ext, entries of an array/map */
    const uint8_t *bytes; /* payload of a str/bin/ext */
} tok_t;

typedef struct reader {
    const uint8_t *base; /* start of the message, for offsets in messages */
    const uint8_t *p;
    const uint8_t *end;
    const char *what; /* "req", "ack" or "message" */
} reader_t;

static size_t
offset(const reader_t *r)
{
    return (size_t)(r->p - r->base);
}

static size_t
left(const reader_t *r)
{
    return (size_t)(r->end - r->p);
}

static ect_status_t
truncated(const reader_t *r, const char *what_item)
{
    return ect__error(ECT_ERR_PARSE, "wire decode %s: truncated %s at byte %zu", r->what, what_item,
                      offset(r));
}

/* Read an n-byte big-endian unsigned integer. */
static ect_status_t
read_be(reader_t *r, size_t n, uint64_t *v_p)
{
    if (left(r) < n) {
        *v_p = 0; /* truncated() is cold and not inlined: say what *v_p is */
        return truncated(r, "header");
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | r->p[i];
    r->p += n;
    *v_p = v;
    return ECT_OK;
}

/* Consume an n-byte payload. */
static ect_status_t
read_payload(reader_t *r, kind_t kind, uint64_t n, tok_t *t)
{
    if (n > left(r))
        return ect__error(ECT_ERR_PARSE,
                          "wire decode %s: %s of %llu bytes at byte %zu, only %zu bytes left",
                          r->what, kind_names[kind], (unsigned long long)n, offset(r), left(r));
    t->kind = kind;
    t->n = (uint32_t)n;
    t->bytes = r->p;
    r->p += n;
    return ECT_OK;
}

/* Record a container header; every entry takes at least one byte, so a
 * count beyond what is left is refused here, before anyone loops over it. */
static ect_status_t
read_container(reader_t *r, kind_t kind, uint64_t n, tok_t *t)
{
    uint64_t min_bytes = kind == K_MAP ? 2 * n : n;
    if (min_bytes > left(r))
        return ect__error(ECT_ERR_PARSE,
                          "wire decode %s: %s of %llu entries at byte %zu, only %zu bytes left",
                          r->what, kind_names[kind], (unsigned long long)n, offset(r), left(r));
    t->kind = kind;
    t->n = (uint32_t)n;
    return ECT_OK;
}

static ect_status_t
read_uint(reader_t *r, size_t n, tok_t *t)
{
    uint64_t v;
    ect_status_t st = read_be(r, n, &v);
    if (st != ECT_OK)
        return st;
    t->kind = K_INT;
    t->neg = false;
    t->u = v;
    return ECT_OK;
}

/* A signed encoding may hold a non-negative value; normalise it so callers
 * see one representation per number, as Python does. */
static ect_status_t
read_sint(reader_t *r, size_t n, tok_t *t)
{
    uint64_t v;
    ect_status_t st = read_be(r, n, &v);
    if (st != ECT_OK)
        return st;
    unsigned shift = (unsigned)(64 - 8 * n);
    int64_t s = (int64_t)(v << shift) >> shift;
    t->kind = K_INT;
    t->neg = s < 0;
    t->i = s;
    t->u = s < 0 ? 0 : (uint64_t)s;
    return ECT_OK;
}

static ect_status_t
read_ext(reader_t *r, uint64_t n, tok_t *t)
{
    if (left(r) < 1)
        return truncated(r, "ext type");
    r->p++; /* the ext type byte; ext values are only ever skipped */
    return read_payload(r, K_EXT, n, t);
}

/* Read one header (and the payload of a scalar, str, bin or ext). */
static ect_status_t
read_tok(reader_t *r, tok_t *t)
{
    memset(t, 0, sizeof(*t));
    if (left(r) == 0)
        return truncated(r, "value");
    uint8_t b = *r->p++;
    uint64_t n;
    ect_status_t st;
    if (b <= 0x7f) {
        t->kind = K_INT;
        t->u = b;
        return ECT_OK;
    }
    if (b >= 0xe0) {
        t->kind = K_INT;
        t->neg = true;
        t->i = (int8_t)b;
        return ECT_OK;
    }
    if (b <= 0x8f)
        return read_container(r, K_MAP, b & 0x0f, t);
    if (b <= 0x9f)
        return read_container(r, K_ARRAY, b & 0x0f, t);
    if (b <= 0xbf)
        return read_payload(r, K_STR, b & 0x1f, t);
    switch (b) {
    case 0xc0:
        t->kind = K_NIL;
        return ECT_OK;
    case 0xc2:
    case 0xc3:
        t->kind = K_BOOL;
        t->u = b & 1;
        return ECT_OK;
    case 0xc4:
    case 0xc5:
    case 0xc6:
        if ((st = read_be(r, (size_t)1 << (b - 0xc4), &n)) != ECT_OK)
            return st;
        return read_payload(r, K_BIN, n, t);
    case 0xc7:
    case 0xc8:
    case 0xc9:
        if ((st = read_be(r, (size_t)1 << (b - 0xc7), &n)) != ECT_OK)
            return st;
        return read_ext(r, n, t);
    case 0xca:
    case 0xcb:
        if ((st = read_be(r, b == 0xca ? 4 : 8, &n)) != ECT_OK)
            return st;
        t->kind = K_FLOAT;
        return ECT_OK;
    case 0xcc:
    case 0xcd:
    case 0xce:
    case 0xcf:
        return read_uint(r, (size_t)1 << (b - 0xcc), t);
    case 0xd0:
    case 0xd1:
    case 0xd2:
    case 0xd3:
        return read_sint(r, (size_t)1 << (b - 0xd0), t);
    case 0xd4:
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        return read_ext(r, (uint64_t)1 << (b - 0xd4), t);
    case 0xd9:
    case 0xda:
    case 0xdb:
        if ((st = read_be(r, (size_t)1 << (b - 0xd9), &n)) != ECT_OK)
            return st;
        return read_payload(r, K_STR, n, t);
    case 0xdc:
    case 0xdd:
        if ((st = read_be(r, b == 0xdc ? 2 : 4, &n)) != ECT_OK)
            return st;
        return read_container(r, K_ARRAY, n, t);
    case 0xde:
    case 0xdf:
        if ((st = read_be(r, b == 0xde ? 2 : 4, &n)) != ECT_OK)
            return st;
        return read_container(r, K_MAP, n, t);
    default: /* 0xc1 is the one byte msgpack never uses */
        return ect__error(ECT_ERR_PARSE, "wire decode %s: reserved type byte 0x%02x at byte %zu",
                          r->what, b, offset(r) - 1);
    }
}

/* Skip one complete value.  Each entry consumes at least one byte, so this
 * is linear in the input; depth is bounded so the stack is too. */
static ect_status_t
skip_value(reader_t *r, unsigned depth)
{
    if (depth > MAX_DEPTH)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: value nested deeper than %d at byte %zu",
                          r->what, MAX_DEPTH, offset(r));
    tok_t t;
    ect_status_t st = read_tok(r, &t);
    if (st != ECT_OK || (t.kind != K_ARRAY && t.kind != K_MAP))
        return st;
    uint64_t entries = t.kind == K_MAP ? 2 * (uint64_t)t.n : t.n;
    for (uint64_t i = 0; i < entries; i++)
        if ((st = skip_value(r, depth + 1)) != ECT_OK)
            return st;
    return ECT_OK;
}

/* ---- message schema ------------------------------------------------------- */

typedef enum field_kind {
    F_STR,     /* UTF-8 str without NUL, at most ECT_WIRE_MAX_STR bytes */
    F_VERSION, /* any int that fits int64 */
    F_STATUS,  /* int naming an ect_xfer_status_t */
    F_BLOCKS,  /* array of non-negative ints, at most ECT_WIRE_MAX_BLOCKS */
    F_BIN,     /* bin, at most ECT_WIRE_MAX_BLOB bytes */
    F_BOOL,    /* true or false */
} field_kind_t;

typedef struct field {
    const char *name;
    field_kind_t kind;
    bool required;
} field_t;

/* Where the first pass found a field's value. */
typedef struct slot {
    bool seen;
    const uint8_t *bytes; /* str/bin payload, or the first block entry */
    uint32_t n;           /* str/bin bytes or block entries */
    int64_t value;        /* F_VERSION, F_STATUS */
} slot_t;

enum { REQ_MM_HASH, REQ_COMPAT, REQ_SESSION, REQ_VERSION, REQ_RUNS, REQ_FIELDS };
static const field_t req_fields[REQ_FIELDS] = {
    [REQ_MM_HASH] = {"mm_hash", F_STR, true},
    [REQ_COMPAT] = {"compatibility_hash", F_STR, true},
    [REQ_SESSION] = {"session_id", F_STR, false},
    [REQ_VERSION] = {"connector_version", F_VERSION, false},
    [REQ_RUNS] = {"ectier_runs", F_BOOL, false},
};

enum { ACK_MM_HASH, ACK_STATUS, ACK_SESSION, ACK_BLOCKS, ACK_AGENT, ACK_DESC, ACK_FIELDS };
static const field_t ack_fields[ACK_FIELDS] = {
    [ACK_MM_HASH] = {"mm_hash", F_STR, true},
    [ACK_STATUS] = {"status", F_STATUS, true},
    [ACK_SESSION] = {"session_id", F_STR, false},
    [ACK_BLOCKS] = {"src_block_indices", F_BLOCKS, false},
    [ACK_AGENT] = {"agent_metadata", F_BIN, false},
    [ACK_DESC] = {"mem_descriptor", F_BIN, false},
};

enum { DONE_MM_HASH, DONE_SESSION, DONE_FIELDS };
static const field_t done_fields[DONE_FIELDS] = {
    [DONE_MM_HASH] = {"mm_hash", F_STR, true},
    [DONE_SESSION] = {"session_id", F_STR, true},
};

static bool
key_is(const tok_t *key, const char *name)
{
    size_t n = strlen(name);
    return key->n == n && memcmp(key->bytes, name, n) == 0;
}

static ect_status_t
wrong_type(const reader_t *r, const char *field, const tok_t *t, const char *want)
{
    return ect__error(ECT_ERR_PARSE, "wire decode %s: \"%s\" is %s, expected %s", r->what, field,
                      kind_phrases[t->kind], want);
}

static ect_status_t
decode_blocks(reader_t *r, const field_t *f, const tok_t *t, slot_t *s)
{
    if (t->kind != K_ARRAY)
        return wrong_type(r, f->name, t, "an array of ints");
    if (t->n > ECT_WIRE_MAX_BLOCKS)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: %u src_block_indices, at most %u allowed",
                          r->what, t->n, ECT_WIRE_MAX_BLOCKS);
    s->bytes = r->p;
    s->n = t->n;
    for (uint32_t i = 0; i < t->n; i++) {
        tok_t e;
        ect_status_t st = read_tok(r, &e);
        if (st != ECT_OK)
            return st;
        if (e.kind != K_INT)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: %s[%u] is %s, expected an int",
                              r->what, f->name, i, kind_phrases[e.kind]);
        if (e.neg)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: %s[%u] is negative (%lld)", r->what,
                              f->name, i, (long long)e.i);
    }
    return ECT_OK;
}

/* Read and validate the value of a known field into its slot. */
static ect_status_t
decode_field(reader_t *r, const field_t *f, slot_t *s)
{
    tok_t t;
    ect_status_t st = read_tok(r, &t);
    if (st != ECT_OK)
        return st;
    switch (f->kind) {
    case F_STR:
        if (t.kind != K_STR)
            return wrong_type(r, f->name, &t, "a str");
        if (t.n > ECT_WIRE_MAX_STR)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: \"%s\" is %u bytes, at most %u",
                              r->what, f->name, t.n, ECT_WIRE_MAX_STR);
        if (!ect__utf8_valid_nonul(t.bytes, t.n))
            return ect__error(ECT_ERR_PARSE,
                              "wire decode %s: \"%s\" is not UTF-8 or contains a NUL byte", r->what,
                              f->name);
        s->bytes = t.bytes;
        s->n = t.n;
        return ECT_OK;
    case F_BIN:
        if (t.kind != K_BIN)
            return wrong_type(r, f->name, &t, "a bin");
        if (t.n > ECT_WIRE_MAX_BLOB)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: \"%s\" is %u bytes, at most %u",
                              r->what, f->name, t.n, ECT_WIRE_MAX_BLOB);
        s->bytes = t.bytes;
        s->n = t.n;
        return ECT_OK;
    case F_VERSION:
        if (t.kind != K_INT)
            return wrong_type(r, f->name, &t, "an int");
        if (!t.neg && t.u > INT64_MAX)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: \"%s\" %llu is out of range", r->what,
                              f->name, (unsigned long long)t.u);
        s->value = t.neg ? t.i : (int64_t)t.u;
        return ECT_OK;
    case F_STATUS:
        if (t.kind != K_INT)
            return wrong_type(r, f->name, &t, "an int");
        if (t.neg)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: unknown status %lld", r->what,
                              (long long)t.i);
        if (t.u >= ECT_XFER_STATUS_COUNT)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: unknown status %llu", r->what,
                              (unsigned long long)t.u);
        s->value = (int64_t)t.u;
        return ECT_OK;
    case F_BLOCKS:
        return decode_blocks(r, f, &t, s);
    case F_BOOL:
        if (t.kind != K_BOOL)
            return wrong_type(r, f->name, &t, "a bool");
        s->value = (int64_t)t.u;
        return ECT_OK;
    }
    return ect__error(ECT_ERR_INTERNAL, "wire decode %s: field kind %d", r->what, (int)f->kind);
}

/* First pass: validate the whole message and fill one slot per field. */
static ect_status_t
parse_message(const void *data, size_t len, const char *tag, const field_t *fields, size_t n_fields,
              slot_t *slots)
{
    if (data == NULL || len == 0)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: empty message", tag);
    reader_t r = {data, data, (const uint8_t *)data + len, tag};
    tok_t map;
    ect_status_t st = read_tok(&r, &map);
    if (st != ECT_OK)
        return st;
    if (map.kind != K_MAP)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: message is %s, expected a map", tag,
                          kind_phrases[map.kind]);
    bool tag_seen = false;
    for (uint32_t i = 0; i < map.n; i++) {
        size_t key_at = offset(&r);
        tok_t key;
        if ((st = read_tok(&r, &key)) != ECT_OK)
            return st;
        if (key.kind != K_STR)
            return ect__error(ECT_ERR_PARSE,
                              "wire decode %s: key at byte %zu is %s, expected a str", tag, key_at,
                              kind_phrases[key.kind]);
        if (key_is(&key, "type")) {
            if (tag_seen)
                return ect__error(ECT_ERR_PARSE, "wire decode %s: key \"type\" given twice", tag);
            tag_seen = true;
            tok_t v;
            if ((st = read_tok(&r, &v)) != ECT_OK)
                return st;
            if (v.kind != K_STR)
                return wrong_type(&r, "type", &v, "a str");
            if (!key_is(&v, tag)) {
                const char *other = key_is(&v, "req")    ? "req"
                                    : key_is(&v, "ack")  ? "ack"
                                    : key_is(&v, "done") ? "done"
                                                         : NULL;
                return ect__error(
                    ECT_ERR_PARSE, "wire decode %s: \"type\" is %s%s%s, expected \"%s\"", tag,
                    other ? "\"" : "", other ? other : "not a known tag", other ? "\"" : "", tag);
            }
            continue;
        }
        size_t j = 0;
        while (j < n_fields && !key_is(&key, fields[j].name))
            j++;
        if (j == n_fields) {
            if ((st = skip_value(&r, 1)) != ECT_OK)
                return st;
            continue;
        }
        if (slots[j].seen)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: key \"%s\" given twice", tag,
                              fields[j].name);
        slots[j].seen = true;
        if ((st = decode_field(&r, &fields[j], &slots[j])) != ECT_OK)
            return st;
    }
    if (left(&r) > 0)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: %zu trailing bytes after the map", tag,
                          left(&r));
    if (!tag_seen)
        return ect__error(ECT_ERR_PARSE, "wire decode %s: missing key \"type\"", tag);
    for (size_t j = 0; j < n_fields; j++)
        if (fields[j].required && !slots[j].seen)
            return ect__error(ECT_ERR_PARSE, "wire decode %s: missing required key \"%s\"", tag,
                              fields[j].name);
    return ECT_OK;
}

/* ---- second pass: copy into the arena -------------------------------------- */

static const char *
copy_str(uint8_t **cursor, const slot_t *s)
{
    char *dst = (char *)*cursor;
    if (s->n > 0)
        memcpy(dst, s->bytes, s->n);
    dst[s->n] = '\0';
    *cursor += (size_t)s->n + 1;
    return dst;
}

static const uint8_t *
copy_bin(uint8_t **cursor, const slot_t *s)
{
    if (s->n == 0)
        return NULL;
    uint8_t *dst = *cursor;
    memcpy(dst, s->bytes, s->n);
    *cursor += s->n;
    return dst;
}

ect_status_t
ect__wire_decode_req(const void *data, size_t len, ect_xfer_req_t *req_p)
{
    if (req_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire decode req: NULL output");
    slot_t s[REQ_FIELDS] = {{0}};
    ect_status_t st = parse_message(data, len, "req", req_fields, REQ_FIELDS, s);
    if (st != ECT_OK)
        return st;
    size_t size = (size_t)s[REQ_MM_HASH].n + s[REQ_COMPAT].n + s[REQ_SESSION].n + 3;
    uint8_t *arena = ect__malloc(size);
    if (arena == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "wire decode req: cannot allocate %zu bytes", size);
    uint8_t *cursor = arena;
    ect_xfer_req_t req = {0};
    req.mm_hash = copy_str(&cursor, &s[REQ_MM_HASH]);
    req.compatibility_hash = copy_str(&cursor, &s[REQ_COMPAT]);
    req.session_id = copy_str(&cursor, &s[REQ_SESSION]);
    req.has_connector_version = s[REQ_VERSION].seen;
    req.connector_version = s[REQ_VERSION].seen ? s[REQ_VERSION].value : ECT_WIRE_CONNECTOR_VERSION;
    req.accepts_runs = s[REQ_RUNS].seen && s[REQ_RUNS].value != 0;
    req.arena_ = arena;
    *req_p = req;
    return ECT_OK;
}

ect_status_t
ect__wire_decode_ack(const void *data, size_t len, ect_xfer_ack_t *ack_p)
{
    if (ack_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire decode ack: NULL output");
    slot_t s[ACK_FIELDS] = {{0}};
    ect_status_t st = parse_message(data, len, "ack", ack_fields, ACK_FIELDS, s);
    if (st != ECT_OK)
        return st;
    /* Block indices first: malloc's alignment suits uint64_t.  The sizes are
     * bounded by the limits checked above, so the sum cannot overflow. */
    size_t size = (size_t)s[ACK_BLOCKS].n * sizeof(uint64_t) + s[ACK_MM_HASH].n + s[ACK_SESSION].n +
                  2 + s[ACK_AGENT].n + s[ACK_DESC].n;
    uint8_t *arena = ect__malloc(size);
    if (arena == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "wire decode ack: cannot allocate %zu bytes", size);
    ect_xfer_ack_t ack = {0};
    uint8_t *cursor = arena;
    if (s[ACK_BLOCKS].n > 0) {
        uint64_t *blocks = (uint64_t *)(void *)arena;
        reader_t r = {data, s[ACK_BLOCKS].bytes, (const uint8_t *)data + len, "ack"};
        for (uint32_t i = 0; i < s[ACK_BLOCKS].n; i++) {
            tok_t e;
            /* Validated by the first pass; a failure here is our bug. */
            if (read_tok(&r, &e) != ECT_OK || e.kind != K_INT || e.neg) {
                ect__free(arena);
                return ect__error(ECT_ERR_INTERNAL,
                                  "wire decode ack: block %u changed between passes", i);
            }
            blocks[i] = e.u;
        }
        ack.src_block_indices = blocks;
        ack.n_src_blocks = s[ACK_BLOCKS].n;
        cursor += (size_t)s[ACK_BLOCKS].n * sizeof(uint64_t);
    }
    ack.mm_hash = copy_str(&cursor, &s[ACK_MM_HASH]);
    ack.status = (ect_xfer_status_t)s[ACK_STATUS].value;
    ack.session_id = copy_str(&cursor, &s[ACK_SESSION]);
    ack.agent_metadata = copy_bin(&cursor, &s[ACK_AGENT]);
    ack.agent_metadata_len = s[ACK_AGENT].n;
    ack.mem_descriptor = copy_bin(&cursor, &s[ACK_DESC]);
    ack.mem_descriptor_len = s[ACK_DESC].n;
    ack.arena_ = arena;
    *ack_p = ack;
    return ECT_OK;
}

ect_status_t
ect__wire_decode_done(const void *data, size_t len, ect_xfer_done_t *done_p)
{
    if (done_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire decode done: NULL output");
    slot_t s[DONE_FIELDS] = {{0}};
    ect_status_t st = parse_message(data, len, "done", done_fields, DONE_FIELDS, s);
    if (st != ECT_OK)
        return st;
    if (s[DONE_MM_HASH].n == 0 || s[DONE_SESSION].n == 0)
        return ect__error(ECT_ERR_PARSE, "wire decode done: empty mm_hash or session_id");
    size_t size = (size_t)s[DONE_MM_HASH].n + s[DONE_SESSION].n + 2;
    uint8_t *arena = ect__malloc(size);
    if (arena == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "wire decode done: cannot allocate %zu bytes", size);
    uint8_t *cursor = arena;
    ect_xfer_done_t done = {0};
    done.mm_hash = copy_str(&cursor, &s[DONE_MM_HASH]);
    done.session_id = copy_str(&cursor, &s[DONE_SESSION]);
    done.arena_ = arena;
    *done_p = done;
    return ECT_OK;
}

ect_status_t
ect__wire_peek_type(const void *data, size_t len, ect__wire_type_t *type_p)
{
    if (type_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "wire peek: NULL output");
    if (data == NULL || len == 0)
        return ect__error(ECT_ERR_PARSE, "wire decode message: empty message");
    reader_t r = {data, data, (const uint8_t *)data + len, "message"};
    tok_t map;
    ect_status_t st = read_tok(&r, &map);
    if (st != ECT_OK)
        return st;
    if (map.kind != K_MAP)
        return ect__error(ECT_ERR_PARSE, "wire decode message: message is %s, expected a map",
                          kind_phrases[map.kind]);
    for (uint32_t i = 0; i < map.n; i++) {
        tok_t key;
        if ((st = read_tok(&r, &key)) != ECT_OK)
            return st;
        if (key.kind != K_STR || !key_is(&key, "type")) {
            if ((st = skip_value(&r, 1)) != ECT_OK)
                return st;
            continue;
        }
        tok_t v;
        if ((st = read_tok(&r, &v)) != ECT_OK)
            return st;
        if (v.kind == K_STR && key_is(&v, "req")) {
            *type_p = ECT_WIRE_REQ;
            return ECT_OK;
        }
        if (v.kind == K_STR && key_is(&v, "ack")) {
            *type_p = ECT_WIRE_ACK;
            return ECT_OK;
        }
        if (v.kind == K_STR && key_is(&v, "done")) {
            *type_p = ECT_WIRE_DONE;
            return ECT_OK;
        }
        return ect__error(ECT_ERR_PARSE,
                          "wire decode message: \"type\" is not \"req\", \"ack\" or \"done\"");
    }
    return ect__error(ECT_ERR_PARSE, "wire decode message: missing key \"type\"");
}

void
ect__xfer_req_cleanup(ect_xfer_req_t *req)
{
    if (req == NULL)
        return;
    ect__free(req->arena_);
    memset(req, 0, sizeof(*req));
}

void
ect__xfer_ack_cleanup(ect_xfer_ack_t *ack)
{
    if (ack == NULL)
        return;
    ect__free(ack->arena_);
    memset(ack, 0, sizeof(*ack));
}

void
ect__xfer_done_cleanup(ect_xfer_done_t *done)
{
    if (done == NULL)
        return;
    ect__free(done->arena_);
    memset(done, 0, sizeof(*done));
}
