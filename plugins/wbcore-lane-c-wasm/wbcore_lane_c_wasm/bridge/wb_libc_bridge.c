/* SPDX-License-Identifier: Apache-2.0 */
/* wbcore's chmod() for programs built by the c-wasm lane.
 *
 * tcc-shellsim.wasm links /tcc/shellsim_libc.c into every program it builds. The
 * shipped bridge forwards chmod() to a host import (shellsim.path_chmod); the lane
 * stages this file in its place, so the programs it builds import nothing but
 * wasi_snapshot_preview1 and run on any WASI host.
 *
 * WASI Preview 1 has no permission bits: chmod() succeeds on a path that exists and
 * changes nothing, and fails with the stat() error otherwise.
 */

#include <errno.h>
#include <sys/stat.h>

int chmod(const char *path, mode_t mode)
{
    struct stat st;
    (void)mode;
    if (!path) {
        errno = EFAULT;
        return -1;
    }
    return stat(path, &st);
}
