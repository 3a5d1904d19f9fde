"""The package as users install it: a wheel built from this checkout, installed (not editable)
into a fresh virtual environment that sees this one's dependencies, and run from a folder outside
the repository. demo, bench and the Engine work; the course commands, which need a checkout,
refuse in one line; the hidden checks are never silently empty; nothing is written into
site-packages."""
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.installed          # in CI: -m "not slow or notebook or installed"


def listing(folder: Path) -> set:
    return {p for p in folder.rglob("*") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp / "wheels"), str(ROOT)], check=True,
                   capture_output=True, cwd=tmp)
    wheel = next((tmp / "wheels").glob("dflash_lite-*.whl"))
    venv.EnvBuilder(with_pip=False).create(tmp / "env")
    python = tmp / "env" / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # this environment's dependencies, after the new one's own site-packages (a path, not a site
    # dir: this checkout's editable install is not carried over)
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site),
                    str(wheel)], check=True, capture_output=True)
    work = tmp / "work"
    work.mkdir()
    return python, site, work


def run(installed, *code_or_args, module=True):
    python, _, work = installed
    argv = [python, "-m", *code_or_args] if module else [python, "-c", *code_or_args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=work, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(work), "OMP_NUM_THREADS": "2"})


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_not_this_checkout(installed):
    _, site, _ = installed
    done = run(installed, "import dflash_lite; print(dflash_lite.__file__)", module=False)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).is_relative_to(site)


@pytest.mark.slow
def test_demo_bench_and_engine_work_and_write_nothing_into_site_packages(installed):
    _, site, work = installed
    before = listing(site)
    demo = run(installed, "dflash_lite", "demo", "--max-new-tokens", "8", "--repeats", "1")
    assert demo.returncode == 0 and "Traceback" not in demo.stderr, demo.stderr
    bench = run(installed, "dflash_lite", "bench", "--num-prompts", "1", "--max-new-tokens", "8",
                "--block-sizes", "4", "--repeats", "1", "--no-baselines", "--no-hf-dflash",
                "--tree-sizes", "", "--json", "report.json")
    assert bench.returncode == 0 and "Traceback" not in bench.stderr, bench.stderr
    assert (work / "report.json").is_file()
    engine = run(installed, "from dflash_lite.decoding.engine import Engine\nfrom dflash_lite.decoding.checkpoints import load_pair\n"
                 "target, tokenizer, drafter = load_pair('tiny')\n"
                 "print(repr(Engine(target, tokenizer, drafter).generate('Q: 2 + 3 = ?', 8)))",
                 module=False)
    assert engine.returncode == 0 and engine.stdout.strip(), engine.stderr
    figures = run(installed, "from dflash_lite.measuring.plotting import figures_dir, results_dir\n"
                  "print(figures_dir(), results_dir())", module=False)
    assert figures.returncode == 0 and str(site) not in figures.stdout, figures.stdout
    assert listing(site) == before


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["site", "out"], ["student-edition", "out"],
                                  ["student-edition", "out", "--notebooks", "02"],
                                  ["autograde", "."]])
def test_course_commands_say_in_one_line_that_they_need_a_checkout(installed, argv):
    _, _, work = installed
    done = run(installed, "dflash_lite.course", *argv)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "checkout" in lines[0], done.stderr
    assert not (work / "out").exists()


@pytest.mark.slow
def test_the_hidden_checks_are_never_silently_empty(installed):
    done = run(installed, "from dflash_lite.course import grader\ntry:\n    grader.load_hidden()\n"
               "except FileNotFoundError as e:\n    print('refused:', e)", module=False)
    assert done.stdout.startswith("refused:") and "instructor" in done.stdout, done.stdout + done.stderr
