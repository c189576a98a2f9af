/* grep: the reserved built-in (seed 000), a WASI command built by the c lane.
 *
 * ARG_MODE stdin1: the first stdin line is the argument, the rest is the text searched.
 * The argument is [flags] PATTERN, where flags come first and are any of
 *   -i ignore case   -v invert   -c count only   -n line numbers   -o only the matches
 *   -F fixed string  -E extended regex (the default)   -G basic regex
 *   -x whole line    -w whole word   -m N at most N matching lines   --  end of flags
 * The pattern is the rest of the line, spaces included. POSIX regex (wasi-libc's TRE).
 * Exit: 0 some line matched, 1 none, 2 bad pattern or usage.
 */
#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE (1 << 20)

static int icase, invert, count_only, numbers, only, fixed, basic, whole_line, whole_word;
static long max_count = -1;
static const char *pattern;
static size_t pattern_len;
static regex_t re;

static int word_char(int c) { return isalnum(c) || c == '_'; }

static const char *find_fixed(const char *hay, size_t n, size_t *mlen) {
    size_t m = pattern_len;
    *mlen = m;
    if (m == 0) return hay;
    for (size_t i = 0; i + m <= n; i++) {
        size_t j = 0;
        while (j < m && (icase ? tolower((unsigned char)hay[i + j]) == tolower((unsigned char)pattern[j])
                               : hay[i + j] == pattern[j]))
            j++;
        if (j == m) return hay + i;
    }
    return NULL;
}

/* The first acceptable match at or after `from`; returns 1 and sets [*so, *eo) if any. */
static int match_at(const char *line, size_t n, size_t from, size_t *so, size_t *eo) {
    while (from <= n) {
        size_t s, e;
        if (fixed) {
            size_t mlen;
            const char *p = find_fixed(line + from, n - from, &mlen);
            if (!p) return 0;
            s = (size_t)(p - line);
            e = s + mlen;
        } else {
            regmatch_t m[1];
            int flags = from > 0 ? REG_NOTBOL : 0;
            /* regexec needs a NUL-terminated string: the caller's line is. */
            if (regexec(&re, line + from, 1, m, flags) != 0) return 0;
            s = from + (size_t)m[0].rm_so;
            e = from + (size_t)m[0].rm_eo;
        }
        int ok = 1;
        if (whole_line && (s != 0 || e != n)) ok = 0;
        if (whole_word && ((s > 0 && word_char((unsigned char)line[s - 1])) || (e < n && word_char((unsigned char)line[e]))))
            ok = 0;
        if (ok) {
            *so = s;
            *eo = e;
            return 1;
        }
        if (whole_line) return 0;
        from = s + 1;
    }
    return 0;
}

static int parse_args(char *arg) {
    char *p = arg;
    while (*p == '-' && p[1] && p[1] != ' ') {
        if (p[1] == '-' && (p[2] == ' ' || p[2] == 0)) {
            p += p[2] ? 3 : 2;
            break;
        }
        char *q = p + 1;
        for (; *q && *q != ' '; q++) {
            switch (*q) {
            case 'i': icase = 1; break;
            case 'v': invert = 1; break;
            case 'c': count_only = 1; break;
            case 'n': numbers = 1; break;
            case 'o': only = 1; break;
            case 'F': fixed = 1; break;
            case 'E': basic = 0; break;
            case 'G': basic = 1; break;
            case 'x': whole_line = 1; break;
            case 'w': whole_word = 1; break;
            case 'm': {
                char *end;
                while (*(q + 1) == ' ') q++;
                max_count = strtol(q + 1, &end, 10);
                if (end == q + 1 || max_count < 0) {
                    fputs("grep: -m needs a number\n", stderr);
                    return 2;
                }
                q = end - 1;
                break;
            }
            default:
                fprintf(stderr, "grep: unknown flag -%c (flags: -i -v -c -n -o -F -E -G -x -w -m N --)\n", *q);
                return 2;
            }
        }
        p = q;
        while (*p == ' ') p++;
    }
    pattern = p;
    pattern_len = strlen(p);
    if (!fixed) {
        int cflags = (basic ? 0 : REG_EXTENDED) | (icase ? REG_ICASE : 0);
        int rc = regcomp(&re, pattern, cflags);
        if (rc != 0) {
            char msg[256];
            regerror(rc, &re, msg, sizeof msg);
            fprintf(stderr, "grep: bad pattern '%s': %s\n", pattern, msg);
            return 2;
        }
    }
    return 0;
}

int main(void) {
    static char line[MAX_LINE + 2];
    if (!fgets(line, sizeof line, stdin)) {
        fputs("grep: usage: the first stdin line is '[flags] PATTERN', the rest is searched\n", stderr);
        return 2;
    }
    size_t n = strlen(line);
    if (n && line[n - 1] == '\n') line[--n] = 0;
    char *arg = malloc(n + 1);
    if (!arg) return 2;
    memcpy(arg, line, n + 1);
    int rc = parse_args(arg);
    if (rc) return rc;
    long lineno = 0, hits = 0;
    while (fgets(line, sizeof line, stdin)) {
        n = strlen(line);
        int had_nl = n && line[n - 1] == '\n';
        if (had_nl) line[--n] = 0;
        else if (n >= MAX_LINE) {
            fputs("grep: a line is longer than 1 MiB\n", stderr);
            return 2;
        }
        lineno++;
        size_t so, eo;
        int matched = match_at(line, n, 0, &so, &eo);
        if (matched == invert) continue;
        hits++;
        if (!count_only) {
            if (only && !invert) {
                size_t from = 0;
                while (from <= n && match_at(line, n, from, &so, &eo)) {
                    if (eo > so) {
                        if (numbers) printf("%ld:", lineno);
                        fwrite(line + so, 1, eo - so, stdout);
                        putchar('\n');
                    }
                    from = eo > so ? eo : so + 1;
                }
            } else {
                if (numbers) printf("%ld:", lineno);
                fwrite(line, 1, n, stdout);
                putchar('\n');
            }
        }
        if (max_count >= 0 && hits >= max_count) break;
    }
    if (count_only) printf("%ld\n", hits);
    return hits ? 0 : 1;
}
