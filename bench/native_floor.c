/* The floor under a relay written outside the Python interpreter: what a C relay on raw epoll
 * costs here per call, parsing both heads with llhttp and deciding nothing. Not a proxy; a
 * measuring stick beside `bench/relay_floor.py` (the same relay in Python on uvloop) and nginx,
 * for design record 0065 ("Seventh look"). Built and run by `bench/native_floor.py`.
 *
 * The same shape as relay_floor.py: each client connection gets its own keep-alive upstream
 * connection; bytes go from one to the other as they arrive (one write per read). The client's
 * bytes go through one llhttp request parser per connection (message begin, URL, one callback
 * per header field and value, headers complete, body, message complete); an upstream read that
 * starts a response ("HTTP/") gets a fresh llhttp response parser over its head. Nothing is done
 * with what is parsed. Single-threaded, level-triggered epoll; a write the kernel takes only in
 * part is held and finished on EPOLLOUT. It serves a client that sends one request at a time and
 * waits for its answer, as the benchmarks' clients do.
 *
 *     native_floor proxy --upstream http://127.0.0.1:PORT --listen 127.0.0.1:PORT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "llhttp.h"

#define READ_SIZE 65536
#define MAX_HEADERS 256

typedef struct conn {
    int fd;
    int is_client;
    int connected;
    struct conn *peer;
    char *out;      /* bytes the kernel has not taken yet (or, before connect, held for it) */
    size_t out_len;
    llhttp_t parser;
    int headers;    /* header fields seen in the current head */
    size_t url_len;
} conn;

static llhttp_settings_t req_settings, resp_settings;
static int epfd;
static struct sockaddr_in upstream_addr;

/* The callbacks record as little as the Python floor's do: a count and a length. */
static int on_message_begin(llhttp_t *p) {
    conn *c = p->data;
    c->headers = 0;
    c->url_len = 0;
    return 0;
}
static int on_url(llhttp_t *p, const char *at, size_t len) {
    (void)at;
    ((conn *)p->data)->url_len += len;
    return 0;
}
static int on_header_field(llhttp_t *p, const char *at, size_t len) {
    (void)at;
    (void)len;
    conn *c = p->data;
    if (++c->headers > MAX_HEADERS) return -1;
    return 0;
}
static int on_data(llhttp_t *p, const char *at, size_t len) {
    (void)p;
    (void)at;
    (void)len;
    return 0;
}
static int on_event(llhttp_t *p) {
    (void)p;
    return 0;
}


static void watch(conn *c, int op, unsigned events) {
    struct epoll_event ev = {.events = events, .data.ptr = c};
    epoll_ctl(epfd, op, c->fd, &ev);
}

/* Closed at once, freed after the epoll batch: a later event of the batch may name the peer. */
static conn *dead[512];
static int n_dead;

static void close_pair(conn *c) {
    conn *peers[2] = {c, c->peer};
    for (int i = 0; i < 2; i++) {
        conn *x = peers[i];
        if (x == NULL || x->fd < 0) continue;
        epoll_ctl(epfd, EPOLL_CTL_DEL, x->fd, NULL);
        close(x->fd);
        x->fd = -1;
        dead[n_dead++] = x;
    }
}

static void hold(conn *to, const char *data, size_t len) {
    to->out = realloc(to->out, to->out_len + len);
    memcpy(to->out + to->out_len, data, len);
    to->out_len += len;
    watch(to, EPOLL_CTL_MOD, EPOLLIN | EPOLLOUT);
}

/* One write per read, as the Python relays and nginx do; what the kernel does not take waits. */
static int send_to(conn *to, const char *data, size_t len) {
    if (!to->connected || to->out_len) {
        hold(to, data, len);
        return 0;
    }
    ssize_t n = write(to->fd, data, len);
    if (n < 0) {
        if (errno != EAGAIN) return -1;
        n = 0;
    }
    if ((size_t)n < len) hold(to, data + n, len - (size_t)n);
    return 0;
}

static int flush(conn *c) {
    ssize_t n = write(c->fd, c->out, c->out_len);
    if (n < 0) return errno == EAGAIN ? 0 : -1;
    memmove(c->out, c->out + n, c->out_len - (size_t)n);
    c->out_len -= (size_t)n;
    if (c->out_len == 0) watch(c, EPOLL_CTL_MOD, EPOLLIN);
    return 0;
}

static void accept_client(int lfd) {
    for (;;) {
        int cfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (cfd < 0) return;
        int one = 1;
        setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int ufd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        setsockopt(ufd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        conn *client = calloc(1, sizeof *client), *up = calloc(1, sizeof *up);
        client->fd = cfd;
        client->is_client = 1;
        client->connected = 1;
        client->peer = up;
        up->fd = ufd;
        up->peer = client;
        llhttp_init(&client->parser, HTTP_REQUEST, &req_settings);
        client->parser.data = client;
        int rc = connect(ufd, (struct sockaddr *)&upstream_addr, sizeof upstream_addr);
        up->connected = rc == 0;
        watch(client, EPOLL_CTL_ADD, EPOLLIN);
        watch(up, EPOLL_CTL_ADD, up->connected ? EPOLLIN : EPOLLIN | EPOLLOUT);
    }
}

static int on_readable(conn *c) {
    static char buf[READ_SIZE];
    ssize_t n = read(c->fd, buf, sizeof buf);
    if (n == 0) return -1;
    if (n < 0) return errno == EAGAIN ? 0 : -1;
    if (c->is_client) {
        if (llhttp_execute(&c->parser, buf, (size_t)n) != HPE_OK) return -1;
    } else if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
        const char *end = memmem(buf, (size_t)n, "\r\n\r\n", 4);
        llhttp_init(&c->parser, HTTP_RESPONSE, &resp_settings);
        c->parser.data = c;
        llhttp_execute(&c->parser, buf, end ? (size_t)(end - buf) + 4 : (size_t)n);
    }
    return send_to(c->peer, buf, (size_t)n);
}

int main(int argc, char **argv) {
    const char *upstream = NULL, *listen_at = NULL;
    for (int i = 1; i + 1 < argc; i++) {
        if (strcmp(argv[i], "--upstream") == 0) upstream = argv[++i];
        else if (strcmp(argv[i], "--listen") == 0) listen_at = argv[++i];
    }
    if (!upstream || !listen_at) {
        fprintf(stderr, "usage: native_floor proxy --upstream http://HOST:PORT --listen HOST:PORT\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const char *u = strstr(upstream, "//") ? strstr(upstream, "//") + 2 : upstream;
    upstream_addr.sin_family = AF_INET;
    upstream_addr.sin_port = htons((unsigned short)atoi(strrchr(u, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &upstream_addr.sin_addr);

    llhttp_settings_init(&req_settings);
    req_settings.on_message_begin = on_message_begin;
    req_settings.on_url = on_url;
    req_settings.on_header_field = on_header_field;
    req_settings.on_header_value = on_data;
    req_settings.on_headers_complete = on_event;
    req_settings.on_body = on_data;
    req_settings.on_message_complete = on_event;
    llhttp_settings_init(&resp_settings);
    resp_settings.on_message_begin = on_message_begin;
    resp_settings.on_status = on_data;
    resp_settings.on_header_field = on_header_field;
    resp_settings.on_header_value = on_data;
    resp_settings.on_headers_complete = on_event;

    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_port = htons((unsigned short)atoi(strrchr(listen_at, ':') + 1));
    inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof addr) || listen(lfd, 2048)) {
        perror("listen");
        return 1;
    }
    epfd = epoll_create1(0);
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev);
    struct epoll_event events[256];
    for (;;) {
        int n = epoll_wait(epfd, events, 256, -1);
        for (int i = 0; i < n; i++) {
            conn *c = events[i].data.ptr;
            if (c == NULL) {
                accept_client(lfd);
                continue;
            }
            if (c->fd < 0) continue;
            if (events[i].events & EPOLLOUT) {
                if (!c->connected) {
                    int err = 0;
                    socklen_t len = sizeof err;
                    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
                    if (err) {
                        close_pair(c);
                        continue;
                    }
                    c->connected = 1;
                }
                if (c->out_len ? flush(c) : (watch(c, EPOLL_CTL_MOD, EPOLLIN), 0)) {
                    close_pair(c);
                    continue;
                }
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                if (on_readable(c) < 0) close_pair(c);
            }
        }
        while (n_dead) {
            conn *x = dead[--n_dead];
            free(x->out);
            free(x);
        }
    }
}
