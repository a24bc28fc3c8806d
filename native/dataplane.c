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

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
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
    int length_zero; /* no Content-Length, or its value the one byte "0": relay.py's test for a head
                      * that is the whole request (`replay`); "00" is a body of 0 to it */
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
    span length_value = {NULL, 0};
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
        if (name_is(h->names[i], "content-length")) length_value = h->values[i];
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
    out->length_zero = length_value.at == NULL || (length_value.len == 1 && length_value.at[0] == '0');
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
 * The data plane's front door, on its own thread: accepts on the proxy's listening socket and
 * reads each connection's request heads on raw epoll. Once `plan_request` has a verdict:
 *
 * - without `forward` (what `proxy.engine: native` runs today), the connection is handed, with the
 *   bytes read, to the Python relay (`RelayServer.adopt`), plain heads too (counted apart);
 * - with `forward` (second milestone, not yet wired into serving: the ring that feeds finished
 *   calls to the control plane is what is left, design record 0067), a PLAIN request is forwarded
 *   from C: its Content-Length body read whole, a pooled keep-alive upstream connection, the
 *   answer read by `plan_response` and its body (length, chunked, close-delimited) relayed as it
 *   arrives, the relay's 502/504/408 answers (their bytes passed in from Python), and the
 *   connection's next request planned here again. Anything else is handed over with the bytes
 *   read, before a byte of that request has gone upstream.
 *
 * The thread touches no Python object: what it hands over waits in a queue under a mutex, and an
 * eventfd tells the event loop (`fileno()`), which takes it with `take()`. A head not complete
 * within proxy.header_timeout_s (from the accept, or from the first byte of a later request) is
 * handed over as expired: the relay counts it and closes the connection, as it does its own. */

#define FRONT_READ 16384
/* relay.py's constants, the defaults of `Front`'s keywords of the same meaning: `RelayServer` passes
 * its own (`native.forwarding`), so a test that changes one changes both engines. */
#define BODY_LIMIT (1 << 20)    /* _PENDING_LIMIT: a bigger body streams, in Python */
#define CLIENT_IDLE_S 75.0      /* _CLIENT_KEEPALIVE_S */
#define LINGER_S 5.0            /* _LINGER_S */
#define UPSTREAM_IDLE_S 4.0     /* _UPSTREAM_IDLE_S */
#define PEER_CHECK_IDLE_S 1.0   /* _PEER_CHECK_IDLE_S */
#define MAX_CHUNK_LINE 8192     /* relay.py's _MAX_CHUNK_LINE */
#define OUT_MARK (256 * 1024)   /* a client's unsent bytes above which its upstream is not read */

/* GIVE_UPSTREAM: an idle upstream connection, with its pool slot, to the relay while calls wait in
 * its pool (the one bound of proxy.max_connections for both engines, design record 0067). */
enum { GIVE_HAND_OVER = 0, GIVE_PLAIN = 1, GIVE_EXPIRED = 2, GIVE_UPSTREAM = 3 };
enum { TAG_CLIENT = 1, TAG_UPSTREAM = 2 };
/* A client connection's state: reading a head, reading a plain request's body, its call with the
 * upstream, closing after a 408 while it may still send (the relay's _linger), or closing once the
 * last answer is out. */
enum { C_HEAD = 0, C_BODY = 1, C_CALL = 2, C_LINGER = 3, C_CLOSING = 4 };
/* An upstream connection's: connecting, sending the request, reading the answer's head, its body. */
enum { U_CONNECTING = 0, U_HEAD = 1, U_LENGTH = 2, U_CHUNKED = 3, U_CLOSE = 4, U_IDLE = 5 };
/* The relay's answers, passed in from Python (their bodies say the upstream's name). */
enum { A_UNREACHABLE = 0, A_CLOSED = 1, A_INVALID = 2, A_TIMEOUT = 3, A_BODY_TIMEOUT = 4, A_COUNT = 5 };

typedef struct {
    char *p;
    size_t len, off, cap; /* bytes [off, len) not yet written */
} obuf;

/* What `Proxy._finish` needs of a call C forwarded on a route in capture.routes (design record 0067
 * step 3), kept while the call runs and queued in the ring when it ends: the same bytes and times
 * the relay appends to its `Exchange` (relay.py's `new_call`, `_Call.body_end`, `_respond`, `_capture`),
 * read into one by `native.NativeFront` on the event loop. Times are CLOCK_MONOTONIC, which is
 * Python's perf_counter on Linux, and CLOCK_REALTIME for the wall clock. */
enum { E_NONE = 0, E_UNAVAILABLE = 1, E_TIMEOUT = 2, E_INTERRUPTED = 3, E_BODY_TIMEOUT = 4, E_CLIENT_GONE = 5 };
/* The request body: not (yet) whole, kept, or over capture.max_body_bytes (the relay's note). */
enum { RB_NONE = 0, RB_KEPT = 1, RB_TOO_LARGE = 2 };
#define TAIL 64 /* relay.py's _tail: a body's last bytes past the cap, for stream_ended */

typedef struct rec {
    const char *method; /* llhttp's static name */
    char *path;         /* the target's path (before any '?'; a plain one has no percent) */
    size_t path_len;
    char *req_head; /* the client's request head as read, for the headers the Exchange reads */
    size_t req_head_len;
    char *req_body;
    size_t req_body_len;
    int req_body_state;
    double t0, started_at, t_end;
    int status;     /* the upstream's status; the relay's own answer's on an error */
    char *resp_head; /* the head the client got (the wanted response headers are read from it) */
    size_t resp_head_len;
    char *body; /* the response's payload (de-chunked) up to the cap, and the piece that crossed it */
    size_t body_len, body_cap;
    size_t *ends; /* cumulative offset after each piece, and when it arrived */
    double *times;
    size_t pieces, pieces_cap;
    int truncated;
    char tail[TAIL];
    size_t tail_len;
    int error;
    int broken; /* out of memory while it was kept: not queued (counted as the ring's loss) */
} rec;

struct fconn;

typedef struct uconn {
    int tag; /* TAG_UPSTREAM: first, as in fconn, so an epoll event names which */
    int fd;
    int state;
    int watched; /* the epoll events it is registered for (0: not registered) */
    struct fconn *c;
    int reused, heard, keep_alive, reusable;
    double idle_since;
    char *hbuf; /* the answer's head so far */
    size_t hlen, hcap;
    int64_t remaining;
    int cstate; /* the chunked framing: 0 size line, 1 data, 2 CRLF after data, 3 trailers */
    uint64_t chunk_left;
    char line[MAX_CHUNK_LINE + 1];
    size_t line_len;
    obuf out; /* the request, while the upstream does not take it whole */
    int paused; /* not read: its client has OUT_MARK unsent (counted in Front.paused) */
    struct uconn *next; /* the idle stack */
} uconn;

typedef struct fconn {
    int tag; /* TAG_CLIENT */
    int fd;
    int state;
    int watched;
    char *buf; /* bytes read from the client, from the current request's first byte */
    size_t len, cap;
    double deadline;
    /* the current plain call */
    char *uhead;
    size_t uhead_len, consumed;
    int64_t content_length;
    int keep_alive, replay, sent_head, client_keep_alive, done;
    int replan; /* bytes of a next request wait: planned by the loop, not from inside a finished call */
    uconn *up;
    rec *rec;  /* the current call's capture, on a route in capture.routes */
    int open;  /* a planned call not yet answered or ended: the client leaving now is counted */
    obuf out; /* bytes for the client not yet written */
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
    int kick_fd; /* written by Python when calls start waiting in the relay's pool: C's idle connections go to them */
    double header_timeout;
    pthread_t thread;
    int started, stopped;
    fconn *conns; /* every client connection the thread holds */
    pthread_mutex_t lock;
    given *queue;
    size_t queued, queue_cap;
    unsigned long long accepted, plain, handed, expired, left, accept_pauses;
    double accept_resumes; /* 0: the listening socket is watched; else when to watch it again */
    /* forwarding (all zero without `forward`) */
    int forward;
    struct sockaddr_storage upstream;
    socklen_t upstream_len;
    double connect_timeout, read_timeout, body_timeout;
    double client_idle, linger, upstream_idle, peer_check_idle; /* relay.py's constants (see BODY_LIMIT) */
    int64_t body_limit;
    /* The pool's one bound, shared with the relay's `_Pool` (design record 0067): `upstreams` counts
     * the upstream connections open or being opened by both engines, idle ones included, under
     * `lock`; a slot is taken by a check-and-increment there (`slot_take`, `Front.take_slot`), so
     * two takers never pass `max_connections` together. `relay_waiting`: calls wait in the relay's
     * pool for a slot; C then opens none itself, hands its idle connections to the relay, and wakes
     * Python when it gives one back. */
    long max_connections, upstreams;
    int relay_waiting;
    unsigned long long upstreams_handed;
    long paused; /* upstreams not read now: their client has OUT_MARK unsent (atomic, read by stats()) */
    /* Shutting down (`shutdown()`, atomic): the listener is no longer watched, connections between
     * calls are closed, a call in flight finishes and its connection closes after it (the relay's
     * `cleanup`); `held` counts the client connections the thread still holds (atomic). */
    int closing, door_closed;
    long held;
    uconn *idle;
    PyObject *answer_objs[A_COUNT];
    span answers[A_COUNT]; /* whole keep-alive answers: "HTTP/1.1 502 ...\r\n...\r\n\r\n{body}" */
    unsigned long long forwarded, gateway_errors, interrupted, body_timeouts, replayed, opened;
    /* The relay's proxy_errors of calls C ends: 502s, 504s, and clients gone mid-call whose call has
     * no record in the ring (one with a record is judged in Python: stream_ended). */
    unsigned long long unavailable, timeouts, disconnected, bad_requests;
    long in_flight; /* calls planned and not yet ended (the relay's in_flight gauge); atomic, read by Python */
    /* capture (empty `routes`: nothing kept) and the ring of finished calls, under `lock` */
    span *routes;
    size_t nroutes;
    PyObject *routes_obj;
    size_t max_body;
    rec **ring;
    size_t ring_cap, ring_head, ring_len;
    /* The bytes the ring's records hold, and their bound: a record of up to about twice
     * capture.max_body_bytes, 256 of them, could otherwise hold ~512 MiB while Python is behind. */
    size_t ring_held, ring_bytes;
    unsigned long long ring_full, captured;
    /* Connections ended while an epoll batch is handled are freed after it: a later event of the
     * same batch may name one (a client and its upstream each have events). */
    fconn *dead_c;
    uconn *dead_u;
} Front;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void count(Front *f, unsigned long long *counter) {
    pthread_mutex_lock(&f->lock);
    (*counter)++;
    pthread_mutex_unlock(&f->lock);
}

static void wake(Front *f) {
    uint64_t one = 1;
    ssize_t w = write(f->ready_fd, &one, sizeof one);
    (void)w; /* an eventfd write fails only when its counter would overflow: it is then readable anyway */
}

/* A counter that Python reads into the proxy's metrics: told at once, as the relay counts at once. */
static void count_wake(Front *f, unsigned long long *counter) {
    count(f, counter);
    wake(f);
}

/* A pool slot for a connection C opens: none while the relay has calls waiting for one (they came
 * first: C hands its call to that queue). */
static int slot_take(Front *f) {
    pthread_mutex_lock(&f->lock);
    int ok = !f->relay_waiting && f->upstreams < f->max_connections;
    if (ok) f->upstreams++;
    pthread_mutex_unlock(&f->lock);
    return ok;
}

/* A slot given back: the relay's next waiter may take it (`_Pool.slot_freed`, on the event loop). */
static void slot_give(Front *f) {
    pthread_mutex_lock(&f->lock);
    f->upstreams--;
    int waiting = f->relay_waiting;
    pthread_mutex_unlock(&f->lock);
    if (waiting) wake(f);
}

/* A call of `c` begins (1) or ends (0): the in-flight count follows, read at scrape time. */
static void set_open(Front *f, fconn *c, int open) {
    if (open != c->open) __atomic_add_fetch(&f->in_flight, open ? 1 : -1, __ATOMIC_RELAXED);
    c->open = open;
}

/* Back-pressure on an upstream (its client has OUT_MARK unsent), counted as it changes. */
static void set_paused(Front *f, uconn *u, int paused) {
    if (paused != u->paused) __atomic_add_fetch(&f->paused, paused ? 1 : -1, __ATOMIC_RELAXED);
    u->paused = paused;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void rec_free(rec *r) {
    if (r == NULL) return;
    free(r->path);
    free(r->req_head);
    free(r->req_body);
    free(r->resp_head);
    free(r->body);
    free(r->ends);
    free(r->times);
    free(r);
}

static char *dup_bytes(const char *at, size_t len) {
    char *p = malloc(len ? len : 1);
    if (p != NULL && len) memcpy(p, at, len);
    return p;
}

/* Whether the path is one of capture.routes (relay.py: `path in self.routes`; a plain path has no
 * percent, so the relay's str is its bytes read as latin-1, as the routes are given here). */
static int route_captured(const Front *f, span path) {
    for (size_t i = 0; i < f->nroutes; i++)
        if (f->routes[i].len == path.len && memcmp(f->routes[i].at, path.at, path.len) == 0) return 1;
    return 0;
}

/* A planned call's record (NULL: not captured, or out of memory, which loses only its capture). */
static rec *rec_new(Front *f, const plan_out *out, const char *head) {
    if (!route_captured(f, out->path)) return NULL;
    rec *r = calloc(1, sizeof *r);
    if (r == NULL) return NULL;
    r->t0 = now_s(); /* the relay's new_call: when the head is read whole */
    r->started_at = wall_s();
    r->method = out->method;
    r->path = dup_bytes(out->path.at, out->path.len);
    r->path_len = out->path.len;
    r->req_head = dup_bytes(head, out->consumed);
    r->req_head_len = out->consumed;
    if (r->path == NULL || r->req_head == NULL) {
        rec_free(r);
        return NULL;
    }
    return r;
}

/* The request's body, once whole (`_Call.body_end`; over the cap: `new_call`'s note, nothing kept). */
static void rec_request_body(Front *f, fconn *c) {
    rec *r = c->rec;
    if (r == NULL || r->req_body_state != RB_NONE) return; /* a replayed call keeps what it had */
    size_t len = c->content_length > 0 ? (size_t)c->content_length : 0;
    if (len > f->max_body) {
        r->req_body_state = RB_TOO_LARGE;
        return;
    }
    r->req_body = dup_bytes(c->buf + c->consumed, len);
    if (r->req_body == NULL) r->broken = 1;
    r->req_body_len = len;
    r->req_body_state = RB_KEPT;
}

/* A piece of the response's payload, as relay.py's `_capture`: kept while the total is within the
 * cap (the piece that crosses it too, and the call is then truncated), past it only the last bytes. */
static void rec_capture(Front *f, rec *r, const char *data, size_t len) {
    if (r == NULL || r->broken) return;
    if (r->body_len <= f->max_body) {
        if (r->body_cap - r->body_len < len) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap - r->body_len < len) cap *= 2;
            char *p = realloc(r->body, cap);
            if (p == NULL) {
                r->broken = 1;
                return;
            }
            r->body = p;
            r->body_cap = cap;
        }
        if (r->pieces == r->pieces_cap) {
            size_t cap = r->pieces_cap ? r->pieces_cap * 2 : 16;
            size_t *ends = realloc(r->ends, cap * sizeof *ends);
            if (ends != NULL) r->ends = ends;
            double *times = realloc(r->times, cap * sizeof *times);
            if (times != NULL) r->times = times;
            if (ends == NULL || times == NULL) {
                r->broken = 1;
                return;
            }
            r->pieces_cap = cap;
        }
        memcpy(r->body + r->body_len, data, len);
        r->body_len += len;
        r->ends[r->pieces] = r->body_len;
        r->times[r->pieces] = now_s();
        r->pieces++;
        if (r->body_len > f->max_body) r->truncated = 1;
        return;
    }
    /* _tail: data[-64:] if len(data) >= 64 else (kept + data)[-64:] */
    if (len >= TAIL) {
        memcpy(r->tail, data + len - TAIL, TAIL);
        r->tail_len = TAIL;
    } else {
        size_t keep = r->tail_len + len > TAIL ? TAIL - len : r->tail_len;
        memmove(r->tail, r->tail + r->tail_len - keep, keep);
        memcpy(r->tail + keep, data, len);
        r->tail_len = keep + len;
    }
}

/* The call's record, ended (`error`, E_NONE for a whole answer), joins the ring for Python; a full
 * ring drops it and counts it: the call was relayed, only its capture is lost. Python is woken when
 * the ring was empty (it drains the whole ring each time). */
/* The bytes a record holds, for the ring's byte bound. */
static size_t rec_size(const rec *r) {
    return sizeof *r + r->path_len + r->req_head_len + r->req_body_len + r->resp_head_len + r->body_cap +
           r->pieces_cap * (sizeof *r->ends + sizeof *r->times);
}

static void rec_finish(Front *f, fconn *c, int error) {
    rec *r = c->rec;
    if (r == NULL) return;
    c->rec = NULL;
    r->t_end = now_s();
    if (error != E_NONE) r->error = error;
    int woke = 0;
    size_t size = rec_size(r);
    pthread_mutex_lock(&f->lock);
    if (r->broken || f->ring_len == f->ring_cap || f->ring_held + size > f->ring_bytes) {
        f->ring_full++;
        if (r->error == E_CLIENT_GONE) f->disconnected++; /* no Exchange will be judged: counted as the relay does without one */
        pthread_mutex_unlock(&f->lock);
        rec_free(r);
        wake(f);
        return;
    }
    woke = f->ring_len == 0;
    f->ring[(f->ring_head + f->ring_len) % f->ring_cap] = r;
    f->ring_len++;
    f->ring_held += size;
    f->captured++;
    pthread_mutex_unlock(&f->lock);
    if (woke) wake(f);
}

static void fconn_unlink(Front *f, fconn *c) {
    if (c->prev) c->prev->next = c->next;
    else f->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    /* the last one gone while shutting down: Python stops waiting (`NativeFront.stop`) */
    if (__atomic_sub_fetch(&f->held, 1, __ATOMIC_RELAXED) == 0 && __atomic_load_n(&f->closing, __ATOMIC_RELAXED))
        wake(f);
}

/* Registers `fd` for `events` (0: not at all). Level-triggered: a socket whose bytes this side
 * does not want now is left out of epoll, never registered and ignored (it would wake the loop
 * again and again). */
static void watch(Front *f, int fd, int *watched, uint32_t events, void *tag) {
    if (events == (uint32_t)*watched) return;
    struct epoll_event ev = {.events = events, .data.ptr = tag};
    if (events == 0) epoll_ctl(f->epfd, EPOLL_CTL_DEL, fd, NULL);
    else epoll_ctl(f->epfd, *watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    *watched = (int)events;
}

static void obuf_free(obuf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

static int obuf_pending(const obuf *b) { return b->len > b->off; }

static int obuf_add(obuf *b, const char *data, size_t len) {
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->cap - b->len < len) {
        if (b->off) { /* compact first */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->cap - b->len < len) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap - b->len < len) cap *= 2;
            char *p = realloc(b->p, cap);
            if (p == NULL) return -1;
            b->p = p;
            b->cap = cap;
        }
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}

/* Writes what `b` holds, then `data`, to `fd`, keeping what the socket does not take: 0, or -1
 * when the peer is gone (or memory is). */
static int send_or_keep(int fd, obuf *b, const char *data, size_t len) {
    while (obuf_pending(b)) {
        ssize_t w = send(fd, b->p + b->off, b->len - b->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return len ? obuf_add(b, data, len) : 0;
            return -1;
        }
        b->off += (size_t)w;
    }
    while (len) {
        ssize_t w = send(fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return obuf_add(b, data, len);
            return -1;
        }
        data += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Ends a connection's life: its tag is cleared (a later event naming it is skipped) and it is freed
 * by `reap` after the batch. */
/* `a` then `d` in one sendmsg where nothing waits before them (an answer's head and its first body
 * bytes leave in one write, one packet, as the relay writes them); what is not taken is kept. */
static int send2_or_keep(int fd, obuf *b, const char *a, size_t alen, const char *d, size_t dlen) {
    if (obuf_pending(b) || alen == 0 || dlen == 0)
        return (send_or_keep(fd, b, a, alen) < 0 || send_or_keep(fd, b, d, dlen) < 0) ? -1 : 0;
    struct iovec iov[2] = {{(void *)a, alen}, {(void *)d, dlen}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    ssize_t w;
    do w = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        w = 0;
    }
    size_t sent = (size_t)w;
    if (sent < alen) return (send_or_keep(fd, b, a + sent, alen - sent) < 0 || send_or_keep(fd, b, d, dlen) < 0) ? -1 : 0;
    return send_or_keep(fd, b, d + (sent - alen), dlen - (sent - alen));
}

static void fconn_free(Front *f, fconn *c) {
    rec_free(c->rec);
    c->rec = NULL;
    free(c->buf);
    c->buf = NULL;
    free(c->uhead);
    c->uhead = NULL;
    obuf_free(&c->out);
    c->tag = 0;
    c->next = f->dead_c;
    f->dead_c = c;
}

static void reap(Front *f) {
    while (f->dead_c) {
        fconn *c = f->dead_c;
        f->dead_c = c->next;
        free(c);
    }
    while (f->dead_u) {
        uconn *u = f->dead_u;
        f->dead_u = u->next;
        free(u);
    }
}

/* Room for one more in the queue for Python; called with `lock` held. */
static int queue_room(Front *f) {
    if (f->queued < f->queue_cap) return 0;
    size_t cap = f->queue_cap ? 2 * f->queue_cap : 64;
    given *q = realloc(f->queue, cap * sizeof *q);
    if (q == NULL) return -1;
    f->queue = q;
    f->queue_cap = cap;
    return 0;
}

/* The connection leaves the thread: queued for Python (its fd and bytes now Python's), or closed
 * when the queue cannot grow (out of memory: the client sees its connection closed). */
static void give(Front *f, fconn *c, int kind, double now) {
    rec_free(c->rec); /* the relay reads the call again from its first byte, and keeps its own Exchange */
    c->rec = NULL;
    set_open(f, c, 0);
    watch(f, c->fd, &c->watched, 0, c);
    fconn_unlink(f, c);
    pthread_mutex_lock(&f->lock);
    if (queue_room(f) < 0) {
        pthread_mutex_unlock(&f->lock);
        close(c->fd);
        fconn_free(f, c);
        return;
    }
    double remaining = kind == GIVE_EXPIRED ? 0 : c->deadline - now;
    f->queue[f->queued++] = (given){c->fd, c->buf, c->len, kind, remaining > 0 ? remaining : 0};
    c->buf = NULL; /* now the queue's */
    if (kind == GIVE_PLAIN) f->plain++;
    else if (kind == GIVE_EXPIRED) f->expired++;
    f->handed++;
    pthread_mutex_unlock(&f->lock);
    fconn_free(f, c);
    uint64_t one = 1;
    ssize_t w = write(f->ready_fd, &one, sizeof one);
    (void)w; /* an eventfd write fails only when its counter would overflow: it is then readable anyway */
}

/* `reset`: with SO_LINGER 0, so the client reads a reset, not an end (where a close would read as
 * the end of a close-delimited body). */
static void drop_reset(Front *f, fconn *c, int reset);

/* The struct's buffers freed and the struct on the dead list (reaped after the loop turn); its
 * descriptor is the caller's: closed (`upstream_free`) or handed to the relay (`upstream_hand`). */
static void upstream_retire(Front *f, uconn *u) {
    free(u->hbuf);
    u->hbuf = NULL;
    obuf_free(&u->out);
    u->tag = 0;
    u->next = f->dead_u;
    f->dead_u = u;
}

/* Frees the connection; its pool slot stays taken (the caller's to give or to pass on). */
static void upstream_free(Front *f, uconn *u) {
    set_paused(f, u, 0);
    watch(f, u->fd, &u->watched, 0, u);
    close(u->fd);
    upstream_retire(f, u);
}

static void upstream_close(Front *f, uconn *u) {
    upstream_free(f, u);
    slot_give(f);
}

static void drop_reset(Front *f, fconn *c, int reset) {
    /* The client left (or the connection failed) during its call: relay.py's `_client_gone`. */
    if (c->rec != NULL) rec_finish(f, c, E_CLIENT_GONE); /* judged in Python: a stream after [DONE] is whole */
    else if (c->open) count_wake(f, &f->disconnected);
    set_open(f, c, 0);
    if (c->up != NULL) { /* the upstream stops working for nobody */
        c->up->c = NULL;
        upstream_close(f, c->up);
        c->up = NULL;
    }
    watch(f, c->fd, &c->watched, 0, c);
    fconn_unlink(f, c);
    if (reset) {
        struct linger lg = {1, 0};
        setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(c->fd);
    fconn_free(f, c);
    count(f, &f->left);
}

static void drop(Front *f, fconn *c) { drop_reset(f, c, 0); }

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
                count(f, &f->accept_pauses);
            }
            return; /* else EAGAIN, or a connection that died in the backlog */
        }
        fconn *c = calloc(1, sizeof *c);
        if (c == NULL) {
            close(fd);
            continue;
        }
        c->tag = TAG_CLIENT;
        c->fd = fd;
        /* As asyncio does for every TCP transport: without it an answer written in two sends (a
         * 502's pieces, a head then a body) waits for the client's delayed ACK, 40 ms. */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->deadline = now + f->header_timeout;
        watch(f, fd, &c->watched, EPOLLIN | EPOLLRDHUP, c);
        if (!c->watched) {
            close(fd);
            free(c);
            continue;
        }
        c->next = f->conns;
        if (f->conns) f->conns->prev = c;
        f->conns = c;
        __atomic_add_fetch(&f->held, 1, __ATOMIC_RELAXED);
        count(f, &f->accepted);
    }
}

/* --- forwarding ------------------------------------------------------------------------------- */

static void call_start(Front *f, fconn *c, int fresh, double now);
static void client_plan(Front *f, fconn *c, double now);

/* The relay's answer `which` (502, 504 or 408) to the current call, whose head has not gone out. */
static int answer(Front *f, fconn *c, int which, int keep_alive) {
    span a = f->answers[which];
    const char *blank = NULL;
    for (size_t i = 0; i + 3 < a.len; i++)
        if (memcmp(a.at + i, "\r\n\r\n", 4) == 0) {
            blank = a.at + i + 2;
            break;
        }
    if (which != A_BODY_TIMEOUT) count(f, &f->gateway_errors);
    count_wake(f, which == A_BODY_TIMEOUT ? &f->body_timeouts : which == A_TIMEOUT ? &f->timeouts : &f->unavailable);
    if (c->rec != NULL) { /* the relay's answer is the call's (`relay_gateway_error`, `_body_expired`) */
        c->rec->status = which == A_BODY_TIMEOUT ? 408 : which == A_TIMEOUT ? 504 : 502;
        c->rec->error = which == A_BODY_TIMEOUT ? E_BODY_TIMEOUT : which == A_TIMEOUT ? E_TIMEOUT : E_UNAVAILABLE;
    }
    c->sent_head = 1;
    c->client_keep_alive = keep_alive;
    int failed;
    if (keep_alive || blank == NULL) {
        failed = send_or_keep(c->fd, &c->out, a.at, a.len);
    } else {
        /* _send_error's `Connection: close`, as its last header */
        size_t before = (size_t)(blank - a.at);
        char *whole = malloc(a.len + 19); /* one write */
        failed = whole == NULL;
        if (!failed) {
            memcpy(whole, a.at, before);
            memcpy(whole + before, "Connection: close\r\n", 19);
            memcpy(whole + before + 19, blank, a.len - before);
            failed = send_or_keep(c->fd, &c->out, whole, a.len + 19) < 0;
            free(whole);
        }
    }
    if (failed) { /* the call ended with its answer, as the relay's `response_done` after a write */
        rec_finish(f, c, E_NONE);
        set_open(f, c, 0);
        drop(f, c);
        return -1;
    }
    c->done = 1;
    return 0;
}

/* The upstream connection goes back to the idle stack, or is closed. */
/* While calls wait in the relay's pool for a slot, a kept-alive connection C has no call for goes
 * to them with its slot (`_Pool.adopt`), as the relay's `release` gives a freed connection to its
 * next waiter: kept alive, not closed and opened again. Returns whether it went. */
static int upstream_hand(Front *f, uconn *u) {
    pthread_mutex_lock(&f->lock);
    if (!f->relay_waiting || queue_room(f) < 0) {
        pthread_mutex_unlock(&f->lock);
        return 0;
    }
    watch(f, u->fd, &u->watched, 0, u);
    f->queue[f->queued++] = (given){u->fd, NULL, 0, GIVE_UPSTREAM, 0};
    f->upstreams_handed++;
    pthread_mutex_unlock(&f->lock);
    u->fd = -1; /* now the queue's */
    upstream_retire(f, u);
    wake(f);
    return 1;
}

static void upstream_release(Front *f, uconn *u, int reusable, double now) {
    u->c = NULL;
    if (!reusable) {
        upstream_close(f, u);
        return;
    }
    if (upstream_hand(f, u)) return;
    u->state = U_IDLE;
    u->reused = 1;
    u->idle_since = now;
    u->hlen = 0;
    /* watched for its close (or bytes nobody asked for: then it is not to be trusted) */
    watch(f, u->fd, &u->watched, EPOLLIN | EPOLLRDHUP, u);
    u->next = f->idle;
    f->idle = u;
}

/* Whether the upstream has closed (or reset) an idle connection the loop has not read the end of
 * yet (relay.py's peer_closed: TCP_INFO's state). */
static int peer_closed(int fd) {
    struct tcp_info info;
    socklen_t len = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) < 0 || len < 1) return 1;
    return info.tcpi_state != TCP_ESTABLISHED;
}

/* After an answer the client has whole (or is still being written): the next request, or the end. */
static void call_finished(Front *f, fconn *c, double now) {
    rec_finish(f, c, E_NONE);
    set_open(f, c, 0);
    free(c->uhead);
    c->uhead = NULL;
    c->sent_head = 0;
    c->done = 0;
    count(f, &f->forwarded);
    if (!c->client_keep_alive || __atomic_load_n(&f->closing, __ATOMIC_RELAXED)) {
        /* closed once its bytes are out (the whole body was read: nothing to linger for) */
        if (!obuf_pending(&c->out)) {
            drop(f, c);
            return;
        }
        c->state = C_CLOSING;
        c->deadline = now + f->client_idle;
        watch(f, c->fd, &c->watched, EPOLLOUT, c);
        return;
    }
    size_t used = c->consumed + (c->content_length > 0 ? (size_t)c->content_length : 0);
    memmove(c->buf, c->buf + used, c->len - used);
    c->len -= used;
    c->state = C_HEAD;
    c->deadline = now + (c->len ? f->header_timeout : f->client_idle);
    if (obuf_pending(&c->out)) { /* read again once the client has this answer */
        watch(f, c->fd, &c->watched, EPOLLOUT, c);
        return;
    }
    watch(f, c->fd, &c->watched, EPOLLIN | EPOLLRDHUP, c);
    c->replan = c->len > 0; /* pipelined: the next head is planned after the answer, by the loop */
}

/* The upstream failed before the answer's head went out: the relay's 502/504. */
static void call_failed(Front *f, fconn *c, int which, double now) {
    if (c->up != NULL) {
        c->up->c = NULL;
        upstream_close(f, c->up);
        c->up = NULL;
    }
    if (answer(f, c, which, c->keep_alive) < 0) return;
    watch(f, c->fd, &c->watched, obuf_pending(&c->out) ? EPOLLOUT : 0, c);
    call_finished(f, c, now);
}

/* The upstream broke off an answer whose head the client has: the client's is broken too. */
static void call_cut(Front *f, fconn *c, int reset) {
    count_wake(f, &f->interrupted);
    rec_finish(f, c, E_INTERRUPTED);
    set_open(f, c, 0);
    drop_reset(f, c, reset);
}

/* Relays `head` (if any) and `data` to the client; the upstream is not read while the client has
 * OUT_MARK unsent. */
static int to_client(Front *f, fconn *c, const char *head, size_t head_len, const char *data, size_t len) {
    if (send2_or_keep(c->fd, &c->out, head, head_len, data, len) < 0) return -1;
    if (obuf_pending(&c->out)) {
        watch(f, c->fd, &c->watched, EPOLLOUT | EPOLLRDHUP, c);
        if (c->out.len - c->out.off > OUT_MARK && c->up != NULL) {
            watch(f, c->up->fd, &c->up->watched, 0, c->up);
            set_paused(f, c->up, 1);
        }
    }
    return 0;
}

/* Reads the chunked framing in data[0:len] as `_chunked_body` does. Returns -1 on a framing fault,
 * else how many bytes belong to the answer (len, or where the terminal chunk's empty line ends). */
static long chunked_feed(Front *f, rec *r, uconn *u, const char *data, size_t len, int *ended) {
    size_t pos = 0;
    *ended = 0;
    while (pos < len) {
        if (u->cstate == 1) {
            size_t avail = len - pos;
            if ((uint64_t)avail > u->chunk_left + 1 && data[pos + u->chunk_left] == '\r' &&
                data[pos + u->chunk_left + 1] == '\n') {
                rec_capture(f, r, data + pos, (size_t)u->chunk_left); /* the chunk's content, as `_chunked_body` */
                pos += u->chunk_left + 2;
                u->cstate = 0;
            } else {
                size_t taken = (uint64_t)avail < u->chunk_left ? avail : (size_t)u->chunk_left;
                rec_capture(f, r, data + pos, taken);
                pos += taken;
                u->chunk_left -= taken;
                if (u->chunk_left == 0) u->cstate = 2;
            }
            continue;
        }
        const char *nl = memchr(data + pos, '\n', len - pos);
        if (nl == NULL) {
            size_t rest = len - pos;
            if (u->line_len + rest > MAX_CHUNK_LINE) return -1;
            memcpy(u->line + u->line_len, data + pos, rest);
            u->line_len += rest;
            break;
        }
        size_t piece = (size_t)(nl - (data + pos));
        const char *line = data + pos;
        size_t line_len = piece;
        char *joined = NULL;
        if (u->line_len) {
            joined = malloc(u->line_len + piece + 1);
            if (joined == NULL) return -1;
            memcpy(joined, u->line, u->line_len);
            memcpy(joined + u->line_len, data + pos, piece);
            line = joined;
            line_len = u->line_len + piece;
            u->line_len = 0;
        }
        pos += piece + 1;
        int bad = 0;
        if (u->cstate == 0) {
            /* A size line: `digits\r` (isalnum, all hex, no 0x) or _CHUNK_SIZE's
             * `([0-9A-Fa-f]{1,20})(?:;[^\n]*?)?[ \t]*\r`. */
            if (line_len == 0 || line[line_len - 1] != '\r') {
                bad = 1;
            } else {
                size_t n = line_len - 1, hex = 0;
                while (hex < n && ((line[hex] >= '0' && line[hex] <= '9') || (line[hex] >= 'a' && line[hex] <= 'f') ||
                                   (line[hex] >= 'A' && line[hex] <= 'F')))
                    hex++;
                int alnum = n > 0 && !(n > 1 && (line[1] == 'x' || line[1] == 'X'));
                for (size_t i = 0; alnum && i < n; i++)
                    if (!((line[i] >= '0' && line[i] <= '9') || (line[i] >= 'a' && line[i] <= 'z') ||
                          (line[i] >= 'A' && line[i] <= 'Z')))
                        alnum = 0;
                if (alnum) {
                    bad = hex != n; /* int(digits, 16) refuses a letter past f */
                } else if (hex == 0 || hex > 20) {
                    bad = 1;
                } else if (line[hex] != ';') {
                    for (size_t i = hex; i < n; i++)
                        if (line[i] != ' ' && line[i] != '\t') bad = 1;
                }
                if (!bad) {
                    uint64_t size = 0;
                    for (size_t i = 0; i < hex; i++) {
                        char ch = line[i];
                        unsigned d = ch <= '9' ? (unsigned)(ch - '0') : ch <= 'F' ? (unsigned)(ch - 'A' + 10) : (unsigned)(ch - 'a' + 10);
                        /* Python's int has no bound: a size past 2^64 reads as one no body ends */
                        size = size > (UINT64_MAX >> 4) ? UINT64_MAX : (size << 4) | d;
                    }
                    if (size) {
                        u->chunk_left = size;
                        u->cstate = 1;
                    } else {
                        u->cstate = 3;
                    }
                }
            }
        } else if (u->cstate == 2) {
            bad = !(line_len == 1 && line[0] == '\r'); /* chunk data longer than its size said */
            if (!bad) u->cstate = 0;
        } else if (line_len == 0 || (line_len == 1 && line[0] == '\r')) {
            free(joined);
            *ended = 1;
            return (long)pos; /* the empty line after the terminal chunk (and any trailers) */
        } else if (line_len > MAX_CHUNK_LINE) {
            bad = 1;
        } else {
            /* _TRAILER: [-!#$%&'*+.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r? */
            size_t i = 0;
            while (i < line_len && line[i] != '\0' && strchr("-!#$%&'*+.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", line[i]) != NULL) i++;
            if (i == 0 || i >= line_len || line[i] != ':') bad = 1;
            size_t stop = line_len;
            if (!bad && line[stop - 1] == '\r') stop--;
            for (i = i + 1; !bad && i < stop; i++) {
                unsigned char ch = (unsigned char)line[i];
                if (!(ch == '\t' || (ch >= 0x20 && ch <= 0x7e) || ch >= 0x80)) bad = 1;
            }
        }
        free(joined);
        if (bad) return -1;
    }
    return (long)len;
}

/* Bytes of the answer's body, in state U_LENGTH, U_CHUNKED or U_CLOSE; `head`: the client's head,
 * going out with them (a chunked head only with bytes whose framing reads right: else a 502). */
static void body_bytes(Front *f, uconn *u, const char *data, size_t len, const char *head, size_t head_len,
                       double now) {
    fconn *c = u->c;
    if (u->state == U_LENGTH) {
        int end = (uint64_t)len >= (uint64_t)u->remaining;
        if (len > (uint64_t)u->remaining) {
            len = (size_t)u->remaining; /* bytes past the end of the answer: not this client's */
            u->reusable = 0;
        }
        u->remaining -= (int64_t)len;
        if (len) rec_capture(f, c->rec, data, len);
        if ((head_len || len) && to_client(f, c, head, head_len, data, len) < 0) {
            drop(f, c);
            return;
        }
        if (end) {
            c->up = NULL;
            upstream_release(f, u, u->keep_alive && u->reusable, now);
            call_finished(f, c, now);
        }
        return;
    }
    if (u->state == U_CLOSE) {
        if (len) rec_capture(f, c->rec, data, len);
        if ((head_len || len) && to_client(f, c, head, head_len, data, len) < 0) drop(f, c);
        return;
    }
    int ended;
    long keep = chunked_feed(f, c->rec, u, data, len, &ended);
    if (keep < 0) {
        if (head_len) {
            call_failed(f, c, A_INVALID, now); /* the head has not gone out: a clean 502 */
        } else {
            call_cut(f, c, 0);
        }
        return;
    }
    if ((size_t)keep < len) u->reusable = 0; /* bytes past the end of the answer: never the client's */
    if ((head_len || keep) && to_client(f, c, head, head_len, data, (size_t)keep) < 0) {
        drop(f, c);
        return;
    }
    if (ended) {
        c->up = NULL;
        upstream_release(f, u, u->keep_alive && u->reusable, now);
        call_finished(f, c, now);
    }
}

static void upstream_head(Front *f, uconn *u, double now) {
    fconn *c = u->c;
    resp_out out;
    plan_response(&f->cfg, &f->scan, u->hbuf, u->hlen, c->keep_alive, 0, &out);
    if (out.verdict == RESP_MORE) return;
    if (out.verdict == RESP_INVALID) {
        call_failed(f, c, A_INVALID, now);
        return;
    }
    c->sent_head = 1;
    c->client_keep_alive = out.client_keep_alive;
    if (c->rec != NULL) { /* `_respond`: the status, and the head the wanted headers are read from */
        c->rec->status = out.status;
        free(c->rec->resp_head);
        c->rec->resp_head = dup_bytes(out.head, out.head_len);
        c->rec->resp_head_len = out.head_len;
        if (c->rec->resp_head == NULL) c->rec->broken = 1;
    }
    u->keep_alive = out.upstream_keep_alive;
    u->reusable = out.reusable;
    const char *rest = u->hbuf + out.consumed;
    size_t rest_len = u->hlen - out.consumed;
    switch (out.framing) {
    case FRAME_NONE:
        if (to_client(f, c, out.head, out.head_len, NULL, 0) < 0) {
            free(out.head);
            drop(f, c);
            return;
        }
        free(out.head);
        c->up = NULL;
        upstream_release(f, u, u->keep_alive && u->reusable, now);
        call_finished(f, c, now);
        return;
    case FRAME_LENGTH:
        u->state = U_LENGTH;
        u->remaining = out.content_length;
        break;
    case FRAME_CHUNKED:
        u->state = U_CHUNKED;
        break;
    default:
        u->state = U_CLOSE;
        break;
    }
    body_bytes(f, u, rest, rest_len, out.head, out.head_len, now);
    free(out.head);
}

static void upstream_event(Front *f, uconn *u, uint32_t events, double now) {
    fconn *c = u->c;
    if (c == NULL) { /* idle: closed by its server, or bytes nobody asked for */
        for (uconn **p = &f->idle; *p; p = &(*p)->next)
            if (*p == u) {
                *p = u->next;
                break;
            }
        upstream_close(f, u);
        return;
    }
    if (u->state == U_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
            call_failed(f, c, A_UNREACHABLE, now);
            return;
        }
        int one = 1;
        setsockopt(u->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        u->state = U_HEAD;
        c->deadline = now + f->read_timeout;
        if (send_or_keep(u->fd, &u->out, NULL, 0) < 0) {
            call_failed(f, c, A_CLOSED, now);
            return;
        }
        watch(f, u->fd, &u->watched, EPOLLIN | (obuf_pending(&u->out) ? EPOLLOUT : 0), u);
        return;
    }
    if ((events & EPOLLOUT) && obuf_pending(&u->out)) {
        if (send_or_keep(u->fd, &u->out, NULL, 0) < 0) {
            /* the upstream went away while it was sent the request: read what it said, if anything */
        } else {
            c->deadline = now + f->read_timeout; /* sending a body: the upstream is not silent */
        }
        if (!obuf_pending(&u->out)) watch(f, u->fd, &u->watched, EPOLLIN, u);
        if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    }
    char data[FRONT_READ];
    ssize_t n = read(u->fd, data, sizeof data);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        int reset = n < 0;
        if (!c->sent_head && u->reused && !u->heard && c->replay && u->hlen == 0) {
            /* A kept-alive connection that ended before a byte of the answer: its server most
             * likely closed it idle as this call was sent. Sent again, once, on a new connection,
             * as the relay does for an idempotent request without a body. */
            c->replay = 0;
            c->up = NULL;
            upstream_free(f, u); /* its slot goes to the new connection (the relay's `retry`) */
            count(f, &f->replayed);
            call_start(f, c, 1, now);
            return;
        }
        if (u->state == U_CLOSE && !reset) { /* the close is the end of this answer */
            c->up = NULL;
            upstream_close(f, u);
            call_finished(f, c, now);
            return;
        }
        if (!c->sent_head) {
            call_failed(f, c, A_CLOSED, now);
            return;
        }
        call_cut(f, c, u->state == U_CLOSE); /* in state U_CLOSE a reset: the body is cut short */
        return;
    }
    u->heard = 1;
    c->deadline = now + f->read_timeout;
    if (u->state == U_HEAD) {
        if (u->hcap - u->hlen < (size_t)n) {
            size_t cap = u->hcap ? u->hcap * 2 : FRONT_READ;
            while (cap - u->hlen < (size_t)n) cap *= 2;
            char *p = realloc(u->hbuf, cap);
            if (p == NULL) {
                call_failed(f, c, A_INVALID, now);
                return;
            }
            u->hbuf = p;
            u->hcap = cap;
        }
        memcpy(u->hbuf + u->hlen, data, (size_t)n);
        u->hlen += (size_t)n;
        upstream_head(f, u, now);
        return;
    }
    body_bytes(f, u, data, (size_t)n, NULL, 0, now);
}

/* The request is whole: an upstream connection (an idle one, or a new one within
 * proxy.max_connections; else handed over, nothing has been sent), and the request on it. */
static void call_start(Front *f, fconn *c, int fresh, double now) {
    uconn *u = NULL;
    while (!fresh && f->idle != NULL) {
        uconn *cand = f->idle;
        f->idle = cand->next;
        double idle_for = now - cand->idle_since;
        if (idle_for >= f->peer_check_idle && (idle_for > f->upstream_idle || peer_closed(cand->fd))) {
            upstream_close(f, cand); /* its server has closed it, or may as it is used */
            continue;
        }
        u = cand;
        break;
    }
    size_t body = c->content_length > 0 ? (size_t)c->content_length : 0;
    if (u == NULL) {
        /* `fresh`: a replayed call, which holds the slot of the connection it lost */
        if (!fresh && !slot_take(f)) {
            give(f, c, GIVE_PLAIN, now); /* the relay's pool queues it */
            return;
        }
        int fd = socket(f->upstream.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        u = fd < 0 ? NULL : calloc(1, sizeof *u);
        if (u == NULL) {
            if (fd >= 0) close(fd);
            slot_give(f);
            give(f, c, GIVE_PLAIN, now);
            return;
        }
        u->tag = TAG_UPSTREAM;
        u->fd = fd;
        count(f, &f->opened);
        c->up = u;
        u->c = c;
        c->state = C_CALL;
        watch(f, c->fd, &c->watched, EPOLLRDHUP, c); /* its leaving, not its bytes (see front_main) */
        if (obuf_add(&u->out, c->uhead, c->uhead_len) < 0 || obuf_add(&u->out, c->buf + c->consumed, body) < 0) {
            call_failed(f, c, A_UNREACHABLE, now);
            return;
        }
        int rc = connect(fd, (struct sockaddr *)&f->upstream, f->upstream_len);
        if (rc < 0 && errno != EINPROGRESS) {
            call_failed(f, c, A_UNREACHABLE, now);
            return;
        }
        u->state = U_CONNECTING;
        c->deadline = now + f->connect_timeout;
        watch(f, fd, &u->watched, EPOLLOUT, u);
        return;
    }
    c->up = u;
    u->c = c;
    u->state = U_HEAD;
    u->heard = 0;
    u->hlen = 0;
    u->cstate = 0;
    u->line_len = 0;
    u->chunk_left = 0;
    c->state = C_CALL;
    watch(f, c->fd, &c->watched, EPOLLRDHUP, c); /* its leaving, not its bytes (see front_main) */
    c->deadline = now + f->read_timeout;
    /* The head and the body in one write, as the relay sends them. */
    if (send2_or_keep(u->fd, &u->out, c->uhead, c->uhead_len, c->buf + c->consumed, body) < 0) {
        /* Its server closed it as this was sent: the read below says how (replay, or 502). */
    }
    watch(f, u->fd, &u->watched, EPOLLIN | (obuf_pending(&u->out) ? EPOLLOUT : 0), u);
}

/* Whether the Python relay's parser, fed the bytes that came after a complete request, refuses
 * them (llhttp's error or a header limit): it then answers that request with `Connection: close`
 * and reads nothing more (`_Client._reject`). A complete head, or one not complete yet within the
 * bounds, is judged after the answer, as a pipelined request. */
static int rest_refused(Front *f, const char *data, size_t len) {
    llhttp_t parser;
    llhttp_init(&parser, HTTP_REQUEST, &request_settings);
    head_scan *h = &f->scan;
    h->cfg = &f->cfg;
    h->url = (span){NULL, 0};
    h->n = 0;
    h->last = 0;
    h->bad = NULL;
    parser.data = h;
    llhttp_errno_t err = llhttp_execute(&parser, data, len);
    if (h->bad != NULL) return strstr(h->bad, "proxy.max_header") != NULL;
    if (err == HPE_PAUSED) return 0;
    if (err == HPE_OK) return len > f->cfg.max_head;
    return 1;
}

/* The bytes read so far make a head (or not yet): the verdict, and for a plain request its body. */
static void client_plan(Front *f, fconn *c, double now) {
    if (c->state == C_BODY) {
        if (c->len - c->consumed < (size_t)c->content_length) return;
        size_t used = c->consumed + (size_t)c->content_length;
        if (c->len > used && rest_refused(f, c->buf + used, c->len - used)) {
            c->keep_alive = 0;
            count_wake(f, &f->bad_requests); /* the relay's `_reject`: proxy_errors{bad_request} */
        }
        rec_request_body(f, c);
        call_start(f, c, 0, now);
        return;
    }
    plan_out out;
    plan_request(&f->cfg, &f->scan, c->buf, c->len, &out);
    if (out.verdict == PLAN_MORE) return;
    if (out.verdict != PLAN_PLAIN) {
        give(f, c, GIVE_HAND_OVER, now);
        return;
    }
    if (!f->forward || out.content_length > f->body_limit) {
        free(out.head);
        give(f, c, GIVE_PLAIN, now); /* a body over 1 MiB streams: the relay's */
        return;
    }
    free(c->uhead);
    c->uhead = out.head;
    c->uhead_len = out.head_len;
    set_open(f, c, 1);
    rec_free(c->rec);
    c->rec = rec_new(f, &out, c->buf);
    c->consumed = out.consumed;
    c->content_length = out.content_length;
    c->keep_alive = out.keep_alive;
    c->client_keep_alive = out.keep_alive;
    /* relay.py's call.replay: an idempotent method without a body (GET, PUT, DELETE, OPTIONS here) */
    /* relay.py's rule: a replayable method (_REPLAYABLE) whose head is the whole request, judged
     * on the Content-Length's text as the relay does (before, "00" counted as bodiless here) */
    c->replay = out.length_zero && strcmp(out.method, "POST") != 0 && strcmp(out.method, "PATCH") != 0;
    c->sent_head = 0;
    c->done = 0;
    if (out.content_length > 0 && c->len - c->consumed < (size_t)out.content_length) {
        c->state = C_BODY;
        c->deadline = now + f->body_timeout;
        return;
    }
    size_t used = c->consumed + (out.content_length > 0 ? (size_t)out.content_length : 0);
    if (c->len > used && rest_refused(f, c->buf + used, c->len - used)) {
        c->keep_alive = 0;
        count_wake(f, &f->bad_requests);
    }
    rec_request_body(f, c);
    call_start(f, c, 0, now);
}

static void client_read(Front *f, fconn *c, double now) {
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
    if (c->state == C_LINGER) { /* read and dropped until the client closes */
        c->len = 0;
        if (n == 0) drop(f, c);
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
    if (c->len == 0 && c->state == C_HEAD) c->deadline = now + f->header_timeout; /* a later request's first byte */
    c->len += (size_t)n;
    client_plan(f, c, now);
}

static void client_writable(Front *f, fconn *c, double now) {
    if (send_or_keep(c->fd, &c->out, NULL, 0) < 0) {
        drop(f, c);
        return;
    }
    if (obuf_pending(&c->out)) return;
    if (c->state == C_CLOSING) {
        drop(f, c);
        return;
    }
    if (c->state == C_LINGER) {
        shutdown(c->fd, SHUT_WR);
        watch(f, c->fd, &c->watched, EPOLLIN | EPOLLRDHUP, c);
        return;
    }
    if (c->state == C_CALL) {
        watch(f, c->fd, &c->watched, EPOLLRDHUP, c);
        uconn *u = c->up;
        if (u != NULL && u->state != U_CONNECTING && !u->watched) { /* back-pressure off */
            watch(f, u->fd, &u->watched, EPOLLIN | (obuf_pending(&u->out) ? EPOLLOUT : 0), u);
            set_paused(f, u, 0);
        }
        return;
    }
    watch(f, c->fd, &c->watched, EPOLLIN | EPOLLRDHUP, c);
    c->replan = c->len > 0;
    (void)now;
}

static void client_expired(Front *f, fconn *c, double now) {
    switch (c->state) {
    case C_HEAD:
        if (c->len == 0) drop(f, c); /* idle between requests */
        else give(f, c, GIVE_EXPIRED, now);
        return;
    case C_BODY:
        /* The relay's 408; the connection closes after it, the body's bytes being unframed. */
        if (answer(f, c, A_BODY_TIMEOUT, 0) < 0) return;
        rec_finish(f, c, E_NONE);
        set_open(f, c, 0);
        free(c->uhead);
        c->uhead = NULL;
        c->state = C_LINGER;
        c->deadline = now + f->linger;
        if (obuf_pending(&c->out)) { /* half-closed once the answer is out (client_writable) */
            watch(f, c->fd, &c->watched, EPOLLOUT, c);
            return;
        }
        shutdown(c->fd, SHUT_WR);
        watch(f, c->fd, &c->watched, EPOLLIN | EPOLLRDHUP, c);
        return;
    case C_CALL:
        if (!c->sent_head) {
            call_failed(f, c, A_TIMEOUT, now); /* connect or read deadline, before the head */
        } else {
            call_cut(f, c, c->up != NULL && c->up->state == U_CLOSE);
        }
        return;
    default:
        drop(f, c);
    }
}

static void *front_main(void *arg) {
    Front *f = arg;
    struct epoll_event events[128];
    for (;;) {
        double now = now_s();
        double next = 0;
        int replans = 0;
        for (fconn *c = f->conns; c; c = c->next) {
            if (next == 0 || c->deadline < next) next = c->deadline;
            replans |= c->replan;
        }
        if (f->accept_resumes > 0 && (next == 0 || f->accept_resumes < next)) next = f->accept_resumes;
        int wait_ms = 1000;
        if (next > 0) {
            double left = next - now;
            wait_ms = left <= 0 ? 0 : left * 1000 < 1000 ? (int)(left * 1000) + 1 : 1000;
        }
        if (replans) wait_ms = 0;
        int n = epoll_wait(f->epfd, events, 128, wait_ms);
        now = now_s();
        /* A connection freed while this batch is handled could be named by a later event of it:
         * each event is checked against the connections still held. */
        for (int i = 0; i < n; i++) {
            void *tag = events[i].data.ptr;
            if (tag == &f->stop_fd) return NULL;
            if (tag == &f->kick_fd) {
                uint64_t got;
                ssize_t r = read(f->kick_fd, &got, sizeof got);
                (void)r;
                if (__atomic_load_n(&f->closing, __ATOMIC_RELAXED) && !f->door_closed) {
                    /* Shutting down: no more accepts; a connection between calls (or reading a
                     * head, or lingering after a 408) is closed, as the relay closes its idle ones;
                     * calls in flight go on, their connections closed after them. */
                    f->door_closed = 1;
                    f->accept_resumes = 0;
                    epoll_ctl(f->epfd, EPOLL_CTL_DEL, f->listen_fd, NULL);
                    for (fconn *c = f->conns, *following; c; c = following) {
                        following = c->next;
                        if (c->state == C_HEAD || c->state == C_LINGER) drop(f, c);
                    }
                    if (__atomic_load_n(&f->held, __ATOMIC_RELAXED) == 0) wake(f);
                }
                /* Calls wait in the relay's pool: C's idle connections go to them, with their slots
                 * (`upstream_release`); without this a waiter sat out its connect timeout beside them. */
                while (f->idle != NULL) {
                    uconn *u = f->idle;
                    f->idle = u->next;
                    double idle_for = now - u->idle_since;
                    if (idle_for >= f->peer_check_idle && (idle_for > f->upstream_idle || peer_closed(u->fd))) {
                        upstream_close(f, u); /* as call_start judges it: its slot, not it, goes */
                        continue;
                    }
                    if (!upstream_hand(f, u)) { /* the relay waits no more (or out of memory): kept */
                        u->next = f->idle;
                        f->idle = u;
                        break;
                    }
                }
                continue;
            }
            if (tag == &f->listen_fd) {
                if (!f->door_closed) front_accept(f, now);
                continue;
            }
            if (*(int *)tag == 0) continue; /* ended earlier in this batch */
            if (*(int *)tag == TAG_UPSTREAM) {
                upstream_event(f, tag, events[i].events, now);
                continue;
            }
            fconn *c = tag;
            if (c->state == C_CALL && (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) {
                /* The client closed (or reset) its side during its call: the relay's
                 * connection_lost -> `_client_gone` (asyncio closes a transport at EOF): the
                 * upstream connection is dropped, the call counted or finished as gone. Before,
                 * C saw it only at its next write, or at the read deadline as an interruption. */
                drop(f, c);
                continue;
            }
            if (c->state == C_CALL || c->state == C_CLOSING || (events[i].events & EPOLLOUT)) {
                if (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) client_writable(f, c, now);
                continue;
            }
            client_read(f, c, now);
        }
        for (fconn *c = f->conns, *following; c; c = following) {
            following = c->next;
            if (c->deadline <= now) {
                client_expired(f, c, now);
            } else if (c->replan && c->tag) {
                c->replan = 0;
                client_plan(f, c, now);
            }
        }
        reap(f);
        if (f->accept_resumes > 0 && f->accept_resumes <= now) {
            struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &f->listen_fd};
            epoll_ctl(f->epfd, EPOLL_CTL_ADD, f->listen_fd, &lev);
            f->accept_resumes = 0;
        }
    }
}

static void Front_release(Front *f) {
    while (f->conns) drop(f, f->conns);
    while (f->idle) {
        uconn *u = f->idle;
        f->idle = u->next;
        upstream_close(f, u);
    }
    reap(f);
    for (size_t i = 0; i < f->queued; i++) {
        if (f->queue[i].kind == GIVE_UPSTREAM) f->upstreams--; /* never reached the relay: its slot is free */
        close(f->queue[i].fd);
        free(f->queue[i].buf);
    }
    f->queued = 0;
    free(f->queue);
    f->queue = NULL;
    f->queue_cap = 0;
    for (size_t i = 0; i < f->ring_len; i++) rec_free(f->ring[(f->ring_head + i) % f->ring_cap]);
    f->ring_len = f->ring_head = 0;
    int *fds[] = {&f->epfd, &f->stop_fd, &f->ready_fd, &f->kick_fd};
    for (int i = 0; i < 4; i++)
        if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
}

static PyObject *Front_stop(Front *self, PyObject *unused);

static void Front_dealloc(Front *self) {
    if (self->started && !self->stopped) {
        PyObject *r = Front_stop(self, NULL);
        Py_XDECREF(r);
        PyErr_Clear();
    }
    if (self->started) Front_release(self); /* the lock exists only once started */
    else {
        int *fds[] = {&self->epfd, &self->stop_fd, &self->ready_fd, &self->kick_fd};
        for (int i = 0; i < 4; i++) /* all four, as Front_release closes them once started */
            if (*fds[i] >= 0) close(*fds[i]), *fds[i] = -1;
    }
    if (self->started) pthread_mutex_destroy(&self->lock);
    PyMem_Free(self->scan.names);
    PyMem_Free(self->scan.values);
    PyMem_Free(self->scan.valued);
    Py_XDECREF(self->planner);
    for (int i = 0; i < A_COUNT; i++) Py_XDECREF(self->answer_objs[i]);
    if (!self->started)
        for (size_t i = 0; i < self->ring_len; i++) rec_free(self->ring[(self->ring_head + i) % self->ring_cap]);
    free(self->ring);
    PyMem_Free(self->routes);
    Py_XDECREF(self->routes_obj);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Front_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Front *self = (Front *)type->tp_alloc(type, 0);
    if (self) self->listen_fd = self->epfd = self->stop_fd = self->ready_fd = self->kick_fd = -1;
    return (PyObject *)self;
}

/* The forwarding settings: the upstream's numeric address, the deadlines, the pool's bound and the
 * relay's five answers (whole, as the relay sends them to a keep-alive client). */
static int Front_init_forward(Front *self, PyObject *upstream, double connect_timeout, double read_timeout,
                              double body_timeout, long max_connections, PyObject *answers) {
    const char *host;
    int port;
    if (!PyArg_ParseTuple(upstream, "si", &host, &port)) return -1;
    memset(&self->upstream, 0, sizeof self->upstream);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&self->upstream;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&self->upstream;
    if (port <= 0 || port > 65535) {
        PyErr_SetString(PyExc_ValueError, "the upstream's port must be 1-65535");
        return -1;
    }
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        self->upstream_len = sizeof *v4;
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        self->upstream_len = sizeof *v6;
    } else {
        PyErr_SetString(PyExc_ValueError, "the upstream must be a numeric address (resolved in Python)");
        return -1;
    }
    if (!(connect_timeout > 0 && read_timeout > 0 && body_timeout > 0) || max_connections < 1) {
        PyErr_SetString(PyExc_ValueError, "the deadlines must be positive and max_connections at least 1");
        return -1;
    }
    if (!PyTuple_Check(answers) || PyTuple_GET_SIZE(answers) != A_COUNT) {
        PyErr_SetString(PyExc_TypeError, "answers must be a tuple of five bytes: unreachable, closed, invalid, timeout, body timeout");
        return -1;
    }
    for (int i = 0; i < A_COUNT; i++) {
        PyObject *a = PyTuple_GET_ITEM(answers, i);
        if (!PyBytes_Check(a) || memmem(PyBytes_AS_STRING(a), (size_t)PyBytes_GET_SIZE(a), "\r\n\r\n", 4) == NULL) {
            PyErr_SetString(PyExc_TypeError, "each answer must be bytes: a head ended by an empty line, then its body");
            return -1;
        }
        Py_INCREF(a);
        self->answer_objs[i] = a;
        self->answers[i] = (span){PyBytes_AS_STRING(a), (size_t)PyBytes_GET_SIZE(a)};
    }
    self->connect_timeout = connect_timeout;
    self->read_timeout = read_timeout;
    self->body_timeout = body_timeout;
    self->max_connections = max_connections;
    self->forward = 1;
    return 0;
}

static int Front_init(Front *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"planner",          "listen_fd",       "header_timeout_s", "upstream",
                             "connect_timeout_s", "read_timeout_s", "body_timeout_s",   "max_connections",
                             "answers",          "routes",          "max_body_bytes",   "ring_capacity",
                             "client_keepalive_s", "linger_s",      "upstream_idle_s",  "peer_check_idle_s",
                             "pending_limit",    "ring_bytes",      NULL};
    PyObject *planner = NULL, *upstream = Py_None, *answers = Py_None, *routes = NULL;
    int listen_fd = -1;
    double header_timeout = 0, connect_timeout = 0, read_timeout = 0, body_timeout = 0;
    long max_connections = 0;
    Py_ssize_t max_body = 1048576, ring_capacity = 256, body_limit = BODY_LIMIT, ring_bytes = 64 << 20;
    double client_idle = CLIENT_IDLE_S, linger = LINGER_S, upstream_idle = UPSTREAM_IDLE_S;
    double peer_check_idle = PEER_CHECK_IDLE_S;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$O!idOdddlOO!nnddddnn", kwlist, &PlannerType, &planner, &listen_fd,
                                     &header_timeout, &upstream, &connect_timeout, &read_timeout, &body_timeout,
                                     &max_connections, &answers, &PyTuple_Type, &routes, &max_body, &ring_capacity,
                                     &client_idle, &linger, &upstream_idle, &peer_check_idle, &body_limit,
                                     &ring_bytes))
        return -1;
    if (!(client_idle > 0 && linger > 0 && upstream_idle > 0 && peer_check_idle >= 0) || body_limit < 0) {
        PyErr_SetString(PyExc_ValueError, "client_keepalive_s, linger_s and upstream_idle_s must be positive, "
                                          "peer_check_idle_s and pending_limit at least 0");
        return -1;
    }
    if (planner == NULL) { /* all keywords are optional to PyArg (forwarding's are): these three are not */
        PyErr_SetString(PyExc_TypeError, "planner, listen_fd and header_timeout_s are required");
        return -1;
    }
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
    self->client_idle = client_idle;
    self->linger = linger;
    self->upstream_idle = upstream_idle;
    self->peer_check_idle = peer_check_idle;
    self->body_limit = body_limit;
    if (upstream != Py_None &&
        Front_init_forward(self, upstream, connect_timeout, read_timeout, body_timeout, max_connections, answers) < 0)
        return -1;
    if (max_body < 0 || ring_capacity < 1 || ring_bytes < 0) {
        PyErr_SetString(PyExc_ValueError,
                        "max_body_bytes and ring_bytes must be at least 0 and ring_capacity at least 1");
        return -1;
    }
    if (routes != NULL && PyTuple_GET_SIZE(routes) > 0) { /* capture.routes, each as latin-1 bytes */
        Py_ssize_t n = PyTuple_GET_SIZE(routes);
        self->routes = PyMem_Calloc((size_t)n, sizeof(span));
        if (self->routes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *r = PyTuple_GET_ITEM(routes, i);
            if (!PyBytes_Check(r)) {
                PyErr_SetString(PyExc_TypeError, "routes must be a tuple of bytes");
                return -1;
            }
            self->routes[i] = (span){PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r)};
        }
        Py_INCREF(routes);
        self->routes_obj = routes;
        self->nroutes = (size_t)n;
    }
    self->max_body = (size_t)max_body;
    self->ring = calloc((size_t)ring_capacity, sizeof(rec *));
    if (self->ring == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->ring_cap = (size_t)ring_capacity;
    self->ring_bytes = (size_t)ring_bytes;
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
    self->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->epfd < 0 || self->stop_fd < 0 || self->ready_fd < 0 || self->kick_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &self->listen_fd};
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = &self->stop_fd};
    struct epoll_event kev = {.events = EPOLLIN, .data.ptr = &self->kick_fd};
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, listen_fd, &lev) < 0 ||
        epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->stop_fd, &sev) < 0 ||
        epoll_ctl(self->epfd, EPOLL_CTL_ADD, self->kick_fd, &kev) < 0) {
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
    /* Connections still reading a head are closed, as the relay closes idle ones; calls still
     * being forwarded are cut (after `shutdown()`, only those past proxy.shutdown_timeout_s). */
    while (self->conns) drop(self, self->conns);
    while (self->idle) {
        uconn *u = self->idle;
        self->idle = u->next;
        upstream_close(self, u);
    }
    reap(self);
    Py_RETURN_NONE;
}

static PyObject *Front_fileno(Front *self, PyObject *unused) { return PyLong_FromLong(self->ready_fd); }

/* Shutting down with a grace: see `closing`. Returns at once; `held()` falls to 0 as the calls in
 * flight end (the eventfd is written when it does), then `stop()` cuts what is left. */
static PyObject *Front_shutdown(Front *self, PyObject *unused) {
    __atomic_store_n(&self->closing, 1, __ATOMIC_RELAXED);
    if (self->kick_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(self->kick_fd, &one, sizeof one);
        (void)w;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_held(Front *self, PyObject *unused) {
    return PyLong_FromLong(__atomic_load_n(&self->held, __ATOMIC_RELAXED));
}

/* The pool's shared bound, from the relay's `_Pool` on the event loop (design record 0067). */
static PyObject *Front_take_slot(Front *self, PyObject *unused) {
    if (!self->forward) {
        PyErr_SetString(PyExc_RuntimeError, "a Front that does not forward keeps no pool");
        return NULL;
    }
    if (self->started) pthread_mutex_lock(&self->lock);
    int ok = self->upstreams < self->max_connections;
    if (ok) self->upstreams++;
    int kick = !ok && !self->relay_waiting;
    if (!ok) self->relay_waiting = 1; /* C now opens none, and hands its idle connections over */
    if (self->started) pthread_mutex_unlock(&self->lock);
    if (kick && self->kick_fd >= 0) {
        uint64_t one = 1;
        ssize_t w = write(self->kick_fd, &one, sizeof one);
        (void)w;
    }
    return PyBool_FromLong(ok);
}

static PyObject *Front_give_slot(Front *self, PyObject *unused) {
    if (!self->forward) {
        PyErr_SetString(PyExc_RuntimeError, "a Front that does not forward keeps no pool");
        return NULL;
    }
    if (self->started) pthread_mutex_lock(&self->lock);
    if (self->upstreams > 0) self->upstreams--;
    if (self->started) pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

/* No call waits in the relay's pool any more: C may open connections again. */
static PyObject *Front_relay_served(Front *self, PyObject *unused) {
    if (self->started) pthread_mutex_lock(&self->lock);
    self->relay_waiting = 0;
    if (self->started) pthread_mutex_unlock(&self->lock);
    Py_RETURN_NONE;
}

static PyObject *Front_in_flight(Front *self, PyObject *unused) {
    return PyLong_FromLong(__atomic_load_n(&self->in_flight, __ATOMIC_RELAXED));
}

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
            if (q[i].kind == GIVE_UPSTREAM) { /* its slot is free */
                pthread_mutex_lock(&self->lock);
                self->upstreams--;
                pthread_mutex_unlock(&self->lock);
            }
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


static PyObject *bytes_or_none(const char *p, size_t len) {
    if (p == NULL) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(p, (Py_ssize_t)len);
}

/* One record as the tuple `native.NativeFront` reads into an Exchange. */
static PyObject *rec_tuple(const rec *r) {
    PyObject *chunks = PyList_New((Py_ssize_t)r->pieces), *ends = PyList_New((Py_ssize_t)r->pieces),
             *times = PyList_New((Py_ssize_t)r->pieces);
    if (chunks == NULL || ends == NULL || times == NULL) goto fail;
    size_t start = 0;
    for (size_t i = 0; i < r->pieces; i++) {
        PyObject *c = PyBytes_FromStringAndSize(r->body + start, (Py_ssize_t)(r->ends[i] - start));
        PyObject *e = PyLong_FromSize_t(r->ends[i]);
        PyObject *t = PyFloat_FromDouble(r->times[i]);
        if (c == NULL || e == NULL || t == NULL) {
            Py_XDECREF(c);
            Py_XDECREF(e);
            Py_XDECREF(t);
            goto fail;
        }
        PyList_SET_ITEM(chunks, (Py_ssize_t)i, c);
        PyList_SET_ITEM(ends, (Py_ssize_t)i, e);
        PyList_SET_ITEM(times, (Py_ssize_t)i, t);
        start = r->ends[i];
    }
    PyObject *req_body = r->req_body_state == RB_KEPT ? bytes_or_none(r->req_body, r->req_body_len) : (Py_INCREF(Py_None), Py_None);
    PyObject *resp_head = bytes_or_none(r->resp_head, r->resp_head_len);
    PyObject *item = NULL;
    if (req_body != NULL && resp_head != NULL)
        item = Py_BuildValue("(sN(dd)y#OOiONNNOy#di)", r->method, PyUnicode_DecodeLatin1(r->path, (Py_ssize_t)r->path_len, NULL),
                             r->t0, r->started_at, r->req_head, (Py_ssize_t)r->req_head_len, req_body,
                             r->req_body_state == RB_TOO_LARGE ? Py_True : Py_False, r->status, resp_head, chunks, ends,
                             times, r->truncated ? Py_True : Py_False, r->tail, (Py_ssize_t)r->tail_len, r->t_end,
                             r->error);
    else {
        Py_DECREF(chunks);
        Py_DECREF(ends);
        Py_DECREF(times);
    }
    Py_XDECREF(req_body);
    Py_XDECREF(resp_head);
    return item; /* N: the three lists are the tuple's (or freed with it on failure) */
fail:
    Py_XDECREF(chunks);
    Py_XDECREF(ends);
    Py_XDECREF(times);
    return NULL;
}

static PyObject *Front_drain(Front *self, PyObject *unused) {
    rec **taken = NULL;
    size_t n = 0;
    unsigned long long counts[7] = {0};
    if (self->started && self->ring != NULL) {
        Py_BEGIN_ALLOW_THREADS pthread_mutex_lock(&self->lock);
        Py_END_ALLOW_THREADS n = self->ring_len;
        taken = n ? malloc(n * sizeof *taken) : NULL;
        if (taken == NULL) n = 0; /* out of memory: left in the ring for the next drain */
        for (size_t i = 0; i < n; i++) {
            taken[i] = self->ring[(self->ring_head + i) % self->ring_cap];
            self->ring_held -= rec_size(taken[i]);
        }
        self->ring_head = (self->ring_head + n) % self->ring_cap;
        self->ring_len -= n;
        counts[0] = self->unavailable, counts[1] = self->timeouts, counts[2] = self->interrupted;
        counts[3] = self->body_timeouts, counts[4] = self->disconnected, counts[5] = self->bad_requests;
        counts[6] = self->ring_full;
        pthread_mutex_unlock(&self->lock);
    }
    PyObject *list = PyList_New(0);
    for (size_t i = 0; i < n; i++) {
        PyObject *item = list ? rec_tuple(taken[i]) : NULL;
        if (item == NULL || PyList_Append(list, item) < 0) Py_CLEAR(list); /* the rest is freed, not leaked */
        Py_XDECREF(item);
        rec_free(taken[i]);
    }
    free(taken);
    if (list == NULL) return NULL;
    return Py_BuildValue("(N(KKKKKKK))", list, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5],
                         counts[6]);
}

static PyObject *Front_stats(Front *self, PyObject *unused) {
    unsigned long long accepted = 0, left = 0, plain = 0, handed = 0, expired = 0, pauses = 0;
    unsigned long long forwarded = 0, gateway = 0, interrupted = 0, body_timeouts = 0, replayed = 0, opened = 0;
    unsigned long long ring_full = 0, captured = 0, disconnected = 0, upstreams_handed = 0;
    long upstreams = 0;
    if (self->started) {
        pthread_mutex_lock(&self->lock);
        accepted = self->accepted, left = self->left, plain = self->plain, handed = self->handed, expired = self->expired;
        pauses = self->accept_pauses;
        forwarded = self->forwarded, gateway = self->gateway_errors, interrupted = self->interrupted;
        body_timeouts = self->body_timeouts, replayed = self->replayed, opened = self->opened;
        ring_full = self->ring_full, captured = self->captured, disconnected = self->disconnected;
        upstreams = self->upstreams, upstreams_handed = self->upstreams_handed;
        pthread_mutex_unlock(&self->lock);
    }
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKslsKslsO}", "accepted", accepted, "plain", plain, "handed", handed,
                         "expired", expired, "left", left, "accept_pauses", pauses, "forwarded", forwarded,
                         "gateway_errors", gateway, "interrupted", interrupted, "body_timeouts", body_timeouts,
                         "replayed", replayed, "upstream_connections", opened, "captured", captured, "ring_full",
                         ring_full, "disconnected", disconnected, "upstreams_open", upstreams, "upstreams_handed",
                         upstreams_handed, "upstreams_paused", __atomic_load_n(&self->paused, __ATOMIC_RELAXED), "running",
                         (self->started && !self->stopped) ? Py_True : Py_False);
}

static PyMethodDef Front_methods[] = {
    {"start", (PyCFunction)Front_start, METH_NOARGS, "Start the thread."},
    {"stop", (PyCFunction)Front_stop, METH_NOARGS,
     "Stop the thread and close the connections it still holds (the listening socket stays open)."},
    {"fileno", (PyCFunction)Front_fileno, METH_NOARGS, "An eventfd, readable when connections wait in take()."},
    {"take", (PyCFunction)Front_take, METH_NOARGS,
     "The connections handed over since the last call: [(fd, bytes_read, kind, head_seconds_left)]."},
    {"in_flight", (PyCFunction)Front_in_flight, METH_NOARGS, "Calls C has planned and not yet ended."},
    {"shutdown", (PyCFunction)Front_shutdown, METH_NOARGS,
     "Accept no more, close the connections between calls, let calls in flight finish (their connections then "
     "close); returns at once."},
    {"held", (PyCFunction)Front_held, METH_NOARGS, "Client connections the thread holds."},
    {"take_slot", (PyCFunction)Front_take_slot, METH_NOARGS,
     "A slot of the pool's one bound (proxy.max_connections, both engines) for a connection the relay opens: "
     "True, taken; False, none free (C then opens none and hands its idle connections to the relay until "
     "relay_served())."},
    {"give_slot", (PyCFunction)Front_give_slot, METH_NOARGS, "The relay closed a connection: its slot is free."},
    {"relay_served", (PyCFunction)Front_relay_served, METH_NOARGS, "No call waits in the relay's pool any more."},
    {"drain", (PyCFunction)Front_drain, METH_NOARGS,
     "The finished calls C forwarded on a captured route since the last call, oldest first, as tuples: (method, path, "
     "(t0, started_at), request_head, request_body or None, request_too_large, status, response_head or None, chunks, "
     "chunk_ends, chunk_times, truncated, tail, t_end, error); and the running counts (unavailable, timeouts, "
     "interrupted, body_timeouts, disconnected, bad_requests, ring_full)."},
    {"stats", (PyCFunction)Front_stats, METH_NOARGS, "Counts: accepted, plain, handed, expired, left, accept_pauses, forwarded (calls answered in C), "
     "gateway_errors, interrupted, body_timeouts, replayed, upstream_connections (opened by C), upstreams_open (the pool's "
     "slots taken, both engines), upstreams_handed (idle connections given to the relay's waiters), upstreams_paused (not "
     "read now: back-pressure); running."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "llmwatch.collectors.receivers.proxy.dataplane.Front",
    .tp_doc = PyDoc_STR("Accepts and reads heads on its own thread; forwards plain calls (with `upstream`) or hands "
              "connections to the Python relay."),
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
        PyModule_AddIntConstant(m, "GIVE_UPSTREAM", GIVE_UPSTREAM) < 0 ||
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
