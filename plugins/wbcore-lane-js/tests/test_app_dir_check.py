"""The js runner's check of an extracted app folder (``runner._matches``) walks it through the
core's containment walk: a file replaced by a link to a host file with the same bytes, an
extra link, a FIFO (which would block a plain read) all count as a mismatch, so the folder is
extracted again from the artifact; an exact folder matches."""

from __future__ import annotations

import os
from pathlib import Path

from wbcore_lane_js.runner import _matches

FILES = {"main.js": "std.out.puts('hi');\n", "lib/util.js": "export const x = 1;\n"}


def _app(dest: Path) -> Path:
    for rel, text in FILES.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    return dest


def test_an_exact_folder_matches(tmp_path: Path) -> None:
    assert _matches(_app(tmp_path / "app"), FILES)
    assert not _matches(tmp_path / "missing", FILES)


def test_a_link_with_the_same_bytes_is_a_mismatch(tmp_path: Path) -> None:
    dest = _app(tmp_path / "app")
    host = tmp_path / "host.js"
    host.write_text(FILES["main.js"])
    (dest / "main.js").unlink()
    (dest / "main.js").symlink_to(host)
    assert not _matches(dest, FILES)


def test_an_extra_link_or_file_or_a_fifo_is_a_mismatch(tmp_path: Path) -> None:
    dest = _app(tmp_path / "app")
    (dest / "extra.js").symlink_to(dest / "main.js")
    assert not _matches(dest, FILES)
    (dest / "extra.js").unlink()
    os.mkfifo(dest / "lib" / "pipe")
    assert not _matches(dest, FILES)  # refused by kind, never opened for a read that would block
    (dest / "lib" / "pipe").unlink()
    (dest / "lib" / "util.js").write_text("changed\n")
    assert not _matches(dest, FILES)


def test_concurrent_first_calls_extract_once_and_all_see_the_whole_folder(tmp_path: Path) -> None:
    """Two fabric workers' first calls of one artifact used to race: each found no folder,
    extracted its own and renamed it over the other's, so one call either failed ("changed
    while being written") or ran with its ``/app`` removed under it. One extraction at a
    time per home now; each later caller finds the finished folder and uses it."""
    import threading

    from wbcore_lane_js import runner

    def first_call(prep: object, start: threading.Barrier, got: list[object]) -> None:
        start.wait()
        try:
            dest = runner.app_dir(tmp_path, prep)  # type: ignore[arg-type]
            got.append(dest if _matches(dest, FILES) else f"{dest} does not hold the sources")
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            got.append(exc)

    for round_ in range(12):
        sha = f"{round_:064x}"
        prep = runner.Prepared(sha, FILES, module=None)
        start = threading.Barrier(8)
        got: list[object] = []
        threads = [threading.Thread(target=first_call, args=(prep, start, got)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert got == [tmp_path / "cache" / "js" / "app" / sha] * 8, got
