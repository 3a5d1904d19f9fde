"""dflash-lite: DFlash block-diffusion speculative decoding (arXiv 2602.06036) on a laptop.

The method as implemented and measured here: docs/method.md. One idea per module, in four layer
folders that import only downwards (``decoding`` <- ``training`` <- ``measuring`` <- ``course``) and
the files and data at the top (checked by ``tests/test_package_layout.py``, as is this list).

``decoding``: the models and the lossless loop

* :mod:`~dflash_lite.decoding.target`    the target LM (shipped, local or hub) and its feature taps
* :mod:`~dflash_lite.decoding.cache`     ``SlotCache``: the one KV cache of target and drafter
* :mod:`~dflash_lite.decoding.drafter_config` what a drafter is: config, drafting, conditioning
* :mod:`~dflash_lite.decoding.drafter`   the DFlash drafter: projection, KV-injection layers
* :mod:`~dflash_lite.decoding.variants`  the drafter's ablations (fusion, no features, AR)
* :mod:`~dflash_lite.decoding.checkpoints` drafter save/load, ``load_pair``, the public layout
* :mod:`~dflash_lite.decoding.acceptance` the target's sampling distribution, acceptance rules
* :mod:`~dflash_lite.decoding.shapes`    eager or fixed shapes (buckets, padding, compiled)
* :mod:`~dflash_lite.decoding.drafts`    what a step drafts: ``ChainDraft``, the ``Draft`` protocol
* :mod:`~dflash_lite.decoding.proposers` the one proposer interface; ``PerRow``; ``DFlashProposer``
* :mod:`~dflash_lite.decoding.decode`    the one decode loop ``steps`` over a ``Batch`` of requests
* :mod:`~dflash_lite.decoding.tree`      draft trees verified in one target forward, hybrid trees
* :mod:`~dflash_lite.decoding.ngram`     prompt lookup: drafts copied from the text so far
* :mod:`~dflash_lite.decoding.baselines` plain, EAGLE-style, draft model; the adaptive block size
* :mod:`~dflash_lite.decoding.costs`     what a step costs: measured forwards, ``StepCosts``
* :mod:`~dflash_lite.decoding.estimate`  what a draft is expected to commit: decayed counts
* :mod:`~dflash_lite.decoding.choice`    the policy's options, their costs, the rule that chooses
* :mod:`~dflash_lite.decoding.policy`    the cost-aware proposer (default), one choice per step
* :mod:`~dflash_lite.decoding.session`   what outlives a request: costs, estimates; the default
* :mod:`~dflash_lite.decoding.engine`    text in, text out: ``Engine.generate``, streaming, batches
* :mod:`~dflash_lite.decoding.timing`    the one interleaved timer and the loop's phase timer

``training``: drafters trained on the target's own outputs

* :mod:`~dflash_lite.training.data`      target-regenerated data, random anchors, the block mask
* :mod:`~dflash_lite.training.loss`      the decay-weighted loss, per-position accuracy
* :mod:`~dflash_lite.training.train`     tau probes, ``train_drafter``, the classic draft model
* :mod:`~dflash_lite.training.trainer`   the one training loop and learning-rate schedule

``measuring``: benchmarks a reviewer can trust

* :mod:`~dflash_lite.measuring.harness`  every method on every prompt, interleaved, identity checked
* :mod:`~dflash_lite.measuring.methods`  the benchmark's rows: baselines, peers, our DFlash methods
* :mod:`~dflash_lite.measuring.benchmark` ``bench``: its configuration, resolve -> run -> report
* :mod:`~dflash_lite.measuring.batching` the batch sweep: every method at each batch size
* :mod:`~dflash_lite.measuring.report`   a report's rows: kinds, summary, table, the cost model
* :mod:`~dflash_lite.measuring.plotting` the figures' style, where figures and results go
* :mod:`~dflash_lite.measuring.diagrams` diagrams that explain the method, drawn in code
* :mod:`~dflash_lite.measuring.model_card` measuring a target or a drafter, writing its card

``course``: teaching and grading with the notebooks

* :mod:`~dflash_lite.course.commands`    ``python -m dflash_lite.course``: headers, bundle, grading
* :mod:`~dflash_lite.course.blanks`      a chapter as a student sees it: solutions blanked
* :mod:`~dflash_lite.course.site`        the course site, rendered offline from committed outputs
* :mod:`~dflash_lite.course.grading`     a class's submissions in sandboxed kernels, under limits
* :mod:`~dflash_lite.course.grader`      scores computed outside the student's kernel
* :mod:`~dflash_lite.course.collect`     the values a test cell reads, as they leave the kernel
* :mod:`~dflash_lite.course.guard`       what submitted code may not do in the grader's process
* :mod:`~dflash_lite.course.sandbox`     a command in its own user, mount and PID namespaces

At the top: data, files, failure and the commands

* :mod:`~dflash_lite.corpus`      the offline corpus (stdlib code, generated math), prompt splits
* :mod:`~dflash_lite.prompts`     prompt files, data sets, the built-in splits, the one ``encode``
* :mod:`~dflash_lite.checkout`    where the repository's checkout is, and its chapters
* :mod:`~dflash_lite.validate`    the one validation layer (argparse types, API checks, one line)
* :mod:`~dflash_lite.files`       the one atomic write
* :mod:`~dflash_lite.outputs`     where a run may write: the marker, refused places, the lock
* :mod:`~dflash_lite.signals`     Ctrl-C and SIGTERM: one line and exit 130 / 143
* :mod:`~dflash_lite.exercises`   the notebooks' exercise self-checks
* :mod:`~dflash_lite.fetch`       real public targets fetched once from a PyPI wheel (``zoo get``)
* :mod:`~dflash_lite.zoo`         the shipped models and how to retrain them
* :mod:`~dflash_lite.cli`         ``python -m dflash_lite demo | bench | train``"""
import sys
import warnings

from .signals import quiet_until_main  # standard library only: imported before torch

# python -m dflash_lite[.zoo]: Ctrl-C while torch loads is one line, exit 130
if sys.argv[:1] == ["-m"]:
    quiet_until_main()

# transformers' tqdm.auto warns in Jupyter without ipywidgets; this package draws no widget bars
warnings.filterwarnings("ignore", message="IProgress not found")

from .decoding.acceptance import SamplingParams
from .decoding.baselines import generate_autoregressive
from .decoding.decode import GenerationResult
from .decoding.target import LoadError, load_pretrained, stop_token_ids

__version__ = "0.1.0"
__all__ = ["GenerationResult", "LoadError", "SamplingParams", "generate_autoregressive",
           "load_pretrained", "stop_token_ids", "__version__"]
