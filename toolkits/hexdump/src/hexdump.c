/* hexdump: look inside binary data on stdin — canonical hex dump, printable strings,
 * byte statistics. Built by the c-wasm lane (tcc compiled to wasm); pure WASI stdio. */

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUT (64L << 20)

static const char *USAGE =
    "usage: hexdump <command> [options] < file\n"
    "commands:\n"
    "  dump [-s OFFSET] [-n LENGTH]   canonical hex + ASCII, 16 bytes a line\n"
    "  strings [-m MIN]              printable ASCII runs of at least MIN (default 4) bytes, with offsets\n"
    "  stats                         size, distinct bytes, entropy, top bytes, and a guess at the kind\n";

static unsigned char *slurp(size_t *len)
{
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap);
    if (!buf)
        return NULL;
    while ((got = fread(buf + n, 1, cap - n, stdin)) > 0) {
        n += got;
        if (n == cap) {
            if ((long)cap >= MAX_INPUT) {
                fprintf(stderr, "hexdump: input over %ld bytes\n", MAX_INPUT);
                exit(1);
            }
            cap *= 2;
            unsigned char *more = realloc(buf, cap);
            if (!more) {
                fprintf(stderr, "hexdump: out of memory\n");
                exit(1);
            }
            buf = more;
        }
    }
    *len = n;
    return buf;
}

static int number(const char *s, long *out)
{
    char *end;
    long v = strtol(s, &end, 0); /* decimal, 0x hex or 0 octal */
    if (!*s || *end || v < 0)
        return -1;
    *out = v;
    return 0;
}

static int usage_error(const char *msg)
{
    fprintf(stderr, "hexdump: %s\n", msg);
    return 2;
}

static int dump(int argc, char **argv)
{
    long skip = 0, length = -1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc) {
            if (number(argv[++i], &skip))
                return usage_error("-s needs a byte offset (decimal or 0x hex)");
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            if (number(argv[++i], &length))
                return usage_error("-n needs a byte count (decimal or 0x hex)");
        } else {
            return usage_error("dump takes -s OFFSET and -n LENGTH");
        }
    }
    size_t len;
    unsigned char *buf = slurp(&len);
    if (!buf)
        return 1;
    size_t start = (size_t)skip < len ? (size_t)skip : len;
    size_t end = length < 0 || start + (size_t)length > len ? len : start + (size_t)length;
    for (size_t off = start; off < end; off += 16) {
        printf("%08zx ", off);
        for (size_t j = 0; j < 16; j++) {
            if (j == 8)
                putchar(' ');
            if (off + j < end)
                printf(" %02x", buf[off + j]);
            else
                fputs("   ", stdout);
        }
        fputs("  |", stdout);
        for (size_t j = 0; j < 16 && off + j < end; j++)
            putchar(isprint(buf[off + j]) ? buf[off + j] : '.');
        puts("|");
    }
    printf("%08zx\n", end);
    free(buf);
    return 0;
}

static int strings_cmd(int argc, char **argv)
{
    long min = 4;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            if (number(argv[++i], &min) || min < 1)
                return usage_error("-m needs a length >= 1");
        } else {
            return usage_error("strings takes -m MIN");
        }
    }
    size_t len;
    unsigned char *buf = slurp(&len);
    if (!buf)
        return 1;
    size_t run = 0;
    for (size_t i = 0; i <= len; i++) {
        int printable = i < len && (isprint(buf[i]) || buf[i] == '\t');
        if (printable) {
            run++;
            continue;
        }
        if (run >= (size_t)min) {
            printf("%08zx ", i - run);
            fwrite(buf + i - run, 1, run, stdout);
            putchar('\n');
        }
        run = 0;
    }
    free(buf);
    return 0;
}

static const char *guess(const unsigned char *b, size_t n, double entropy, size_t printable)
{
    static const struct { const char *magic; size_t len; const char *kind; } sigs[] = {
        {"\x89PNG\r\n\x1a\n", 8, "PNG image"}, {"\xff\xd8\xff", 3, "JPEG image"}, {"GIF8", 4, "GIF image"},
        {"%PDF-", 5, "PDF document"}, {"PK\x03\x04", 4, "ZIP archive (also docx/xlsx/jar/wheel)"},
        {"\x1f\x8b", 2, "gzip data"}, {"\0asm", 4, "WebAssembly module"}, {"\x7f" "ELF", 4, "ELF executable"},
        {"BZh", 3, "bzip2 data"}, {"\xfd" "7zXZ", 5, "xz data"}, {"SQLite format 3", 15, "SQLite database"},
    };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (n >= sigs[i].len && !memcmp(b, sigs[i].magic, sigs[i].len))
            return sigs[i].kind;
    if (n == 0)
        return "empty";
    if (printable * 100 >= n * 95)
        return "text";
    if (entropy > 7.5)
        return "compressed or encrypted data";
    return "binary data";
}

static int stats(int argc, char **argv)
{
    (void)argv;
    if (argc)
        return usage_error("stats takes no options");
    size_t len;
    unsigned char *buf = slurp(&len);
    if (!buf)
        return 1;
    size_t count[256] = {0}, distinct = 0, printable = 0;
    for (size_t i = 0; i < len; i++) {
        count[buf[i]]++;
        if (isprint(buf[i]) || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')
            printable++;
    }
    double entropy = 0;
    for (int c = 0; c < 256; c++) {
        if (!count[c])
            continue;
        distinct++;
        double p = (double)count[c] / (double)len;
        entropy -= p * log2(p);
    }
    printf("{\"bytes\": %zu, \"distinct\": %zu, \"entropy_bits_per_byte\": %.3f, \"printable_ratio\": %.3f, \"kind\": \"%s\", \"top\": [",
           len, distinct, entropy, len ? (double)printable / (double)len : 0.0, guess(buf, len, entropy, printable));
    for (int k = 0; k < 5; k++) {
        int best = -1;
        for (int c = 0; c < 256; c++)
            if (count[c] && (best < 0 || count[c] > count[best]))
                best = c;
        if (best < 0)
            break;
        printf("%s{\"byte\": \"0x%02x\", \"n\": %zu}", k ? ", " : "", best, count[best]);
        count[best] = 0;
    }
    puts("]}");
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "dump"))
        return dump(argc - 2, argv + 2);
    if (!strcmp(argv[1], "strings"))
        return strings_cmd(argc - 2, argv + 2);
    if (!strcmp(argv[1], "stats"))
        return stats(argc - 2, argv + 2);
    fprintf(stderr, "hexdump: unknown command \"%s\"; commands: dump, strings, stats\n", argv[1]);
    return 2;
}
