/* sha256: SHA-256 digests and HMAC-SHA256 of stdin (FIPS 180-4, RFC 2104), a WASI command.
 *
 *   sha256                 hex digest of all of stdin
 *   sha256 check <hex>     exit 0 if stdin's digest is <hex>, else 1
 *   sha256 hmac <key>      HMAC-SHA256 of stdin keyed with the <key> text
 *   sha256 lines           one "<hex>  <line>" per stdin line (newline excluded)
 */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    uint32_t h[8];
    uint64_t len;
    uint8_t buf[64];
    size_t used;
} sha256_ctx;

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block(sha256_ctx *c, const uint8_t *p) {
    uint32_t w[64], a, b, d, e, f, g, h, cc, t1, t2;
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    a = c->h[0]; b = c->h[1]; cc = c->h[2]; d = c->h[3];
    e = c->h[4]; f = c->h[5]; g = c->h[6]; h = c->h[7];
    for (int i = 0; i < 64; i++) {
        t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g; g = f; f = e; e = d + t1; d = cc; cc = b; b = a; a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
    c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

static void init(sha256_ctx *c) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, iv, sizeof iv);
    c->len = 0;
    c->used = 0;
}

static void update(sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->len += n;
    while (n > 0) {
        size_t take = 64 - c->used < n ? 64 - c->used : n;
        memcpy(c->buf + c->used, p, take);
        c->used += take;
        p += take;
        n -= take;
        if (c->used == 64) {
            block(c, c->buf);
            c->used = 0;
        }
    }
}

static void final(sha256_ctx *c, uint8_t out[32]) {
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80, zero = 0, lenb[8];
    update(c, &pad, 1);
    while (c->used != 56) update(c, &zero, 1);
    for (int i = 0; i < 8; i++) lenb[i] = (uint8_t)(bits >> (56 - 8 * i));
    update(c, lenb, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(c->h[i] >> 24); out[4 * i + 1] = (uint8_t)(c->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(c->h[i] >> 8); out[4 * i + 3] = (uint8_t)c->h[i];
    }
}

static void hex(const uint8_t d[32], char out[65]) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = 0;
}

static void digest_stdin(uint8_t out[32]) {
    sha256_ctx c;
    uint8_t buf[65536];
    size_t n;
    init(&c);
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) update(&c, buf, n);
    final(&c, out);
}

static int usage(void) {
    fputs("usage: sha256 [check <hex> | hmac <key> | lines]\n", stderr);
    return 2;
}

int main(int argc, char **argv) {
    uint8_t d[32];
    char h[65];
    if (argc == 1) {
        digest_stdin(d);
        hex(d, h);
        printf("%s\n", h);
        return 0;
    }
    if (strcmp(argv[1], "check") == 0 && argc == 3) {
        char want[65];
        size_t n = strlen(argv[2]);
        if (n != 64) {
            fprintf(stderr, "sha256 check: expected 64 hex digits, got %zu characters\n", n);
            return 2;
        }
        for (size_t i = 0; i < 64; i++) want[i] = (char)tolower((unsigned char)argv[2][i]);
        want[64] = 0;
        digest_stdin(d);
        hex(d, h);
        if (strcmp(h, want) == 0) {
            printf("OK %s\n", h);
            return 0;
        }
        printf("MISMATCH expected %s got %s\n", want, h);
        return 1;
    }
    if (strcmp(argv[1], "hmac") == 0 && argc == 3) {
        uint8_t key[64] = {0}, ipad[64], opad[64], inner[32], buf[65536];
        size_t klen = strlen(argv[2]), n;
        sha256_ctx c;
        if (klen > 64) {
            init(&c);
            update(&c, argv[2], klen);
            final(&c, key);
        } else {
            memcpy(key, argv[2], klen);
        }
        for (int i = 0; i < 64; i++) {
            ipad[i] = key[i] ^ 0x36;
            opad[i] = key[i] ^ 0x5c;
        }
        init(&c);
        update(&c, ipad, 64);
        while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) update(&c, buf, n);
        final(&c, inner);
        init(&c);
        update(&c, opad, 64);
        update(&c, inner, 32);
        final(&c, d);
        hex(d, h);
        printf("%s\n", h);
        return 0;
    }
    if (strcmp(argv[1], "lines") == 0 && argc == 2) {
        static char line[1 << 20];
        while (fgets(line, sizeof line, stdin)) {
            size_t n = strlen(line);
            int whole = n > 0 && line[n - 1] == '\n';
            if (whole) line[--n] = 0;
            if (!whole && !feof(stdin)) {
                fputs("sha256 lines: a line is longer than 1 MiB\n", stderr);
                return 1;
            }
            sha256_ctx c;
            init(&c);
            update(&c, line, n);
            final(&c, d);
            hex(d, h);
            printf("%s  %s\n", h, line);
        }
        return 0;
    }
    return usage();
}
