/* First-party warm-up source: compiling it fills zig's cache with wasi-libc. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

int main(int argc, char **argv) {
    char buf[64];
    snprintf(buf, sizeof buf, "%d %g", argc, sqrt(2.0));
    char *copy = strdup(buf);
    puts(copy);
    free(copy);
    return argv[0] == NULL;
}
