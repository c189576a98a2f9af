/* pipe: run registered commands in sequence, each one's stdout feeding the next (commands cap). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wb_dock.h"

#define MAX_INPUT (16u << 20)

static int usage(void) {
    fputs("usage: pipe CMD [ARG...] [-- CMD [ARG...]]...   (stdin feeds the first command)\n", stderr);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    uint8_t *data = (uint8_t *)malloc(MAX_INPUT + 1);
    if (!data) return 70;
    size_t len = fread(data, 1, MAX_INPUT + 1, stdin);
    if (len > MAX_INPUT) { fputs("pipe: stdin over 16 MiB\n", stderr); return 2; }
    int stage = 0;
    for (int i = 1; i < argc;) {
        int end = i;
        while (end < argc && strcmp(argv[end], "--")) end++;
        if (end == i) return usage();
        stage++;
        wb_buf req = {0};
        wb_map(&req, 4);
        wb_text(&req, "op"); wb_text(&req, "run");
        wb_text(&req, "name"); wb_text(&req, argv[i]);
        wb_text(&req, "argv"); wb_array(&req, (size_t)(end - i - 1));
        for (int a = i + 1; a < end; a++) wb_text(&req, argv[a]);
        wb_text(&req, "stdin"); wb_bytes(&req, data, len);
        wb_val resp;
        int st = wb_call(wb_commands, &req, &resp);
        if (st) {
            fprintf(stderr, "pipe: stage %d (%s): %s\n", stage, argv[i], resp.p ? wb_error_message(resp) : "failed");
            return wb_exit_code(st);
        }
        int64_t code = 0;
        const uint8_t *out, *err; size_t on, en;
        if (wb_get_int(resp, "exit", &code) || wb_get_bytes(resp, "stdout", &out, &on) || wb_get_bytes(resp, "stderr", &err, &en)) {
            fputs("pipe: malformed response from the host\n", stderr);
            return 70;
        }
        fwrite(err, 1, en, stderr);
        if (code != 0) {
            fprintf(stderr, "pipe: stage %d (%s) exited %lld\n", stage, argv[i], (long long)code);
            return (int)code;
        }
        if (on > MAX_INPUT) { fputs("pipe: a stage's output is over 16 MiB\n", stderr); return 2; }
        memcpy(data, out, on);
        len = on;
        wb_free(&req, &resp);
        i = end + 1;
    }
    fwrite(data, 1, len, stdout);
    return 0;
}
