"""Reliability round 3 (issue 32): no pickle is ever loaded, every output path goes through one
guard (:func:`dflash_lite.outputs.guard_output_file`, :func:`~dflash_lite.outputs.guard_output_dir`,
the lock), and bad configs, tokenizers, chat templates and sizes are one line at load, before
anything is allocated. Destructive cases run on copies in tmp_path; nothing here writes into the
repository."""
import json
import os
import pickle
import shutil
import stat
import sys
import time
from pathlib import Path

import pytest

import dflash_lite
from dflash_lite import outputs, prompts, validate
from dflash_lite.decoding.checkpoints import export_dflash, load_drafter, load_pair
from dflash_lite.decoding.target import SHIPPED, SHIPPED_DRAFTERS, LoadError, load_pretrained
from dflash_lite.training.train import CHECKPOINT, DrafterTrainConfig, prepare_out
from test_bad_input_cli import FAST_TRAIN, no_work, run_cli, snapshot, the_line  # noqa: F401

PACKAGE = Path(dflash_lite.__file__).parent
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_speculative_decoding.ipynb"
GiB = 2 ** 30


class Payload:
    """Unpickling this creates a marker file: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def zoo_cli(capsys, *argv) -> tuple[int, str, str]:
    from dflash_lite.zoo import main
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message
    return message


@pytest.fixture
def a_24gb_machine(monkeypatch):
    """Free memory as on the 24 GB machine of the issue, whatever this one has."""
    monkeypatch.setattr(validate, "available_memory", lambda device="cpu": 22 * GiB)


# ----------------------------------------------------------------------------- output paths
def _plant(tmp_path: Path, case: str) -> tuple[list, Path]:
    """The command line of ``case`` and the folder (or file) it must leave as it was."""
    out = tmp_path / "run"
    if case == "json into the package":
        tiny = PACKAGE / "models" / "tiny"
        return ["bench", "--json", tiny / "config.json"], tiny
    if case == "cache-dir in the package":
        cache = PACKAGE / "models" / "tiny"
        return ["train", "--out", out, "--cache-dir", cache, *FAST_TRAIN], PACKAGE / "models"
    if case == "json over a source notebook":
        notebook = tmp_path / "notebooks" / NOTEBOOK.name
        notebook.parent.mkdir()
        shutil.copy(NOTEBOOK, notebook)
        return ["bench", "--json", notebook], notebook.parent
    if case == "json over a foreign file":
        (tmp_path / "notes.json").write_text('{"mine": 1}')
        return ["bench", "--json", tmp_path / "notes.json"], tmp_path
    if case == "json onto a device":
        device = tmp_path / "null"
        if os.geteuid() == 0:
            os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))      # a copy of /dev/null
        else:
            os.mkfifo(device)                                   # not a regular file either
        return ["bench", "--json", device], tmp_path
    if case == "json with a long name":
        return ["bench", "--json", tmp_path / ("r" * 5000 + ".json")], tmp_path
    if case == "out with a long name":
        return ["train", "--out", tmp_path / ("o" * 5000), *FAST_TRAIN], tmp_path
    if case == "out with a symlinked lock":
        (tmp_path / "precious.txt").write_text("the user's file")
        (tmp_path / ".run.lock").symlink_to(tmp_path / "precious.txt")
        return ["train", "--out", out, *FAST_TRAIN], tmp_path
    if case == "out with a foreign lock file":
        (tmp_path / ".run.lock").write_text("my own notes, not a lock")
        return ["train", "--out", out, *FAST_TRAIN], tmp_path
    if case == "out with an unmarked .old":
        shutil.copytree(SHIPPED_DRAFTERS["tiny"], out)
        (out / outputs.MARKER).write_text("{}")
        (tmp_path / ".run.old").mkdir()
        (tmp_path / ".run.old" / "thesis.tex").write_text("years of work")
        return ["train", "--out", out, "--overwrite", *FAST_TRAIN], tmp_path
    if case == "zoo card of the package":
        return ["zoo", "card", PACKAGE / "models" / "tiny"], PACKAGE / "models" / "tiny"
    if case == "zoo drafter-card of the package":
        shipped = PACKAGE / "models" / "tiny-dflash"
        return ["zoo", "drafter-card", shipped], shipped
    raise AssertionError(case)


OUTPUT_PATHS = [
    ("json into the package", "inside the dflash_lite package"),
    ("cache-dir in the package", "inside the dflash_lite package"),
    ("json over a source notebook", "not this project's output"),
    ("json over a foreign file", "not this project's output"),
    ("json onto a device", "not a regular file"),
    ("json with a long name", "too long"),
    ("out with a long name", "too long"),
    ("out with a symlinked lock", "not a dflash-lite lock"),
    ("out with a foreign lock file", "not a dflash-lite lock"),
    ("out with an unmarked .old", "not written by dflash-lite"),
    ("zoo card of the package", "inside the dflash_lite package"),
    ("zoo drafter-card of the package", "inside the dflash_lite package"),
]


@pytest.mark.parametrize("case, named", OUTPUT_PATHS, ids=[c for c, _ in OUTPUT_PATHS])
def test_every_output_path_is_guarded_before_any_work(capsys, tmp_path, no_work, monkeypatch,
                                                      case, named):
    monkeypatch.setattr("dflash_lite.measuring.model_card.load_pretrained",
                        lambda *a, **k: pytest.fail("the card's evaluation started"))
    monkeypatch.setattr("dflash_lite.measuring.model_card.bench",
                        lambda *a, **k: pytest.fail("a benchmark started"))
    argv, kept = _plant(tmp_path, case)
    before = snapshot(kept) if kept.is_dir() else kept.read_bytes()
    modes = {p: os.lstat(p).st_mode for p in kept.rglob("*")} if kept.is_dir() else None
    runner = zoo_cli if argv[0] == "zoo" else run_cli
    code, out, err = runner(capsys, *(argv[1:] if argv[0] == "zoo" else argv))
    line = the_line(err)
    assert code == 2 and named in line and out == "", line
    assert (snapshot(kept) if kept.is_dir() else kept.read_bytes()) == before
    if modes is not None:                  # no device replaced, no link followed, no mode changed
        assert {p: os.lstat(p).st_mode for p in kept.rglob("*")} == modes


def test_json_replaces_its_own_report_keeps_its_mode_and_a_foreign_file_needs_overwrite(tmp_path):
    from dflash_lite.measuring.benchmark import IS_BENCH_REPORT
    from dflash_lite.files import atomic_write_text
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"env": {}, "methods": []}))
    report.chmod(0o600)
    assert outputs.guard_output_file(report, "json_out", own=IS_BENCH_REPORT) == report
    atomic_write_text(report, json.dumps({"env": {"new": 1}, "methods": []}))
    assert stat.S_IMODE(report.stat().st_mode) == 0o600 and "new" in report.read_text()
    foreign = tmp_path / "notes.json"
    foreign.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not this project's output"):
        outputs.guard_output_file(foreign, "json_out", own=IS_BENCH_REPORT)
    assert outputs.guard_output_file(foreign, "json_out", True, IS_BENCH_REPORT) == foreign


def _course_plant(tmp_path: Path, case: str) -> tuple[list, Path]:
    """The course command line of ``case`` and the folder it must leave as it was."""
    root = PACKAGE.parent
    if case == "student-edition over notebooks":
        (tmp_path / "edition").mkdir()
        shutil.copy(NOTEBOOK, tmp_path / "edition" / NOTEBOOK.name)
        return ["student-edition", tmp_path / "edition", "--notebooks", "02"], tmp_path
    if case == "student-edition onto the source notebooks":
        return ["student-edition", NOTEBOOK.parent, "--notebooks", "02"], NOTEBOOK.parent
    if case == "site over a foreign index.html":
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "index.html").write_text("<p>my page</p>")
        return ["site", tmp_path / "site"], tmp_path
    if case == "site inside the package":
        return ["site", PACKAGE / "site"], PACKAGE / "models"
    if case == "autograde --out into the package":
        (tmp_path / "sub").mkdir()
        return ["autograde", tmp_path / "sub", "--allow-root", "--out", PACKAGE / "s.json"], \
            PACKAGE / "models"
    if case == "autograde a folder in the repository":
        return ["autograde", root / "notebooks", "--allow-root"], root / "notebooks"
    if case == "autograde as root":
        (tmp_path / "sub").mkdir()
        shutil.copy(NOTEBOOK, tmp_path / "sub" / NOTEBOOK.name)
        return ["autograde", tmp_path / "sub", "--notebooks", "02"], tmp_path
    raise AssertionError(case)


AS_ROOT = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                             reason="refusing root needs root")
COURSE_PATHS = [pytest.param(case, named, id=case, marks=AS_ROOT if "root" in case else ())
                for case, named in [
    ("student-edition over notebooks", "not written by student-edition"),
    ("student-edition onto the source notebooks", "inside the repository"),
    ("site over a foreign index.html", "not built by course site"),
    ("site inside the package", "inside the dflash_lite package"),
    ("autograde --out into the package", "inside the dflash_lite package"),
    ("autograde a folder in the repository", "inside the repository"),
    ("autograde as root", "refusing to grade as root")]]


@pytest.mark.parametrize("case, named", COURSE_PATHS)
def test_every_course_command_refuses_in_one_line_before_any_work(capsys, tmp_path, monkeypatch,
                                                                   case, named):
    """The course's usage errors are one line, exit 2, like the other commands' (no usage
    banner), and come before any work: nothing is written even if a check regressed."""
    from dflash_lite.course import commands as course
    from dflash_lite.course import site as course_site
    for module, work in ((course, "prepare_course"), (course_site, "build_site")):
        monkeypatch.setattr(module, work, lambda *a, **k: pytest.fail("the work started"))
    argv, kept = _course_plant(tmp_path, case)
    before = snapshot(kept)
    with pytest.raises(SystemExit) as exit_:
        course.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    line = the_line(err)
    assert exit_.value.code == 2 and named in line and out == "", line
    assert snapshot(kept) == before
    assert not (PACKAGE / "site").exists() and not (PACKAGE / "s.json").exists()


def test_graded_kernels_start_in_the_sandbox_with_the_instructors_files_hidden(tmp_path):
    """The kernel spec autograde runs notebooks with: this Python's ipykernel behind the sandbox
    launcher (run as a file, isolated mode), the repository read-only, the instructor's folder
    and the source notebooks hidden, the kernel's own folder writable."""
    from dflash_lite.course import grading
    kernels = grading.kernel_spec(tmp_path, ["/x/graded"], [str(tmp_path / "run")], {"A": "1"},
                                  grading.Limits())
    spec = json.loads((kernels / grading.KERNEL / "kernel.json").read_text())
    argv = spec["argv"]
    assert argv[:3] == [sys.executable, "-I", str(PACKAGE / "course" / "sandbox.py")]
    assert f"--read-only={PACKAGE.parent}" in argv and f"--writable={tmp_path / 'run'}" in argv
    for hidden in (PACKAGE.parent / "instructor", PACKAGE.parent / "notebooks", "/x/graded"):
        assert f"--hide={hidden}" in argv
    assert argv[argv.index("--") + 1:] == [sys.executable, "-m", "ipykernel_launcher", "-f",
                                           "{connection_file}"]
    assert spec["env"] == {"A": "1"}


def test_the_guard_for_a_folder_of_outputs_refuses_files_it_did_not_write(tmp_path):
    own = outputs.is_json_with(("written_by",))
    folder = tmp_path / "release"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps({"written_by": "dflash-lite"}))
    assert outputs.guard_output_dir(folder, "release", ("a.json",), own=own, exclusive=True)
    shutil.copy(NOTEBOOK, folder / NOTEBOOK.name)                       # an instructor's source
    for writes in ((), (NOTEBOOK.name,)):
        with pytest.raises(ValueError, match=NOTEBOOK.name) as info:
            outputs.guard_output_dir(folder, "release", writes, own=own, exclusive=True)
        one_line(info.value)
    with pytest.raises(ValueError, match="inside the dflash_lite package"):
        outputs.guard_output_dir(PACKAGE / "exercises", "release", own=own, exclusive=True)


def test_a_device_is_never_replaced_by_the_atomic_writer(tmp_path):
    from dflash_lite.files import atomic_write_text
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        atomic_write_text(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_the_lock_is_this_projects_own_and_is_released(tmp_path):
    out = tmp_path / "run"
    path = outputs.lock(out)
    assert path.read_text() == outputs.LOCK_TEXT.format(pid=os.getpid())
    outputs.release(out)
    assert not path.exists()
    path.write_text("12345\n")                    # a lock an older, killed run left: still ours
    assert outputs.lock(out) == path
    outputs.release(out)


def test_a_run_committed_through_a_symbolic_link_replaces_what_it_points_to(tmp_path):
    """``out`` a link to a run's directory: the directory is replaced, the link stays a link, and
    nothing is left beside either (the old directory used to be renamed as a link and then passed
    to rmtree, which refused it after the link had been replaced)."""
    store, link = tmp_path / "store" / "run", tmp_path / "link"
    outputs.mark(store, "first run")
    (store / "old.txt").write_text("old")
    link.symlink_to(store)
    work = outputs.begin(link, True, "second run")
    (work / "new.txt").write_text("new")
    assert outputs.commit(work, link) == link
    assert link.is_symlink() and link.resolve() == store.resolve()
    assert sorted(p.name for p in store.iterdir()) == [outputs.MARKER, "new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "store"]
    assert [p.name for p in store.parent.iterdir()] == ["run"]


def test_a_card_of_a_read_only_folder_is_refused_before_the_evaluation(capsys, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr("dflash_lite.measuring.model_card.load_pretrained",
                        lambda *a, **k: pytest.fail("evaluated"))
    folder = Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))
    if os.geteuid() == 0:            # root may write anyway: the folder is read-only as a user's is
        access = os.access

        def user_access(path, mode, *a, **k):
            inside = Path(path).resolve().is_relative_to(folder.resolve())
            return not (inside and mode & os.W_OK) and access(path, mode, *a, **k)

        monkeypatch.setattr(os, "access", user_access)
    folder.chmod(0o555)
    try:
        code, _, err = zoo_cli(capsys, "card", folder)
    finally:
        folder.chmod(0o755)
    line = the_line(err)
    assert code == 2 and "no write permission" in line and f"{folder}/x" not in line, line


def test_empty_temporary_files_left_by_a_killed_run_do_not_block_resuming(tmp_path):
    out = tmp_path / "run"
    (out / "checkpoint").mkdir(parents=True)
    (out / outputs.MARKER).write_text("{}")
    (out / "checkpoint" / f".{CHECKPOINT}.a1b2c3d4.tmp").write_bytes(b"")   # killed while saving
    (out / ".drafter.safetensors.x_y_z_12.tmp").write_bytes(b"\0" * 10)         # and a partial one
    config = DrafterTrainConfig(out=str(out), **{"steps": 2}).check()
    try:
        assert prepare_out(out, False, config.run_config()) == out
    finally:
        outputs.release(out)
    (out / "notes.tmp").write_text("the user's own")               # not a run's temporary name
    with pytest.raises(ValueError, match="not empty"):
        prepare_out(out, False, config.run_config())
    outputs.release(out)


# ----------------------------------------------------------------------------- weight formats
OTHER_FORMATS = ["pytorch_model.bin", "model.pt", "model.pth", "model.ckpt", "weights.pkl",
                 "flax_model.msgpack", "tf_model.h5", "pytorch_model.bin.index.json"]


@pytest.mark.parametrize("name", OTHER_FORMATS)
@pytest.mark.parametrize("what", ["target", "drafter"])
def test_a_pickle_beside_the_safetensors_is_refused_and_never_loaded(tmp_path, monkeypatch, name,
                                                                     what):
    folder = Path(shutil.copytree(SHIPPED["tiny"] if what == "target" else SHIPPED_DRAFTERS["tiny"],
                                  tmp_path / what))
    marker = tmp_path / "code-ran"
    (folder / name).write_bytes(pickle.dumps(Payload(marker)))
    monkeypatch.setattr("transformers.AutoModelForCausalLM.from_pretrained",
                        lambda *a, **k: pytest.fail("transformers was given a pickle"))
    with pytest.raises(LoadError) as info:
        load_pretrained(folder) if what == "target" else load_drafter(folder)
    assert name in one_line(info.value) and "only safetensors" in str(info.value)
    assert not marker.exists()


def test_loading_asks_transformers_for_safetensors_only(monkeypatch):
    import transformers
    seen = {}
    real = transformers.AutoModelForCausalLM.from_pretrained

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    load_pretrained("tiny")
    assert seen["use_safetensors"] is True and seen["trust_remote_code"] is False


# ------------------------------------------------------------------------- configs and tokenizers
def _target_missing_tensors(folder: Path) -> None:
    from safetensors.torch import load_file, save_file
    weights = folder / "model.safetensors"
    tensors = load_file(str(weights))
    for name in sorted(tensors)[-2:]:
        tensors.pop(name)
    save_file(tensors, str(weights), metadata={"format": "pt"})


def _tokenizer_beyond_embedding(folder: Path) -> None:
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens(["<beyond-the-embedding>"])
    tokenizer.save_pretrained(folder)


def _edit(file: str, change):
    def plant(folder: Path) -> None:
        raw = json.loads((folder / file).read_text())
        change(raw)
        (folder / file).write_text(json.dumps(raw))
    return plant


def _nested(folder: Path) -> None:
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)


TARGETS = [
    ("missing tensors", _target_missing_tensors, "tensors missing"),
    ("tokenizer beyond the embedding", _tokenizer_beyond_embedding, "beyond the model's embedding"),
    ("deeply nested config", _nested, "not valid JSON"),
    ("a 14.9B config", _edit("config.json", lambda r: r.update(
        hidden_size=5120, intermediate_size=25600, num_hidden_layers=30, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, vocab_size=151936, layer_types=None)),
     "more than the 22.0 GiB free"),
]


@pytest.mark.parametrize("case, plant, named", TARGETS, ids=[c for c, _, _ in TARGETS])
def test_a_bad_target_is_one_line_at_load(tmp_path, a_24gb_machine, case, plant, named):
    folder = Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))
    plant(folder)
    with pytest.raises(LoadError) as info:
        load_pretrained(folder)
    assert named in one_line(info.value)


OWN, PUBLIC = "drafter_config.json", "config.json"


def _public(folder: Path, random_drafter) -> Path:
    export_dflash(random_drafter, folder)
    return folder


DRAFTERS = [
    ("no config key", "own", _edit(OWN, lambda r: r.pop("config")), "'config' must be a JSON"),
    ("config not an object", "own", _edit(OWN, lambda r: r.update(config=[1])), "'config' must"),
    ("unknown activation", "own", _edit(OWN, lambda r: r["config"].update(hidden_act="bogus_act")),
     "bogus_act"),
    ("dflash_config a list", "public", _edit(PUBLIC, lambda r: r.update(dflash_config=[1])),
     "dflash_config must be a JSON object"),
    ("rope_parameters a list", "public", _edit(PUBLIC, lambda r: r.update(rope_parameters=[1])),
     "rope_parameters must be a JSON object"),
    ("config a list", "own", lambda f: (f / OWN).write_text("[]"), "must be a JSON object"),
    ("deeply nested config", "own", lambda f: (f / OWN).write_text("[" * 100_000),
     "not valid JSON"),
]


@pytest.mark.parametrize("case, layout, plant, named", DRAFTERS, ids=[c for c, *_ in DRAFTERS])
def test_a_bad_drafter_config_is_one_line_at_load(tmp_path, random_drafter, case, layout, plant,
                                                  named):
    if layout == "own":
        folder = Path(shutil.copytree(SHIPPED_DRAFTERS["tiny"], tmp_path / "drafter"))
    else:
        folder = _public(tmp_path / "drafter", random_drafter)
    plant(folder)
    with pytest.raises(LoadError) as info:
        load_drafter(folder)
    assert named in one_line(info.value)


MISMATCHED = [("another mask token", {"mask_token_id": 5}, "mask token 5"),
              ("taps beyond the target", {"target_layer_ids": [1, 2, 3, 4, 40]},
               "the target has 8 layers")]


@pytest.mark.parametrize("case, change, named", MISMATCHED, ids=[c for c, *_ in MISMATCHED])
def test_a_drafter_that_does_not_belong_to_the_target_is_refused_at_load_in_bench_too(
        capsys, tmp_path, monkeypatch, case, change, named):
    folder = Path(shutil.copytree(SHIPPED_DRAFTERS["tiny"], tmp_path / "drafter"))
    _edit("drafter_config.json", lambda r: r["config"].update(change))(folder)
    with pytest.raises(LoadError) as info:
        load_pair("tiny", str(folder))
    assert named in one_line(info.value)
    monkeypatch.setattr("dflash_lite.measuring.benchmark.measure",
                        lambda *a, **k: pytest.fail("bench ran its methods"))
    code, _, err = run_cli(capsys, "bench", "--drafter", folder, "--no-baselines",
                           "--num-prompts", "1")
    assert code == 2 and named in the_line(err)


# ----------------------------------------------------------------------------- chat templates
TEMPLATES = [
    ("raises", "{{ raise_exception('no system role') }}", "no system role"),
    ("includes", "{% include 'other.jinja' %}", "no loader"),
    ("loops without end",
     "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
     "took more than"),
    ("allocates without bound", "{{ 'a' * 100000000000 }}", "ran out of memory"),
    ("writes too much", "{% for i in range(3000) %}{{ 'b' * 1000 }}{% endfor %}",
     "more than 1 MiB"),
]


@pytest.mark.parametrize("case, template, named", TEMPLATES, ids=[c for c, *_ in TEMPLATES])
def test_a_hostile_chat_template_is_one_line_at_load_within_the_time_limit(tmp_path, monkeypatch,
                                                                          case, template, named):
    monkeypatch.setattr(prompts, "TEMPLATE_SECONDS", 1.0)
    folder = Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))
    _edit("tokenizer_config.json", lambda r: r.update(chat_template=template))(folder)
    started = time.monotonic()
    with pytest.raises(LoadError) as info:
        load_pretrained(folder)
    assert named in one_line(info.value) and "chat template" in str(info.value)
    assert time.monotonic() - started < 20


def test_a_template_quick_on_a_short_prompt_is_limited_on_every_later_render(tmp_path,
                                                                             monkeypatch):
    # a million loop steps per character: well under a second for the load's "Hello", a minute
    # or more for a prompt of a few thousand characters
    slow = ("{% for m in messages %}{% for c in m['content'] %}{% for i in range(100000) %}"
            "{% for j in range(10) %}{% endfor %}{% endfor %}{% endfor %}{{ m['content'] }}"
            "{% endfor %}")
    folder = Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))
    _edit("tokenizer_config.json", lambda r: r.update(chat_template=slow))(folder)
    _, tokenizer = load_pretrained(folder)
    monkeypatch.setattr(prompts, "TEMPLATE_SECONDS", 1.0)
    assert prompts.apply_chat_template(tokenizer, ["Hi"]) == ["Hi"]
    started = time.monotonic()
    with pytest.raises(ValueError) as info:
        prompts.encode(tokenizer, "x" * 4000)
    assert "took more than" in one_line(info.value) and "chat template" in str(info.value)
    assert time.monotonic() - started < 20


def test_a_good_chat_template_loads_and_is_used(tmp_path):
    folder = Path(shutil.copytree(SHIPPED["tiny"], tmp_path / "tiny"))
    _edit("tokenizer_config.json", lambda r: r.update(
        chat_template="{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}")
    )(folder)
    _, tokenizer = load_pretrained(folder)
    assert prompts.apply_chat_template(tokenizer, ["Hi"]) == ["<user>Hi"]


# ----------------------------------------------------------------------------- sizes and repeats
SIZES = [
    (["bench", "--repeats", "1000000000"], "--repeats"),
    (["bench", "--cost-repeats", "1000000000"], "--cost-repeats"),
    (["demo", "--repeats", "1000000000"], "--repeats"),
    (["train", "--out", "{tmp}/r", "--max-new-tokens", "100000"], "context of 1024 tokens"),
    (["train", "--out", "{tmp}/r", "--num-anchors", "100000", "--batch-size", "64",
      "--block-size", "64"], "num_anchors (100000)"),
    (["train", "--out", "{tmp}/r", "--num-anchors", "100", "--batch-size", "64",
      "--block-size", "64", "--max-new-tokens", "1000"], "one batch"),
    (["train", "--out", "{tmp}/r", "--layers", "20000"], "a drafter of 20000 layers"),
    (["train", "--out", "{tmp}/r", "--layers", "20000", "--drafting", "draft-model"],
     "a drafter of 20000 layers"),
]


@pytest.mark.parametrize("argv, named", SIZES, ids=[" ".join(a[:4]) for a, _ in SIZES])
def test_a_size_beyond_the_machine_is_one_line_before_allocating(capsys, tmp_path, no_work,
                                                                a_24gb_machine, argv, named):
    code, _, err = run_cli(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert code == 2 and named in the_line(err)
    assert not (tmp_path / "r").exists()


def test_twenty_thousand_random_drafter_layers_are_refused_before_building(capsys, a_24gb_machine,
                                                                           monkeypatch):
    monkeypatch.setattr("dflash_lite.measuring.benchmark.DFlashDrafter",
                        lambda *a: pytest.fail("the drafter was built"))
    code, _, err = run_cli(capsys, "bench", "--random-drafter-layers", "20000", "--no-baselines")
    assert code == 2 and "a random drafter of 20000 layers" in the_line(err)


def test_a_huge_prompts_file_is_read_only_up_to_num_prompts(tmp_path):
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"prompt": "first"}\n{"prompt": "second"}\n')
        fh.truncate(3 * GiB)                        # sparse: the rest is zero bytes, no newline
    started = time.monotonic()
    assert prompts.load_prompts(str(path), 2) == ["first", "second"]
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError, match=r"huge.jsonl:3: a line longer than 4 MiB") as info:
        prompts.load_prompts(str(path), 3)
    one_line(info.value)


def test_deeply_nested_json_in_a_prompts_file_is_one_line(capsys, tmp_path, no_work):
    path = tmp_path / "nested.jsonl"
    path.write_text('{"prompt": "ok"}\n' + "[" * 100_000 + "\n")
    code, _, err = run_cli(capsys, "bench", "--prompts", path, "--num-prompts", "2")
    assert code == 2 and "nested.jsonl:2: JSON nested too deeply" in the_line(err)
