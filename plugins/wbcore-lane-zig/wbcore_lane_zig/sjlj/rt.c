/* The runtime clang's wasm setjmp/longjmp lowering calls (LLVM's
 * WebAssemblyLowerEmscriptenEHSjLj, wasm exception-handling mode): setjmp records which
 * call site (label) of which function invocation it was; longjmp throws the
 * __c_longjmp tag carrying (env, val); the catching function asks __wasm_setjmp_test
 * whether env belongs to one of its own invocations and, if so, resumes at that label. */
#include <stdint.h>

struct wb_longjmp_args {
	void *env;
	int val;
};

struct jmp_buf_impl {
	void *func_invocation_id;
	uint32_t label;
	struct wb_longjmp_args arg;
};

_Static_assert(sizeof(struct jmp_buf_impl) <= 8 * sizeof(unsigned long), "jmp_buf too small");

void __wasm_setjmp(void *env, uint32_t label, void *func_invocation_id) {
	struct jmp_buf_impl *jb = env;
	jb->func_invocation_id = func_invocation_id;
	jb->label = label;
}

uint32_t __wasm_setjmp_test(void *env, void *func_invocation_id) {
	struct jmp_buf_impl *jb = env;
	return jb->func_invocation_id == func_invocation_id ? jb->label : 0;
}

void __wasm_longjmp(void *env, int val) {
	struct jmp_buf_impl *jb = env;
	jb->arg.env = env;
	jb->arg.val = val == 0 ? 1 : val; /* longjmp(env, 0) returns 1 from setjmp (C17 7.13.2.1) */
	__builtin_wasm_throw(1, &jb->arg); /* tag 1 = __c_longjmp */
}

/* The exception tag itself (LLVM ≥ 20 leaves its definition to the runtime). */
__asm__(".globl __c_longjmp\n.tagtype __c_longjmp i32\n__c_longjmp:\n");
