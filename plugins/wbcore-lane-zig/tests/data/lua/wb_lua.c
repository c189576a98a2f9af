/* The standalone Lua interpreter (Lua's own onelua.c: core, libraries and lua.c in one
 * translation unit) from the release sources, unmodified; WASI adaptations as macros. */
#include <stdio.h>
#include <stdlib.h>
/* WASI runs no shell (os.execute() answers false) and has no temporary files
 * (io.tmpfile() and os.tmpname() fail with an error). */
#define system(cmd) ((cmd) == NULL ? 0 : -1)
#define tmpfile() ((FILE *)NULL)
#define lua_tmpnam(b, e) { b[0] = '\0'; e = 1; }
#define LUA_TMPNAMBUFSIZE 32
#include "lua-5.4.8/onelua.c"
