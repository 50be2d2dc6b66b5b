"""Seed 003: the partition type is the backing filesystem, never the container layer 'overlay'.
A real overlay mount (root only) is looked through to the filesystem that holds its upperdir."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from ai4s_graph.tools.cluster import gpu_storage as S


def test_a_plain_mount_is_reported_as_it_is(tmp_path):
    info = S.fs_info(str(tmp_path))
    plain = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(tmp_path)], capture_output=True, text=True).stdout.strip()
    assert info["type"] == plain and "layer" not in info


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="mounting an overlay needs root")
def test_overlay_is_looked_through_to_its_backing_filesystem(tmp_path):
    low, up, work, merged = (tmp_path / d for d in ("l", "u", "w", "m"))
    for d in (low, up, work, merged):
        d.mkdir()
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={low},upperdir={up},workdir={work}", str(merged)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"overlay mount refused here: {r.stderr.strip()}")
    try:
        seen = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", str(merged)], capture_output=True, text=True).stdout.strip()
        assert seen == "overlay"  # what df -T / findmnt say inside a container
        info = S.fs_info(str(merged))
        back = S.fs_info(str(up))
        assert info["layer"] == "overlay" and info["type"] == back["type"] != "overlay"
        assert info["source"] == back["source"] and info["mount"] == str(merged)
    finally:
        subprocess.run(["umount", str(merged)], capture_output=True)
