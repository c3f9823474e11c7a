/*
 * Scraping a Prometheus endpoint (src/metrics/scrape.h): the HTTP/1.0 GET
 * and the text-format parser.
 *
 * Everything read here comes from a peer we do not control.  The fetch
 * holds one deadline for the whole exchange and one byte limit for the
 * answer, and stops reading once a Content-Length body is complete (a
 * server that keeps the connection open cannot stall it).  The parser
 * looks at each byte once, copies what it keeps, and checks every limit
 * before it allocates.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/settings.h"
#include "metrics/http.h"
#include "metrics/scrape.h"

#define HEADERS_MAX (16u * 1024)

/* ---- the parser ------------------------------------------------------------------ */

struct label {
    const char *name;
    size_t name_len;
    char *value; /* unescaped, owned */
    size_t value_len;
};

struct line {
    const char *s;
    size_t len;
    unsigned no; /* 1-based */
};

static ect_status_t
line_error(const struct line *l, ect_status_t st, const char *what)
{
    char q[128];
    return ect__error(st, "metrics text line %u: %s: %s", l->no, what,
                      ect__quote(q, sizeof(q), l->s, l->len));
}

static bool
name_char(char c, bool first, bool colon_ok)
{
    return isalpha((unsigned char)c) || c == '_' || (colon_ok && c == ':') ||
           (!first && isdigit((unsigned char)c));
}

static size_t
skip_blanks(const struct line *l, size_t i)
{
    while (i < l->len && (l->s[i] == ' ' || l->s[i] == '\t'))
        i++;
    return i;
}

/* A name at i: its length (0: none). */
static size_t
scan_name(const struct line *l, size_t i, bool colon_ok)
{
    size_t n = 0;
    while (i + n < l->len && name_char(l->s[i + n], n == 0, colon_ok))
        n++;
    return n;
}

static void
free_labels(struct label *labels, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ect__free(labels[i].value);
}

/* A quoted label value at *i (at the opening quote), unescaped. */
static ect_status_t
scan_value(const struct line *l, size_t *i, struct label *lab)
{
    size_t j = *i + 1, n = 0;
    char *out = ect__malloc(l->len); /* never longer than the line */
    if (out == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "metrics text: out of memory");
    for (;; j++) {
        if (j >= l->len) {
            ect__free(out);
            return line_error(l, ECT_ERR_PARSE, "a label value has no closing quote");
        }
        char c = l->s[j];
        if (c == '"')
            break;
        if (c == '\\') {
            char e = j + 1 < l->len ? l->s[++j] : '\0';
            if (e != '\\' && e != '"' && e != 'n') {
                ect__free(out);
                return line_error(l, ECT_ERR_PARSE, "a label value has an unknown escape");
            }
            c = e == 'n' ? '\n' : e;
        }
        out[n++] = c;
    }
    lab->value = out;
    lab->value_len = n;
    *i = j + 1;
    return ECT_OK;
}

/* The labels at *i (at '{'), up to and past '}'. */
static ect_status_t
scan_labels(const struct line *l, size_t *i, struct label *labels, size_t *n_p)
{
    size_t j = *i + 1, n = 0;
    ect_status_t st = ECT_OK;
    for (;;) {
        j = skip_blanks(l, j);
        if (j < l->len && l->s[j] == '}') {
            j++;
            break;
        }
        size_t nl = scan_name(l, j, false);
        if (nl == 0 || nl > ECT_PROM_NAME_MAX) {
            st = line_error(l, ECT_ERR_PARSE, "a label name is missing or malformed");
            goto err;
        }
        if (n == ECT_PROM_LABELS_MAX) {
            st = line_error(l, ECT_ERR_OVERFLOW, "more than 16 labels");
            goto err;
        }
        for (size_t k = 0; k < n; k++)
            if (labels[k].name_len == nl && memcmp(labels[k].name, l->s + j, nl) == 0) {
                st = line_error(l, ECT_ERR_PARSE, "a label appears twice");
                goto err;
            }
        labels[n] = (struct label){.name = l->s + j, .name_len = nl};
        j = skip_blanks(l, j + nl);
        if (j >= l->len || l->s[j] != '=') {
            st = line_error(l, ECT_ERR_PARSE, "a label has no '='");
            goto err;
        }
        j = skip_blanks(l, j + 1);
        if (j >= l->len || l->s[j] != '"') {
            st = line_error(l, ECT_ERR_PARSE, "a label value is not quoted");
            goto err;
        }
        if ((st = scan_value(l, &j, &labels[n])) != ECT_OK)
            goto err;
        n++;
        j = skip_blanks(l, j);
        if (j < l->len && l->s[j] == ',') {
            j++;
        } else if (j < l->len && l->s[j] == '}') {
            j++;
            break;
        } else {
            st = line_error(l, ECT_ERR_PARSE, "labels are not closed with '}'");
            goto err;
        }
    }
    *i = j;
    *n_p = n;
    return ECT_OK;
err:
    free_labels(labels, n);
    return st;
}

static int
cmp_label(const void *a, const void *b)
{
    const struct label *x = a, *y = b;
    size_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, n);
    return c != 0 ? c : (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

/* The canonical text of labels: sorted, name="value" with \\ \" \n. */
static char *
canonical_labels(struct label *labels, size_t n)
{
    qsort(labels, n, sizeof(*labels), cmp_label);
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += labels[i].name_len + 2 * labels[i].value_len + 4;
    char *out = ect__malloc(cap), *p = out;
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            *p++ = ',';
        memcpy(p, labels[i].name, labels[i].name_len);
        p += labels[i].name_len;
        *p++ = '=';
        *p++ = '"';
        for (size_t k = 0; k < labels[i].value_len; k++) {
            char c = labels[i].value[k];
            if (c == '\\' || c == '"' || c == '\n')
                *p++ = '\\';
            *p++ = c == '\n' ? 'n' : c;
        }
        *p++ = '"';
    }
    *p = '\0';
    return out;
}

/* The value token at *i: Go's float syntax, which strtod covers (with
 * "Inf", "+Inf", "-Inf", "NaN"). */
static ect_status_t
scan_number(const struct line *l, size_t *i, double *v_p)
{
    size_t j = *i, n = 0;
    while (j + n < l->len && l->s[j + n] != ' ' && l->s[j + n] != '\t')
        n++;
    char tok[64];
    if (n == 0 || n >= sizeof(tok))
        return line_error(l, ECT_ERR_PARSE, "the value is missing or too long");
    memcpy(tok, l->s + j, n);
    tok[n] = '\0';
    char *end = NULL;
    errno = 0;
    double v = strtod(tok, &end);
    if (end != tok + n || (errno == ERANGE && isfinite(v) && v != 0))
        return line_error(l, ECT_ERR_PARSE, "the value is not a number");
    *v_p = v;
    *i = j + n;
    return ECT_OK;
}

static ect_status_t
add_sample(ect__prom_t *p, const struct line *l, char *name, char *labels, double v)
{
    size_t klen = strlen(name) + strlen(labels) + 3;
    char *key = ect__malloc(klen);
    if (key == NULL)
        return ect__error(ECT_ERR_NO_MEMORY, "metrics text: out of memory");
    snprintf(key, klen, "%s{%s}", name, labels);
    ect_status_t st;
    if (ect__strmap_find(&p->index, key) != NULL) {
        st = line_error(l, ECT_ERR_PARSE, "the same sample appears twice");
        goto out;
    }
    if (p->n == ECT_PROM_SAMPLES_MAX) {
        st = line_error(l, ECT_ERR_OVERFLOW, "more than 100000 samples");
        goto out;
    }
    if (p->n == p->cap) {
        size_t cap = p->cap == 0 ? 64 : p->cap * 2;
        ect__prom_sample_t *s = ect__realloc(p->samples, cap * sizeof(*s));
        if (s == NULL) {
            st = ect__error(ECT_ERR_NO_MEMORY, "metrics text: out of memory");
            goto out;
        }
        p->samples = s;
        p->cap = cap;
    }
    if ((st = ect__strmap_put(&p->index, key, (void *)(uintptr_t)(p->n + 1), NULL)) != ECT_OK)
        goto out;
    p->samples[p->n++] = (ect__prom_sample_t){.name = name, .labels = labels, .value = v};
    ect__free(key);
    return ECT_OK;
out:
    ect__free(key);
    return st;
}

static ect_status_t
parse_sample(ect__prom_t *p, const struct line *l)
{
    size_t i = skip_blanks(l, 0);
    size_t nl = scan_name(l, i, true);
    if (nl == 0)
        return line_error(l, ECT_ERR_PARSE, "not a sample: no metric name");
    if (nl > ECT_PROM_NAME_MAX)
        return line_error(l, ECT_ERR_OVERFLOW, "a metric name over 256 bytes");
    const char *name_at = l->s + i;
    i += nl;
    struct label labels[ECT_PROM_LABELS_MAX];
    size_t n_labels = 0;
    ect_status_t st;
    if (i < l->len && l->s[i] == '{' && (st = scan_labels(l, &i, labels, &n_labels)) != ECT_OK)
        return st;
    double v = 0;
    size_t before = i;
    i = skip_blanks(l, i);
    if (i == before && i < l->len) {
        st = line_error(l, ECT_ERR_PARSE, "no blank before the value");
        goto out_labels;
    }
    if ((st = scan_number(l, &i, &v)) != ECT_OK)
        goto out_labels;
    i = skip_blanks(l, i);
    /* An optional timestamp (ms): kept out, but it must be one. */
    if (i < l->len && (l->s[i] == '-' || isdigit((unsigned char)l->s[i]))) {
        size_t j = i + (l->s[i] == '-');
        size_t digits = 0;
        while (j < l->len && isdigit((unsigned char)l->s[j]))
            j++, digits++;
        if (digits == 0 || digits > 19) {
            st = line_error(l, ECT_ERR_PARSE, "the timestamp is not an integer");
            goto out_labels;
        }
        i = skip_blanks(l, j);
    }
    if (i != l->len) {
        st = line_error(l, ECT_ERR_PARSE, "unexpected text after the value");
        goto out_labels;
    }
    char *name = ect__strndup(name_at, nl);
    char *canon = canonical_labels(labels, n_labels);
    if (name == NULL || canon == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "metrics text: out of memory");
    } else if ((st = add_sample(p, l, name, canon, v)) == ECT_OK) {
        free_labels(labels, n_labels);
        return ECT_OK;
    }
    ect__free(name);
    ect__free(canon);
out_labels:
    free_labels(labels, n_labels);
    return st;
}

ect_status_t
ect__prom_parse(const char *text, size_t len, ect__prom_t *prom_p)
{
    if ((text == NULL && len > 0) || prom_p == NULL)
        return ect__error(ECT_ERR_INVALID_ARG, "metrics text: NULL text or prom_p");
    if (len > ECT_PROM_TEXT_MAX)
        return ect__error(ECT_ERR_OVERFLOW, "metrics text of %zu bytes: more than the %u allowed",
                          len, ECT_PROM_TEXT_MAX);
    if (len > 0 && memchr(text, '\0', len) != NULL)
        return ect__error(ECT_ERR_PARSE, "metrics text has a NUL byte: it is not text");
    ect__prom_t p = {0};
    ect__strmap_init(&p.index);
    ect_status_t st = ECT_OK;
    struct line l = {.no = 0};
    for (size_t pos = 0; pos < len && st == ECT_OK;) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        l = (struct line){.s = text + pos, .len = end - pos, .no = l.no + 1};
        pos = end + 1;
        if (l.len > ECT_PROM_LINE_MAX) {
            l.len = 80;
            st = line_error(&l, ECT_ERR_OVERFLOW, "a line over 64 KiB");
            break;
        }
        if (l.len > 0 && l.s[l.len - 1] == '\r')
            l.len--;
        size_t first = skip_blanks(&l, 0);
        if (first == l.len || l.s[first] == '#')
            continue;
        st = parse_sample(&p, &l);
    }
    if (st != ECT_OK) {
        ect__prom_cleanup(&p);
        return st;
    }
    *prom_p = p;
    return ECT_OK;
}

void
ect__prom_cleanup(ect__prom_t *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n; i++) {
        ect__free(p->samples[i].name);
        ect__free(p->samples[i].labels);
    }
    ect__free(p->samples);
    ect__strmap_cleanup(&p->index);
    memset(p, 0, sizeof(*p));
}

bool
ect__prom_get(const ect__prom_t *p, const char *name, const char *labels, double *value_p)
{
    if (p == NULL || name == NULL || labels == NULL)
        return false;
    size_t nl = strlen(name), ll = strlen(labels), klen = nl + ll + 3;
    char small[512];
    char *key = klen <= sizeof(small) ? small : ect__malloc(klen);
    if (key == NULL)
        return false;
    memcpy(key, name, nl);
    key[nl] = '{';
    memcpy(key + nl + 1, labels, ll);
    memcpy(key + nl + 1 + ll, "}", 2);
    ect_strmap_node_t *node = ect__strmap_find(&p->index, key);
    if (key != small)
        ect__free(key);
    if (node == NULL)
        return false;
    if (value_p != NULL)
        *value_p = p->samples[(uintptr_t)node->value - 1].value;
    return true;
}

struct bucket {
    double le, cum;
};

static int
cmp_bucket(const void *a, const void *b)
{
    double x = ((const struct bucket *)a)->le, y = ((const struct bucket *)b)->le;
    return (x > y) - (x < y);
}

size_t
ect__prom_buckets(const ect__prom_t *p, const char *name, double *le, double *cum, size_t cap)
{
    if (p == NULL || name == NULL)
        return 0;
    size_t nl = strlen(name), n = 0, have = 0;
    struct bucket *b = NULL;
    for (size_t i = 0; i < p->n; i++) {
        const ect__prom_sample_t *s = &p->samples[i];
        if (strncmp(s->name, name, nl) != 0 || strcmp(s->name + nl, "_bucket") != 0 ||
            strncmp(s->labels, "le=\"", 4) != 0)
            continue;
        /* Only le: the value must run to the end of the label text. */
        size_t vl = strlen(s->labels) - 4;
        if (vl == 0 || s->labels[4 + vl - 1] != '"' || memchr(s->labels + 4, '"', vl - 1))
            continue;
        char tok[64];
        if (vl - 1 >= sizeof(tok))
            continue;
        memcpy(tok, s->labels + 4, vl - 1);
        tok[vl - 1] = '\0';
        char *end = NULL;
        double bound = strtod(tok, &end);
        if (end == tok || *end != '\0' || isnan(bound))
            continue;
        if (n == have) {
            struct bucket *nb = ect__realloc(b, (have ? have * 2 : 16) * sizeof(*b));
            if (nb == NULL)
                break;
            b = nb;
            have = have ? have * 2 : 16;
        }
        b[n++] = (struct bucket){bound, s->value};
    }
    if (n > 0)
        qsort(b, n, sizeof(*b), cmp_bucket);
    for (size_t i = 0; i < n && i < cap; i++) {
        le[i] = b[i].le;
        cum[i] = b[i].cum;
    }
    ect__free(b);
    return n;
}

double
ect__prom_quantile(const double *le, const double *cum, size_t n, double q)
{
    if (le == NULL || cum == NULL || n < 2 || !isinf(le[n - 1]) || !(cum[n - 1] > 0) || isnan(q))
        return NAN;
    q = q < 0 ? 0 : q > 1 ? 1 : q;
    double rank = q * cum[n - 1];
    size_t b = 0;
    while (b < n - 1 && cum[b] < rank)
        b++;
    if (isinf(le[b]) && le[b] > 0) {
        /* In +Inf (a second +Inf bound is possible in hostile text): the
         * largest finite bound below. */
        while (b > 0 && !isfinite(le[b]))
            b--;
        return isfinite(le[b]) ? le[b] : NAN;
    }
    double lo = b == 0 ? 0 : le[b - 1];
    double below = b == 0 ? 0 : cum[b - 1];
    double in = cum[b] - below;
    if (b == 0 && le[0] <= 0)
        return le[0];
    return in > 0 ? lo + (le[b] - lo) * ((rank - below) / in) : le[b];
}

/* ---- the fetch ------------------------------------------------------------------- */

static int
ms_left(uint64_t deadline_ns)
{
    uint64_t now = ect__now_ns();
    return now >= deadline_ns ? 0 : (int)((deadline_ns - now) / 1000000u) + 1;
}

/* Wait for events on fd until the deadline: 1 ready, 0 timeout, -1 error. */
static int
wait_fd(int fd, short events, uint64_t deadline_ns)
{
    for (;;) {
        int ms = ms_left(deadline_ns);
        if (ms == 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms);
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
    }
}

static ect_status_t
connect_to(const char *address, uint64_t deadline_ns, int *fd_p)
{
    char host[256], port[16];
    ect_status_t st =
        ect__http_split_address("address", address, host, sizeof(host), port, sizeof(port));
    if (st != ECT_OK)
        return st;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return ect__error(ECT_ERR_CONFIG, "%s: cannot resolve: %s", address, gai_strerror(gai));
    st = ect__error(ECT_ERR_IO, "%s: no usable address", address);
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        int fd =
            socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
        if (fd < 0) {
            st = ect__error_errno(ECT_ERR_IO, "%s: socket", address);
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, deadline_ns);
            int err = 0;
            socklen_t el = sizeof(err);
            if (w == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0) {
                *fd_p = fd;
                st = ECT_OK;
                break;
            }
            if (w == 0) {
                close(fd);
                st = ect__error(ECT_ERR_TIMEOUT, "%s: no connection within the deadline", address);
                break;
            }
            errno = err != 0 ? err : errno;
        }
        st = ect__error_errno(ECT_ERR_IO, "%s: cannot connect", address);
        close(fd);
    }
    freeaddrinfo(res);
    return st;
}

static ect_status_t
send_request(int fd, const char *address, const char *path, uint64_t deadline_ns)
{
    char req[512];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.0\r\nHost: %s\r\nAccept: text/plain\r\n"
                     "User-Agent: ectier-stats\r\nConnection: close\r\n\r\n",
                     path, address);
    if (n < 0 || (size_t)n >= sizeof(req))
        return ect__error(ECT_ERR_INVALID_ARG, "%s: request path too long", address);
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int r = wait_fd(fd, POLLOUT, deadline_ns);
            if (r == 0)
                return ect__error(ECT_ERR_TIMEOUT, "%s: the request could not be sent in time",
                                  address);
            if (r < 0)
                return ect__error_errno(ECT_ERR_IO, "%s: poll", address);
        } else {
            return ect__error_errno(ECT_ERR_IO, "%s: sending the request", address);
        }
    }
    return ECT_OK;
}

/* What the header section says: the status and the body's length. */
struct head {
    size_t end;     /* offset of the body */
    long long clen; /* Content-Length, or -1 */
};

/* Parse the headers in buf[0..len), which end at a blank line.  Returns
 * ECT_OK (*h filled), ECT_ERR_PEER or ECT_ERR_OVERFLOW; 1 when the blank
 * line has not come yet. */
static int
parse_head(const char *address, const char *buf, size_t len, size_t max_body, struct head *h)
{
    char q[128];
    if (len >= 5 && strncmp(buf, "HTTP/", 5) != 0)
        return ect__error(ECT_ERR_PEER, "%s: not an HTTP answer: %s", address,
                          ect__quote(q, sizeof(q), buf, len < 40 ? len : 40));
    const char *crlf = NULL;
    size_t sep = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] == '\n' && buf[i + 1] == '\n') {
            crlf = buf + i, sep = 2;
            break;
        }
        if (i + 3 < len && memcmp(buf + i, "\r\n\r\n", 4) == 0) {
            crlf = buf + i, sep = 4;
            break;
        }
    }
    if (crlf == NULL) {
        if (len > HEADERS_MAX)
            return ect__error(ECT_ERR_OVERFLOW, "%s: HTTP headers over 16 KiB", address);
        return 1;
    }
    size_t head_len = (size_t)(crlf - buf);
    const char *eol = memchr(buf, '\n', head_len + 1);
    size_t line_len = eol != NULL ? (size_t)(eol - buf) : head_len;
    if (line_len > 0 && buf[line_len - 1] == '\r')
        line_len--;
    bool is_code = line_len >= 12 && isdigit((unsigned char)buf[9]) &&
                   isdigit((unsigned char)buf[10]) && isdigit((unsigned char)buf[11]);
    int code = is_code ? (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0') : 0;
    if (!is_code || strncmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ' || code < 100)
        return ect__error(ECT_ERR_PEER, "%s: not an HTTP status line: %s", address,
                          ect__quote(q, sizeof(q), buf, line_len));
    if (code != 200)
        return ect__error(ECT_ERR_PEER, "%s: the server answered %s", address,
                          ect__quote(q, sizeof(q), buf + 9, line_len - 9));
    h->end = head_len + sep;
    h->clen = -1;
    /* One header a line, up to the blank one; any byte may be in them. */
    for (size_t i = line_len; i < head_len;) {
        const char *nl = memchr(buf + i, '\n', head_len - i);
        size_t next = nl != NULL ? (size_t)(nl - buf) + 1 : head_len;
        size_t ll = next - i;
        while (ll > 0 && (buf[i + ll - 1] == '\n' || buf[i + ll - 1] == '\r'))
            ll--;
        if (ll >= 15 && strncasecmp(buf + i, "Content-Length:", 15) == 0) {
            size_t j = i + 15, digits = 0;
            unsigned long long v = 0;
            while (j < i + ll && (buf[j] == ' ' || buf[j] == '\t'))
                j++;
            for (; j < i + ll && isdigit((unsigned char)buf[j]) && digits < 19; j++, digits++)
                v = v * 10 + (unsigned long long)(buf[j] - '0');
            while (j < i + ll && (buf[j] == ' ' || buf[j] == '\t'))
                j++;
            if (digits == 0 || j != i + ll)
                return ect__error(ECT_ERR_PEER, "%s: a malformed Content-Length: %s", address,
                                  ect__quote(q, sizeof(q), buf + i, ll));
            if (v > max_body)
                return ect__error(ECT_ERR_OVERFLOW,
                                  "%s: a body of %llu bytes, more than the %zu allowed", address, v,
                                  max_body);
            h->clen = (long long)v;
        }
        i = next;
    }
    return ECT_OK;
}

ect_status_t
ect__http_get(const char *address, const char *path, int timeout_ms, size_t max_body, char **body_p,
              size_t *len_p)
{
    if (address == NULL || path == NULL || body_p == NULL || len_p == NULL || timeout_ms <= 0 ||
        max_body > ((size_t)1 << 40))
        return ect__error(ECT_ERR_INVALID_ARG, "http get: NULL argument, no time or no limit");
    uint64_t deadline = ect__now_ns() + (uint64_t)timeout_ms * 1000000u;
    int fd = -1;
    ect_status_t st = connect_to(address, deadline, &fd);
    if (st != ECT_OK)
        return st;
    char *buf = NULL;
    if ((st = send_request(fd, address, path, deadline)) != ECT_OK)
        goto out;
    size_t cap = HEADERS_MAX + max_body + 1, len = 0;
    if ((buf = ect__malloc(cap < 65536 ? cap : 65536)) == NULL) {
        st = ect__error(ECT_ERR_NO_MEMORY, "http get: out of memory");
        goto out;
    }
    size_t have = cap < 65536 ? cap : 65536;
    struct head h = {0};
    int head_done = 0;
    for (;;) {
        if (head_done && h.clen >= 0 && len >= h.end + (size_t)h.clen)
            break; /* the whole body: no need to wait for the close */
        if (len + 1 >= have) {
            if (have >= cap) {
                st = ect__error(ECT_ERR_OVERFLOW, "%s: an answer over %zu bytes", address, cap - 1);
                goto out;
            }
            size_t grow = have * 2 < cap ? have * 2 : cap;
            char *nb = ect__realloc(buf, grow);
            if (nb == NULL) {
                st = ect__error(ECT_ERR_NO_MEMORY, "http get: out of memory");
                goto out;
            }
            buf = nb;
            have = grow;
        }
        ssize_t n = recv(fd, buf + len, have - 1 - len, 0);
        if (n > 0) {
            len += (size_t)n;
            if (!head_done) {
                int r = parse_head(address, buf, len, max_body, &h);
                if (r < 0) {
                    st = (ect_status_t)r;
                    goto out;
                }
                head_done = r == ECT_OK;
            }
            if (head_done && len - h.end > max_body) {
                st = ect__error(ECT_ERR_OVERFLOW, "%s: a body over %zu bytes", address, max_body);
                goto out;
            }
        } else if (n == 0) {
            break;
        } else if (errno == EINTR) {
            continue;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int r = wait_fd(fd, POLLIN, deadline);
            if (r == 0) {
                st = ect__error(ECT_ERR_TIMEOUT, "%s: no complete answer within %d ms", address,
                                timeout_ms);
                goto out;
            }
            if (r < 0) {
                st = ect__error_errno(ECT_ERR_IO, "%s: poll", address);
                goto out;
            }
        } else {
            st = ect__error_errno(ECT_ERR_IO, "%s: reading the answer", address);
            goto out;
        }
    }
    if (!head_done) {
        st = ect__error(ECT_ERR_PEER, "%s: the connection closed before the HTTP headers ended",
                        address);
        goto out;
    }
    size_t body = len - h.end;
    if (h.clen >= 0 && body != (size_t)h.clen) {
        st = ect__error(ECT_ERR_PEER, "%s: a body of %zu bytes where Content-Length said %lld",
                        address, body, h.clen);
        goto out;
    }
    memmove(buf, buf + h.end, body);
    buf[body] = '\0';
    *body_p = buf;
    *len_p = body;
    buf = NULL;
out:
    ect__free(buf);
    close(fd);
    return st;
}
