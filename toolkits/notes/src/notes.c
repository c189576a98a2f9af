/* notes: durable key-value notes through the Dock's kv cap (wb_dock.h). */
#include <stdio.h>
#include <string.h>

#include "wb_dock.h"

#define MAX_NOTE (1u << 20)

static int fail(int status, wb_val *resp, const char *what) {
    fprintf(stderr, "notes: %s: %s\n", what, resp && resp->p ? wb_error_message(*resp) : "failed");
    return wb_exit_code(status);
}

static int usage(void) {
    fputs("usage: notes put KEY < text | get KEY | rm KEY | list [PREFIX] | count\n", stderr);
    return 2;
}

static int op_put(const char *key) {
    static unsigned char note[MAX_NOTE + 1];
    size_t n = fread(note, 1, sizeof note, stdin);
    if (n > MAX_NOTE) { fputs("notes: a note is at most 1 MiB\n", stderr); return 2; }
    wb_buf req = {0}; wb_val resp;
    wb_map(&req, 3);
    wb_text(&req, "op"); wb_text(&req, "put");
    wb_text(&req, "key"); wb_text(&req, key);
    wb_text(&req, "value"); wb_bytes(&req, note, n);
    int st = wb_call(wb_kv, &req, &resp);
    int rc = st ? fail(st, &resp, "put") : 0;
    if (!st) fprintf(stderr, "saved %s (%zu bytes)\n", key, n);
    wb_free(&req, &resp);
    return rc;
}

static int op_key(const char *op, const char *key) {
    wb_buf req = {0}; wb_val resp;
    wb_map(&req, 2);
    wb_text(&req, "op"); wb_text(&req, op);
    wb_text(&req, "key"); wb_text(&req, key);
    int st = wb_call(wb_kv, &req, &resp), rc = 0;
    if (st) rc = fail(st, &resp, op);
    else if (!strcmp(op, "get")) {
        const uint8_t *p; size_t n;
        if (wb_get_bytes(resp, "value", &p, &n)) rc = fail(WB_GUEST_ERROR, NULL, "malformed response");
        else fwrite(p, 1, n, stdout);
    } else {
        wb_val v;
        if (!wb_get(resp, "deleted", &v) && v.p[0] == 0xf4) { fprintf(stderr, "notes: no note %s\n", key); rc = 1; }
    }
    wb_free(&req, &resp);
    return rc;
}

static int op_list(const char *prefix) {
    char after[1100] = "";
    for (;;) {
        wb_buf req = {0}; wb_val resp, keys;
        wb_map(&req, 3);
        wb_text(&req, "op"); wb_text(&req, "list");
        wb_text(&req, "prefix"); wb_text(&req, prefix);
        wb_text(&req, "after"); wb_text(&req, after);
        int st = wb_call(wb_kv, &req, &resp);
        if (st) { int rc = fail(st, &resp, "list"); wb_free(&req, &resp); return rc; }
        if (wb_get(resp, "keys", &keys)) { wb_free(&req, &resp); return fail(WB_GUEST_ERROR, NULL, "malformed response"); }
        int64_t count = wb_count(keys);
        for (int64_t i = 0; i < count; i++) {
            wb_val k; const uint8_t *p; size_t n;
            if (wb_at(keys, (size_t)i, &k) || wb_as_bytes(k, &p, &n)) break;
            printf("%.*s\n", (int)n, (const char *)p);
            if (i == count - 1 && n < sizeof after) { memcpy(after, p, n); after[n] = 0; }
        }
        wb_free(&req, &resp);
        if (count < 1000) return 0;
    }
}

static int op_count(void) {
    wb_buf req = {0}; wb_val resp;
    wb_map(&req, 1); wb_text(&req, "op"); wb_text(&req, "count");
    int st = wb_call(wb_kv, &req, &resp), rc = 0;
    int64_t n = 0, cap = 0;
    if (st) rc = fail(st, &resp, "count");
    else if (!wb_get_int(resp, "count", &n) && !wb_get_int(resp, "cap", &cap)) printf("%lld of %lld\n", (long long)n, (long long)cap);
    wb_free(&req, &resp);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    const char *cmd = argv[1];
    if (!strcmp(cmd, "put") && argc == 3) return op_put(argv[2]);
    if ((!strcmp(cmd, "get") || !strcmp(cmd, "rm")) && argc == 3) return op_key(!strcmp(cmd, "rm") ? "delete" : "get", argv[2]);
    if (!strcmp(cmd, "list") && argc <= 3) return op_list(argc == 3 ? argv[2] : "");
    if (!strcmp(cmd, "count") && argc == 2) return op_count();
    return usage();
}
