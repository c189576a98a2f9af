"""``products.refuse`` names the first real file inside a build-product folder, found through
the containment walk: a link inside (to a host file) is never followed or named as a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from wbcore_runtime.build import products


def test_the_first_file_named_is_a_real_one_never_a_link(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "__pycache__").mkdir(parents=True)
    host = tmp_path / "host.pyc"
    host.write_bytes(b"host")
    (src / "__pycache__" / "a.pyc").symlink_to(host)
    (src / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"evil")
    with pytest.raises(products.BuildProductInSource, match=r"file '__pycache__/b\.cpython-311\.pyc'"):
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])


def test_a_folder_holding_only_a_link_is_named_as_the_folder(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "__pycache__").mkdir(parents=True)
    (src / "__pycache__" / "x").symlink_to(tmp_path)
    with pytest.raises(products.BuildProductInSource, match=r"folder '__pycache__'"):
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])


def test_a_product_folder_that_is_a_link_is_named_never_walked(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    host = tmp_path / "host"
    host.mkdir()
    (host / "host-file-name.txt").write_text("x")
    (src / "__pycache__").symlink_to(host, target_is_directory=True)
    with pytest.raises(products.BuildProductInSource, match=r"folder '__pycache__'") as err:
        products.refuse(src, lane="python", dirs=products.PYTHON_PRODUCTS[0],
                        suffixes=products.PYTHON_PRODUCTS[1])
    assert "host-file-name" not in str(err.value)
