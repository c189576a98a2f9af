/* A single-threaded <pthread.h> for jq on WASI (the wb built-in): Debian's wasi-libc has
 * no pthread stubs, and a WASI command runs one thread. jq uses only mutexes, once and
 * thread-specific keys; they are exact here for one thread. Key destructors are not run
 * (no thread ever exits before the process). */
#ifndef WB_JQ_PTHREAD_H
#define WB_JQ_PTHREAD_H

#include <stddef.h>

typedef int pthread_mutex_t;
typedef int pthread_once_t;
typedef unsigned pthread_key_t;
#define PTHREAD_MUTEX_INITIALIZER 0
#define PTHREAD_ONCE_INIT 0
#define WB_JQ_PTHREAD_KEYS 64

static inline int pthread_mutex_init(pthread_mutex_t *m, const void *attr) { (void)attr; *m = 0; return 0; }
static inline int pthread_mutex_lock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_unlock(pthread_mutex_t *m) { (void)m; return 0; }
static inline int pthread_mutex_destroy(pthread_mutex_t *m) { (void)m; return 0; }

static inline int pthread_once(pthread_once_t *once, void (*init)(void)) {
    if (!*once) {
        *once = 1;
        init();
    }
    return 0;
}

/* One table per translation unit would split a key's value between files: keep it in one
 * place, a weak definition every file shares. */
__attribute__((weak)) void *wb_jq_pthread_values[WB_JQ_PTHREAD_KEYS];
__attribute__((weak)) unsigned wb_jq_pthread_next;

static inline int pthread_key_create(pthread_key_t *key, void (*dtor)(void *)) {
    (void)dtor;
    if (wb_jq_pthread_next >= WB_JQ_PTHREAD_KEYS) return 11; /* EAGAIN */
    *key = wb_jq_pthread_next++;
    return 0;
}
static inline void *pthread_getspecific(pthread_key_t key) {
    return key < WB_JQ_PTHREAD_KEYS ? wb_jq_pthread_values[key] : NULL;
}
static inline int pthread_setspecific(pthread_key_t key, const void *value) {
    if (key >= WB_JQ_PTHREAD_KEYS) return 22; /* EINVAL */
    wb_jq_pthread_values[key] = (void *)value;
    return 0;
}

#endif
