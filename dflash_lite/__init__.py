"""dflash-lite: DFlash block-diffusion speculative decoding (arXiv 2602.06036), small enough for a
laptop.

The method as implemented and measured here: docs/method.md. Modules, one idea each:

* :mod:`dflash_lite.target`      loading the target LM (shipped, local or hub) and its feature taps
* :mod:`dflash_lite.drafter`     the DFlash drafter: projection, KV-injection layers, drafter KV
  cache
* :mod:`dflash_lite.variants`    the drafter's ablations (input fusion, no features, autoregressive)
* :mod:`dflash_lite.acceptance`  the target's sampling distribution and the acceptance rules
* :mod:`dflash_lite.decode`      the decode loop as phases, chain drafts, the ``Proposer``
  protocol, the result
* :mod:`dflash_lite.tree`        draft trees verified in one target forward (greedy and sampled)
* :mod:`dflash_lite.baselines`   block size 1 (plain decoding), the EAGLE-style drafter, a draft
  model
* :mod:`dflash_lite.costs`       what a step costs: measured forwards, ``StepCosts``, the cost model
* :mod:`dflash_lite.policy`      the cost-aware block size (the default) as pure parts, and the
  adaptive rule
* :mod:`dflash_lite.timing`      the one interleaved timer and the decode loop's phase timer
* :mod:`dflash_lite.prompts`     prompt files, data sets, the built-in splits and the one ``encode``
* :mod:`dflash_lite.engine`      text in, text out: ``Engine.generate``, with streaming
* :mod:`dflash_lite.static`      the decode loop on static shapes, for CUDA graphs
  (``Engine(compile=True)``)
* :mod:`dflash_lite.checkpoints` drafter save/load, ``load_pair``, the public DFlash layout,
  transformers' drafter
* :mod:`dflash_lite.train`       target-regenerated data, anchors, the block mask, the loss, tau
  probes
* :mod:`dflash_lite.trainer`     the one training loop and learning-rate schedule (drafters and the
  target)
* :mod:`dflash_lite.benchmark`   the methods, interleaved measurement with the identity check,
  ``bench``
* :mod:`dflash_lite.report`      a report's rows: kinds, summary, table, the cost model's rows
* :mod:`dflash_lite.plotting`    the benchmark figures, and where figures and results are written
* :mod:`dflash_lite.corpus`      the offline corpus (stdlib code + generated math) and the prompt
  splits
* :mod:`dflash_lite.zoo`         the shipped models and how to retrain them
* :mod:`dflash_lite.model_card`  measuring a target or a drafter and writing its card
* :mod:`dflash_lite.cli`         ``python -m dflash_lite demo | bench | train``
* :mod:`dflash_lite.validate`    the one validation layer; :mod:`dflash_lite.files` the one atomic
  write
* :mod:`dflash_lite.outputs`     output directories: the marker, refused places, the lock,
  replacing last
* :mod:`dflash_lite.signals`     Ctrl-C and SIGTERM: one line and exit 130 / 143
* :mod:`dflash_lite.exercises`   the notebooks' exercise self-checks
"""
import sys
import warnings

from .signals import quiet_until_main   # standard library only: imported before torch

# python -m dflash_lite[.zoo]: Ctrl-C while torch loads is one line, exit 130
if sys.argv[:1] == ["-m"]:
    quiet_until_main()

# transformers imports tqdm.auto, which warns inside Jupyter when ipywidgets is missing. This package
# draws no widget progress bars (its own bars go to a terminal only), so the warning is noise.
warnings.filterwarnings("ignore", message="IProgress not found")

from .acceptance import SamplingParams
from .baselines import generate_autoregressive
from .decode import GenerationResult
from .target import LoadError, load_pretrained, stop_token_ids

__version__ = "0.1.0"
__all__ = ["GenerationResult", "LoadError", "SamplingParams", "generate_autoregressive",
           "load_pretrained",
           "stop_token_ids", "__version__"]
