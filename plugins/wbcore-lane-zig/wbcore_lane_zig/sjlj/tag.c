/* The __c_longjmp exception tag: clang >= 20 leaves its definition to the runtime, and
 * zig's wasi-libc setjmp runtime predates that. */
__asm__(".globl __c_longjmp\n.tagtype __c_longjmp i32\n__c_longjmp:\n");
