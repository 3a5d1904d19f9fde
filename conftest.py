"""Tests never write into the repository.

Before any test runs (unit tests, papermill runs, nbval), the figures, results and cache
directories of :mod:`dflash_lite.measuring.plotting` are pointed at one temporary directory for the session.
Notebook kernels started by papermill and nbval inherit these variables.
"""
import atexit
import os
import shutil
import tempfile

_OUTPUTS = tempfile.mkdtemp(prefix="dflash-lite-tests-")
atexit.register(shutil.rmtree, _OUTPUTS, ignore_errors=True)
for _var, _sub in (("DFLASH_LITE_FIGURES", "figures"), ("DFLASH_LITE_RESULTS", "results"),
                   ("DFLASH_LITE_CACHE", "cache")):
    os.environ[_var] = os.path.join(_OUTPUTS, _sub)
