/* wb-agent: the guest agent of the microvm tier (seed 003), one static binary.
 *
 * Started by the guest's /init (a busybox shell, PID 1) as root; never PID 1 itself (its
 * exit would panic the guest). It speaks the framed protocol of wbcore_runtime/wire/frames.py on the
 * virtio-serial port named "wb.0":
 *
 *   u32 LE payload length | u8 type | payload (raw for Ping/Pong/Shutdown, else
 *   u32 LE json length + a JSON object + its "blobs" attachments back to back)
 *
 * Layers it enforces inside the guest:
 *   - the session secret: read once from /proc/cmdline (wb.secret=<64 hex>), after which
 *     /proc/cmdline is covered by /dev/null; Ping must carry it, every json frame from the
 *     host carries it as "secret" (hex), compared in constant time; a frame without it is
 *     refused (Refused frame) and nothing runs;
 *   - the command allowlist: /etc/wb/allowed (absolute paths, one a line, baked into the
 *     image); argv[0] is resolved on the guest's PATH and must be listed exactly;
 *   - rlimits (address space, processes, open files, CPU seconds, file size, no core) set
 *     in the child before exec, from the Exec frame;
 *   - privilege drop: the child runs as uid/gid 1000 with no supplementary groups, in a
 *     new session, in a fresh /tmp/w;
 *   - the watchdog: at the call's deadline the child's process group is SIGKILLed, and
 *     after every call every process of uid 1000 is (kill(-1) from that uid).
 *   - terminal sessions (PtyOpen/PtyData/PtyResize/PtyClose, wbcore_runtime/contract/terminal.py's frames):
 *     an allowlisted program on a new pty (devpts, mounted by the agent), uid 1000, its own
 *     session, RLIMIT_NOFILE/NPROC but no RLIMIT_FSIZE; at most 4 at once; every session
 *     and every uid-1000 process ends when the host hangs up; Exec is refused meanwhile.
 * Every length read from the host is checked against its cap before anything is
 * allocated; a malformed frame is answered with Refused and the agent keeps serving.
 *
 * Multi-call: invoked as "wb-cap <cap> <json request>", it is the guest command's way to a
 * host broker: the request goes over the socket the agent gave the command (fd 3) and the
 * agent forwards it to the host as a BrokerCall frame; the answer is printed as JSON.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define VERSION 1
#define MAX_FRAME (64u << 20)
#define SECRET_BYTES 32
#define SEED_BYTES 32
#define GUEST_UID 1000
#define MAX_ARGS 256
#define MAX_CAP_REQ (1u << 20)
#define OUTPUT_CAP (31u << 20)

enum { EXEC = 0x01, EXEC_RESULT = 0x02, PING = 0x03, PONG = 0x04, SHUTDOWN = 0x05,
       PTY_OPEN = 0x16, PTY_OPENED = 0x17, PTY_DATA = 0x18, PTY_RESIZE = 0x19, PTY_CLOSE = 0x1A, PTY_CLOSED = 0x1B,
       MOUNT = 0x1C, MOUNTED = 0x1D,
       BROKER_CALL = 0x22, BROKER_ANSWER = 0x23, REFUSED = 0x7F };

static unsigned char secret[SECRET_BYTES];
static int have_secret;
static int port = -1;
static int authed;
static char *allowed;      /* the allowlist file's bytes, NUL-separated lines */
static size_t allowed_len;

/* --- small helpers --------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) { struct pollfd q = {fd, POLLOUT, 0}; poll(&q, 1, 100); continue; }
            return -1;
        }
        p += w; n -= (size_t)w;
    }
    return 0;
}

/* Read exactly n bytes from the port; 0 ok, -1 end of stream / error. */
static int read_exact(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) { struct pollfd q = {fd, POLLIN, 0}; poll(&q, 1, 1000); continue; }
        if (r <= 0) return -1;
        p += r; n -= (size_t)r;
    }
    return 0;
}

static void put32(unsigned char *p, uint32_t v) { p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24; }
static uint32_t get32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static int send_frame(int kind, const void *a, size_t an, const void *b, size_t bn, const void *c, size_t cn) {
    unsigned char h[5];
    put32(h, (uint32_t)(an + bn + cn));
    h[4] = (unsigned char)kind;
    if (write_all(port, h, 5) < 0) return -1;
    if (an && write_all(port, a, an) < 0) return -1;
    if (bn && write_all(port, b, bn) < 0) return -1;
    if (cn && write_all(port, c, cn) < 0) return -1;
    return 0;
}

/* A json frame: u32 length + head (a JSON object text) + attachments. */
static int send_json(int kind, const char *head, const void *b1, size_t n1, const void *b2, size_t n2) {
    size_t hn = strlen(head);
    unsigned char *buf = malloc(4 + hn);
    if (!buf) return -1;
    put32(buf, (uint32_t)hn);
    memcpy(buf + 4, head, hn);
    int rc = send_frame(kind, buf, 4 + hn, b1, n1, b2, n2);
    free(buf);
    return rc;
}

static void json_escape(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 8 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { out[o++] = '\\'; out[o++] = ch; }
        else if (ch < 0x20 || ch >= 0x7f) o += snprintf(out + o, cap - o, "\\u%04x", ch < 0x20 ? ch : '?');
        else out[o++] = ch;
    }
    out[o] = 0;
}

static void refuse(const char *reason, const char *message) {
    char msg[1200], head[1400];
    json_escape(msg, sizeof msg, message);
    snprintf(head, sizeof head, "{\"reason\":\"%s\",\"message\":\"%s\",\"blobs\":[]}", reason, msg);
    send_json(REFUSED, head, NULL, 0, NULL, 0);
}

static int same_secret(const unsigned char *got) {
    unsigned char d = 0;
    for (int i = 0; i < SECRET_BYTES; i++) d |= got[i] ^ secret[i];
    return have_secret && d == 0;
}

static int unhex(const char *s, size_t n, unsigned char *out, size_t outn) {
    if (n != 2 * outn) return -1;
    for (size_t i = 0; i < outn; i++) {
        int v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[2 * i + k];
            v <<= 4;
            if (c >= '0' && c <= '9') v |= c - '0';
            else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
            else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
            else return -1;
        }
        out[i] = (unsigned char)v;
    }
    return 0;
}

/* --- a bounded JSON reader for the host's objects ------------------------------------- */
/* Top level: an object whose values are strings, integers, booleans, null, arrays of
 * strings or integers; anything else is skipped to a bounded depth. */

#define MAX_FIELDS 48
#define MAX_ITEMS 1024

typedef struct {
    char *key;
    int type;           /* 's' string, 'i' integer, 'a' array, 'o' other */
    char *str;          /* 's' */
    long long num;      /* 'i' */
    int n;              /* 'a': items */
    char **items;       /* 'a': strings (NULL for numbers) */
    long long *nums;    /* 'a': integers */
    const char *raw;    /* 'o': the value's text (a nested object is parsed again from it) */
    size_t rawn;
} jfield;

typedef struct { const char *p, *end; char *err; } jcur;

static void ws(jcur *c) { while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++; }

static int utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = cp; return 1; }
    if (cp < 0x800) { o[0] = 0xc0 | cp >> 6; o[1] = 0x80 | (cp & 63); return 2; }
    if (cp < 0x10000) { o[0] = 0xe0 | cp >> 12; o[1] = 0x80 | (cp >> 6 & 63); o[2] = 0x80 | (cp & 63); return 3; }
    o[0] = 0xf0 | cp >> 18; o[1] = 0x80 | (cp >> 12 & 63); o[2] = 0x80 | (cp >> 6 & 63); o[3] = 0x80 | (cp & 63); return 4;
}

static int hex4(const char *p, unsigned *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i]; *v <<= 4;
        if (c >= '0' && c <= '9') *v |= c - '0';
        else if (c >= 'a' && c <= 'f') *v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') *v |= c - 'A' + 10;
        else return -1;
    }
    return 0;
}

static char *jstring(jcur *c) {
    if (c->p >= c->end || *c->p != '"') { c->err = "expected a string"; return NULL; }
    c->p++;
    size_t cap = (size_t)(c->end - c->p) + 1;
    char *out = malloc(cap), *o = out;
    if (!out) { c->err = "out of memory"; return NULL; }
    while (c->p < c->end && *c->p != '"') {
        unsigned char ch = (unsigned char)*c->p++;
        if (ch < 0x20) { c->err = "control character in a string"; free(out); return NULL; }
        if (ch != '\\') { *o++ = ch; continue; }
        if (c->p >= c->end) break;
        char e = *c->p++;
        switch (e) {
        case '"': *o++ = '"'; break; case '\\': *o++ = '\\'; break; case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break; case 'f': *o++ = '\f'; break; case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break; case 't': *o++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (c->end - c->p < 4 || hex4(c->p, &cp)) { c->err = "bad \\u escape"; free(out); return NULL; }
            c->p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u'
                && !hex4(c->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                c->p += 6;
            }
            if (cp == 0) { c->err = "NUL in a string"; free(out); return NULL; }
            o += utf8(o, cp);
            break;
        }
        default: c->err = "bad escape"; free(out); return NULL;
        }
    }
    if (c->p >= c->end) { c->err = "unterminated string"; free(out); return NULL; }
    c->p++;
    *o = 0;
    return out;
}

static int jint(jcur *c, long long *v) {
    const char *s = c->p;
    int neg = 0;
    long long x = 0;
    if (s < c->end && *s == '-') { neg = 1; s++; }
    if (s >= c->end || *s < '0' || *s > '9') { c->err = "expected a number"; return -1; }
    while (s < c->end && *s >= '0' && *s <= '9') {
        if (x > (long long)9e17) { c->err = "number too large"; return -1; }
        x = x * 10 + (*s++ - '0');
    }
    if (s < c->end && (*s == '.' || *s == 'e' || *s == 'E')) { c->err = "expected an integer"; return -1; }
    c->p = s;
    *v = neg ? -x : x;
    return 0;
}

static int jskip(jcur *c, int depth) {
    ws(c);
    if (depth > 16) { c->err = "nested too deeply"; return -1; }
    if (c->p >= c->end) { c->err = "truncated"; return -1; }
    char ch = *c->p;
    if (ch == '"') { char *s = jstring(c); if (!s) return -1; free(s); return 0; }
    if (ch == '{' || ch == '[') {
        char close = ch == '{' ? '}' : ']';
        c->p++; ws(c);
        if (c->p < c->end && *c->p == close) { c->p++; return 0; }
        for (;;) {
            if (ch == '{') { ws(c); char *k = jstring(c); if (!k) return -1; free(k); ws(c);
                if (c->p >= c->end || *c->p++ != ':') { c->err = "expected ':'"; return -1; } }
            if (jskip(c, depth + 1)) return -1;
            ws(c);
            if (c->p < c->end && *c->p == ',') { c->p++; continue; }
            if (c->p < c->end && *c->p == close) { c->p++; return 0; }
            c->err = "expected ',' or a closing bracket"; return -1;
        }
    }
    if (ch == 't' && c->end - c->p >= 4 && !memcmp(c->p, "true", 4)) { c->p += 4; return 0; }
    if (ch == 'f' && c->end - c->p >= 5 && !memcmp(c->p, "false", 5)) { c->p += 5; return 0; }
    if (ch == 'n' && c->end - c->p >= 4 && !memcmp(c->p, "null", 4)) { c->p += 4; return 0; }
    long long v;
    const char *s = c->p;
    if (*s == '-' || (*s >= '0' && *s <= '9')) {  /* any number, fractions included */
        s++;
        while (s < c->end && strchr("0123456789.eE+-", *s)) s++;
        c->p = s;
        return 0;
    }
    (void)v;
    c->err = "unexpected character";
    return -1;
}

typedef struct { jfield f[MAX_FIELDS]; int n; } jobj;

static void jfree(jobj *o) {
    for (int i = 0; i < o->n; i++) {
        jfield *f = &o->f[i];
        free(f->key); free(f->str);
        if (f->items) { for (int k = 0; k < f->n; k++) free(f->items[k]); free(f->items); }
        free(f->nums);
    }
    o->n = 0;
}

static int jparse(const char *text, size_t n, jobj *o, const char **err) {
    jcur c = {text, text + n, NULL};
    o->n = 0;
    ws(&c);
    if (c.p >= c.end || *c.p != '{') { *err = "the json header must be an object"; return -1; }
    c.p++; ws(&c);
    if (c.p < c.end && *c.p == '}') { c.p++; goto done; }
    for (;;) {
        ws(&c);
        if (o->n >= MAX_FIELDS) { *err = "too many fields"; goto fail; }
        jfield *f = &o->f[o->n];
        memset(f, 0, sizeof *f);
        f->key = jstring(&c);
        if (!f->key) goto bad;
        o->n++;
        ws(&c);
        if (c.p >= c.end || *c.p++ != ':') { c.err = "expected ':'"; goto bad; }
        ws(&c);
        if (c.p >= c.end) { c.err = "truncated"; goto bad; }
        if (*c.p == '"') { f->type = 's'; if (!(f->str = jstring(&c))) goto bad; }
        else if (*c.p == '-' || (*c.p >= '0' && *c.p <= '9')) {
            const char *save = c.p;
            if (jint(&c, &f->num) == 0) f->type = 'i';
            else { c.p = save; c.err = NULL; f->type = 'o'; if (jskip(&c, 1)) goto bad; }
        } else if (*c.p == '[') {
            const char *save = c.p;
            c.p++; ws(&c);
            f->type = 'a';
            f->items = calloc(MAX_ITEMS, sizeof(char *));
            f->nums = calloc(MAX_ITEMS, sizeof(long long));
            if (!f->items || !f->nums) { c.err = "out of memory"; goto bad; }
            int strings = -1;
            if (c.p < c.end && *c.p == ']') { c.p++; }
            else for (;;) {
                ws(&c);
                if (f->n >= MAX_ITEMS) { c.err = "array too long"; goto bad; }
                if (c.p < c.end && *c.p == '"' && strings != 0) {
                    strings = 1;
                    if (!(f->items[f->n++] = jstring(&c))) goto bad;
                } else if (strings != 1 && jint(&c, &f->nums[f->n]) == 0) {
                    strings = 0; f->n++;
                } else {  /* a mixed or nested array: skipped, kept as 'o' */
                    for (int k = 0; k < f->n; k++) { free(f->items[k]); f->items[k] = NULL; }
                    f->n = 0; f->type = 'o'; c.err = NULL; c.p = save;
                    if (jskip(&c, 1)) goto bad;
                    break;
                }
                ws(&c);
                if (c.p < c.end && *c.p == ',') { c.p++; continue; }
                if (c.p < c.end && *c.p == ']') { c.p++; break; }
                c.err = "expected ',' or ']'"; goto bad;
            }
        } else {
            f->type = 'o';
            f->raw = c.p;
            if (jskip(&c, 1)) goto bad;
            f->rawn = (size_t)(c.p - f->raw);
        }
        ws(&c);
        if (c.p < c.end && *c.p == ',') { c.p++; continue; }
        if (c.p < c.end && *c.p == '}') { c.p++; break; }
        c.err = "expected ',' or '}'"; goto bad;
    }
done:
    ws(&c);
    if (c.p != c.end) { *err = "trailing bytes after the json object"; goto fail; }
    return 0;
bad:
    *err = c.err ? c.err : "malformed json";
fail:
    jfree(o);
    return -1;
}

static jfield *jget(jobj *o, const char *key, int type) {
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->f[i].key, key)) return o->f[i].type == type ? &o->f[i] : NULL;
    return NULL;
}

/* A host → guest json payload: parsed, its blobs split, its secret checked. */
typedef struct { jobj obj; const unsigned char *blob[8]; size_t blen[8]; int nblobs; } sealed;

static int open_sealed(const unsigned char *payload, size_t n, sealed *s, const char **reason, const char **err) {
    *reason = "malformed";
    if (n < 4) { *err = "a json payload starts with a 4-byte length"; return -1; }
    uint32_t hn = get32(payload);
    if (hn > n - 4) { *err = "the json header is longer than the payload"; return -1; }
    if (jparse((const char *)payload + 4, hn, &s->obj, err)) return -1;
    jfield *bl = jget(&s->obj, "blobs", 'a');
    if (!bl) { *err = "'blobs' must be a list of byte lengths"; jfree(&s->obj); return -1; }
    if (bl->n > 8 || (bl->n && bl->items[0])) { *err = "'blobs' must be a short list of byte lengths"; jfree(&s->obj); return -1; }
    size_t at = 4 + hn, rest = n - at, sum = 0;
    for (int i = 0; i < bl->n; i++) {
        if (bl->nums[i] < 0 || (unsigned long long)bl->nums[i] > rest) { *err = "an attachment is longer than the payload"; jfree(&s->obj); return -1; }
        sum += (size_t)bl->nums[i];
    }
    if (sum != rest) { *err = "the attachments do not add up to the payload"; jfree(&s->obj); return -1; }
    s->nblobs = bl->n;
    for (int i = 0; i < bl->n; i++) { s->blob[i] = payload + at; s->blen[i] = (size_t)bl->nums[i]; at += s->blen[i]; }
    jfield *sec = jget(&s->obj, "secret", 's');
    unsigned char got[SECRET_BYTES];
    if (!sec) { *reason = "secret"; *err = "the frame carries no session secret; refused"; jfree(&s->obj); return -1; }
    if (unhex(sec->str, strlen(sec->str), got, SECRET_BYTES) || !same_secret(got)) {
        *reason = "secret"; *err = "the frame carries the wrong session secret; refused"; jfree(&s->obj); return -1;
    }
    return 0;
}

static long long jnum(jobj *o, const char *key, long long dflt) {
    jfield *f = jget(o, key, 'i');
    return f ? f->num : dflt;
}

/* --- frames from the host -------------------------------------------------------------- */

/* The next frame: 0 ok (payload malloc'ed), -1 end of stream, -2 refused (answered). */
static int recv_frame(int *kind, unsigned char **payload, uint32_t *n) {
    unsigned char h[5];
    if (read_exact(port, h, 5)) return -1;
    *n = get32(h);
    *kind = h[4];
    if (*n > MAX_FRAME) {
        refuse("too-large", "the frame declares more than the 64 MiB cap; the stream is out of step, closing it");
        return -1;  /* cannot skip a lying length safely: the host reconnects */
    }
    *payload = malloc(*n ? *n : 1);
    if (!*payload) { refuse("too-large", "no memory for the frame"); return -1; }
    if (*n && read_exact(port, *payload, *n)) { free(*payload); return -1; }
    return 0;
}

/* --- the allowlist --------------------------------------------------------------------- */

static void load_allowlist(void) {
    int fd = open("/etc/wb/allowed", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) || st.st_size > (1 << 20)) { close(fd); return; }
    allowed = malloc((size_t)st.st_size + 1);
    if (!allowed || read_exact(fd, allowed, (size_t)st.st_size)) { close(fd); return; }
    close(fd);
    allowed_len = (size_t)st.st_size;
    for (size_t i = 0; i < allowed_len; i++) if (allowed[i] == '\n') allowed[i] = 0;
    allowed[allowed_len] = 0;
}

static int is_allowed(const char *path) {
    for (size_t i = 0; i < allowed_len; i += strlen(allowed + i) + 1)
        if (allowed[i] && !strcmp(allowed + i, path)) return 1;
    return 0;
}

/* argv[0] on the guest's PATH, as the path the allowlist names (never realpath'd: busybox
 * applets are symlinks to one binary, and only root can write where they live). */
static int resolve(const char *name, char *out, size_t cap) {
    if (!*name || strstr(name, "..")) return -1;
    if (name[0] == '/') { snprintf(out, cap, "%s", name); return access(out, X_OK); }
    if (strchr(name, '/')) return -1;
    static const char *dirs[] = {"/bin", "/sbin", "/usr/bin", "/usr/sbin"};
    for (int i = 0; i < 4; i++) {
        snprintf(out, cap, "%s/%s", dirs[i], name);
        if (access(out, X_OK) == 0) return 0;
    }
    return -1;
}

/* --- exec --------------------------------------------------------------------------- */

static void sweep_guest_user(void) {
    /* SIGKILL every process of the guest uid: a forked child drops to it and kill(-1)s
     * (a signal to every process it may signal, i.e. its own uid's, but itself). */
    for (int round = 0; round < 3; round++) {
        pid_t p = fork();
        if (p == 0) {
            if (setgid(GUEST_UID) || setuid(GUEST_UID)) _exit(1);
            kill(-1, SIGKILL);
            _exit(0);
        }
        if (p > 0) waitpid(p, NULL, 0);
    }
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    if (write(fd, text, strlen(text)) < 0) { /* best effort: the limits below still hold */ }
    close(fd);
}

static void set_limit(int which, long long v) {
    if (v < 0) return;
    struct rlimit r = {(rlim_t)v, (rlim_t)v};
    setrlimit(which, &r);
}

typedef struct { unsigned char *buf; size_t len, cap; } obuf;

static int take(obuf *b, int fd, size_t limit, int *over) {
    unsigned char tmp[65536];
    ssize_t r = read(fd, tmp, sizeof tmp);
    if (r < 0) return (errno == EINTR || errno == EAGAIN) ? 1 : 0;
    if (r == 0) return 0;
    size_t room = limit > b->len ? limit - b->len : 0;
    size_t keep = (size_t)r < room ? (size_t)r : room;
    if (keep) {
        if (b->len + keep > b->cap) {
            size_t nc = b->cap ? b->cap * 2 : 65536;
            while (nc < b->len + keep) nc *= 2;
            unsigned char *nb = realloc(b->buf, nc);
            if (!nb) { *over = 1; return 0; }
            b->buf = nb; b->cap = nc;
        }
        memcpy(b->buf + b->len, tmp, keep);
        b->len += keep;
    }
    if ((size_t)r > keep) *over = 1;
    return 1;
}

/* One broker call of the guest command: read it from the command's socket, forward it to
 * the host as BrokerCall, wait for BrokerAnswer (within the deadline), give it back. */
static int bridge(int sock, long long id, double deadline) {
    unsigned char h[4];
    if (read_exact(sock, h, 4)) return 0;
    uint32_t n = get32(h);
    if (n > MAX_CAP_REQ) return 0;
    unsigned char *req = malloc(n + 1);
    if (!req || read_exact(sock, req, n)) { free(req); return 0; }
    req[n] = 0;
    size_t cl = strnlen((char *)req, n);
    if (cl == n || cl == 0 || cl > 64) { free(req); return 0; }
    char cap[200], head[400];
    json_escape(cap, sizeof cap, (char *)req);
    snprintf(head, sizeof head, "{\"id\":%lld,\"cap\":\"%s\",\"encoding\":\"json\",\"blobs\":[%u]}", id, cap, n - (unsigned)cl - 1);
    int rc = send_json(BROKER_CALL, head, req + cl + 1, n - cl - 1, NULL, 0);
    free(req);
    if (rc) return 0;
    for (;;) {
        int ms = (int)((deadline - now_s()) * 1000);
        if (ms <= 0) return 0;
        struct pollfd q = {port, POLLIN, 0};
        if (poll(&q, 1, ms > 1000 ? 1000 : ms) <= 0) continue;
        int kind; unsigned char *payload; uint32_t pn;
        if (recv_frame(&kind, &payload, &pn)) return -1;
        if (kind != BROKER_ANSWER) { refuse("unexpected", "a call is running: only BrokerAnswer is read now"); free(payload); continue; }
        sealed s; const char *reason, *err;
        if (open_sealed(payload, pn, &s, &reason, &err)) { refuse(reason, err); free(payload); continue; }
        long long status = jnum(&s.obj, "status", -1);
        const unsigned char *body = s.nblobs ? s.blob[0] : (const unsigned char *)"";
        size_t bn = s.nblobs ? s.blen[0] : 0;
        unsigned char out[8];
        put32(out, (uint32_t)status);
        put32(out + 4, (uint32_t)bn);
        int ok = write_all(sock, out, 8) == 0 && write_all(sock, body, bn) == 0;
        jfree(&s.obj);
        free(payload);
        return ok;
    }
}

static void do_exec(sealed *s) {
    double t0 = now_s();
    long long id = jnum(&s->obj, "id", 0);
    jfield *av = jget(&s->obj, "argv", 'a');
    char path[512], head[1000], msg[700];
    if (!av || av->n < 1 || av->n >= MAX_ARGS || !av->items[0]) { refuse("malformed", "Exec needs 'argv', a list of 1 to 255 strings"); return; }
    if (s->nblobs != 1) { refuse("malformed", "Exec carries exactly one attachment (stdin)"); return; }
    if (resolve(av->items[0], path, sizeof path) || !is_allowed(path)) {
        char name[300];
        json_escape(name, sizeof name, av->items[0]);
        snprintf(msg, sizeof msg, "command %s is not on the guest's allowlist", name);
        snprintf(head, sizeof head, "{\"id\":%lld,\"denied\":\"%s\",\"blobs\":[]}", id, msg);
        send_json(EXEC_RESULT, head, NULL, 0, NULL, 0);
        return;
    }
    double deadline = t0 + jnum(&s->obj, "deadline_ms", 10000) / 1000.0;
    size_t out_cap = (size_t)jnum(&s->obj, "stdout_cap", 1 << 20), err_cap = (size_t)jnum(&s->obj, "stderr_cap", 1 << 20);
    /* both streams travel in one ExecResult frame, under the 64 MiB cap */
    if (out_cap > OUTPUT_CAP) out_cap = OUTPUT_CAP;
    if (err_cap > OUTPUT_CAP) err_cap = OUTPUT_CAP;

    /* a fresh scratch folder for the call, owned by the guest uid */
    pid_t rm = fork();
    if (rm == 0) { execl("/bin/busybox", "rm", "-rf", "/tmp/w", (char *)NULL); _exit(127); }
    if (rm > 0) waitpid(rm, NULL, 0);
    mkdir("/tmp/w", 0700);
    if (chown("/tmp/w", GUEST_UID, GUEST_UID)) { /* reported by the command's own failure */ }

    int in[2], out[2], err[2], cap[2];
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC) ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, cap)) { refuse("internal", "no pipes"); return; }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        dup2(in[0], 0); dup2(out[1], 1); dup2(err[1], 2); dup2(cap[1], 3);
        for (int fd = 4; fd < 1024; fd++) close(fd);
        signal(SIGPIPE, SIG_DFL);
        write_file("/proc/self/oom_score_adj", "0");  /* the command is what the OOM killer takes */
        set_limit(RLIMIT_AS, jnum(&s->obj, "rlimit_as", -1));
        set_limit(RLIMIT_NPROC, jnum(&s->obj, "rlimit_nproc", 64));
        set_limit(RLIMIT_NOFILE, jnum(&s->obj, "rlimit_nofile", 256));
        set_limit(RLIMIT_CPU, jnum(&s->obj, "rlimit_cpu", 10));
        set_limit(RLIMIT_FSIZE, jnum(&s->obj, "rlimit_fsize", 64 << 20));
        set_limit(RLIMIT_CORE, 0);
        if (chdir("/tmp/w") || setgroups(0, NULL) || setgid(GUEST_UID) || setuid(GUEST_UID) || getuid() == 0) {
            dprintf(2, "wb-agent: could not drop privileges\n");
            _exit(126);
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        char *argv[MAX_ARGS];
        for (int i = 0; i < av->n; i++) argv[i] = av->items[i];
        argv[av->n] = NULL;
        char *env[] = {"PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/tmp/w", "TMPDIR=/tmp/w", "LANG=C", "USER=wb",
                       "WB_CAP_FD=3", NULL};
        execve(path, argv, env);
        dprintf(2, "wb-agent: exec %s: %s\n", path, strerror(errno));
        _exit(127);
    }
    close(in[0]); close(out[1]); close(err[1]); close(cap[1]);
    if (pid < 0) { close(in[1]); close(out[0]); close(err[0]); close(cap[0]); refuse("internal", "fork failed"); return; }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    const unsigned char *stdin_p = s->blob[0];
    size_t stdin_left = s->blen[0];
    if (!stdin_left) { close(in[1]); in[1] = -1; }
    obuf ob = {0}, eb = {0};
    int over_out = 0, over_err = 0, timed_out = 0, status = 0, exited = 0, lost = 0;
    int fo = out[0], fe = err[0], fc = cap[0];
    double exited_at = 0;
    while (fo >= 0 || fe >= 0 || !exited) {
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) { exited = 1; exited_at = now_s(); sweep_guest_user(); }
        if (exited && now_s() - exited_at > 2.0) break;  /* a pipe held open by nothing we can reach */
        if (now_s() >= deadline) { timed_out = !exited; break; }
        if (over_out || over_err) break;
        struct pollfd q[5]; int nq = 0;
        int io = -1, ie = -1, ii = -1, ic = -1, ip = -1;
        if (fo >= 0) { io = nq; q[nq++] = (struct pollfd){fo, POLLIN, 0}; }
        if (fe >= 0) { ie = nq; q[nq++] = (struct pollfd){fe, POLLIN, 0}; }
        if (in[1] >= 0) { ii = nq; q[nq++] = (struct pollfd){in[1], POLLOUT, 0}; }
        if (fc >= 0) { ic = nq; q[nq++] = (struct pollfd){fc, POLLIN, 0}; }
        ip = nq; q[nq++] = (struct pollfd){port, POLLIN, 0};
        int ms = (int)((deadline - now_s()) * 1000);
        if (poll(q, nq, ms > 50 ? 50 : (ms < 1 ? 1 : ms)) < 0 && errno != EINTR) break;
        if (io >= 0 && q[io].revents && !take(&ob, fo, out_cap, &over_out)) { close(fo); fo = -1; }
        if (ie >= 0 && q[ie].revents && !take(&eb, fe, err_cap, &over_err)) { close(fe); fe = -1; }
        if (ii >= 0 && q[ii].revents) {
            ssize_t w = write(in[1], stdin_p, stdin_left > 65536 ? 65536 : stdin_left);
            if (w > 0) { stdin_p += w; stdin_left -= (size_t)w; }
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || !stdin_left) { close(in[1]); in[1] = -1; }
        }
        if (ic >= 0 && q[ic].revents) {
            int r = bridge(fc, id, deadline);
            if (r < 0) { lost = 1; break; }
            if (r == 0) { close(fc); fc = -1; }
        }
        if (q[ip].revents & POLLIN) {
            /* the host spoke mid-call: only a (sealed) Shutdown is honoured; it is read
             * and answered so the stream stays in step */
            int kind; unsigned char *payload; uint32_t pn;
            if (recv_frame(&kind, &payload, &pn)) { lost = 1; break; }
            if (kind == SHUTDOWN && pn == SECRET_BYTES && same_secret(payload)) { sync(); reboot(RB_POWER_OFF); }
            refuse("unexpected", "a call is running: the frame was dropped");
            free(payload);
        } else if (q[ip].revents & (POLLHUP | POLLERR)) {
            usleep(20000);  /* the host went away: the call ends at its deadline */
        }
    }
    if (!exited) { kill(-pid, SIGKILL); waitpid(pid, &status, 0); }
    sweep_guest_user();
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
    if (fo >= 0) close(fo);
    if (fe >= 0) close(fe);
    if (fc >= 0) close(fc);
    if (in[1] >= 0) close(in[1]);
    if (!lost) {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1, sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        snprintf(head, sizeof head,
                 "{\"id\":%lld,\"exit\":%d,\"signal\":%d,\"over\":\"%s\",\"timed_out\":%s,\"wall_ms\":%lld,\"blobs\":[%zu,%zu]}",
                 id, code, sig, over_out ? "stdout" : over_err ? "stderr" : "", timed_out ? "true" : "false",
                 (long long)((now_s() - t0) * 1000), ob.len, eb.len);
        send_json(EXEC_RESULT, head, ob.buf, ob.len, eb.buf, eb.len);
    }
    free(ob.buf); free(eb.buf);
}

/* --- terminal sessions (seed 003's PTY; wbcore-terminal's agent.py, its Agent in C) -------------- */
/* PtyOpen{session, program, args, rows, cols, env} (sealed) starts an allowlisted program on
 * a new pty as uid 1000 in its own session; PtyData (secret + u32 session + bytes) is typed
 * into it; its output goes back as PtyData (u32 session + bytes); PtyResize sets the
 * window size (the child gets SIGWINCH); PtyClose sends SIGHUP to the child's process
 * group; PtyClosed{session, exit_code} reports its end. At most MAX_SESSIONS at once.
 * Sessions keep RLIMIT_NOFILE and RLIMIT_NPROC but not RLIMIT_FSIZE (seed 003). */

#define MAX_SESSIONS 4
#define PTY_CHUNK 65536
#define PENDING_CAP (1u << 20)  /* keystrokes not yet taken: past it the port is not read */
#define SESSION_NOFILE 256
#define SESSION_NPROC 64

typedef struct {
    uint32_t id;            /* 0: a free slot */
    pid_t pid;
    int fd;                 /* the pty master */
    int out_open;           /* its output has not ended */
    int exited, status;
    unsigned char *pending;
    size_t plen;
} pty_session;

static pty_session sessions[MAX_SESSIONS];
static int nsessions;
static int sessions_started;  /* once set, no more Mounts (see do_mount) */

static const char *ENV_NAMES[] = {"TERM", "LANG", "LC_ALL", "COLUMNS", "LINES", "PS1", "HOME", "USER", "PATH", "SHELL"};
#define N_ENV_NAMES (sizeof ENV_NAMES / sizeof *ENV_NAMES)

static pty_session *session_of(long long sid) {
    for (int i = 0; i < MAX_SESSIONS; i++) if (sessions[i].id && sessions[i].id == sid) return &sessions[i];
    return NULL;
}

static void pty_opened(long long sid, const char *error) {
    char head[1400], msg[1200];
    if (!error) snprintf(head, sizeof head, "{\"session\":%lld,\"ok\":true,\"blobs\":[]}", sid);
    else {
        json_escape(msg, sizeof msg, error);
        snprintf(head, sizeof head, "{\"session\":%lld,\"ok\":false,\"error\":\"%s\",\"blobs\":[]}", sid, msg);
    }
    send_json(PTY_OPENED, head, NULL, 0, NULL, 0);
}

static int has_key(jobj *o, const char *key) {
    for (int i = 0; i < o->n; i++) if (!strcmp(o->f[i].key, key)) return 1;
    return 0;
}

/* rows and cols of a PtyOpen/PtyResize: 0, or -1 after refusing the frame. */
static int pty_size(jobj *o, struct winsize *w) {
    jfield *r = jget(o, "rows", 'i'), *c = jget(o, "cols", 'i');
    if ((has_key(o, "rows") && !r) || (has_key(o, "cols") && !c)) { refuse("malformed", "'rows' and 'cols' must be integers"); return -1; }
    long long rows = r ? r->num : 24, cols = c ? c->num : 80;
    if (rows < 1 || rows > 1000 || cols < 1 || cols > 1000) {
        char m[120];
        snprintf(m, sizeof m, "terminal size %lldx%lld is out of range (1..1000)", cols, rows);
        refuse("malformed", m);
        return -1;
    }
    memset(w, 0, sizeof *w);
    w->ws_row = (unsigned short)rows;
    w->ws_col = (unsigned short)cols;
    return 0;
}

static int open_master(char *slave, size_t cap) {
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0) m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0) return -1;
    if (grantpt(m) || unlockpt(m) || ptsname_r(m, slave, cap)) { close(m); return -1; }
    return m;
}

static void pty_open(sealed *s) {
    jobj *o = &s->obj;
    jfield *sf = jget(o, "session", 'i'), *pf = jget(o, "program", 's'), *af = jget(o, "args", 'a');
    if (!sf) { refuse("malformed", "PtyOpen needs 'session', an integer"); return; }
    if (!pf) { refuse("malformed", "PtyOpen needs 'program', a string"); return; }
    if ((has_key(o, "args") && !af) || (af && af->n && !af->items[0]) || (af && af->n >= MAX_ARGS)) {
        refuse("malformed", "'args' must be a list of at most 255 strings");
        return;
    }
    struct winsize win;
    if (pty_size(o, &win)) return;
    long long sid = sf->num;
    if (sid <= 0 || sid >= (1LL << 32) || session_of(sid)) { char m[100]; snprintf(m, sizeof m, "session %lld is already open or not a valid id", sid); pty_opened(sid, m); return; }
    if (nsessions >= MAX_SESSIONS) { pty_opened(sid, "this sandbox already serves 4 terminal sessions (the most at once); close one first"); return; }
    char path[512];
    if (pf->str[0] != '/' || resolve(pf->str, path, sizeof path) || !is_allowed(path)) {
        char name[300], m[600];
        json_escape(name, sizeof name, pf->str);
        snprintf(m, sizeof m, "'%s' is not on this sandbox's command allowlist (/etc/wb/allowed: busybox's applets "
                 "under /bin and /usr/bin, as absolute paths)", name);
        pty_opened(sid, m);
        return;
    }
    /* the environment: defaults, then the names a PtyOpen may set (LD_PRELOAD and the like never) */
    static char envbuf[N_ENV_NAMES][1100];
    char *env[N_ENV_NAMES + 1];
    const char *dflt[N_ENV_NAMES] = {"xterm-256color", "C", NULL, NULL, NULL, NULL, "/tmp/w", "wb",
                                     "/bin:/sbin:/usr/bin:/usr/sbin", "/bin/sh"};
    const char *val[N_ENV_NAMES];
    memcpy(val, dflt, sizeof val);
    jobj eo = {0};
    jfield *ef = jget(o, "env", 'o');
    const char *err = NULL;
    int have_env = ef && ef->rawn && ef->raw[0] == '{' && jparse(ef->raw, ef->rawn, &eo, &err) == 0;
    if (have_env)
        for (int i = 0; i < eo.n; i++)
            for (size_t k = 0; k < N_ENV_NAMES; k++)
                if (eo.f[i].type == 's' && !strcmp(eo.f[i].key, ENV_NAMES[k]) && strlen(eo.f[i].str) < 1024) val[k] = eo.f[i].str;
    int ne = 0;
    for (size_t k = 0; k < N_ENV_NAMES; k++)
        if (val[k]) { snprintf(envbuf[k], sizeof envbuf[k], "%s=%s", ENV_NAMES[k], val[k]); env[ne++] = envbuf[k]; }
    env[ne] = NULL;
    if (have_env) jfree(&eo);

    char slave[128];
    int m = open_master(slave, sizeof slave);
    if (m < 0) { char msg[200]; snprintf(msg, sizeof msg, "no pty in the guest: %s", strerror(errno)); pty_opened(sid, msg); return; }
    ioctl(m, TIOCSWINSZ, &win);
    mkdir("/tmp/w", 0700);
    if (chown("/tmp/w", GUEST_UID, GUEST_UID)) { /* the shell starts elsewhere if it cannot */ }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        int sl = open(slave, O_RDWR);
        if (sl < 0 || ioctl(sl, TIOCSCTTY, 0)) _exit(126);
        if (fchown(sl, GUEST_UID, GUEST_UID)) { /* the terminal stays root's: still usable through the fds */ }
        dup2(sl, 0); dup2(sl, 1); dup2(sl, 2);
        for (int fd = 3; fd < 1024; fd++) close(fd);
        signal(SIGPIPE, SIG_DFL);
        write_file("/proc/self/oom_score_adj", "0");
        set_limit(RLIMIT_NOFILE, SESSION_NOFILE);
        set_limit(RLIMIT_NPROC, SESSION_NPROC);
        set_limit(RLIMIT_CORE, 0);
        if (chdir("/tmp/w")) { if (chdir("/tmp")) {} }
        if (setgroups(0, NULL) || setgid(GUEST_UID) || setuid(GUEST_UID) || getuid() == 0) {
            dprintf(2, "wb-agent: could not drop privileges\r\n");
            _exit(126);
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        char *argv[MAX_ARGS + 1];
        int na = 0;
        argv[na++] = path;
        for (int i = 0; af && i < af->n; i++) argv[na++] = af->items[i];
        argv[na] = NULL;
        execve(path, argv, env);
        dprintf(2, "wb-agent: cannot start %s: %s\r\n", path, strerror(errno));
        _exit(127);
    }
    if (pid < 0) { close(m); pty_opened(sid, "fork failed in the guest"); return; }
    fcntl(m, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < MAX_SESSIONS; i++)
        if (!sessions[i].id) {
            sessions[i] = (pty_session){(uint32_t)sid, pid, m, 1, 0, 0, NULL, 0};
            nsessions++;
            break;
        }
    sessions_started = 1;
    pty_opened(sid, NULL);
}

static void pty_flush(pty_session *t) {
    if (!t->plen) return;
    ssize_t w = write(t->fd, t->pending, t->plen > PTY_CHUNK ? PTY_CHUNK : t->plen);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return;
    size_t n = w < 0 ? t->plen : (size_t)w;  /* the child is gone: its input goes nowhere */
    memmove(t->pending, t->pending + n, t->plen - n);
    t->plen -= n;
}

/* One read of the session's output: 1 relayed (or nothing yet), 0 the output ended. */
static int pty_read(pty_session *t) {
    unsigned char buf[4 + PTY_CHUNK];
    ssize_t r = read(t->fd, buf + 4, PTY_CHUNK);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
    if (r <= 0) { t->out_open = 0; return 0; }  /* EIO: every slave fd closed */
    put32(buf, t->id);
    send_frame(PTY_DATA, buf, 4 + (size_t)r, NULL, 0, NULL, 0);
    return 1;
}

static void pty_free(pty_session *t) {
    close(t->fd);
    free(t->pending);
    memset(t, 0, sizeof *t);
    nsessions--;
}

/* Children that exited: their sessions end (output drained first) with PtyClosed. */
static void pty_reap(void) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0)  /* orphans of a session (we are the subreaper) too */
        for (int i = 0; i < MAX_SESSIONS; i++)
            if (sessions[i].id && sessions[i].pid == p) { sessions[i].exited = 1; sessions[i].status = st; }
    for (int i = 0; i < MAX_SESSIONS; i++) {
        pty_session *t = &sessions[i];
        if (!t->id || !t->exited) continue;
        for (int k = 0; k < 64 && t->out_open && pty_read(t); k++) {
            struct pollfd q = {t->fd, POLLIN, 0};
            if (poll(&q, 1, 0) <= 0) break;
        }
        kill(-t->pid, SIGHUP);  /* a background job holding the terminal goes with it */
        int code = WIFSIGNALED(t->status) ? 128 + WTERMSIG(t->status) : WEXITSTATUS(t->status);
        char head[120];
        snprintf(head, sizeof head, "{\"session\":%u,\"exit_code\":%d,\"blobs\":[]}", t->id, code);
        pty_free(t);
        send_json(PTY_CLOSED, head, NULL, 0, NULL, 0);
    }
}

/* The host left (or shuts the guest down): every session and every process of uid 1000 ends. */
static void pty_hang_up_all(void) {
    if (!nsessions) return;
    for (int i = 0; i < MAX_SESSIONS; i++) {
        pty_session *t = &sessions[i];
        if (!t->id) continue;
        kill(-t->pid, SIGHUP);
        kill(-t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        pty_free(t);
    }
    sweep_guest_user();
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

static void pty_data_from_host(const unsigned char *payload, uint32_t n) {
    if (n < SECRET_BYTES + 4 || !same_secret(payload)) { refuse("secret", "PtyData without the session secret; refused"); return; }
    pty_session *t = session_of(get32(payload + SECRET_BYTES));
    size_t len = n - SECRET_BYTES - 4;
    if (!t || !t->out_open || !len) return;  /* a session that ended takes no more keystrokes */
    unsigned char *nb = realloc(t->pending, t->plen + len);
    if (!nb) return;
    t->pending = nb;
    memcpy(t->pending + t->plen, payload + SECRET_BYTES + 4, len);
    t->plen += len;
    pty_flush(t);
}

static void pty_control(int kind, sealed *s) {
    jfield *sf = jget(&s->obj, "session", 'i');
    if (!sf) { refuse("malformed", "missing field 'session' (an integer)"); return; }
    pty_session *t = session_of(sf->num);
    if (kind == PTY_OPEN) { pty_open(s); return; }
    if (kind == PTY_RESIZE) {
        struct winsize win;
        if (pty_size(&s->obj, &win) == 0 && t) ioctl(t->fd, TIOCSWINSZ, &win);  /* the kernel sends SIGWINCH */
        return;
    }
    if (t) kill(-t->pid, SIGHUP);  /* PtyClose */
}

/* --- host folders (wbx shell --mount): virtio-9p slots the VM was started with ---------- */
/* Mount{slot, guest, rw} (sealed) mounts the 9p export tagged "wbm<slot>" at an absolute,
 * normalised guest path outside the guest's system folders, nosuid and nodev, read-only
 * unless rw (QEMU exports an unused slot, or a read-only one, read-only as well). Only
 * before the first terminal session: no uid-1000 process exists yet to race the folders
 * created on the way (the initramfs is root's). Answered with Mounted{slot, ok, error}. */

#define MOUNT_SLOTS 4

static void mounted(long long slot, const char *error) {
    char head[1400], msg[1200];
    json_escape(msg, sizeof msg, error ? error : "");
    snprintf(head, sizeof head, "{\"slot\":%lld,\"ok\":%s,\"error\":\"%s\",\"blobs\":[]}", slot, error ? "false" : "true", msg);
    send_json(MOUNTED, head, NULL, 0, NULL, 0);
}

static const char *guest_path_problem(const char *g) {
    static const char *reserved[] = {"/proc", "/dev", "/sys", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/wb", "/run", "/init", "/root"};
    size_t n = strlen(g);
    if (g[0] != '/' || n < 2 || n > 200 || g[n - 1] == '/') return "the guest path must be absolute, normalised and not /";
    for (const char *p = g; *p; p++) {
        if (p[0] == '/' && (p[1] == '/' || (p[1] == '.' && (p[2] == '/' || !p[2] || (p[2] == '.' && (p[3] == '/' || !p[3]))))))
            return "the guest path must be normalised (no '//', '.' or '..')";
    }
    for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++) {
        size_t r = strlen(reserved[i]);
        if (!strncmp(g, reserved[i], r) && (g[r] == 0 || g[r] == '/')) return "the guest path is inside a system folder of the guest";
    }
    return NULL;
}

static void do_mount(sealed *s) {
    jobj *o = &s->obj;
    jfield *sl = jget(o, "slot", 'i'), *gf = jget(o, "guest", 's'), *rwf = jget(o, "rw", 'o');
    if (!sl || !gf) { refuse("malformed", "Mount needs 'slot' (an integer) and 'guest' (a string)"); return; }
    int rw = rwf && rwf->rawn == 4 && !memcmp(rwf->raw, "true", 4);
    if (sl->num < 0 || sl->num >= MOUNT_SLOTS) { mounted(sl->num, "no such mount slot (0..3)"); return; }
    if (sessions_started) { mounted(sl->num, "mounts are made before the first terminal session only"); return; }
    const char *why = guest_path_problem(gf->str);
    if (why) { mounted(sl->num, why); return; }
    char path[256];
    snprintf(path, sizeof path, "%s", gf->str);
    for (char *p = path + 1; ; p++) {  /* mkdir -p, as root, of root-owned folders */
        char c = *p;
        if (c == '/' || c == 0) {
            *p = 0;
            struct stat st;
            if (mkdir(path, 0755) && errno != EEXIST) { mounted(sl->num, strerror(errno)); return; }
            if (lstat(path, &st) || !S_ISDIR(st.st_mode)) { mounted(sl->num, "a part of the guest path is not a folder"); return; }
            *p = c;
        }
        if (!c) break;
    }
    char tag[16];
    snprintf(tag, sizeof tag, "wbm%lld", sl->num);
    unsigned long flags = MS_NOSUID | MS_NODEV | (rw ? 0 : MS_RDONLY);
    if (mount(tag, path, "9p", flags, "trans=virtio,version=9p2000.L,cache=none,msize=262144")) {
        char m[300];
        snprintf(m, sizeof m, "mount %s at %s: %s", tag, path, strerror(errno));
        mounted(sl->num, m);
        return;
    }
    mounted(sl->num, NULL);
}

/* --- wb-cap: the guest command's side of a broker call -------------------------------- */

static int cap_main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: wb-cap <cap> <json request>\n"); return 2; }
    size_t cl = strlen(argv[1]), rl = strlen(argv[2]);
    if (!cl || cl > 64 || rl > MAX_CAP_REQ - 100) { fprintf(stderr, "wb-cap: cap name or request too long\n"); return 2; }
    unsigned char h[4];
    put32(h, (uint32_t)(cl + 1 + rl));
    if (write_all(3, h, 4) || write_all(3, argv[1], cl + 1) || write_all(3, argv[2], rl)) {
        fprintf(stderr, "wb-cap: no broker channel (fd 3): %s\n", strerror(errno));
        return 3;
    }
    unsigned char a[8];
    if (read_exact(3, a, 8)) { fprintf(stderr, "wb-cap: the broker channel closed\n"); return 3; }
    uint32_t status = get32(a), n = get32(a + 4);
    if (n > MAX_FRAME) return 3;
    unsigned char *body = malloc(n + 1);
    if (!body || read_exact(3, body, n)) return 3;
    write_all(1, body, n);
    write_all(1, "\n", 1);
    return status == 0 ? 0 : 1;
}

/* --- the session ------------------------------------------------------------------------ */

static void read_secret(void) {
    char buf[4096];
    int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    char *p = strstr(buf, "wb.secret=");
    if (!p) return;
    p += strlen("wb.secret=");
    size_t len = strcspn(p, " \n");
    if (unhex(p, len, secret, SECRET_BYTES) == 0) have_secret = 1;
    /* nobody after us reads the secret from the command line */
    mount("/dev/null", "/proc/cmdline", NULL, MS_BIND, NULL);
}

static int open_port(void) {
    DIR *d = opendir("/sys/class/virtio-ports");
    if (!d) return -1;
    struct dirent *e;
    int fd = -1;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[300], name[64] = {0};
        snprintf(p, sizeof p, "/sys/class/virtio-ports/%s/name", e->d_name);
        int nf = open(p, O_RDONLY);
        if (nf < 0) continue;
        ssize_t r = read(nf, name, sizeof name - 1);
        close(nf);
        if (r > 0 && !strncmp(name, "wb.0", 4)) {
            snprintf(p, sizeof p, "/dev/%s", e->d_name);
            fd = open(p, O_RDWR | O_CLOEXEC);
            break;
        }
    }
    closedir(d);
    return fd;
}

/* A restored guest resumes with the snapshot's kernel RNG state, the same in every VM restored
 * from it: the host's fresh seed (in the Ping) is credited to the input pool and the CRNG
 * reseeded from it at once, before any guest process can read /dev/urandom. */
static int reseed(const unsigned char *seed) {
    struct { struct rand_pool_info info; unsigned char buf[SEED_BYTES]; } p;
    p.info.entropy_count = SEED_BYTES * 8;
    p.info.buf_size = SEED_BYTES;
    memcpy(p.buf, seed, SEED_BYTES);
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = ioctl(fd, RNDADDENTROPY, &p.info) || ioctl(fd, RNDRESEEDCRNG);
    close(fd);
    memset(&p, 0, sizeof p);
    return r ? -1 : 0;
}

/* One frame from the host, dispatched. */
static void from_host(void) {
    int kind; unsigned char *payload; uint32_t n;
    if (recv_frame(&kind, &payload, &n)) { authed = 0; pty_hang_up_all(); usleep(50000); return; }
    if (kind == PING) {
        if ((n != SECRET_BYTES + 2 && n != SECRET_BYTES + 2 + SEED_BYTES) || !same_secret(payload)) {
            authed = 0;
            refuse("secret", "Ping without the session secret; refused");
        } else if ((payload[32] | payload[33] << 8) != VERSION) {
            refuse("version", "the host speaks another protocol version; this agent speaks 1");
        } else if (n == SECRET_BYTES + 2 + SEED_BYTES && reseed(payload + SECRET_BYTES + 2)) {
            authed = 0;
            refuse("reseed", "the guest could not reseed its random number generator; refused");
        } else {
            unsigned char v[2] = {VERSION, 0};
            authed = 1;
            send_frame(PONG, v, 2, NULL, 0, NULL, 0);
        }
    } else if (kind == SHUTDOWN) {
        if (n == SECRET_BYTES && same_secret(payload)) { pty_hang_up_all(); sync(); reboot(RB_POWER_OFF); }
        refuse("secret", "Shutdown without the session secret; refused");
    } else if (kind == PTY_DATA) {
        if (!authed) refuse("unexpected", "PtyData before a Ping with the session secret; refused");
        else pty_data_from_host(payload, n);
    } else if (kind == EXEC || kind == PTY_OPEN || kind == PTY_RESIZE || kind == PTY_CLOSE || kind == MOUNT) {
        sealed s;
        const char *reason, *err;
        if (!authed) refuse("unexpected", "a request before a Ping with the session secret; refused");
        else if (open_sealed(payload, n, &s, &reason, &err)) refuse(reason, err);
        else {
            if (kind == MOUNT) do_mount(&s);
            else if (kind != EXEC) pty_control(kind, &s);
            /* a call sweeps every process of uid 1000 when it ends: never while sessions run */
            else if (nsessions) refuse("unexpected", "terminal sessions are open in this guest; Exec runs in a guest without them");
            else do_exec(&s);
            jfree(&s.obj);
        }
    } else {
        char m[80];
        snprintf(m, sizeof m, "frame type 0x%02x is not one the agent accepts", kind);
        refuse("unknown-type", m);
    }
    free(payload);
}

static void serve(void) {
    for (;;) {
        struct pollfd q[1 + MAX_SESSIONS];
        int who[1 + MAX_SESSIONS], nq = 0, iport = -1;
        size_t backlog = 0;
        for (int i = 0; i < MAX_SESSIONS; i++) backlog += sessions[i].plen;
        if (backlog < PENDING_CAP) { iport = nq; q[nq++] = (struct pollfd){port, POLLIN, 0}; }
        for (int i = 0; i < MAX_SESSIONS; i++) {
            pty_session *t = &sessions[i];
            short ev = (short)((t->id && t->out_open ? POLLIN : 0) | (t->id && t->plen ? POLLOUT : 0));
            if (ev) { who[nq] = i; q[nq++] = (struct pollfd){t->fd, ev, 0}; }
        }
        int r = poll(q, (nfds_t)nq, nsessions ? 200 : 1000);
        if (r < 0 && errno != EINTR) { usleep(50000); continue; }
        for (int k = 0; r > 0 && k < nq; k++) {
            if (k == iport || !q[k].revents) continue;
            pty_session *t = &sessions[who[k]];
            if (q[k].revents & POLLOUT) pty_flush(t);
            if (q[k].revents & (POLLIN | POLLHUP | POLLERR)) pty_read(t);
        }
        if (nsessions) pty_reap();
        if (iport < 0 || r <= 0 || !q[iport].revents) continue;
        if (!(q[iport].revents & POLLIN)) {  /* no host on the other end: a new one must authenticate */
            authed = 0;
            pty_hang_up_all();
            usleep(50000);
            continue;
        }
        from_host();
    }
}

int main(int argc, char **argv) {
    const char *base = strrchr(argv[0], '/');
    base = base ? base + 1 : argv[0];
    if (!strcmp(base, "wb-cap")) return cap_main(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);  /* orphans of a call are reaped here */
    write_file("/proc/self/oom_score_adj", "-1000");  /* a guest out of memory never loses its agent */
    read_secret();
    load_allowlist();
    /* terminal sessions need a devpts (the image's /init mounts only devtmpfs); a restarted
     * agent finds it mounted already */
    mkdir("/dev/pts", 0755);
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666");
    for (int i = 0; port < 0; i++) {
        port = open_port();
        if (port < 0) sleep(1);
        if (i == 60) { fprintf(stderr, "wb-agent: no virtio port named wb.0\n"); return 1; }
    }
    fprintf(stderr, "wb-agent: serving on wb.0 (secret %s, %zu allowlist bytes)\n", have_secret ? "set" : "MISSING", allowed_len);
    serve();
    return 0;
}
