/* setjmp/longjmp for wasm32-wasi on WebAssembly exception handling (the c lane adds this
 * folder to the include path and rt.c to the sources when a program uses <setjmp.h>).
 * Debian's wasi-libc predates setjmp support; clang lowers these calls itself
 * (-mllvm -wasm-enable-sjlj) into calls to the runtime in rt.c. */
#ifndef _WB_SETJMP_H
#define _WB_SETJMP_H

#ifdef __cplusplus
extern "C" {
#endif

/* The first words are the runtime's (struct jmp_buf_impl in rt.c); the rest is room. */
typedef struct __jmp_buf_tag {
	unsigned long __jb[8];
} jmp_buf[1];
typedef jmp_buf sigjmp_buf;

int setjmp(jmp_buf) __attribute__((__returns_twice__));
_Noreturn void longjmp(jmp_buf, int);

/* No signals in WASI: the signal-mask variants are the plain ones. */
#define _setjmp(env) setjmp(env)
#define _longjmp(env, val) longjmp(env, val)
#define sigsetjmp(env, savemask) setjmp(env)
#define siglongjmp(env, val) longjmp(env, val)
#define setjmp setjmp

#ifdef __cplusplus
}
#endif

#endif
