/* <stdlib.h> for jq on WASI (the wb built-in): Debian's wasi-libc hides realpath() (WASI
 * has no absolute paths); jq's util.c calls it for module search paths. wb_main.c defines it. */
#include_next <stdlib.h>

#ifndef WB_JQ_STDLIB_H
#define WB_JQ_STDLIB_H
char *realpath(const char *__restrict path, char *__restrict resolved);
#endif
