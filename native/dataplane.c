/* llmwatch.collectors.receivers.proxy.dataplane: the proxy's data plane in C (design record 0067).
 *
 * First milestone: the decision the data plane makes on a connection's first request head, and the
 * head it would send upstream. `plan_request` reads a head with llhttp (the parser the Python relay
 * runs through httptools, same version: native/llhttp/ORIGIN.md) and keeps it only if it is one of
 * the plain cases of 0067 step 2:
 *
 *   HTTP/1.1; GET, POST, PUT, PATCH, DELETE or OPTIONS; a body framed by Content-Length or none;
 *   no Transfer-Encoding, Upgrade or Expect; exactly one Host (a valid one where it is forwarded);
 *   an origin-form target whose path holds no dot, percent or backslash; CRLF line ends, no
 *   obs-fold; within proxy.max_header_bytes / proxy.max_headers and the whole-head bound.
 *
 * For a plain head it builds the upstream's head exactly as `RelayServer.new_call` does (the path
 * prefix, the upstream's Host unless proxy.preserve_host, hop-by-hop headers dropped, the
 * configured Authorization when the client sent none). Everything else is "hand over": the Python
 * relay gets the connection with the bytes already read and answers it as it always has, so the
 * C side never answers a malformed or unusual request itself. Being conservative costs a call on
 * the slower engine; being wrong would forward what the Python relay refuses, so every check here
 * errs towards handing over, and tests/integration/test_native_heads.py compares the two engines' heads.
 *
 * Nothing here reads a byte it has not bounds-checked: every span comes from llhttp over the
 * caller's buffer, and the output's size is computed before it is written.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "llhttp.h"

enum { PLAN_MORE = 0, PLAN_PLAIN = 1, PLAN_HAND_OVER = 2 };

typedef struct {
    const char *at;
    size_t len;
} span;

/* What the proxy's configuration says about heads; the strings are the caller's and outlive it. */
typedef struct {
    span prefix;      /* the upstream URL's path, without a trailing slash ("" for none) */
    span host_header; /* "Host: <upstream host[:port]>\r\n" */
    span auth;        /* "Authorization: ...\r\n", or {NULL, 0} */
    int preserve_host;
    size_t max_line;    /* proxy.max_header_bytes */
    size_t max_headers; /* proxy.max_headers */
    size_t max_head;    /* relay.head_limit(...) */
} plan_cfg;

/* What llhttp reported of one head; `names`/`values` hold cfg.max_headers + 1 entries. */
typedef struct {
    const plan_cfg *cfg;
    span url;
    span *names;
    span *values;
    unsigned char *valued; /* whether a value callback came for header i */
    size_t n;
    int last; /* 0: nothing yet, 1: a name, 2: a value, 3: the URL */
    const char *bad;
} head_scan;

typedef struct {
    int verdict;
    const char *reason; /* why handed over (static text) */
    size_t consumed;    /* bytes of the head, for PLAIN */
    char *head;         /* malloc'd upstream head, for PLAIN */
    size_t head_len;
    int64_t content_length; /* -1: none */
    int keep_alive;
    const char *method;
    span path; /* the target's path (before '?') */
} plan_out;

/* Extends `s` by a piece that must follow it in the same buffer (llhttp reports one span per
 * callback over one buffer; anything else is a case this code does not claim to understand). */
static int extend(span *s, const char *at, size_t len) {
    if (s->at == NULL) {
        s->at = at;
        s->len = len;
        return 0;
    }
    if (at != s->at + s->len) return -1;
    s->len += len;
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t len) {
    head_scan *h = p->data;
    if (extend(&h->url, at, len) < 0) {
        h->bad = "the target came in pieces";
        return -1;
    }
    h->last = 3;
    if (h->url.len > h->cfg->max_line) {
        h->bad = "the target exceeds proxy.max_header_bytes";
        return -1;
    }
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len) {
    head_scan *h = p->data;
    if (h->last == 1) {
        if (extend(&h->names[h->n - 1], at, len) < 0) {
            h->bad = "a header name came in pieces";
            return -1;
        }
        return 0;
    }
    if (h->n >= h->cfg->max_headers) {
        h->bad = "more headers than proxy.max_headers";
        return -1;
    }
    h->names[h->n] = (span){at, len};
    h->values[h->n] = (span){NULL, 0};
    h->valued[h->n] = 0;
    h->n++;
    h->last = 1;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len) {
    head_scan *h = p->data;
    if (h->n == 0 || (h->last != 1 && h->last != 2)) {
        h->bad = "a header value without a name";
        return -1;
    }
    size_t i = h->n - 1;
    if (extend(&h->values[i], at, len) < 0) {
        h->bad = "a header value came in pieces";
        return -1;
    }
    h->valued[i] = 1;
    h->last = 2;
    /* relay.py's _Client.on_header: len(name) + len(value) + 2 > max_header_bytes is refused. */
    if (h->names[i].len + h->values[i].len + 2 > h->cfg->max_line) {
        h->bad = "a header line exceeds proxy.max_header_bytes";
        return -1;
    }
    return 0;
}

static int on_headers_complete(llhttp_t *p) {
    (void)p;
    return HPE_PAUSED; /* the head is all this reads; the body is the data plane's */
}

static llhttp_settings_t request_settings;

static int name_is(span name, const char *lower) {
    size_t len = strlen(lower);
    return name.len == len && strncasecmp(name.at, lower, len) == 0;
}

/* What new_call does with a request header (relay.py's _REQUEST_KINDS), plus the ones this side
 * hands over rather than implement. */
enum { K_PLAIN, K_HOP, K_HOST, K_AUTH, K_REFUSE };

static int header_kind(span name) {
    static const char *const hop[] = {
        "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
        "te",         "trailer",    "trailers",
    };
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        if (name_is(name, hop[i])) return K_HOP;
    if (name_is(name, "host")) return K_HOST;
    if (name_is(name, "authorization")) return K_AUTH;
    if (name_is(name, "transfer-encoding") || name_is(name, "upgrade") || name_is(name, "expect")) return K_REFUSE;
    return K_PLAIN; /* content-length included: llhttp has validated it and refuses a second one */
}

/* relay.py's _HOST_VALUE, as a full match:
 *   (?:\[[0-9A-Fa-f:.]+\]|[-A-Za-z0-9._~%!$&'()*+,;=]*)(?::[0-9]*)?   */
static int host_value_ok(span v) {
    size_t i = 0;
    if (v.len > 0 && v.at[0] == '[') {
        size_t j = 1;
        while (j < v.len && (strchr("0123456789abcdefABCDEF:.", v.at[j]) != NULL && v.at[j] != '\0')) j++;
        if (j > 1 && j < v.len && v.at[j] == ']') i = j + 1;
        /* else the first alternative fails, and the second matches nothing before the '[' */
    } else {
        while (i < v.len && v.at[i] != '\0' && strchr("-ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._~%!$&'()*+,;=", v.at[i]) != NULL) i++;
    }
    if (i < v.len && v.at[i] == ':') {
        i++;
        while (i < v.len && v.at[i] >= '0' && v.at[i] <= '9') i++;
    }
    return i == v.len;
}

static int method_known(uint8_t method) {
    switch (method) {
    case HTTP_GET:
    case HTTP_POST:
    case HTTP_PUT:
    case HTTP_PATCH:
    case HTTP_DELETE:
    case HTTP_OPTIONS:
        return 1;
    default:
        return 0;
    }
}

static void hand_over(plan_out *out, const char *why) {
    out->verdict = PLAN_HAND_OVER;
    out->reason = why;
}
#define HAND_OVER(why)                                                                                                 \
    do {                                                                                                               \
        hand_over(out, (why));                                                                                         \
        return;                                                                                                        \
    } while (0)

/* Where the head in data[0:len] ends (just past its CRLFCRLF), or 0 if it has not yet; -1 when its
 * lines do not all end in CRLF or one is folded (obs-fold): cases the Python relay reads. */
static long head_extent(const char *data, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (data[i] != '\n') continue;
        if (i == 0 || data[i - 1] != '\r') return -1;
        if (i + 1 < len && (data[i + 1] == ' ' || data[i + 1] == '\t')) return -1;
        if (i >= 3 && data[i - 2] == '\n' && data[i - 3] == '\r') return (long)(i + 1);
    }
    return 0;
}

/* The decision on the first request head in data[0:len], and the upstream's head for a plain one.
 * `h` is scratch space for cfg->max_headers + 1 headers. */
static void plan_request(const plan_cfg *cfg, head_scan *h, const char *data, size_t len, plan_out *out) {
    memset(out, 0, sizeof *out);
    out->content_length = -1;
    long end = head_extent(data, len);
    if (end < 0) HAND_OVER("a line not ended by CRLF, or a folded header line");
    size_t upto = end ? (size_t)end : len;
    if (upto > cfg->max_head) HAND_OVER("the head exceeds the whole-head bound");

    llhttp_t parser;
    llhttp_init(&parser, HTTP_REQUEST, &request_settings);
    h->cfg = cfg;
    h->url = (span){NULL, 0};
    h->n = 0;
    h->last = 0;
    h->bad = NULL;
    parser.data = h;
    llhttp_errno_t err = llhttp_execute(&parser, data, upto);
    if (h->bad != NULL) HAND_OVER(h->bad);
    if (err == HPE_OK) {
        if (end) HAND_OVER("llhttp did not end the head where its empty line is");
        out->verdict = PLAN_MORE;
        return;
    }
    if (err != HPE_PAUSED) HAND_OVER("llhttp refused the head");
    if (!end) HAND_OVER("llhttp ended the head before its empty line");

    if (parser.http_major != 1 || parser.http_minor != 1) HAND_OVER("not HTTP/1.1");
    if (!method_known(parser.method)) HAND_OVER("a method outside the plain set");
    if (parser.flags & (F_CHUNKED | F_TRANSFER_ENCODING | F_UPGRADE) || parser.upgrade)
        HAND_OVER("Transfer-Encoding or Upgrade");
    if (h->url.len == 0 || h->url.at[0] != '/') HAND_OVER("not an origin-form target");
    span path = h->url;
    const char *q = memchr(path.at, '?', path.len);
    if (q != NULL) path.len = (size_t)(q - path.at);
    for (size_t i = 0; i < path.len; i++)
        if (path.at[i] == '.' || path.at[i] == '%' || path.at[i] == '\\')
            HAND_OVER("a dot, percent or backslash in the path");

    const char *method = llhttp_method_name((llhttp_method_t)parser.method);
    size_t method_len = strlen(method);
    size_t size = method_len + 1 + cfg->prefix.len + h->url.len + sizeof " HTTP/1.1\r\n" - 1;
    if (!cfg->preserve_host) size += cfg->host_header.len;
    int hosts = 0, has_auth = 0;
    for (size_t i = 0; i < h->n; i++) {
        if (!h->valued[i]) HAND_OVER("a header without a value callback");
        int kind = header_kind(h->names[i]);
        if (kind == K_REFUSE) HAND_OVER("Transfer-Encoding, Upgrade or Expect");
        if (kind == K_HOP) continue;
        if (kind == K_HOST) {
            hosts++;
            if (!cfg->preserve_host) continue;
            if (!host_value_ok(h->values[i])) HAND_OVER("an invalid Host");
        }
        if (kind == K_AUTH) has_auth = 1;
        size += h->names[i].len + 2 + h->values[i].len + 2;
    }
    if (hosts != 1) HAND_OVER("not exactly one Host");
    int add_auth = !has_auth && cfg->auth.at != NULL;
    if (add_auth) size += cfg->auth.len;
    size += 2;

    char *buf = malloc(size), *w = buf;
    if (buf == NULL) HAND_OVER("out of memory");
#define PUT(p, n)                                                                                                      \
    do {                                                                                                               \
        memcpy(w, (p), (n));                                                                                           \
        w += (n);                                                                                                      \
    } while (0)
    PUT(method, method_len);
    PUT(" ", 1);
    PUT(cfg->prefix.at, cfg->prefix.len);
    PUT(h->url.at, h->url.len);
    PUT(" HTTP/1.1\r\n", 11);
    if (!cfg->preserve_host) PUT(cfg->host_header.at, cfg->host_header.len);
    for (size_t i = 0; i < h->n; i++) {
        int kind = header_kind(h->names[i]);
        if (kind == K_HOP || (kind == K_HOST && !cfg->preserve_host)) continue;
        PUT(h->names[i].at, h->names[i].len);
        PUT(": ", 2);
        PUT(h->values[i].at, h->values[i].len);
        PUT("\r\n", 2);
    }
    if (add_auth) PUT(cfg->auth.at, cfg->auth.len);
    PUT("\r\n", 2);
#undef PUT
    if ((size_t)(w - buf) != size) { /* cannot happen; refuse rather than send a wrong head */
        free(buf);
        HAND_OVER("internal: head size mismatch");
    }
    out->verdict = PLAN_PLAIN;
    out->consumed = (size_t)end;
    out->head = buf;
    out->head_len = size;
    out->content_length = (parser.flags & F_CONTENT_LENGTH) ? (int64_t)parser.content_length : -1;
    out->keep_alive = llhttp_should_keep_alive(&parser);
    out->method = method;
    out->path = path;
}

/* --- the response head -------------------------------------------------------------------------
 *
 * What `_Upstream._head` and `_Upstream._respond` do with an upstream's answer to a plain request
 * (HTTP/1.1, not HEAD): 1xx heads skipped, the final head checked against the same limits and
 * rules (502 when it fails them: the answer side cannot be handed over), and the head the client
 * gets built the same way, with the body's framing. Unlike the request side there is no third
 * way out, so this must be exactly what the Python relay does, and test_native_heads.py checks it
 * in both directions. */

enum { RESP_MORE = 0, RESP_HEAD = 1, RESP_INVALID = 2 };
enum { FRAME_LENGTH = 1, FRAME_CHUNKED = 2, FRAME_CLOSE = 3, FRAME_NONE = 4 };

typedef struct {
    int verdict;
    size_t consumed; /* bytes of the upstream's heads (1xx included) */
    char *head;      /* malloc'd head for the client */
    size_t head_len;
    int framing;
    int64_t content_length;
    int upstream_keep_alive;
    int client_keep_alive;
    int status;
    int reusable; /* whether the upstream connection may carry another call (nothing after a bodiless answer) */
} resp_out;

typedef struct {
    head_scan h;
    int bad_reason;
    int status;
    int interim;
    int keep_alive;
} resp_scan;

static int on_status(llhttp_t *p, const char *at, size_t len) {
    resp_scan *r = p->data;
    /* relay.py's on_status: a reason with control bytes (RFC 9112 §4) other than HTAB is refused. */
    if (len == 2 && at[0] == 'O' && at[1] == 'K') return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)at[i];
        if ((c <= 0x08) || (c >= 0x0a && c <= 0x1f) || c == 0x7f) {
            r->bad_reason = 1;
            return -1;
        }
    }
    return 0;
}

static int on_response_headers_complete(llhttp_t *p) {
    resp_scan *r = p->data;
    int status = llhttp_get_status_code(p);
    if (status < 100) {
        r->h.bad = "a status code under 100";
        return -1;
    }
    if (status < 200) {
        r->interim = 1;
        return 0;
    }
    r->status = status;
    r->keep_alive = llhttp_should_keep_alive(p);
    return 0;
}

static llhttp_settings_t response_settings;

/* Python's bytes.strip(): ASCII whitespace at both ends. */
static span py_strip(span v) {
    static const char ws[] = " \t\n\r\x0b\x0c";
    while (v.len && memchr(ws, v.at[0], sizeof ws - 1)) v.at++, v.len--;
    while (v.len && memchr(ws, v.at[v.len - 1], sizeof ws - 1)) v.len--;
    return v;
}

static int all_digits(const char *at, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (at[i] < '0' || at[i] > '9') return 0;
    return 1;
}

/* relay.py's head_end: just past the first empty line (CRLF or bare LF line ends), or 0. */
static size_t response_head_end(const char *buf, size_t len) {
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n') continue;
        if (buf[i + 1] == '\n') return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
    }
    return 0;
}

static void plan_response(const plan_cfg *cfg, head_scan *scratch, const char *data, size_t len, int keep_alive,
                          int closing, resp_out *out) {
    memset(out, 0, sizeof *out);
    out->content_length = -1;
    size_t at = 0;
    char *head = NULL; /* the final head, its bare LFs made CRLF */
    size_t head_len = 0;
    resp_scan r;
    for (;;) {
        size_t end = response_head_end(data + at, len - at);
        if (end == 0 || end > cfg->max_head) {
            out->verdict = (len - at > cfg->max_head || end > cfg->max_head) ? RESP_INVALID : RESP_MORE;
            return;
        }
        const char *raw = data + at;
        if (raw[0] == '\r' || raw[0] == '\n') {
            out->verdict = RESP_INVALID;
            return;
        }
        size_t lfs = 0, crlfs = 0;
        for (size_t i = 0; i < end; i++)
            if (raw[i] == '\n') {
                lfs++;
                if (i > 0 && raw[i - 1] == '\r') crlfs++;
            }
        head = malloc(end + (lfs - crlfs) + 1);
        if (head == NULL) {
            out->verdict = RESP_INVALID;
            return;
        }
        head_len = 0;
        for (size_t i = 0; i < end; i++) { /* _BARE_LF.sub(b"\r\n", head) */
            if (raw[i] == '\n' && (i == 0 || raw[i - 1] != '\r')) head[head_len++] = '\r';
            head[head_len++] = raw[i];
        }
        llhttp_t parser;
        llhttp_init(&parser, HTTP_RESPONSE, &response_settings);
        memset(&r, 0, sizeof r);
        r.h = *scratch;
        r.h.cfg = cfg;
        r.h.url = (span){NULL, 0};
        r.h.n = 0;
        r.h.last = 0;
        r.h.bad = NULL;
        parser.data = &r;
        llhttp_errno_t err = llhttp_execute(&parser, head, head_len);
        at += end;
        if (err != HPE_OK || r.h.bad != NULL || r.bad_reason) {
            free(head);
            out->verdict = RESP_INVALID;
            return;
        }
        if (!r.interim) break;
        free(head); /* a 1xx (103 Early Hints): not relayed; the final answer follows */
        head = NULL;
    }
    if (r.status == 0) {
        free(head);
        out->verdict = RESP_INVALID;
        return;
    }
    /* The status line after its version, as received (llhttp took one SP after the version). */
    const char *eol = NULL, *sp = NULL;
    for (size_t i = 0; i + 1 < head_len; i++)
        if (head[i] == '\r' && head[i + 1] == '\n') {
            eol = head + i;
            break;
        }
    if (eol != NULL) sp = memchr(head, ' ', (size_t)(eol - head));
    if (sp == NULL) { /* llhttp requires both; refuse rather than guess */
        free(head);
        out->verdict = RESP_INVALID;
        return;
    }
    span status_rest = {sp + 1, (size_t)(eol + 2 - (sp + 1))};

    head_scan *h = &r.h;
    int te = 0, cl = 0;
    span cl_value = {NULL, 0};
    size_t size = 9 + status_rest.len;
    for (size_t i = 0; i < h->n; i++) {
        if (!h->valued[i]) {
            free(head);
            out->verdict = RESP_INVALID; /* cannot happen after llhttp's checks; refuse rather than guess */
            return;
        }
        span name = h->names[i], value = h->values[i];
        if (name_is(name, "transfer-encoding")) {
            span v = py_strip(value);
            if (te || !(v.len == 7 && strncasecmp(v.at, "chunked", 7) == 0)) {
                free(head);
                out->verdict = RESP_INVALID; /* only a lone `chunked` frames a body that can be ended exactly */
                return;
            }
            te = 1;
        } else if (header_kind(name) == K_HOP || name_is(name, "upgrade")) {
            continue;
        } else if (name_is(name, "content-length")) {
            size_t trimmed = value.len;
            while (trimmed && (value.at[trimmed - 1] == ' ' || value.at[trimmed - 1] == '\t')) trimmed--;
            if (!all_digits(value.at, value.len) && !all_digits(value.at, trimmed)) {
                free(head);
                out->verdict = RESP_INVALID;
                return;
            }
            cl = 1;
            cl_value = (span){value.at, trimmed};
        }
        size += name.len + 2 + value.len + 2;
    }
    int status = r.status, upstream_keep_alive = r.keep_alive, client_keep_alive = keep_alive;
    int framing;
    out->reusable = 1;
    if (status == 204 || status == 304) {
        framing = FRAME_NONE;
        if (at < len) out->reusable = 0; /* bytes after an answer without a body: not to be trusted */
    } else if (te) {
        framing = FRAME_CHUNKED;
    } else if (cl) {
        framing = FRAME_LENGTH;
        int64_t n = 0;
        for (size_t i = 0; i < cl_value.len; i++) {
            if (n > (INT64_MAX - 9) / 10) { /* Python's int() has no bound; llhttp refuses above 2^64 */
                free(head);
                out->verdict = RESP_INVALID;
                return;
            }
            n = n * 10 + (cl_value.at[i] - '0');
        }
        out->content_length = n;
    } else {
        framing = FRAME_CLOSE;
        upstream_keep_alive = 0;
        client_keep_alive = 0;
    }
    if (closing) client_keep_alive = 0;
    if (!client_keep_alive) size += sizeof "Connection: close\r\n" - 1;
    size += 2;
    char *buf = malloc(size), *w = buf;
    if (buf == NULL) {
        free(head);
        out->verdict = RESP_INVALID;
        return;
    }
    memcpy(w, "HTTP/1.1 ", 9), w += 9;
    memcpy(w, status_rest.at, status_rest.len), w += status_rest.len;
    for (size_t i = 0; i < h->n; i++) {
        span name = h->names[i], value = h->values[i];
        if (!name_is(name, "transfer-encoding") && (header_kind(name) == K_HOP || name_is(name, "upgrade"))) continue;
        memcpy(w, name.at, name.len), w += name.len;
        memcpy(w, ": ", 2), w += 2;
        memcpy(w, value.at, value.len), w += value.len;
        memcpy(w, "\r\n", 2), w += 2;
    }
    if (!client_keep_alive) memcpy(w, "Connection: close\r\n", 19), w += 19;
    memcpy(w, "\r\n", 2), w += 2;
    free(head);
    if ((size_t)(w - buf) != size) {
        free(buf);
        out->verdict = RESP_INVALID;
        return;
    }
    out->verdict = RESP_HEAD;
    out->consumed = at;
    out->head = buf;
    out->head_len = size;
    out->framing = framing;
    out->upstream_keep_alive = upstream_keep_alive;
    out->client_keep_alive = client_keep_alive;
    out->status = status;
}

/* --- Python: Planner ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD plan_cfg cfg;
    PyObject *strings[3]; /* prefix, host_header, auth (or NULL): cfg's spans point into them */
    head_scan scan;
} Planner;

static void Planner_dealloc(Planner *self) {
    for (int i = 0; i < 3; i++) Py_XDECREF(self->strings[i]);
    PyMem_Free(self->scan.names);
    PyMem_Free(self->scan.values);
    PyMem_Free(self->scan.valued);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Planner_init(Planner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"prefix",  "host_header", "authorization", "preserve_host", "max_header_bytes",
                             "max_headers", "max_head", NULL};
    PyObject *prefix, *host_header, *auth;
    int preserve_host;
    Py_ssize_t max_line, max_headers, max_head;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$SSOpnnn", kwlist, &prefix, &host_header, &auth, &preserve_host,
                                     &max_line, &max_headers, &max_head))
        return -1;
    if (auth != Py_None && !PyBytes_Check(auth)) {
        PyErr_SetString(PyExc_TypeError, "authorization must be bytes or None");
        return -1;
    }
    if (max_line < 2 || max_headers < 1 || max_head < 1 || max_headers > 1 << 20) {
        PyErr_SetString(PyExc_ValueError, "max_header_bytes, max_headers and max_head must be positive");
        return -1;
    }
    if (self->scan.names != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Planner is initialised once");
        return -1;
    }
    PyObject *strings[3] = {prefix, host_header, auth == Py_None ? NULL : auth};
    for (int i = 0; i < 3; i++) {
        Py_XINCREF(strings[i]);
        self->strings[i] = strings[i];
    }
    self->cfg.prefix = (span){PyBytes_AS_STRING(prefix), (size_t)PyBytes_GET_SIZE(prefix)};
    self->cfg.host_header = (span){PyBytes_AS_STRING(host_header), (size_t)PyBytes_GET_SIZE(host_header)};
    self->cfg.auth = auth == Py_None ? (span){NULL, 0} : (span){PyBytes_AS_STRING(auth), (size_t)PyBytes_GET_SIZE(auth)};
    self->cfg.preserve_host = preserve_host;
    self->cfg.max_line = (size_t)max_line;
    self->cfg.max_headers = (size_t)max_headers;
    self->cfg.max_head = (size_t)max_head;
    size_t n = (size_t)max_headers + 1;
    self->scan.names = PyMem_Calloc(n, sizeof(span));
    self->scan.values = PyMem_Calloc(n, sizeof(span));
    self->scan.valued = PyMem_Calloc(n, 1);
    if (self->scan.names == NULL || self->scan.values == NULL || self->scan.valued == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(plan_doc,
             "plan(data: bytes) -> tuple\n\n"
             "The decision on the first request head in `data`:\n"
             "(MORE,) when the head is not complete yet; (HAND_OVER, reason) when it is not a plain case;\n"
             "(PLAIN, upstream_head, head_length, content_length or -1, keep_alive, method, path).");

static PyObject *Planner_plan(Planner *self, PyObject *arg) {
    if (self->scan.names == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Planner not initialised");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    plan_out out;
    plan_request(&self->cfg, &self->scan, view.buf, (size_t)view.len, &out);
    PyObject *result;
    if (out.verdict == PLAN_MORE) {
        result = Py_BuildValue("(i)", PLAN_MORE);
    } else if (out.verdict == PLAN_HAND_OVER) {
        result = Py_BuildValue("(is)", PLAN_HAND_OVER, out.reason);
    } else {
        result = Py_BuildValue("(iy#nLNy#y#)", PLAN_PLAIN, out.head, (Py_ssize_t)out.head_len, (Py_ssize_t)out.consumed,
                               (long long)out.content_length, PyBool_FromLong(out.keep_alive), out.method,
                               (Py_ssize_t)strlen(out.method), out.path.at, (Py_ssize_t)out.path.len);
        free(out.head);
    }
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(respond_doc,
             "respond(data: bytes, keep_alive: bool, closing: bool) -> tuple\n\n"
             "The upstream's answer to a plain request, as the Python relay reads it:\n"
             "(MORE,) when its final head is not complete yet; (INVALID,) for a 502;\n"
             "(HEAD, client_head, consumed, framing, content_length or -1, upstream_keep_alive,\n"
             "client_keep_alive, status, reusable).");

static PyObject *Planner_respond(Planner *self, PyObject *args) {
    if (self->scan.names == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Planner not initialised");
        return NULL;
    }
    Py_buffer view;
    int keep_alive, closing;
    if (!PyArg_ParseTuple(args, "y*pp", &view, &keep_alive, &closing)) return NULL;
    resp_out out;
    plan_response(&self->cfg, &self->scan, view.buf, (size_t)view.len, keep_alive, closing, &out);
    PyObject *result;
    if (out.verdict != RESP_HEAD) {
        result = Py_BuildValue("(i)", out.verdict);
    } else {
        result = Py_BuildValue("(iy#niLNNiN)", RESP_HEAD, out.head, (Py_ssize_t)out.head_len, (Py_ssize_t)out.consumed,
                               out.framing, (long long)out.content_length, PyBool_FromLong(out.upstream_keep_alive),
                               PyBool_FromLong(out.client_keep_alive), out.status, PyBool_FromLong(out.reusable));
        free(out.head);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef Planner_methods[] = {
    {"plan", (PyCFunction)Planner_plan, METH_O, plan_doc},
    {"respond", (PyCFunction)Planner_respond, METH_VARARGS, respond_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PlannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "llmwatch.collectors.receivers.proxy.dataplane.Planner",
    .tp_doc = PyDoc_STR("The data plane's decision on a first request head, with the proxy's configuration."),
    .tp_basicsize = sizeof(Planner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Planner_init,
    .tp_dealloc = (destructor)Planner_dealloc,
    .tp_methods = Planner_methods,
};

/* --- Python: Front ----------------------------------------------------------------------------
 *
 * The data plane's front door, on its own thread: accepts on the proxy's listening socket, reads
 * each connection's first request head on raw epoll and, once `plan_request` has a verdict, hands
 * the connection, with the bytes read, to the Python relay (`RelayServer.adopt`). In this
 * milestone a plain head is handed over too (counted apart): forwarding it from C is the next
 * step (design record 0067, "What is left"). The thread touches no Python object: what it hands
 * over waits in a queue under a mutex, and an eventfd tells the event loop (`fileno()`), which
 * takes it with `take()`. A head not complete within proxy.header_timeout_s of the accept is handed
 * over as expired: the relay counts it and closes the connection, as it does its own. */

#define FRONT_READ 16384

enum { GIVE_HAND_OVER = 0, GIVE_PLAIN = 1, GIVE_EXPIRED = 2 };

typedef struct fconn {
    int fd;
    char *buf;
    size_t len, cap;
    double deadline;
    struct fconn *prev, *next;
} fconn;

typedef struct {
    int fd;
    char *buf;
    size_t len;
    int kind;
    double remaining; /* of the head deadline, when handed over */
} given;

typedef struct {
    PyObject_HEAD PyObject *planner; /* keeps cfg's strings alive */
    plan_cfg cfg;
    head_scan scan; /* the thread's own scratch */
    int listen_fd, epfd, stop_fd, ready_fd;
    double header_timeout;
    pthread_t thread;
    int started, stopped;
    fconn *conns; /* in accept order, so the oldest deadline is first */
    pthread_mutex_t lock;
    given *queue;
    size_t queued, queue_cap;
    unsigned long long accepted, plain, handed, expired, left, accept_pauses;
    double accept_resumes; /* 0: the listening socket is watched; else when to watch it again */
} Front;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fconn_unlink(Front *f, fconn *c) {
    if (c->prev) c->prev->next = c->next;
    else f->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static fconn *conns_tail(Front *f) {
    fconn *c = f->conns;
    while (c && c->next) c = c->next;
    return c;
}

/* The connection leaves the thread: queued for Python (its fd and bytes now Python's), or closed
 * when the queue cannot grow (out of memory: the client sees its connection closed). */
static void give(Front *f, fconn *c, int kind, double now) {
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    fconn_unlink(f, c);
    pthread_mutex_lock(&f->lock);
    if (f->queued == f->queue_cap) {
        size_t cap = f->queue_cap ? 2 * f->queue_cap : 64;
        given *q = realloc(f->queue, cap * sizeof *q);
        if (q == NULL) {
            pthread_mutex_unlock(&f->lock);
            close(c->fd);
            free(c->buf);
            free(c);
            return;
        }
        f->queue = q;
        f->queue_cap = cap;
    }
    double remaining = c->deadline - now;
    f->queue[f->queued++] = (given){c->fd, c->buf, c->len, kind, remaining > 0 ? remaining : 0};
    if (kind == GIVE_PLAIN) f->plain++;
    else if (kind == GIVE_EXPIRED) f->expired++;
    f->handed++;
    pthread_mutex_unlock(&f->lock);
    free(c);
    uint64_t one = 1;
    ssize_t w = write(f->ready_fd, &one, sizeof one);
    (void)w; /* an eventfd write fails only when its counter would overflow: it is then readable anyway */
}

static void drop(Front *f, fconn *c) {
    epoll_ctl(f->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    fconn_unlink(f, c);
    close(c->fd);
    free(c->buf);
    free(c);
    pthread_mutex_lock(&f->lock);
    f->left++;
    pthread_mutex_unlock(&f->lock);
}

static void front_accept(Front *f, double now) {
    for (int i = 0; i < 256; i++) { /* bounded per wake: the other connections get their turn */
        int fd = accept4(f->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Out of descriptors or memory: the connection stays in the backlog and the
                 * listening socket readable, and level-triggered epoll would spin on it. It is
                 * not watched for a second, as asyncio does (and the relay did). */
                epoll_ctl(f->epfd, EPOLL_CTL_DEL, f->listen_fd, NULL);
                f->accept_resumes = now + 1.0;
                pthread_mutex_lock(&f->lock);
                f->accept_pauses++;
                pthread_mutex_unlock(&f->lock);
            }
            return; /* else EAGAIN, or a connection that died in the backlog */
        }
        fconn *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->deadline = now + f->header_timeout;
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (epoll_ctl(f->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        fconn *tail = conns_tail(f);
        if (tail) tail->next = c, c->prev = tail;
        else f->conns = c;
        pthread_mutex_lock(&f->lock);
        f->accepted++;
        pthread_mutex_unlock(&f->lock);
    }
}

static void front_read(Front *f, fconn *c, double now) {
    if (c->cap - c->len < FRONT_READ) {
        size_t cap = c->cap ? c->cap * 2 : FRONT_READ;
        while (cap - c->len < FRONT_READ) cap *= 2;
        char *buf = realloc(c->buf, cap);
        if (buf == NULL) {
            drop(f, c);
            return;
        }
        c->buf = buf;
        c->cap = cap;
    }
    ssize_t n = read(c->fd, c->buf + c->len, FRONT_READ);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return;
        drop(f, c);
        return;
    }
    if (n == 0) {
        /* The client ended its side: with bytes read, the relay reads them and the end as it would
         * have; with none, there is nothing to answer. */
        if (c->len == 0) {
            drop(f, c);
            return;
        }
        give(f, c, GIVE_HAND_OVER, now);
        return;
    }
    c->len += (size_t)n;
    plan_out out;
    plan_request(&f->cfg, &f->scan, c->buf, c->len, &out);
    if (out.verdict == PLAN_MORE) return;
    if (out.verdict == PLAN_PLAIN) free(out.head);
    give(f, c, out.verdict == PLAN_PLAIN ? GIVE_PLAIN : GIVE_HAND_OVER, now);
}

static void *front_main(void *arg) {
    Front *f = arg;
    struct epoll_event events[128];
    for (;;) {
        double now = now_s();
        int wait_ms = 1000;
        double next = f->conns ? f->conns->deadline : 0;
        if (f->accept_resumes > 0 && (next == 0 || f->accept_resumes < next)) next = f->accept_resumes;
        if (next > 0) {
            double left = next - now;
            wait_ms = left <= 0 ? 0 : left * 1000 < 1000 ? (int)(left * 1000) + 1 : 1000;
        }
        int n = epoll_wait(f->epfd, events, 128, wait_ms);
        now = now_s();
        for (int i = 0; i < n; i++) {
            void *tag = events[i].data.ptr;
            if (tag == &f->stop_fd) return NULL;
            if (tag == &f->listen_fd) {
                front_accept(f, now);
                continue;
            }
            fconn *c = tag;
            /* A connection given away or dropped earlier in this batch cannot be named again: each
             * fd is in one event at most per epoll_wait, and it left epoll before it was freed. */
            front_read(f, c, now);
        }
        while (f->conns && f->conns->deadline <= now) give(f, f->conns, GIVE_EXPIRED, now);
        if (f->accept_resumes > 0 && f->accept_resumes <= now) {
            struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
            epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &lev);
            f->accept_resumes = 0;
        }
    }
}

static void Front_release(Front *f) {
    while (f->conns) drop(f, f->conns);
    for (size_t i = 0; i < f->queued; i++) {
        close(f->queue[i].fd);
        free(f->queue[i].buf);
    }
    f->queued = 0;
    free(f->queue);
    f->queue = NULL;
    f->queue_cap = 0;
    int *fds[] = {&f->epfd, &f->stop_fd, &f->ready_fd};
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
}

static PyObject *Front_stop(Front *self, PyObject *unused);

static void Front_dealloc(Front *self) {
    if (self->started && !self->stopped) {
        PyObject *r = Front_stop(self, NULL);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    Front_release(self);
    if (self->started) pthread_mutex_destroy(&self->lock);
    PyMem_Free(self->scan.names);
    PyMem_Free(self->scan.values);
    PyMem_Free(self->scan.valued);
    Py_XDECREF(self->planner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Front_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Front *self = (Front *)type->tp_alloc(type, 0);
    if (self) self->listen_fd = self->epfd = self->stop_fd = self->ready_fd = -1;
    return (PyObject *)self;
}

static int Front_init(Front *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"planner", "listen_fd", "header_timeout_s", NULL};
    PyObject *planner;
    int listen_fd;
    double header_timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "$O!id", kwlist, &PlannerType, &planner, &listen_fd, &header_timeout))
        return -1;
    if (self->planner != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Front is initialised once");
        return -1;
    }
    if (listen_fd < 0 || !(header_timeout > 0)) {
        PyErr_SetString(PyExc_ValueError, "listen_fd must be an open socket and header_timeout_s positive");
        return -1;
    }
    int flags = fcntl(listen_fd, F_GETFL);
    if (flags < 0 || !(flags & O_NONBLOCK)) {
        /* A blocking listener would leave the thread in accept() once the backlog is empty. */
        PyErr_SetString(PyExc_ValueError, "listen_fd must be an open, non-blocking listening socket");
        return -1;
    }
    Planner *pl = (Planner *)planner;
    if (pl->scan.names == NULL) {
        PyErr_SetString(PyExc_ValueError, "the Planner is not initialised");
        return -1;
    }
    Py_INCREF(planner);
    self->planner = planner;
    self->cfg = pl->cfg;
    size_t n = self->cfg.max_headers + 1;
    self->scan.names = PyMem_Calloc(n, sizeof(span));
    self->scan.values = PyMem_Calloc(n, sizeof(span));
    self->scan.valued = PyMem_Calloc(n, 1);
    if (!self->scan.names || !self->scan.values || !self->scan.valued) {
        PyErr_NoMemory();
        return -1;
    }
    self->listen_fd = listen_fd;
    self->header_timeout = header_timeout;
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    self->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    self->ready_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->epfd < 0 || self->stop_fd < 0 || self->ready_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &self->listen_fd};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &self->stop_fd};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0 ||
        epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->stop_fd, &sev) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static PyObject *Front_start(Front *self, PyObject *unused) {
    if (self->planner == NULL || self->started) {
        PyErr_SetString(PyExc_RuntimeError, "a Front starts once, after it is initialised");
        return NULL;
    }
    pthread_mutex_init(&self->lock, NULL);
    self->started = 1;
    int rc = pthread_create(&self->thread, NULL, front_main, self);
    if (rc != 0) {
        self->stopped = 1;
        errno = rc;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

static PyObject *Front_stop(Front *self, PyObject *unused) {
    if (!self->started || self->stopped) Py_RETURN_NONE;
    uint64_t one = 1;
    ssize_t w = write(self->stop_fd, &one, sizeof one);
    (void)w;
    Py_BEGIN_ALLOW_THREADS pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS self->stopped = 1;
    /* Connections still reading their first head are closed, as the relay closes idle ones. */
    while (self->conns) drop(self, self->conns);
    Py_RETURN_NONE;
}

static PyObject *Front_fileno(Front *self, PyObject *unused) { return PyLong_FromLong(self->ready_fd); }

static PyObject *Front_take(Front *self, PyObject *unused) {
    if (self->ready_fd < 0) return PyList_New(0);
    uint64_t count;
    ssize_t r = read(self->ready_fd, &count, sizeof count);
    (void)r; /* EAGAIN: nothing signalled since the last take, but the queue is read anyway */
    given *q = NULL;
    size_t n = 0;
    if (self->started) {
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
        Py_END_ALLOW_THREADS q = self->queue;
        n = self->queued;
        self->queue = NULL;
        self->queued = self->queue_cap = 0;
        pthread_mutex_unlock(&self->lock);
    }
    PyObject *list = PyList_New(0);
    for (size_t i = 0; i < n; i++) {
        PyObject *item = list ? Py_BuildValue("(iy#id)", q[i].fd, q[i].buf, (Py_ssize_t)q[i].len, q[i].kind, q[i].remaining) : NULL;
        if (item == NULL || PyList_Append(list, item) < 0) {
            /* Out of memory: what cannot be handed to Python is closed, never leaked. */
            Py_XDECREF(item);
            close(q[i].fd);
        } else {
            Py_DECREF(item);
        }
        free(q[i].buf);
    }
    free(q);
    if (list == NULL || PyErr_Occurred()) {
        Py_XDECREF(list);
        return NULL;
    }
    return list;
}

static PyObject *Front_stats(Front *self, PyObject *unused) {
    unsigned long long accepted = 0, left = 0, plain = 0, handed = 0, expired = 0, pauses = 0;
    if (self->started) {
        pthread_mutex_lock(&self->lock);
        accepted = self->accepted, left = self->left, plain = self->plain, handed = self->handed, expired = self->expired;
        pauses = self->accept_pauses;
        pthread_mutex_unlock(&self->lock);
    }
    return Py_BuildValue("{sKsKsKsKsKsKsO}", "accepted", accepted, "plain", plain, "handed", handed, "expired", expired,
                         "left", left, "accept_pauses", pauses, "running",
                         (self->started && !self->stopped) ? Py_True : Py_False);
}

static PyMethodDef Front_methods[] = {
    {"start", (PyCFunction)Front_start, METH_NOARGS, "Start the thread."},
    {"stop", (PyCFunction)Front_stop, METH_NOARGS,
     "Stop the thread and close the connections it still holds (the listening socket stays open)."},
    {"fileno", (PyCFunction)Front_fileno, METH_NOARGS, "An eventfd, readable when connections wait in take()."},
    {"take", (PyCFunction)Front_take, METH_NOARGS,
     "The connections handed over since the last call: [(fd, bytes_read, kind, head_seconds_left)]."},
    {"stats", (PyCFunction)Front_stats, METH_NOARGS, "Counts: accepted, plain, handed, expired, left, accept_pauses; running."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "llmwatch.collectors.receivers.proxy.dataplane.Front",
    .tp_doc = PyDoc_STR("Accepts and reads first heads on its own thread; hands connections to the Python relay."),
    .tp_basicsize = sizeof(Front),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = Front_new,
    .tp_init = (initproc)Front_init,
    .tp_dealloc = (destructor)Front_dealloc,
    .tp_methods = Front_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "llmwatch.collectors.receivers.proxy.dataplane",
    .m_doc = "The proxy's data plane in C (design record 0067): first milestone, the plain-head decision.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit_dataplane(void) {
    llhttp_settings_init(&request_settings);
    request_settings.on_url = on_url;
    request_settings.on_header_field = on_header_field;
    request_settings.on_header_value = on_header_value;
    request_settings.on_headers_complete = on_headers_complete;
    llhttp_settings_init(&response_settings);
    response_settings.on_status = on_status;
    response_settings.on_header_field = on_header_field;
    response_settings.on_header_value = on_header_value;
    response_settings.on_headers_complete = on_response_headers_complete;
    if (PyType_Ready(&PlannerType) < 0 || PyType_Ready(&FrontType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&PlannerType);
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(m, "Planner", (PyObject *)&PlannerType) < 0 ||
        PyModule_AddObject(m, "Front", (PyObject *)&FrontType) < 0 ||
        PyModule_AddIntConstant(m, "GIVE_HAND_OVER", GIVE_HAND_OVER) < 0 ||
        PyModule_AddIntConstant(m, "GIVE_PLAIN", GIVE_PLAIN) < 0 ||
        PyModule_AddIntConstant(m, "GIVE_EXPIRED", GIVE_EXPIRED) < 0 ||
        PyModule_AddIntConstant(m, "MORE", PLAN_MORE) < 0 || PyModule_AddIntConstant(m, "PLAIN", PLAN_PLAIN) < 0 ||
        PyModule_AddIntConstant(m, "HAND_OVER", PLAN_HAND_OVER) < 0 || PyModule_AddIntConstant(m, "HEAD", RESP_HEAD) < 0 ||
        PyModule_AddIntConstant(m, "INVALID", RESP_INVALID) < 0 ||
        PyModule_AddIntConstant(m, "FRAME_LENGTH", FRAME_LENGTH) < 0 ||
        PyModule_AddIntConstant(m, "FRAME_CHUNKED", FRAME_CHUNKED) < 0 ||
        PyModule_AddIntConstant(m, "FRAME_CLOSE", FRAME_CLOSE) < 0 || PyModule_AddIntConstant(m, "FRAME_NONE", FRAME_NONE) < 0 ||
        PyModule_AddStringConstant(m, "LLHTTP_VERSION", "9.4.3") < 0) {
        Py_DECREF(&PlannerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
