/* The stdin1 front of the reserved built-in jq (seed 000): upstream jq's own main() behind
 * the ARG_MODE stdin1 convention.
 *
 * The first stdin line is "[OPTIONS] FILTER": leading words that start with '-' are jq's
 * options (`-r -c -n -s -j -e -S -R -a --tab --indent N --arg NAME VALUE --argjson NAME JSON
 * --seq --stream --run-tests ...`; a value may be quoted with '...' or "..."), the rest of the
 * line, verbatim, is the filter ("." when empty). A word like "-1" or "-.a" starts the filter.
 * The rest of stdin is jq's input, read by upstream jq from the same stdin stream.
 * `--run-tests` alone reads a jq test file (tests/jq.test format) from the rest of stdin.
 *
 * Upstream src/main.c is compiled unmodified with -Dmain=jq_upstream_main (a build flag of
 * this built-in), so the WASI entry point is this file's main().
 */
#undef main
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int jq_upstream_main(int argc, char *argv[]);

#define MAX_ARGS 64

/* realpath() for WASI (declared by include/stdlib.h): paths are relative to the preopened
 * folders and there are no symlinks to resolve across them, so an existing path is its own
 * canonical name. jq uses it only to name module search folders. */
char *realpath(const char *restrict path, char *restrict resolved) {
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    size_t n = strlen(path);
    if (n >= PATH_MAX) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    char *out = resolved ? resolved : malloc(PATH_MAX);
    if (!out) return NULL;
    memcpy(out, path, n + 1);
    return out;
}

/* Options followed by this many value words. */
static int values_after(const char *opt) {
    static const char *const two[] = {"--arg", "--argjson", "--slurpfile", "--rawfile", NULL};
    static const char *const one[] = {"--indent", "-L", "-f", "--from-file", "--library-path", "--skip", "--take", NULL};
    for (int i = 0; two[i]; i++)
        if (!strcmp(opt, two[i])) return 2;
    for (int i = 0; one[i]; i++)
        if (!strcmp(opt, one[i])) return 1;
    return 0;
}

/* One word at *p (a quoted value loses its quotes); NULL at the end of the line. */
static char *word(char **p) {
    char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return *p = s, NULL;
    char *out = s, *w = s;
    if (*s == '\'' || *s == '"') {
        char q = *s++;
        while (*s && *s != q) *w++ = *s++;
        if (*s) s++;
    } else {
        while (*s && *s != ' ' && *s != '\t') *w++ = *s++;
    }
    if (*s) s++;
    *w = 0;
    *p = s;
    return out;
}

static int is_option(const char *s) {
    while (*s == ' ' || *s == '\t') s++;
    return s[0] == '-' && s[1] && s[1] != ' ' && s[1] != '\t' && s[1] != '.' && !(s[1] >= '0' && s[1] <= '9');
}

int main(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        fputs("jq: usage: the first stdin line is '[OPTIONS] FILTER', the rest is JSON input\n", stderr);
        return 2;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;

    char *argv[MAX_ARGS + 2];
    int argc = 0, tests = 0;
    argv[argc++] = "jq";
    char *p = line;
    while (is_option(p)) {
        char *opt = word(&p);
        if (!strcmp(opt, "--")) break;
        if (!strcmp(opt, "--run-tests")) tests = 1;
        int more = values_after(opt);
        if (argc + 1 + more > MAX_ARGS) {
            fprintf(stderr, "jq: more than %d option words on the first line\n", MAX_ARGS);
            return 2;
        }
        argv[argc++] = opt;
        for (int i = 0; i < more; i++) {
            char *v = word(&p);
            if (!v) {
                fprintf(stderr, "jq: %s needs %d value%s\n", opt, more, more > 1 ? "s" : "");
                return 2;
            }
            argv[argc++] = v;
        }
    }
    while (*p == ' ' || *p == '\t') p++;
    if (!tests) argv[argc++] = *p ? p : ".";
    argv[argc] = NULL;
    return jq_upstream_main(argc, argv);
}
