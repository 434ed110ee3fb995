/*
 * quiclab's TCP+TLS peer: a bulk TLS 1.3 transfer over kernel TCP, HTTP/1.1
 * GET of N bytes (the seeds' reference: seed 002 used NGINX 1.18 with OpenSSL
 * and wget; seed 001's TCP column is plain iperf3 TCP).
 *
 * Why a small C program over OpenSSL rather than nginx + curl: one process and
 * one thread per side, no worker or master process, no event loop or runtime
 * threads, so a side's rusage is exactly its TLS (user time: OpenSSL's record
 * layer and cipher, the HTTP lines, the copies into its buffers) and its
 * kernel TCP work (system time: the write()/read() system calls, the copies
 * into and out of socket buffers, and the softirq work the kernel runs in its
 * context). Every knob that matters for the cost model is explicit: the TLS
 * record size (SSL_CTX_set_max_send_fragment), the application's write and
 * read sizes, the cipher suite, the congestion controller (TCP_CONGESTION).
 *
 * Each side prints one JSON line: bytes, transfer time, goodput (client), the
 * TLS records it wrote or read (counted by OpenSSL's message callback, which
 * sees every record header), its application calls, and the socket's
 * struct tcp_info just before close (what `ss -ti` prints: cwnd, MSS, RTT,
 * retransmissions, delivery rate, segments in and out).
 *
 * --tls=false runs plain TCP (iperf3's setting: write() of --write-bytes);
 * --ktls=true asks the kernel for TLS (TCP_ULP "tls"); a kernel without it
 * makes the peer refuse with one JSON error line and exit 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

/* OpenSSL's capability mask without AES-NI (bit 57) and PCLMULQDQ (bit 33): its
 * AES-GCM then runs the constant-time software code (OPENSSL_ia32cap(3)). */
#define NO_AESNI_MASK "~0x200000200000000"

static struct {
    const char *role, *addr, *cert, *key, *ca, *server_name, *cipher, *cc;
    unsigned long long bytes;
    int once, tls, ktls, record_bytes, write_bytes, read_bytes, rcvbuf, sndbuf;
} opt = {"client", "127.0.0.1:4433", "", "", "", "quiclab", "aes-ni", "",
         1 << 20, 1, 1, 0, 16384, 0, 0, 0, 0};

static struct {
    unsigned long long records_out, records_in, record_bytes_out, record_bytes_in;
} counts;

static void fail(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("{\"stack\": \"tcp+tls\", \"error\": \"");
    for (const char *p = msg; *p; p++) {
        if (*p == '"' || *p == '\\') putchar('\\');
        putchar(*p == '\n' ? ' ' : *p);
    }
    printf("\"}\n");
    fflush(stdout);
    exit(1);
}

static void fail_ssl(const char *what) {
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e) ERR_error_string_n(e, buf, sizeof buf);
    fail("%s: %s", what, e ? buf : strerror(errno));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int boolean(const char *v) { return !strcmp(v, "true") || !strcmp(v, "1"); }

static void parse(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (strncmp(a, "--", 2)) fail("argument %s: expected --name=value", a);
        char *eq = strchr(a, '=');
        if (!eq) fail("argument %s: expected --name=value", a);
        *eq = 0;
        const char *k = a + 2, *v = eq + 1;
        if (!strcmp(k, "role")) opt.role = v;
        else if (!strcmp(k, "addr")) opt.addr = v;
        else if (!strcmp(k, "bytes")) opt.bytes = strtoull(v, NULL, 10);
        else if (!strcmp(k, "cert")) opt.cert = v;
        else if (!strcmp(k, "key")) opt.key = v;
        else if (!strcmp(k, "ca")) opt.ca = v;
        else if (!strcmp(k, "server-name")) opt.server_name = v;
        else if (!strcmp(k, "once")) opt.once = boolean(v);
        else if (!strcmp(k, "tls")) opt.tls = boolean(v);
        else if (!strcmp(k, "ktls")) opt.ktls = boolean(v);
        else if (!strcmp(k, "cipher")) opt.cipher = v;
        else if (!strcmp(k, "cc")) opt.cc = v;
        else if (!strcmp(k, "record-bytes")) opt.record_bytes = atoi(v);
        else if (!strcmp(k, "write-bytes")) opt.write_bytes = atoi(v);
        else if (!strcmp(k, "read-bytes")) opt.read_bytes = atoi(v);
        else if (!strcmp(k, "rcvbuf")) opt.rcvbuf = atoi(v);
        else if (!strcmp(k, "sndbuf")) opt.sndbuf = atoi(v);
        else fail("argument --%s: unknown (tcp+tls peer)", k);
    }
    if (strcmp(opt.role, "server") && strcmp(opt.role, "client") && strcmp(opt.role, "bench"))
        fail("--role=%s: allowed server | client | bench", opt.role);
    if (opt.record_bytes < 512 || opt.record_bytes > 16384)
        fail("--record-bytes=%d: allowed 512 ... 16384 (TLS 1.3 max_fragment_length)",
             opt.record_bytes);
    /* iperf3 writes 128 KiB blocks; NGINX's ssl_buffer_size is 16 KiB (one record). */
    if (!opt.write_bytes) opt.write_bytes = opt.tls ? opt.record_bytes : 131072;
    if (!opt.read_bytes) opt.read_bytes = opt.tls ? 16384 : 131072;
}

/* The suite for --cipher; aes-sw masks AES-NI out of OpenSSL (re-exec with the mask:
 * OpenSSL reads OPENSSL_ia32cap once, when the library is loaded). */
static const char *suite(char **argv) {
    if (!strcmp(opt.cipher, "aes-sw")) {
        const char *mask = getenv("OPENSSL_ia32cap");
        if (!mask || strcmp(mask, NO_AESNI_MASK)) {
            setenv("OPENSSL_ia32cap", NO_AESNI_MASK, 1);
            execv("/proc/self/exe", argv);
            fail("re-exec for aes-sw: %s", strerror(errno));
        }
        return "TLS_AES_128_GCM_SHA256";
    }
    if (!strcmp(opt.cipher, "aes-ni")) return "TLS_AES_128_GCM_SHA256";
    if (!strcmp(opt.cipher, "aes256gcm")) return "TLS_AES_256_GCM_SHA384";
    if (!strcmp(opt.cipher, "chacha20")) return "TLS_CHACHA20_POLY1305_SHA256";
    fail("--cipher=%s: allowed aes-ni | aes-sw | chacha20 | aes256gcm", opt.cipher);
    return NULL;
}

/* Every record header OpenSSL writes or reads (content type SSL3_RT_HEADER). */
static void on_message(int write_p, int version, int content_type, const void *buf, size_t len,
                       SSL *ssl, void *arg) {
    (void)version, (void)ssl, (void)arg;
    if (content_type != SSL3_RT_HEADER || len < 5) return;
    const unsigned char *h = buf;
    unsigned length = (h[3] << 8) | h[4];
    if (write_p) counts.records_out++, counts.record_bytes_out += length;
    else counts.records_in++, counts.record_bytes_in += length;
}

static void split_addr(struct sockaddr_in *sa) {
    char host[64];
    const char *colon = strrchr(opt.addr, ':');
    if (!colon || colon - opt.addr >= (long)sizeof host) fail("--addr=%s: expected IP:PORT", opt.addr);
    memcpy(host, opt.addr, colon - opt.addr);
    host[colon - opt.addr] = 0;
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) fail("--addr=%s: not an IPv4 address", opt.addr);
}

static void tune(int fd) {
    if (opt.cc[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, opt.cc, strlen(opt.cc)))
        fail("refused: --cc=%s: setsockopt TCP_CONGESTION: %s", opt.cc, strerror(errno));
    /* SO_SNDBUF/SO_RCVBUF fix the buffer and turn the kernel's autotuning off; left
     * unset, tcp_wmem/tcp_rmem of the namespace bound it. */
    if (opt.sndbuf && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &opt.sndbuf, sizeof opt.sndbuf))
        fail("setsockopt SO_SNDBUF: %s", strerror(errno));
    if (opt.rcvbuf && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &opt.rcvbuf, sizeof opt.rcvbuf))
        fail("setsockopt SO_RCVBUF: %s", strerror(errno));
}

/* The kernel's TLS (CONFIG_TLS) registers the "tls" upper-layer protocol; OpenSSL then
 * hands it the keys after the handshake (SSL_OP_ENABLE_KTLS, setsockopt TCP_ULP). */
static void ktls_or_refuse(void) {
    char ulps[256] = "";
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "r");
    if (f) {
        if (!fgets(ulps, sizeof ulps, f)) ulps[0] = 0;
        fclose(f);
    }
    ulps[strcspn(ulps, "\n")] = 0;
    char *p = ulps;
    for (char *tok; (tok = strsep(&p, " "));)
        if (!strcmp(tok, "tls")) return;
    fail("refused: ktls=true: this kernel offers no TLS upper-layer protocol "
         "(net.ipv4.tcp_available_ulp = \"%s\")", ulps);
}

static SSL_CTX *context(char **argv) {
    const char *s = suite(argv);
    SSL_CTX *ctx = SSL_CTX_new(!strcmp(opt.role, "server") ? TLS_server_method() : TLS_client_method());
    if (!ctx) fail_ssl("SSL_CTX_new");
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
    if (!SSL_CTX_set_ciphersuites(ctx, s)) fail_ssl("SSL_CTX_set_ciphersuites");
    SSL_CTX_set_max_send_fragment(ctx, opt.record_bytes);
    /* read_ahead: OpenSSL reads what the socket has into its buffer (one read() per
     * record or more) instead of a header and then a body (two per record). */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_msg_callback(ctx, on_message);
    if (opt.ktls) SSL_CTX_set_options(ctx, SSL_OP_ENABLE_KTLS);
    if (!strcmp(opt.role, "server")) {
        if (SSL_CTX_use_certificate_chain_file(ctx, opt.cert) != 1) fail_ssl("certificate");
        if (SSL_CTX_use_PrivateKey_file(ctx, opt.key, SSL_FILETYPE_PEM) != 1) fail_ssl("key");
    } else if (opt.ca[0]) {
        if (SSL_CTX_load_verify_locations(ctx, opt.ca, NULL) != 1) fail_ssl("CA");
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    return ctx;
}

/* I/O over TLS or plain TCP, counting application calls. */
static SSL *ssl;
static int fd = -1;
static unsigned long long app_calls;

static long put(const char *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        long n;
        app_calls++;
        if (ssl) {
            n = SSL_write(ssl, buf + done, (int)(len - done));
            if (n <= 0) fail_ssl("SSL_write");
        } else {
            n = write(fd, buf + done, len - done);
            if (n < 0) {
                if (errno == EINTR) continue;
                fail("write: %s", strerror(errno));
            }
        }
        done += n;
    }
    return (long)done;
}

static long get(char *buf, size_t len) {
    app_calls++;
    if (ssl) {
        int n = SSL_read(ssl, buf, (int)len);
        if (n <= 0) {
            int e = SSL_get_error(ssl, n);
            if (e == SSL_ERROR_ZERO_RETURN) return 0;
            fail_ssl("SSL_read");
        }
        return n;
    }
    for (;;) {
        long n = read(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("read: %s", strerror(errno));
        return n;
    }
}

static void print_tcp_info(FILE *out) {
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    memset(&ti, 0, sizeof ti);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len)) return;
    char cc[32] = "";
    socklen_t cclen = sizeof cc;
    getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, &cclen);
    int sndbuf = 0, rcvbuf = 0;
    socklen_t ilen = sizeof sndbuf;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &ilen);
    ilen = sizeof rcvbuf;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &ilen);
    fprintf(out,
            ", \"tcp_info\": {\"cc\": \"%s\", \"snd_mss\": %u, \"rcv_mss\": %u, \"advmss\": %u, "
            "\"snd_cwnd\": %u, \"snd_ssthresh\": %u, \"rtt_us\": %u, \"rttvar_us\": %u, "
            "\"min_rtt_us\": %u, \"total_retrans\": %u, \"retrans\": %u, \"lost\": %u, "
            "\"sacked\": %u, \"reordering\": %u, \"reord_seen\": %u, "
            "\"delivery_rate_bps\": %llu, \"pacing_rate_bps\": %llu, \"segs_out\": %u, "
            "\"segs_in\": %u, \"data_segs_out\": %u, \"data_segs_in\": %u, "
            "\"bytes_acked\": %llu, \"bytes_received\": %llu, \"bytes_sent\": %llu, "
            "\"bytes_retrans\": %llu, \"delivered\": %u, \"dsack_dups\": %u, "
            "\"busy_time_us\": %llu, \"rwnd_limited_us\": %llu, \"sndbuf_limited_us\": %llu, "
            "\"rcv_space\": %u, \"rcv_ooopack\": %u, \"snd_wnd\": %u, "
            "\"so_sndbuf\": %d, \"so_rcvbuf\": %d}",
            cc, ti.tcpi_snd_mss, ti.tcpi_rcv_mss, ti.tcpi_advmss, ti.tcpi_snd_cwnd,
            ti.tcpi_snd_ssthresh, ti.tcpi_rtt, ti.tcpi_rttvar, ti.tcpi_min_rtt,
            ti.tcpi_total_retrans, ti.tcpi_retrans, ti.tcpi_lost, ti.tcpi_sacked,
            ti.tcpi_reordering, ti.tcpi_reord_seen,
            (unsigned long long)ti.tcpi_delivery_rate * 8ULL,
            (unsigned long long)ti.tcpi_pacing_rate * 8ULL, ti.tcpi_segs_out, ti.tcpi_segs_in,
            ti.tcpi_data_segs_out, ti.tcpi_data_segs_in,
            (unsigned long long)ti.tcpi_bytes_acked, (unsigned long long)ti.tcpi_bytes_received,
            (unsigned long long)ti.tcpi_bytes_sent, (unsigned long long)ti.tcpi_bytes_retrans,
            ti.tcpi_delivered, ti.tcpi_dsack_dups, (unsigned long long)ti.tcpi_busy_time,
            (unsigned long long)ti.tcpi_rwnd_limited, (unsigned long long)ti.tcpi_sndbuf_limited,
            ti.tcpi_rcv_space, ti.tcpi_rcv_ooopack, ti.tcpi_snd_wnd,
            sndbuf, rcvbuf);
}

static double cpu_s(int user) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct timeval t = user ? ru.ru_utime : ru.ru_stime;
    return t.tv_sec + t.tv_usec / 1e6;
}

static void report(const char *role, unsigned long long bytes, double transfer_s,
                   double handshake_ms, double user0, double sys0) {
    printf("{\"stack\": \"tcp+tls\", \"role\": \"%s\", \"bytes\": %llu, \"transfer_s\": %.6f",
           role, bytes, transfer_s);
    if (!strcmp(role, "client"))
        printf(", \"goodput_mbps\": %.3f, \"handshake_ms\": %.3f",
               transfer_s > 0 ? bytes * 8 / transfer_s / 1e6 : 0.0, handshake_ms);
    printf(", \"tls\": %s, \"ktls\": %s, \"cipher\": \"%s\", \"cipher_suite\": \"%s\"",
           opt.tls ? "true" : "false", opt.ktls ? "true" : "false", opt.tls ? opt.cipher : "none",
           ssl ? SSL_get_cipher_name(ssl) : "none");
    printf(", \"record_bytes_max\": %d, \"records_out\": %llu, \"records_in\": %llu, "
           "\"record_payload_bytes_out\": %llu, \"record_payload_bytes_in\": %llu",
           opt.tls ? opt.record_bytes : 0, counts.records_out, counts.records_in,
           counts.record_bytes_out, counts.record_bytes_in);
    printf(", \"app_calls\": %llu, \"write_bytes\": %d, \"read_bytes\": %d", app_calls,
           opt.write_bytes, opt.read_bytes);
    printf(", \"window_cpu_user_s\": %.6f, \"window_cpu_sys_s\": %.6f", cpu_s(1) - user0,
           cpu_s(0) - sys0);
    print_tcp_info(stdout);
    printf("}\n");
    fflush(stdout);
}

static void handshake(SSL_CTX *ctx, int server) {
    if (!ctx) return;
    ssl = SSL_new(ctx);
    SSL_set_fd(ssl, fd);
    if (server) {
        if (SSL_accept(ssl) != 1) fail_ssl("SSL_accept");
    } else {
        SSL_set_tlsext_host_name(ssl, opt.server_name);
        SSL_set1_host(ssl, opt.server_name);
        if (SSL_connect(ssl) != 1) fail_ssl("SSL_connect");
    }
}

/* Reads until the end of the HTTP header; returns the bytes after it (body) in buf. */
static size_t read_header(char *buf, size_t cap, size_t *header_len) {
    size_t have = 0;
    for (;;) {
        if (have == cap) fail("HTTP header longer than %zu bytes", cap);
        long n = get(buf + have, cap - have);
        if (n == 0) fail("connection closed before the HTTP header ended");
        have += n;
        char *end = memmem(buf, have, "\r\n\r\n", 4);
        if (end) {
            *header_len = end + 4 - buf;
            return have;
        }
    }
}

static int server(SSL_CTX *ctx) {
    struct sockaddr_in sa;
    split_addr(&sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 16))
        fail("listen on %s: %s", opt.addr, strerror(errno));
    fd = accept(lfd, NULL, NULL);
    if (fd < 0) fail("accept: %s", strerror(errno));
    close(lfd);
    tune(fd);
    double user0 = cpu_s(1), sys0 = cpu_s(0), t0 = now_s();
    handshake(ctx, 1);
    char req[4096];
    size_t header_len;
    read_header(req, sizeof req - 1, &header_len);
    req[header_len] = 0;
    unsigned long long want;
    if (sscanf(req, "GET /%llu HTTP/1.1", &want) != 1) fail("bad request line: %.40s", req);
    char head[160];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nContent-Type: "
                      "application/octet-stream\r\nConnection: close\r\n\r\n", want);
    put(head, hl);
    char *block = malloc(opt.write_bytes);
    for (int i = 0; i < opt.write_bytes; i++) block[i] = (char)(i * 131 + 7);
    unsigned long long sent = 0;
    while (sent < want) {
        unsigned long long left = want - sent, n = left < (unsigned long long)opt.write_bytes ? left : (unsigned long long)opt.write_bytes;
        sent += put(block, n);
    }
    if (ssl) SSL_shutdown(ssl);
    shutdown(fd, SHUT_WR);
    /* Wait for the client to close: the last bytes are acknowledged and tcp_info complete. */
    char sink[256];
    while (ssl ? SSL_read(ssl, sink, sizeof sink) > 0 : read(fd, sink, sizeof sink) > 0) {}
    report("server", sent, now_s() - t0, 0, user0, sys0);
    close(fd);
    return 0;
}

static int client(SSL_CTX *ctx) {
    struct sockaddr_in sa;
    split_addr(&sa);
    double t0 = now_s(), user0 = cpu_s(1), sys0 = cpu_s(0);
    for (int attempt = 0;; attempt++) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        tune(fd);
        if (!connect(fd, (struct sockaddr *)&sa, sizeof sa)) break;
        if (attempt > 200) fail("connect to %s: %s", opt.addr, strerror(errno));
        close(fd);
        usleep(20000);
    }
    handshake(ctx, 0);
    double hs_ms = (now_s() - t0) * 1e3;
    char req[160];
    int rl = snprintf(req, sizeof req, "GET /%llu HTTP/1.1\r\nHost: %s\r\nUser-Agent: quiclab\r\n\r\n",
                      opt.bytes, opt.server_name);
    put(req, rl);
    size_t cap = opt.read_bytes > 8192 ? opt.read_bytes : 8192;
    char *buf = malloc(cap);
    size_t header_len, have = read_header(buf, cap, &header_len);
    unsigned long long length = 0;
    char *cl = memmem(buf, header_len, "Content-Length: ", 16);
    if (!cl || sscanf(cl + 16, "%llu", &length) != 1) fail("response without Content-Length");
    unsigned long long got = have - header_len;
    while (got < length) {
        long n = get(buf, opt.read_bytes);
        if (n == 0) break;
        got += n;
    }
    double transfer_s = now_s() - t0;
    if (got != length) fail("received %llu of %llu bytes", got, length);
    if (ssl) SSL_shutdown(ssl);
    report("client", got, transfer_s, hs_ms, user0, sys0);
    close(fd);
    return 0;
}

/* --role=bench: how fast this core is right now, for the run's record: AES-128-GCM
 * over 16 KiB records (OpenSSL's EVP, the TLS peers' cipher), memcpy of 64 KiB blocks
 * (what the kernel's copies to and from sockets do), and a dependent multiply-add
 * chain (the clock). Each test runs in 8 rounds of --bytes / 8; the report has the
 * fastest round (the core's own speed: a round that another task preempted is slower)
 * and the median round (what a process got meanwhile). ns per byte / per step. */
#define BENCH_ROUNDS 8
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void bench_report(const char *name, double *t) {
    qsort(t, BENCH_ROUNDS, sizeof *t, cmp_double);
    printf(", \"%s_min\": %.5f, \"%s_median\": %.5f", name, t[0], name,
           (t[BENCH_ROUNDS / 2 - 1] + t[BENCH_ROUNDS / 2]) / 2);
}

static int bench(void) {
    size_t block = 16384, big = 65536;
    unsigned long long n = opt.bytes / BENCH_ROUNDS;
    unsigned char *in = malloc(big), *out = malloc(big + 64), key[16] = {1}, iv[12] = {2}, tag[16];
    memset(in, 7, big);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    EVP_EncryptInit_ex(ctx, EVP_aes_128_gcm(), NULL, key, iv);
    double aes[BENCH_ROUNDS], copy[BENCH_ROUNDS], step[BENCH_ROUNDS];
    unsigned long long x = 1, steps = n / 8;
    int len;
    for (int r = 0; r < BENCH_ROUNDS; r++) {
        double t0 = now_s();
        for (unsigned long long done = 0; done < n; done += block) {
            iv[0]++;
            EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv);
            EVP_EncryptUpdate(ctx, out, &len, in, (int)block);
            EVP_EncryptFinal_ex(ctx, out + len, &len);
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, tag);
        }
        aes[r] = (now_s() - t0) / n * 1e9;
        t0 = now_s();
        for (unsigned long long done = 0; done < n; done += big) {
            memcpy(out, in, big);
            __asm__ volatile("" ::"r"(out) : "memory");
        }
        copy[r] = (now_s() - t0) / n * 1e9;
        t0 = now_s();
        for (unsigned long long i = 0; i < steps; i++)
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        step[r] = (now_s() - t0) / steps * 1e9;
    }
    printf("{\"stack\": \"tcp+tls\", \"role\": \"bench\", \"bytes\": %llu", n * BENCH_ROUNDS);
    bench_report("aes128gcm_ns_per_byte", aes);
    bench_report("memcpy_ns_per_byte", copy);
    bench_report("mul_add_ns", step);
    printf(", \"check\": %llu}\n", x & 1);
    return 0;
}

int main(int argc, char **argv) {
    char **saved = malloc((argc + 1) * sizeof *saved);
    for (int i = 0; i <= argc; i++) saved[i] = argv[i] ? strdup(argv[i]) : NULL;
    parse(argc, argv);
    SSL_CTX *ctx = NULL;
    if (opt.ktls && !opt.tls) fail("--ktls=true needs --tls=true");
    if (!strcmp(opt.role, "bench")) return bench();
    if (opt.ktls) ktls_or_refuse();
    if (opt.tls) ctx = context(saved);
    return !strcmp(opt.role, "server") ? server(ctx) : client(ctx);
}
