"""The shipped files are found beside the package (editable install) or, for a plain
install into site-packages, in the working directory."""

from __future__ import annotations

from pathlib import Path

from ctxsim import paths
from ctxsim.paths import find_root


def test_a_checkout_beside_the_package_wins(tmp_path):
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    (checkout / "data").mkdir(parents=True)
    elsewhere.mkdir()
    assert find_root(checkout, elsewhere) == checkout


def test_site_packages_without_data_falls_back_to_the_working_directory(tmp_path):
    site, cwd = tmp_path / "site-packages", tmp_path / "checkout"
    site.mkdir()
    cwd.mkdir()
    assert find_root(site, cwd) == cwd


def test_this_checkout_ships_its_folders():
    assert paths.ROOT == Path(__file__).resolve().parents[1]
    for folder in (paths.DATA_DIR / "scenarios", paths.ENVS_DIR, paths.EXPERIMENTS_DIR):
        assert folder.is_dir(), folder
