"""The sandbox's own init: run as ``python -I -S _sandbox_init.py <config.marshal>``.

Standard library only (the seccomp filter arrives as BPF bytes built by the parent), because it
runs before anything of the host's environment is trusted. Three processes:

* **C** (this script): ``unshare`` user, mount, pid, net, ipc, uts and cgroup
  namespaces; waits while the parent writes the uid/gid maps; forks G; relays G's end.
* **G** (pid 1 of the new pid namespace): builds the new root (tmpfs, read-only binds,
  fresh ``/proc``, a minimal ``/dev``, tmpfs ``/tmp`` and ``/out``), pivots into it, forks
  W, reaps every orphan until W ends, then copies ``/out`` (regular files and folders
  only, within the caps) through a folder fd kept from before the pivot. When G exits
  the kernel kills whatever is left in the pid namespace.
* **W**: rlimits, drop to uid/gid 1000, no capabilities, ``no_new_privs``, seccomp,
  close every other fd, ``execve`` the compiler.

G reports one JSON line on the status fd; C reports G's outer pid on the sync fd.
"""

import ctypes
import errno
import marshal
import os
import resource
import stat
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

NAMESPACES = {
    "user": CLONE_NEWUSER,
    "mount": CLONE_NEWNS,
    "pid": CLONE_NEWPID,
    "net": CLONE_NEWNET,
    "ipc": CLONE_NEWIPC,
    "uts": CLONE_NEWUTS,
    "cgroup": CLONE_NEWCGROUP,
}

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38

SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41}

SANDBOX_ID = 1000
SIGKILL = 9  # not the signal module: importing it (and enum) costs ~6 ms of every start

libc = ctypes.CDLL(None, use_errno=True)


def _check(ret, what):
    if ret != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def unshare(flags):
    _check(libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(src, dst, fstype, flags, data=None):
    _check(
        libc.mount(
            src.encode() if src else None,
            dst.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {fstype or src} on {dst}",
    )


def prctl(option, arg2=0):
    _check(libc.prctl(option, ctypes.c_ulong(arg2), 0, 0, 0), f"prctl {option}")


def _locked_flags(path):
    """The mount flags a remount inside a user namespace must keep (else EPERM)."""
    f = os.statvfs(path).f_flag
    out = 0
    for st_bit, ms_bit in ((2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, MS_NOATIME),
                           (2048, MS_NODIRATIME), (4096, MS_RELATIME)):
        if f & st_bit:
            out |= ms_bit
    return out


def _mkdirs(path):
    os.makedirs(path, mode=0o755, exist_ok=True)


def _touch(path):
    _mkdirs(os.path.dirname(path))
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def bind(src, dst, *, writable, dev=False):
    if os.path.isdir(src):
        _mkdirs(dst)
    else:
        _touch(dst)
    mount(src, dst, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | _locked_flags(dst)
    if not dev:
        flags |= MS_NODEV
    if not writable:
        flags |= MS_RDONLY
    mount(None, dst, None, flags)


def overlay(src, dst, layer):
    """``src`` at ``dst``, writable, with every write kept in ``layer`` (private, discarded)."""
    for part in ("upper", "work"):
        os.makedirs(f"{layer}/{part}", mode=0o777)
        os.chown(f"{layer}/{part}", SANDBOX_ID, SANDBOX_ID)
    _mkdirs(dst)
    mount("wb-overlay", dst, "overlay", MS_NOSUID | MS_NODEV,
          f"lowerdir={src},upperdir={layer}/upper,workdir={layer}/work,userxattr")


# --- G: the new root -------------------------------------------------------------------


def build_root(cfg):
    new = cfg["root"]
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("wb-root", new, "tmpfs", MS_NOSUID | MS_NODEV, "size=8m,nr_inodes=4096,mode=0755")
    lim = cfg["limits"]
    layers = 0
    for b in cfg["binds"]:
        if b.get("overlay"):
            if layers == 0:
                _mkdirs(new + "/.layers")
                mount("wb-layers", new + "/.layers", "tmpfs", MS_NOSUID | MS_NODEV,
                      f"size={lim['tmp_bytes']},mode=0755")
            layers += 1
            overlay(b["src"], new + b["dst"], f"{new}/.layers/{layers}")
        else:
            bind(b["src"], new + b["dst"], writable=b["rw"])
    _mkdirs(new + "/dev")
    for node in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + node, new + "/dev/" + node, writable=True, dev=True)
    _mkdirs(new + "/tmp")
    mount("wb-tmp", new + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={lim['tmp_bytes']},nr_inodes={lim['out_files'] + 1024},mode=1777")
    _mkdirs(new + "/out")
    mount("wb-out", new + "/out", "tmpfs", MS_NOSUID | MS_NODEV,
          f"size={lim['out_bytes']},nr_inodes={lim['out_files'] + 16},mode=0755,"
          f"uid={SANDBOX_ID},gid={SANDBOX_ID}")
    if cfg.get("seed_out"):
        _seed(cfg["seed_out"], new + "/out")
    _mkdirs(new + "/proc")
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    old = new + "/.old"
    _mkdirs(old)
    nr = SYS_PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(libc.syscall(nr, new.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _check(libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")
    # The root tmpfs holds only mount points now: make it read-only.
    mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _seed(src, dst):
    """Copy the caller's starting files into the private /out (before the pivot)."""
    for dirpath, _dirnames, filenames in os.walk(src, followlinks=False):
        rel = os.path.relpath(dirpath, src)
        target = dst if rel == "." else os.path.join(dst, rel)
        os.makedirs(target, exist_ok=True)
        os.chown(target, SANDBOX_ID, SANDBOX_ID)
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fi, open(os.path.join(target, name), "wb") as fo:
                fo.write(fi.read())
            os.chown(os.path.join(target, name), SANDBOX_ID, SANDBOX_ID)


# --- W: drop everything and exec ----------------------------------------------------------


PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_seccomp(program):
    """Install a classic-BPF seccomp program (built by the parent with libseccomp)."""
    if len(program) % 8:
        raise OSError(errno.EINVAL, "seccomp program is not a whole number of instructions")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(prog), 0, 0),
           "seccomp")


def become_worker(cfg, filt):
    lim = cfg["limits"]
    for res, value in (
        (resource.RLIMIT_AS, lim["address_space"]),
        (resource.RLIMIT_CPU, lim["cpu_seconds"]),
        (resource.RLIMIT_FSIZE, lim["file_size"]),
        (resource.RLIMIT_NOFILE, lim["open_files"]),
        (resource.RLIMIT_NPROC, lim["processes"]),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_MEMLOCK, 0),
    ):
        # CPU: SIGXCPU at the soft limit (so the result can name it), SIGKILL a second later.
        resource.setrlimit(res, (value, value + 1 if res == resource.RLIMIT_CPU else value))
    if cfg["drop_groups"]:
        os.setgroups([])
    os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
    os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
    for cap in range(64):
        if libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0:
            break
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if filt is not None:
        load_seccomp(filt)
    os.chdir(cfg["cwd"])
    secret_r = cfg.get("secret_r")
    if secret_r is not None:
        # The secret pipe becomes fd 3 of the program (it reads and closes it at start): a
        # secret in the environment would be readable in /proc/<pid>/environ for its life.
        if secret_r != 3:
            os.dup2(secret_r, 3)
        os.set_inheritable(3, True)
        os.closerange(4, 1 << 16)
    else:
        os.closerange(3, 1 << 16)
    os.execve(cfg["argv"][0], cfg["argv"], cfg["env"])


# --- G: reap, then copy /out ------------------------------------------------------------


def copy_out(export_fd, lim):
    """Copy /out's regular files and folders into the export folder, within the caps."""
    files = 0
    total = 0
    skipped = []
    for dirpath, dirnames, filenames in os.walk("/out", followlinks=False):
        rel = os.path.relpath(dirpath, "/out")
        dir_fd = export_fd if rel == "." else os.open(rel, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                                                      dir_fd=export_fd)
        try:
            for d in list(dirnames):
                if os.path.islink(os.path.join(dirpath, d)):
                    dirnames.remove(d)
                    skipped.append(os.path.join(rel, d))
                    continue
                os.mkdir(d, 0o755, dir_fd=dir_fd)
            for name in filenames:
                src = os.path.join(dirpath, name)
                st = os.lstat(src)
                if not stat.S_ISREG(st.st_mode):
                    skipped.append(os.path.normpath(os.path.join(rel, name)))
                    continue
                files += 1
                total += st.st_size
                if files > lim["out_files"] or total > lim["out_bytes"]:
                    return files, total, skipped, "output over its cap"
                fi = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
                fo = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o755 if st.st_mode & 0o111 else 0o644, dir_fd=dir_fd)
                try:
                    while True:
                        chunk = os.read(fi, 1 << 20)
                        if not chunk:
                            break
                        os.write(fo, chunk)
                finally:
                    os.close(fi)
                    os.close(fo)
        finally:
            if dir_fd != export_fd:
                os.close(dir_fd)
    return files, total, skipped, None


def _json(v):
    """A tiny JSON encoder (importing json costs ~11 ms of every sandbox's start)."""
    if v is None or isinstance(v, bool):
        return {None: "null", True: "true", False: "false"}[v]
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        out = []
        for ch in v:
            o = ord(ch)
            out.append(ch if o >= 0x20 and ch not in '"\\' else "\\u%04x" % o)
        return '"' + "".join(out) + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_json(x) for x in v) + "]"
    return "{" + ",".join(_json(str(k)) + ":" + _json(x) for k, x in v.items()) + "}"


def report(fd, **kw):
    os.write(fd, (_json(kw) + "\n").encode())


def init_main(cfg, status_fd):
    """G: pid 1 of the sandbox."""
    try:
        filt = bytes.fromhex(cfg["seccomp_bpf"]) if cfg.get("seccomp_bpf") else None
        export_fd = os.open(cfg["export"], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        build_root(cfg)
        libc.sethostname(b"wb-sandbox", 10)
    except Exception as exc:  # report setup failures with the step that failed
        report(status_fd, phase="setup", error=f"{type(exc).__name__}: {exc}")
        os._exit(111)
    stdin_fd = os.open("/dev/null", os.O_RDONLY) if cfg["stdin"] == "null" else 0
    worker = os.fork()
    if worker != 0 and cfg.get("secret_r") is not None:
        os.close(cfg["secret_r"])  # only the program holds the secret pipe
    if worker == 0:
        try:
            if stdin_fd != 0:
                os.dup2(stdin_fd, 0)
            become_worker(cfg, filt)
        except OSError as exc:
            os.write(2, f"wb-sandbox: cannot start {cfg['argv'][0]}: {exc}\n".encode())
            os._exit(127)
        except BaseException as exc:  # pragma: no cover - anything else is a bug in setup
            os.write(2, f"wb-sandbox: setup failed: {exc!r}\n".encode())
            os._exit(126)
    status = 0
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            break
        if pid == worker:
            status = st
            break
    # Kill every process the worker left behind before reading /out.
    try:
        os.kill(-1, SIGKILL)
    except OSError:
        pass
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    code = os.waitstatus_to_exitcode(status)
    try:
        files, total, skipped, err = copy_out(export_fd, cfg["limits"])
    except OSError as exc:
        files, total, skipped, err = 0, 0, [], f"copying /out: {exc}"
    report(status_fd, phase="done", exit=code, files=files, bytes=total, skipped=skipped[:20], error=err)
    os._exit(0)


def missing_namespaces(cfg):
    """Which namespaces this process cannot create, each tried alone in a throwaway child."""
    missing = []
    for name in cfg["namespaces"]:
        flag = NAMESPACES[name] | (CLONE_NEWUSER if name != "user" else 0)
        pid = os.fork()
        if pid == 0:
            os._exit(0 if libc.unshare(ctypes.c_int(flag)) == 0 else 1)
        _, st = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(st) != 0:
            missing.append(f"{name} namespace")
    return missing


def main():
    with open(sys.argv[1], "rb") as fh:
        cfg = marshal.load(fh)  # written by the parent (same interpreter) into its 0700 scratch dir
    sync_w, go_r, status_fd = cfg["sync_w"], cfg["go_r"], cfg["status_w"]
    prctl(PR_SET_PDEATHSIG, SIGKILL)
    flags = 0
    for name in cfg["namespaces"]:
        flags |= NAMESPACES[name]
    try:
        unshare(flags)
    except OSError as exc:
        report(status_fd, phase="unshare",
               error=f"{exc}; missing: {', '.join(missing_namespaces(cfg)) or 'unknown'}")
        os._exit(111)
    os.write(sync_w, b"u")
    if os.read(go_r, 1) != b"g":
        os._exit(111)
    g = os.fork()
    if g == 0:
        prctl(PR_SET_PDEATHSIG, SIGKILL)
        prctl(PR_SET_DUMPABLE, 0)
        os.close(sync_w)
        init_main(cfg, status_fd)
    if cfg.get("secret_r") is not None:
        os.close(cfg["secret_r"])  # G has its copy; this process never reads it
    os.write(sync_w, f"{g}\n".encode())
    os.close(sync_w)
    _, st = os.waitpid(g, 0)
    os._exit(os.waitstatus_to_exitcode(st) & 0xFF if os.WIFEXITED(st) else 112)


if __name__ == "__main__":
    main()
