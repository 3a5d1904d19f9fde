"""The one atomic-write helper (:mod:`dflash_lite.files`): a file is replaced whole or not at all."""
import pytest

from dflash_lite.files import atomic_path, atomic_write_text


def test_atomic_write_never_touches_a_neighbour_and_leaves_nothing_on_failure(tmp_path):
    (tmp_path / "keep.tmp").write_text("mine")
    atomic_write_text(tmp_path / "keep.json", "{}")
    with pytest.raises(ZeroDivisionError):
        with atomic_path(tmp_path / "keep.json") as tmp:
            tmp.write_text("half")
            1 / 0
    assert (tmp_path / "keep.json").read_text() == "{}" and (tmp_path / "keep.tmp").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.json", "keep.tmp"]
