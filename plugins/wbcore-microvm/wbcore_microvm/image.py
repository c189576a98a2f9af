"""The guest image: Debian's kernel + an initramfs this module builds, cached by its inputs' digest.

The initramfs is a newc cpio written here, entries sorted by path, every mtime 0, every
owner root — the same inputs give the same bytes. It holds:

- ``/bin/busybox`` from Debian's ``busybox-static`` and a link per applet (``busybox
  --list-full``), the guest's whole userland;
- ``/sbin/wbcore-agent`` (and its multi-call name ``/usr/bin/wb-cap``), the guest agent,
  compiled here from ``agent/wb_agent.c`` with ``gcc -static`` (or ``zig cc -target
  x86_64-linux-musl``);
- the kernel modules the virtio-serial channel needs, from the same kernel package
  (``virtio_ring`` before ``virtio``, then PCI transport, then ``virtio_console``), and
  virtio-9p's (``netfs``, ``fscache``, ``9pnet``, ``9pnet_virtio``, ``9p``) for shell mounts;
- the host CLIs of :data:`HOST_CLIS` (``git``, for the shipped git-history toolkit's recipes
  against a repository given with ``--mount``) when the host has them: the binary from Debian's
  ``/usr/bin`` and the shared libraries ``ldd`` names (at their host paths, the dynamic
  loader among them), with an ``/etc/gitconfig`` that marks every repository safe (a mounted
  one belongs to a host uid the guest's uid 1000 is not);
- ``/etc/wb/allowed``, the command allowlist: the absolute paths of the user applets
  (``/bin``, ``/usr/bin``), the host CLIs and ``wb-cap`` — nothing from ``/sbin``;
- ``/init``, a busybox shell (PID 1) that mounts ``/proc``, ``/sys``, ``/dev`` and a
  size-capped ``/tmp``, loads the modules, and keeps the agent running (the agent is never
  PID 1: its exit would panic the guest). No network interface is ever configured (the VM
  has none).

The kernel: ``/boot/vmlinuz-<v>`` with ``/lib/modules/<v>`` when a Debian kernel is
installed, else ``linux-image-<v>-amd64`` fetched with ``apt-get download`` into the cache
and unpacked with ``dpkg-deb -x`` (only vmlinuz and the modules above are kept).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.contract.errors import NotFound
from wbcore_runtime.store.artifacts import sha256_file

AGENT_SRC = Path(__file__).with_name("agent") / "wb_agent.c"
RECIPE = 2  # bumped when the layout below changes
MODULES = (
    "virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci", "virtio_console",
    # virtio-9p: host folders of ``wbx shell --tier microvm --mount`` (mounted by the agent on request)
    "netfs", "fscache", "9pnet", "9pnet_virtio", "9p",
)
BUSYBOX = "/bin/busybox"
#: Debian CLIs copied into the guest with their shared libraries, when this host has them.
HOST_CLIS = ("git",)
#: The most bytes the host CLIs and their libraries may add to the image.
HOST_CLI_BYTES = 64 << 20
GITCONFIG = b"[safe]\n\tdirectory = *\n"
TMP_MB = 64
INIT = f"""#!/bin/busybox sh
/bin/busybox mount -t proc -o nosuid,nodev,noexec proc /proc
/bin/busybox mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
/bin/busybox mount -t devtmpfs -o nosuid,noexec devtmpfs /dev
/bin/busybox mount -t tmpfs -o size={TMP_MB}m,mode=1777,nosuid,nodev tmpfs /tmp
for m in {' '.join(MODULES)}; do /bin/busybox insmod /lib/modules/$m.ko; done
/bin/busybox chmod 0600 /dev/vport* 2>/dev/null
while :; do /sbin/wbcore-agent; /bin/busybox sleep 1; done
"""


@dataclass(frozen=True, slots=True)
class Image:
    digest: str
    dir: Path
    kernel: Path
    initrd: Path
    kernel_version: str


def cache_root(home: Path, env: dict[str, str] | None = None) -> Path:
    """Where images and snapshots live: ``$WB_MICROVM_CACHE`` when set (CI and the tests
    share one across homes: the cold boot happens once), else ``<home>/tiers/microvm``."""
    override = (os.environ if env is None else env).get("WB_MICROVM_CACHE")
    return Path(override) if override else home / "tiers" / "microvm"


def busybox() -> Path:
    p = Path(BUSYBOX)
    if not p.is_file():
        raise NotFound("busybox is not installed; install it with: apt-get install busybox-static")
    out = subprocess.run(["file", "-b", str(p)], capture_output=True, text=True, check=False).stdout \
        if shutil.which("file") else "statically linked"
    if "dynamically linked" in out:
        raise NotFound(f"{p} is dynamically linked (the busybox package); the guest needs busybox-static: "
                       "apt-get install busybox-static")
    return p


def compiler() -> list[str]:
    """The C compiler that builds a static agent: gcc (glibc static) or zig cc (musl)."""
    if shutil.which("gcc"):
        return ["gcc", "-static", "-Os", "-s"]
    if shutil.which("zig"):
        return ["zig", "cc", "-target", "x86_64-linux-musl", "-static", "-Os", "-s"]
    raise NotFound(
        "no C compiler for the guest agent; install one with: apt-get install gcc (or pip install ziglang)"
    )


def _kernel_from_boot() -> tuple[str, Path, Path] | None:
    for vmlinuz in sorted(Path("/boot").glob("vmlinuz-*-amd64"), reverse=True):
        version = vmlinuz.name[len("vmlinuz-"):]
        mods = Path("/lib/modules") / version / "kernel"
        if mods.is_dir() and os.access(vmlinuz, os.R_OK):
            return version, vmlinuz, mods
    return None


def _kernel_package() -> str:
    """The versioned package ``linux-image-amd64`` depends on, asked of apt's cache."""
    out = subprocess.run(["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True,
                         timeout=60, check=False).stdout
    m = re.search(r"Depends:\s*(linux-image-[0-9][^\s]*-amd64)", out)
    if not m:
        raise NotFound("no Debian kernel package is known to apt (apt-get update, then "
                       "apt-get install linux-image-amd64, or wbx tiers install microvm)")
    return m.group(1)


def kernel(cache: Path) -> tuple[str, Path, Path]:
    """``(version, vmlinuz, modules/kernel dir)``: the installed Debian kernel, else the
    package downloaded and unpacked under ``cache/kernel`` (once)."""
    found = _kernel_from_boot()
    if found is not None:
        return found
    kdir = cache / "kernel"
    for done in sorted(kdir.glob("*/vmlinuz"), reverse=True):
        version = done.parent.name
        if all(any((done.parent / "modules").rglob(f"{name}.ko")) for name in MODULES):
            return version, done, done.parent / "modules"
        # unpacked before MODULES grew: unpacked again below (the package is fetched once more)
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        raise NotFound("no kernel for the guest: /boot has no Debian kernel and apt is not here "
                       "(install linux-image-amd64)")
    pkg = _kernel_package()
    version = pkg[len("linux-image-"):]
    kdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=kdir) as tmp:
        got = subprocess.run(
            ["apt-get", "download", pkg], cwd=tmp, capture_output=True, text=True, timeout=600, check=False
        )
        debs = list(Path(tmp).glob("*.deb"))
        if not debs:
            raise NotFound(f"apt-get download {pkg} failed: {got.stderr.strip()[-300:]}")
        unpacked = Path(tmp) / "x"
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(unpacked)], check=True, timeout=600)
        stage = Path(tmp) / version
        (stage / "modules").mkdir(parents=True)
        shutil.copy2(unpacked / "boot" / f"vmlinuz-{version}", stage / "vmlinuz")
        tree = unpacked / "lib" / "modules" / version / "kernel"
        for name in MODULES:
            src = _module(tree, name)
            dest = stage / "modules" / src.relative_to(tree)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
        if (kdir / version).exists() and not all(
            any((kdir / version / "modules").rglob(f"{n}.ko")) for n in MODULES
        ):
            shutil.rmtree(kdir / version, ignore_errors=True)  # an older unpacking, short of modules
        try:
            os.rename(stage, kdir / version)
        except OSError:
            pass  # another process unpacked the same kernel first
    return version, kdir / version / "vmlinuz", kdir / version / "modules"


def _module(tree: Path, name: str) -> Path:
    hits = sorted(tree.rglob(f"{name}.ko"))
    if not hits:
        raise NotFound(f"kernel module {name}.ko is not in {tree} (a Debian amd64 kernel ships it)")
    return hits[0]


def _applets(bb: Path) -> list[str]:
    out = subprocess.run(
        [str(bb), "--list-full"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    return sorted({ln.strip().lstrip("/") for ln in out.splitlines() if ln.strip() and ".." not in ln})


def host_clis() -> dict[str, Path]:
    """``guest path -> host file`` of every :data:`HOST_CLIS` binary this host has and the
    shared libraries ``ldd`` resolves for it (links followed: the guest gets the file under
    the name the loader asks for); a CLI whose libraries cannot all be found is left out."""
    out: dict[str, Path] = {}
    for name in HOST_CLIS:
        exe = Path("/usr/bin") / name
        if not exe.is_file() or not shutil.which("ldd"):
            continue
        done = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            continue
        found: dict[str, Path] = {f"/usr/bin/{name}": exe.resolve()}
        for line in done.stdout.splitlines():
            line = line.strip()
            if "=>" in line:
                path = line.split("=>", 1)[1].split("(")[0].strip()
            elif line.startswith("/"):
                path = line.split("(")[0].strip()
            else:
                continue  # linux-vdso: the kernel's
            if not path.startswith("/") or ".." in path or not Path(path).is_file():
                found = {}
                break
            found[path] = Path(path).resolve()
        out.update(found)
    if sum(p.stat().st_size for p in out.values()) > HOST_CLI_BYTES:
        raise NotFound(
            f"the host CLIs for the guest ({', '.join(HOST_CLIS)}) are over {HOST_CLI_BYTES >> 20} MiB"
        )
    return out


def build(cache: Path) -> Image:
    """The image for this machine's inputs, built once under ``cache/images/<digest>``."""
    version, vmlinuz, modtree = kernel(cache)
    bb = busybox()
    clis = host_clis()
    cc = compiler()
    cc_version = subprocess.run(
        [cc[0], "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n")[0]
    modules = {name: _module(modtree, name) for name in MODULES}
    inputs = {
        "recipe": RECIPE, "kernel": version, "vmlinuz": sha256_file(vmlinuz), "busybox": sha256_file(bb),
        "agent": sha256_file(AGENT_SRC), "cc": [*cc, cc_version],
        "init": hashlib.sha256(INIT.encode()).hexdigest(),
        "modules": {name: sha256_file(path) for name, path in modules.items()},
        "host_clis": {guest: sha256_file(path) for guest, path in sorted(clis.items())},
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]
    final = cache / "images" / digest
    if (final / "recipe.json").is_file():
        return Image(digest, final, final / "vmlinuz", final / "initrd.cpio", version)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=final.parent))
    try:
        agent = tmp / "wbcore-agent"
        done = subprocess.run(
            [*cc, "-o", str(agent), str(AGENT_SRC)], capture_output=True, text=True, timeout=600, check=False
        )
        if done.returncode != 0:
            raise NotFound(f"the guest agent did not compile: {done.stderr.strip()[-600:]}")
        entries = _entries(bb, agent, modules, clis)
        (tmp / "initrd.cpio").write_bytes(cpio(entries))
        agent.unlink()
        shutil.copy2(vmlinuz, tmp / "vmlinuz")
        (tmp / "recipe.json").write_text(json.dumps(inputs, sort_keys=True, indent=1) + "\n")
        try:
            os.rename(tmp, final)
        except OSError:  # built by another process first: the same inputs, the same bytes
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Image(digest, final, final / "vmlinuz", final / "initrd.cpio", version)


# --- the initramfs ----------------------------------------------------------------------------

DIR, FILE, LINK = 0o040000, 0o100000, 0o120000


def _entries(bb: Path, agent: Path, modules: dict[str, Path],
             clis: dict[str, Path] | None = None) -> dict[str, tuple[int, bytes]]:
    """``path -> (mode, data)`` (a symlink's data is its target)."""
    e: dict[str, tuple[int, bytes]] = {}

    def mkdirs(path: str) -> None:
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            e.setdefault("/".join(parts[:i]), (DIR | 0o755, b""))

    def add(path: str, mode: int, data: bytes) -> None:
        mkdirs(path)
        e[path] = (mode, data)

    for d in (
        "proc", "sys", "dev", "tmp", "root", "etc/wb", "lib/modules", "usr/bin", "usr/sbin", "sbin", "bin",
    ):
        mkdirs(d + "/x")
        e[d] = (DIR | (0o700 if d == "root" else 0o755), b"")
    add("bin/busybox", FILE | 0o755, bb.read_bytes())
    allowed = []
    for applet in _applets(bb):
        if applet == "bin/busybox" or applet in e:
            continue
        add(applet, LINK | 0o777, b"/bin/busybox")
        if applet.startswith(("bin/", "usr/bin/")):
            allowed.append("/" + applet)
    add("sbin/wbcore-agent", FILE | 0o755, agent.read_bytes())
    add("usr/bin/wb-cap", LINK | 0o777, b"/sbin/wbcore-agent")
    allowed.append("/usr/bin/wb-cap")
    for guest, host in sorted((clis or {}).items()):
        binary = guest.startswith("/usr/bin/")
        add(guest.lstrip("/"), FILE | (host.stat().st_mode & 0o755 | 0o444), host.read_bytes())
        if binary:
            allowed.append(guest)
    if clis:
        add("etc/gitconfig", FILE | 0o444, GITCONFIG)
    add("etc/wb/allowed", FILE | 0o444, ("\n".join(sorted(allowed)) + "\n").encode())
    add("etc/passwd", FILE | 0o444, b"root:x:0:0:root:/root:/bin/sh\nwb:x:1000:1000:wb:/tmp/w:/bin/sh\n")
    add("etc/group", FILE | 0o444, b"root:x:0:\nwb:x:1000:\n")
    for name, path in modules.items():
        add(f"lib/modules/{name}.ko", FILE | 0o644, path.read_bytes())
    add("init", FILE | 0o755, INIT.encode())
    return e


def cpio(entries: dict[str, tuple[int, bytes]]) -> bytes:
    """A newc archive of ``entries`` in sorted order, mtime 0, owner root: reproducible."""
    out = bytearray()

    def record(ino: int, name: str, mode: int, data: bytes, nlink: int) -> None:
        nb = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(nb), 0)
        out.extend(b"070701" + b"".join(b"%08X" % f for f in fields) + nb)
        out.extend(b"\0" * (-len(out) % 4))
        out.extend(data)
        out.extend(b"\0" * (-len(out) % 4))

    record(1, ".", DIR | 0o755, b"", 2)
    for ino, name in enumerate(sorted(entries), start=2):
        mode, data = entries[name]
        record(ino, name, mode, data, 2 if mode & 0o170000 == DIR else 1)
    record(0, "TRAILER!!!", 0, b"", 1)
    return bytes(out)
