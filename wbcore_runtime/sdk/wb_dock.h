/* SPDX-License-Identifier: Apache-2.0
 * wb_dock.h — the guest side of the wbcore Dock ABI (docs/dock.md), header-only C.
 *
 * Every capability is one import in module "wb":
 *     int64_t wb.<cap>(req_ptr, req_len, resp_ptr, resp_cap)
 * The request is a CBOR map {"op": "...", ...args}. The result is the response length
 * (>= 0) or -status (WB_NOT_FOUND ... WB_INTERNAL). The response — or, on error, the
 * map {"error": kind, "reason": ..., "message": ...} — is written at resp_ptr only if
 * it fits in resp_cap; wb.fetch(ptr, cap) copies it again (two-call protocol) until the
 * next call. Only the imports a program actually calls end up in its module, and a
 * module importing a cap its toolkit is not granted does not instantiate.
 *
 * The C lanes put this header on every build's include path (-I/wb-sdk): write
 * #include "wb_dock.h" and ship no copy. To build elsewhere with clang / zig cc
 * --target=wasm32-wasi, add -I$(python -c 'import wbcore_runtime.dispatch.dock as d; print(d.SDK_C)').
 * tcc (the c-wasm lane) names an import by an asm label "module.name" instead of clang's
 * import_module/import_name attributes: the declarations below spell both.
 *
 *   wb_buf req = {0};
 *   wb_map(&req, 2); wb_text(&req, "op"); wb_text(&req, "get");
 *   wb_text(&req, "key"); wb_text(&req, "greeting");
 *   wb_val resp; int st = wb_call(wb_kv, &req, &resp);
 *   if (st == WB_OK) { const uint8_t *v; size_t n; wb_get_bytes(resp, "value", &v, &n); }
 *   else fprintf(stderr, "%s\n", wb_error_message(resp));
 *   wb_free(&req, &resp);
 */
#ifndef WB_DOCK_H
#define WB_DOCK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int64_t (*wb_fn)(const void *req, uint32_t req_len, void *resp, uint32_t resp_cap);
#if defined(__TINYC__)
/* tcc (the c-wasm lane): an import is a symbol's asm label, "wb.<cap>", and tcc learns an
 * import's signature only from a direct call, so each cap is a small function calling its
 * import directly. tcc keeps every function it compiles, so only the caps the lane names
 * with -DWB_CAP_<cap> (the manifest's #+CAPS) are defined: a module that imported every cap
 * would not instantiate without every grant. fetch and info are always linked. */
#define WB_CAP_THUNK(n) int64_t wb_import_##n(const void *, uint32_t, void *, uint32_t) __asm__("wb." #n); \
    static int64_t wb_##n(const void *q, uint32_t ql, void *r, uint32_t rc) { return wb_import_##n(q, ql, r, rc); }
int64_t wb_import_fetch(void *, uint32_t) __asm__("wb.fetch");
static int64_t wb_fetch(void *r, uint32_t rc) { return wb_import_fetch(r, rc); }
int64_t wb_import_info(void *, uint32_t) __asm__("wb.info");
static int64_t wb_info(void *r, uint32_t rc) { return wb_import_info(r, rc); }
#ifdef WB_CAP_vfs
WB_CAP_THUNK(vfs)
#endif
#ifdef WB_CAP_kv
WB_CAP_THUNK(kv)
#endif
#ifdef WB_CAP_queue
WB_CAP_THUNK(queue)
#endif
#ifdef WB_CAP_secrets
WB_CAP_THUNK(secrets)
#endif
#ifdef WB_CAP_net
WB_CAP_THUNK(net)
#endif
#ifdef WB_CAP_browse
WB_CAP_THUNK(browse)
#endif
#ifdef WB_CAP_tcp
WB_CAP_THUNK(tcp)
#endif
#ifdef WB_CAP_udp
WB_CAP_THUNK(udp)
#endif
#ifdef WB_CAP_tls
WB_CAP_THUNK(tls)
#endif
#ifdef WB_CAP_llm
WB_CAP_THUNK(llm)
#endif
#ifdef WB_CAP_exec
WB_CAP_THUNK(exec)
#endif
#ifdef WB_CAP_commands
WB_CAP_THUNK(commands)
#endif
#ifdef WB_CAP_parallel
WB_CAP_THUNK(parallel)
#endif
#else
#define WB_IMPORT(n) __attribute__((import_module("wb"), import_name(#n)))
WB_IMPORT(vfs) int64_t wb_vfs(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(kv) int64_t wb_kv(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(queue) int64_t wb_queue(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(secrets) int64_t wb_secrets(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(net) int64_t wb_net(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(browse) int64_t wb_browse(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(tcp) int64_t wb_tcp(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(udp) int64_t wb_udp(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(tls) int64_t wb_tls(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(llm) int64_t wb_llm(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(exec) int64_t wb_exec(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(commands) int64_t wb_commands(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(parallel) int64_t wb_parallel(const void *, uint32_t, void *, uint32_t);
WB_IMPORT(fetch) int64_t wb_fetch(void *, uint32_t);
WB_IMPORT(info) int64_t wb_info(void *, uint32_t);
#endif

enum { WB_OK = 0, WB_NOT_FOUND = 1, WB_INVALID_ARGS = 2, WB_TIMEOUT = 3, WB_CAPABILITY_DENIED = 4, WB_INTERNAL = 5,
       WB_GUEST_ERROR = 6 /* the guest's own problem: out of memory, malformed response */ };

/* A guest's exit code for a Dock status (WASI exit codes must be < 126, so the sysexits
 * family): not-found 66 (EX_NOINPUT), invalid-args 65 (EX_DATAERR), timeout 75
 * (EX_TEMPFAIL), capability-denied 77 (EX_NOPERM), internal / guest error 70 (EX_SOFTWARE). */
static inline int wb_exit_code(int status) {
    static const int codes[] = {0, 66, 65, 75, 77, 70, 70};
    return status >= 0 && status <= 6 ? codes[status] : 70;
}

#ifndef WB_MAX_REQUEST
#define WB_MAX_REQUEST (64u << 20) /* the host refuses larger requests anyway */
#endif
#ifndef WB_FIRST_READ
#define WB_FIRST_READ 4096u
#endif

/* --- CBOR writer --------------------------------------------------------------------- */

typedef struct { uint8_t *p; size_t len, cap; int oom; } wb_buf;

static inline void wb_put(wb_buf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > WB_MAX_REQUEST) { b->oom = 1; return; }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = (uint8_t *)realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p; b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static inline void wb_head(wb_buf *b, int major, uint64_t n) {
    uint8_t h[9]; size_t k;
    if (n < 24) { h[0] = (uint8_t)(major << 5 | n); k = 1; }
    else if (n <= 0xff) { h[0] = (uint8_t)(major << 5 | 24); h[1] = (uint8_t)n; k = 2; }
    else if (n <= 0xffff) { h[0] = (uint8_t)(major << 5 | 25); h[1] = (uint8_t)(n >> 8); h[2] = (uint8_t)n; k = 3; }
    else if (n <= 0xffffffffu) { h[0] = (uint8_t)(major << 5 | 26); for (int i = 0; i < 4; i++) h[1 + i] = (uint8_t)(n >> (24 - 8 * i)); k = 5; }
    else { h[0] = (uint8_t)(major << 5 | 27); for (int i = 0; i < 8; i++) h[1 + i] = (uint8_t)(n >> (56 - 8 * i)); k = 9; }
    wb_put(b, h, k);
}

static inline void wb_map(wb_buf *b, size_t pairs) { wb_head(b, 5, pairs); }
static inline void wb_array(wb_buf *b, size_t items) { wb_head(b, 4, items); }
static inline void wb_textn(wb_buf *b, const char *s, size_t n) { wb_head(b, 3, n); wb_put(b, s, n); }
static inline void wb_text(wb_buf *b, const char *s) { wb_textn(b, s, strlen(s)); }
static inline void wb_bytes(wb_buf *b, const void *p, size_t n) { wb_head(b, 2, n); wb_put(b, p, n); }
static inline void wb_uint(wb_buf *b, uint64_t u) { wb_head(b, 0, u); }
static inline void wb_int(wb_buf *b, int64_t i) { if (i >= 0) wb_head(b, 0, (uint64_t)i); else wb_head(b, 1, (uint64_t)(-1 - i)); }
static inline void wb_bool(wb_buf *b, int v) { uint8_t c = v ? 0xf5 : 0xf4; wb_put(b, &c, 1); }
static inline void wb_null(wb_buf *b) { uint8_t c = 0xf6; wb_put(b, &c, 1); }

/* --- CBOR reader (definite lengths, as the host writes) ------------------------------ */

typedef struct { const uint8_t *p; size_t len; } wb_val; /* one encoded item */

static inline int wb__head(const uint8_t *p, size_t len, size_t *off, int *major, uint64_t *arg) {
    if (*off >= len) return -1;
    uint8_t ib = p[(*off)++];
    *major = ib >> 5;
    int ai = ib & 31;
    if (ai < 24) { *arg = (uint64_t)ai; return 0; }
    int n = ai == 24 ? 1 : ai == 25 ? 2 : ai == 26 ? 4 : ai == 27 ? 8 : -1;
    if (n < 0 || *off + (size_t)n > len) return -1;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[(*off)++];
    *arg = v;
    return 0;
}

/* Advance *off past one item. */
static inline int wb__skip(const uint8_t *p, size_t len, size_t *off, int depth) {
    int major; uint64_t arg;
    if (depth > 64 || wb__head(p, len, off, &major, &arg)) return -1;
    switch (major) {
    case 0: case 1: case 7: return 0;
    case 2: case 3: if (arg > len - *off) return -1; *off += (size_t)arg; return 0;
    case 4: for (uint64_t i = 0; i < arg; i++) if (wb__skip(p, len, off, depth + 1)) return -1; return 0;
    case 5: for (uint64_t i = 0; i < 2 * arg; i++) if (wb__skip(p, len, off, depth + 1)) return -1; return 0;
    case 6: return wb__skip(p, len, off, depth + 1);
    }
    return -1;
}

/* Number of items of an array, or pairs of a map; -1 otherwise. */
static inline int64_t wb_count(wb_val v) {
    size_t off = 0; int major; uint64_t arg;
    if (wb__head(v.p, v.len, &off, &major, &arg) || (major != 4 && major != 5)) return -1;
    return (int64_t)arg;
}

/* The i-th item of an array. */
static inline int wb_at(wb_val arr, size_t i, wb_val *out) {
    size_t off = 0; int major; uint64_t n;
    if (wb__head(arr.p, arr.len, &off, &major, &n) || major != 4 || i >= n) return -1;
    for (size_t k = 0; k < i; k++) if (wb__skip(arr.p, arr.len, &off, 0)) return -1;
    size_t start = off;
    if (wb__skip(arr.p, arr.len, &off, 0)) return -1;
    out->p = arr.p + start; out->len = off - start;
    return 0;
}

/* The value under text key `key` in a map. */
static inline int wb_get(wb_val map, const char *key, wb_val *out) {
    size_t off = 0, klen = strlen(key); int major; uint64_t n;
    if (wb__head(map.p, map.len, &off, &major, &n) || major != 5) return -1;
    for (uint64_t i = 0; i < n; i++) {
        size_t koff = off; int km; uint64_t kn;
        if (wb__head(map.p, map.len, &koff, &km, &kn)) return -1;
        int match = km == 3 && kn == klen && koff + klen <= map.len && memcmp(map.p + koff, key, klen) == 0;
        if (wb__skip(map.p, map.len, &off, 0)) return -1;
        size_t start = off;
        if (wb__skip(map.p, map.len, &off, 0)) return -1;
        if (match) { out->p = map.p + start; out->len = off - start; return 0; }
    }
    return -1;
}

/* A byte or text string's contents (not NUL-terminated). */
static inline int wb_as_bytes(wb_val v, const uint8_t **p, size_t *n) {
    size_t off = 0; int major; uint64_t len;
    if (wb__head(v.p, v.len, &off, &major, &len) || (major != 2 && major != 3) || len > v.len - off) return -1;
    *p = v.p + off; *n = (size_t)len;
    return 0;
}

static inline int wb_as_int(wb_val v, int64_t *out) {
    size_t off = 0; int major; uint64_t arg;
    if (wb__head(v.p, v.len, &off, &major, &arg)) return -1;
    if (major == 0) { *out = (int64_t)arg; return 0; }
    if (major == 1) { *out = -1 - (int64_t)arg; return 0; }
    return -1;
}

static inline int wb_is_null(wb_val v) { return v.len == 1 && v.p[0] == 0xf6; }

static inline int wb_get_bytes(wb_val map, const char *key, const uint8_t **p, size_t *n) {
    wb_val v;
    return wb_get(map, key, &v) || wb_as_bytes(v, p, n);
}

static inline int wb_get_int(wb_val map, const char *key, int64_t *out) {
    wb_val v;
    return wb_get(map, key, &v) || wb_as_int(v, out);
}

/* --- calling ------------------------------------------------------------------------- */

/* Send `req` to a cap (wb_kv, wb_net, ...). Returns WB_OK or the error status; *resp
 * holds the response or the error map either way (malloc'd: wb_free it). */
static inline int wb_call(wb_fn fn, const wb_buf *req, wb_val *resp) {
    resp->p = NULL; resp->len = 0;
    if (req->oom) return WB_GUEST_ERROR;
    uint8_t *buf = (uint8_t *)malloc(WB_FIRST_READ);
    if (!buf) return WB_GUEST_ERROR;
    int64_t r = fn(req->p, (uint32_t)req->len, buf, WB_FIRST_READ);
    int status = r < 0 ? (int)-r : WB_OK;
    int64_t n = r < 0 ? wb_fetch(NULL, 0) : r;  /* wb.fetch(_, 0) reports the length */
    if (n > (int64_t)WB_FIRST_READ) {
        uint8_t *big = (uint8_t *)realloc(buf, (size_t)n);
        if (!big) { free(buf); return WB_GUEST_ERROR; }
        buf = big;
        if (wb_fetch(buf, (uint32_t)n) != n) { free(buf); return WB_GUEST_ERROR; }
    } else if (r < 0 && n > 0) {
        wb_fetch(buf, (uint32_t)n);
    }
    resp->p = buf; resp->len = (size_t)(n < 0 ? 0 : n);
    return status;
}

/* The "message" of an error response ("" when there is none); a static copy. */
static inline const char *wb_error_message(wb_val resp) {
    static char msg[1024];
    const uint8_t *p; size_t n;
    msg[0] = 0;
    if (!wb_get_bytes(resp, "message", &p, &n)) {
        if (n >= sizeof msg) n = sizeof msg - 1;
        memcpy(msg, p, n); msg[n] = 0;
    }
    return msg;
}

static inline void wb_free(wb_buf *req, wb_val *resp) {
    if (req) { free(req->p); req->p = NULL; req->len = req->cap = 0; req->oom = 0; }
    if (resp) { free((void *)resp->p); resp->p = NULL; resp->len = 0; }
}

#endif /* WB_DOCK_H */
