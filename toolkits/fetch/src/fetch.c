/* fetch: an HTTP(S) GET through the Dock's net cap — NetGuard, #+ALLOWED_HOSTS, capped body. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wb_dock.h"

static int usage(void) {
    fputs("usage: fetch [-i] [-m MAX_BYTES] [-t SECONDS] [-H 'Name: value']... URL\n", stderr);
    return 2;
}

int main(int argc, char **argv) {
    const char *url = NULL, *headers[32];
    int nheaders = 0, show = 0;
    long long max = 0;
    double timeout = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-i")) show = 1;
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) max = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) timeout = atof(argv[++i]);
        else if (!strcmp(argv[i], "-H") && i + 1 < argc && nheaders < 32) headers[nheaders++] = argv[++i];
        else if (argv[i][0] != '-' && !url) url = argv[i];
        else return usage();
    }
    if (!url) return usage();

    wb_buf req = {0};
    wb_map(&req, 3 + (max > 0) + (timeout > 0));
    wb_text(&req, "op"); wb_text(&req, "fetch");
    wb_text(&req, "url"); wb_text(&req, url);
    wb_text(&req, "headers"); wb_map(&req, (size_t)nheaders);
    for (int h = 0; h < nheaders; h++) {
        const char *colon = strchr(headers[h], ':');
        if (!colon) { fprintf(stderr, "fetch: header %s needs 'Name: value'\n", headers[h]); return 2; }
        const char *v = colon + 1;
        while (*v == ' ') v++;
        wb_textn(&req, headers[h], (size_t)(colon - headers[h])); wb_text(&req, v);
    }
    if (max > 0) { wb_text(&req, "max_bytes"); wb_uint(&req, (uint64_t)max); }
    if (timeout > 0) {  /* CBOR has floats, but whole seconds keep the encoder small */
        wb_text(&req, "timeout"); wb_uint(&req, (uint64_t)(timeout < 1 ? 1 : timeout));
    }

    wb_val resp;
    int st = wb_call(wb_net, &req, &resp);
    if (st) {
        fprintf(stderr, "fetch: %s\n", resp.p ? wb_error_message(resp) : "failed");
        wb_free(&req, &resp);
        return wb_exit_code(st);
    }
    int64_t status = 0;
    const uint8_t *body; size_t n;
    if (wb_get_int(resp, "status", &status) || wb_get_bytes(resp, "body", &body, &n)) {
        fputs("fetch: malformed response from the host\n", stderr);
        wb_free(&req, &resp);
        return 70;
    }
    if (show) {
        wb_val hs;
        printf("HTTP %lld\n", (long long)status);
        if (!wb_get(resp, "headers", &hs)) {
            int64_t count = wb_count(hs);
            for (int64_t i = 0; i < count; i++) {
                wb_val pair, k, v; const uint8_t *kp, *vp; size_t kn, vn;
                if (wb_at(hs, (size_t)i, &pair) || wb_at(pair, 0, &k) || wb_at(pair, 1, &v)) break;
                if (wb_as_bytes(k, &kp, &kn) || wb_as_bytes(v, &vp, &vn)) break;
                printf("%.*s: %.*s\n", (int)kn, (const char *)kp, (int)vn, (const char *)vp);
            }
        }
        printf("\n");
    }
    fwrite(body, 1, n, stdout);
    if (status >= 400) fprintf(stderr, "fetch: HTTP %lld from %s\n", (long long)status, url);
    wb_free(&req, &resp);
    return status >= 400 ? 1 : 0;
}
