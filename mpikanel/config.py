"""Training configuration: one frozen dataclass, filled from defaults, a TOML file and flags."""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import InputError
from .lr_schedule import SCHEDULES as LR_SCHEDULES, check_schedule
from .engine.flow import FLOW_CONTROL
from .engine.sparse import PUSH_MODES
from .sync.damping import DAMPINGS
from .sync.options import ON_OFF, one_of
from .sync.registry import MODELS as SYNC_REGISTRY, OPTIONS as SYNC_OPTIONS, SYNC_MODELS


def _with_sync_options(cls: type) -> type:
    """Add every sync model's options (declared in its module, mpikanel.sync.registry.OPTIONS) as
    fields with their defaults, before @dataclass reads the class."""
    for option in SYNC_OPTIONS.values():
        cls.__annotations__[option.name] = option.kind.__name__
        setattr(cls, option.name, option.default)
    return cls


@dataclass(frozen=True)
@_with_sync_options
class TrainConfig:
    """Everything a training run needs; TOML keys and CLI flags mirror these names. The sync
    models' own options (staleness, esp_*, psp_*) are added from their declarations."""

    sync: str = "bsp"
    servers: int = 1
    push: str = "auto"
    flow_control: str = "auto"
    permute_features: str = "off"
    staleness_lr: str = "off"
    model: str = "softmax"
    input_shape: str | None = None
    hidden: int = 64
    activation: str = "relu"
    data: str = "synthetic"
    data_dir: str | None = None
    test_data: str | None = None
    test_fraction: float = 0.1
    val_fraction: float = 0.0
    n_features: int | None = None
    synthetic_rows: int = 100_000
    synthetic_features: int = 100
    synthetic_classes: int | None = None
    sparse_nnz: int = 50
    sparse_alpha: float = 1.1
    sparse_values: str = "binary"
    epochs: int = 3
    budget: str = "shared"
    time_budget: float | None = None
    max_steps: int | None = None
    lr: float = 0.1
    lr_schedule: str = "constant"
    warmup: float = 0.0
    batch_size: int = 64
    l2: float = 1e-4
    seed: int = 0
    step_time: float | None = None
    slowdown: str | None = None
    pause_prob: float = 0.0
    pause_s: float = 0.0
    link_delay: str | None = None
    link_bandwidth: str | None = None
    server_delay: str | None = None
    threads: int = 1
    metrics: str | None = None
    snapshot_interval: float = 0.25
    curve_points: int = 8
    target_loss: float | None = None
    scenario: str | None = None
    checkpoint_dir: str | None = None
    checkpoint_every: str = "0"
    keep_checkpoints: int = 3
    resume: str | None = None
    summary_json: str | None = None
    save_model: str | None = None
    progress: str = "auto"
    quiet: bool = False
    #: the settings given explicitly (flags, TOML keys, dict keys, overrides); a resume takes the
    #: others from the checkpoint. Not a flag, and not part of to_dict()
    given: frozenset = field(default=frozenset(), compare=False, repr=False, metadata={"flag": False})

    def __post_init__(self) -> None:
        _validate(self)

    def replace(self, **changes: Any) -> "TrainConfig":
        """A copy with some fields changed (validated again; they count as given)."""
        return dataclasses.replace(self, **changes, given=self.given | set(changes))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of all settings (JSON-safe; inf staleness becomes "inf")."""
        d = {f.name: getattr(self, f.name) for f in setting_fields()}
        if math.isinf(d["staleness"]):
            d["staleness"] = "inf"
        return d

    @property
    def n_classes_hint(self) -> int:
        """Classes the synthetic generator makes: as asked, else 2 for logistic and 10 otherwise."""
        if self.synthetic_classes is not None:
            return self.synthetic_classes
        return 2 if self.model == "logistic" else 10


def setting_fields() -> list[dataclasses.Field]:
    """TrainConfig's settings: every field but the bookkeeping ones (``given``)."""
    return [f for f in fields(TrainConfig) if f.metadata.get("flag", True)]


#: settings a resumed run never takes from its checkpoint: where this invocation writes and how it talks
NOT_RESUMED = frozenset({"resume", "checkpoint_dir", "summary_json", "save_model", "metrics", "progress", "quiet",
                         "threads"})


def known_settings(recorded: dict[str, Any]) -> dict[str, Any]:
    """The settings of a recorded config (a checkpoint's, a model file's) this version knows: a
    setting an older version had and this one dropped is left out."""
    known = {f.name for f in setting_fields()}
    return {k: v for k, v in recorded.items() if k in known}


def resumed_config(config: TrainConfig, checkpointed: dict[str, Any]) -> TrainConfig:
    """The config a resume runs with: the checkpointed run's settings, except those given explicitly
    now and those that belong to this invocation (NOT_RESUMED)."""
    taken = {k: v for k, v in known_settings(checkpointed).items() if k not in config.given and k not in NOT_RESUMED}
    if isinstance(taken.get("staleness"), str):
        taken["staleness"] = _float_or_inf(taken["staleness"])
    return dataclasses.replace(config, **taken) if taken else config


#: how the run's work is counted: the whole cluster's samples (server-enforced), or each worker's own epochs
BUDGETS = ("shared", "per-worker")

#: the settings with a fixed set of values (a sync model's own are in its declarations)
CHOICES: dict[str, tuple[str, ...]] = {"push": PUSH_MODES, "flow_control": FLOW_CONTROL, "staleness_lr": DAMPINGS,
                                       "permute_features": ON_OFF,
                                       "budget": BUDGETS, "activation": ("relu", "tanh"),
                                       "progress": ("auto", "on", "off")}

_POSITIVE = ("lr", "batch_size", "epochs", "synthetic_rows", "synthetic_features")
#: counts that must be >= 1 when given
_AT_LEAST_ONE = ("servers", "threads", "keep_checkpoints", "hidden", "max_steps", "n_features", "synthetic_classes")


def _validate(c: TrainConfig) -> None:
    if c.sync not in SYNC_MODELS:
        raise InputError(f"unknown sync '{c.sync}'; choose from: {', '.join(SYNC_MODELS)}")
    for name in _POSITIVE:
        value = getattr(c, name)
        if not value > 0:
            raise InputError(f"{_flag(name)} must be > 0, got {value}")
    for name in _AT_LEAST_ONE:
        value = getattr(c, name)
        if value is not None and value < 1:
            raise InputError(f"{_flag(name)} must be >= 1, got {value}")
    for option in SYNC_OPTIONS.values():
        option.check(getattr(c, option.name))
    if not (0 <= c.test_fraction < 1):
        raise InputError(f"--test-fraction must be in [0, 1), got {c.test_fraction}")
    if not (0 <= c.val_fraction < 1):
        raise InputError(f"--val-fraction must be in [0, 1), got {c.val_fraction}")
    for name, valid in CHOICES.items():
        if getattr(c, name) not in valid:
            raise InputError(f"{_flag(name)} must be {one_of(valid)}, got '{getattr(c, name)}'")
    if c.time_budget is not None and not (c.time_budget > 0 and math.isfinite(c.time_budget)):
        raise InputError(f"--time-budget must be a finite number of seconds > 0, got {c.time_budget}")
    check_schedule(c.lr_schedule, c.warmup)
    if c.step_time is not None and not (c.step_time > 0 and math.isfinite(c.step_time)):
        raise InputError(f"--step-time must be a finite number of seconds > 0, got {c.step_time}")
    if not (c.l2 >= 0 and math.isfinite(c.l2)):
        raise InputError(f"--l2 must be a finite number >= 0, got {c.l2}")
    if not math.isfinite(c.lr):
        raise InputError(f"--lr must be finite, got {c.lr}")
    if c.resume == "latest" and not c.checkpoint_dir:
        raise InputError("--resume latest needs --checkpoint-dir")
    from .checkpoint import parse_every
    parse_every(c.checkpoint_every)
    if not c.snapshot_interval > 0:
        raise InputError(f"--snapshot-interval must be > 0, got {c.snapshot_interval}")
    if c.curve_points < 2:
        raise InputError(f"--curve-points must be >= 2 (the first and the last snapshot), got {c.curve_points}")
    if c.sparse_values not in ("binary", "tfidf") or c.sparse_nnz < 1 or not c.sparse_alpha > 0:
        raise InputError("--sparse-values must be binary or tfidf, --sparse-nnz >= 1 and --sparse-alpha > 0, got "
                         f"'{c.sparse_values}', {c.sparse_nnz} and {c.sparse_alpha}")
    if c.data == "synthetic-sparse" and c.synthetic_classes not in (None, 2):
        raise InputError(f"--synthetic-classes {c.synthetic_classes}: synthetic-sparse labels are binary (2 classes)")
    if c.input_shape is not None:
        from .models.spec import parse_shape

        parse_shape(c.input_shape)
        if not c.model.startswith("py:"):
            raise InputError(f"--input-shape is for py:FILE:FACTORY models, not {c.model}")
    if c.model.startswith("py:"):
        from .models.spec import split_spec

        split_spec(c.model)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


_HELP = {
    "sync": "synchronization model: " + "; ".join(f"{m.name} = {m.summary}" for m in SYNC_REGISTRY.values()),
    "servers": "server ranks K: ranks 0..K-1 serve one contiguous key range each (rank 0 decides for all "
               "of them), ranks K.. train",
    "push": "push/pull frames: auto (on sparse data, only the changed keys where that is smaller; on dense "
            "data, the whole vector), dense (always the whole vector), sparse (always keys and values)",
    "flow_control": "large pushes ask first: a worker sends its push once the server has a frame posted for it, "
                    "so a server holds a few pushes however many workers push at once (an MPI may otherwise "
                    "copy every push that arrives early); auto: on for dense frames of at least 1 MiB a server "
                    "with more than 4 workers; on; off",
    "permute_features": "on: renumber sparse (CSR) feature ids by a seeded permutation, so features "
                        "popular at low ids spread over the servers' key ranges (linear models; a saved "
                        "model is in the data's own feature order)",
    "staleness_lr": "damp a stale delta at the server, any sync model: off, inverse (1/(1+tau), tau = versions "
                    "since its base) or gap (1/(1+G), G = how far the parameters moved since its base in typical "
                    "updates); what is damped away is kept in the run's unapplied sum",
    "model": "model to train: logistic (binary), softmax, svm (one-vs-rest hinge), lsq (one-vs-rest "
             "ridge on one-hot targets), mlp (one hidden layer), a name given to register_model, or "
             "py:FILE.py:FACTORY (FACTORY(n_features, n_classes, input_shape) returns a mpikanel.models."
             "GradientModel or JaxModel)",
    "input_shape": "py: models: reshape each row to C,H,W (any comma-separated shape whose product is the "
                   "feature count, e.g. 1,28,28 for Fashion-MNIST) before the model sees it",
    "hidden": "mlp: hidden units",
    "activation": "mlp: hidden activation, relu or tanh",
    "data": "synthetic | synthetic-sparse | fashion-mnist | PATH (.npz or .h5 with X and y; else libsvm text)",
    "data_dir": "directory of the Fashion-MNIST IDX files (default: Debian's dataset-fashion-mnist)",
    "test_data": "separate test set (same forms as --data)",
    "test_fraction": "use the last F of the rows as test set when no test set is given",
    "val_fraction": "hold out the last F of the training rows as a validation set (its loss curve "
                    "is recorded beside the test curve; 0 = none)",
    "n_features": "number of features of a libsvm file (default: largest index seen)",
    "synthetic_rows": "rows of the synthetic problem",
    "synthetic_features": "features of the synthetic problem",
    "synthetic_classes": "classes of the synthetic problem (default: 2 for logistic, else 10)",
    "sparse_nnz": "synthetic-sparse: feature draws per row (duplicates dropped)",
    "sparse_alpha": "synthetic-sparse: power-law exponent of feature popularity (feature f ~ (f+1)^-alpha)",
    "sparse_values": "synthetic-sparse: binary (1.0) or tfidf (idf-like weights, unit row norm)",
    "epochs": "work budget in passes over the training rows: with --budget shared the server counts "
              "the samples all workers process and ends the run when EPOCHS x rows are done; with "
              "--budget per-worker each worker makes EPOCHS passes over its own shard",
    "budget": "shared (the whole cluster processes EPOCHS x rows samples, fast workers doing more "
              "of them) or per-worker (each worker EPOCHS passes over its shard)",
    "time_budget": "also end the run after this many seconds of training (server wall time; every "
                   "worker pushes its unsent work first)",
    "max_steps": "stop each worker after this many SGD steps",
    "lr": "SGD learning rate",
    "lr_schedule": "the rate over the work budget, the same for every sync model: constant, linear (to 0 at the "
                   "budget's end) or cosine (a half cosine to 0)",
    "warmup": "ramp the rate up linearly from 0 over this fraction of the work budget first",
    "batch_size": "minibatch rows per SGD step",
    "l2": "L2 regularization strength",
    "seed": "seed for data order and synthetic data",
    "step_time": "paced workers (accelerator-bound: the CPU mostly waits): every step lasts max(its compute, "
                 "SECONDS x rows/--batch-size x the worker's --slowdown factor, plus --pause-s when it pauses), "
                 "the rest slept; python -m mpikanel.sim models each step so (default: measured there; "
                 "mpikanel.train: unpaced)",
    "slowdown": "straggler injection: RANK:FACTOR[,RANK:FACTOR] (worker RANK takes FACTOR x its "
                "compute time per step), a changing worker RANK:A->B@STEP or RANK:A->B@P%% (A x until "
                "that step or P%% of its fair share of the steps, B x after), or lognormal:SIGMA "
                "(seeded factor per worker)",
    "pause_prob": "per-step probability of a transient pause on each worker",
    "pause_s": "duration in seconds of a transient pause",
    "link_delay": "slow link: RANK:SECONDS[,...] added to each message to the server ('*' = all workers)",
    "link_bandwidth": "slow link: RANK:BYTES_PER_S[,...] bandwidth cap of messages to the server",
    "server_delay": "congested server: service SECONDS added to every push the server handles, or "
                    "lognormal:MEAN:SIGMA (seeded draw per push)",
    "threads": "compute threads per worker for BLAS, numba parallel code and a py: model's JAX (XLA) pool "
               "(the built-in kernels are serial: ranks are the parallelism); numba can use at most NUMBA_NUM_THREADS (export it "
               "before launching to allow more); the summary records what took effect",
    "metrics": "write the metrics file (HDF5: loss-vs-time curve, per-worker timings) to this path",
    "snapshot_interval": "seconds between parameter snapshots for the loss-vs-time curve",
    "curve_points": "py: models: evaluate the curve at this many snapshots, evenly spread, the first and the last "
                    "kept (each point is a forward pass over the test and validation rows; the built-in models "
                    "evaluate every snapshot)",
    "target_loss": "report the wall time after which the test loss stays at or below this value "
                   "(time_to_target_s), and when it first reached it (first_touch_s)",
    "scenario": "label stored in the metrics file and summary (default: the injected heterogeneity)",
    "checkpoint_dir": "write checkpoints here, one ckpt-NNNNNN/ directory each (every rank's HDF5 part and "
                      "a manifest), at the end, every --checkpoint-every, and on SIGTERM/SIGUSR1/SIGINT, "
                      "after which the run exits with code 75",
    "checkpoint_every": "checkpoint interval: SECONDS, or Nsteps (total worker steps); 0 = only at the "
                        "end and on signals",
    "keep_checkpoints": "keep this many newest complete checkpoints",
    "resume": "resume from a checkpoint (a ckpt-NNNNNN directory), or 'latest' (newest valid in --checkpoint-dir; "
              "starts fresh if there is none)",
    "summary_json": "write the run summary as JSON to this path",
    "save_model": "write the trained model (final parameters, model, classes, config) to this HDF5 file; "
                  "load it with mpikanel.load_model or python -m mpikanel.predict",
    "progress": "progress bar on rank 0: on, off, or auto (on when started from an interactive "
                "terminal: mpiexec gives ranks pipes, so auto looks at TERM, CI and SLURM_JOB_ID)",
    "quiet": "print nothing but errors",
}


#: the --help groups, in order: every setting is in exactly one
GROUPS: dict[str, tuple[str, ...]] = {
    "data": ("data", "data_dir", "test_data", "test_fraction", "val_fraction", "n_features", "synthetic_rows",
             "synthetic_features", "synthetic_classes", "sparse_nnz", "sparse_alpha", "sparse_values",
             "permute_features"),
    "model": ("model", "input_shape", "hidden", "activation", "lr", "lr_schedule", "warmup", "batch_size", "l2", "seed",
              "threads"),
    "sync": ("sync", "servers", "push", "flow_control", "staleness_lr", *SYNC_OPTIONS),
    "budget": ("epochs", "budget", "time_budget", "max_steps"),
    "heterogeneity": ("step_time", "slowdown", "pause_prob", "pause_s", "link_delay", "link_bandwidth", "server_delay"),
    "checkpoints": ("checkpoint_dir", "checkpoint_every", "keep_checkpoints", "resume"),
    "output": ("summary_json", "save_model", "metrics", "snapshot_interval", "curve_points", "target_loss", "scenario", "progress",
               "quiet"),
}
_GROUP_TITLES = {
    "data": "data: what to train on",
    "model": "model: what to train, and SGD",
    "sync": "sync: how workers and servers synchronize",
    "budget": "budget: how much work a run does",
    "heterogeneity": "heterogeneity: paced steps, injected stragglers, pauses, slow links, a congested server",
    "checkpoints": "checkpoints: periodic, on SIGTERM/SIGUSR1/SIGINT, and resume (a resume takes every setting not "
                   "given from the checkpoint)",
    "output": "output",
}


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose usage errors are one line, printed by one rank only, with the nearest flag."""

    print_errors = True

    def error(self, message: str) -> None:  # type: ignore[override]
        if self.print_errors:
            sys.stderr.write(f"{self.prog}: error: {_with_hint(message, self._option_string_actions)}\n")
        sys.exit(2)


def _with_hint(message: str, known: Any) -> str:
    """An argparse error with the nearest known flag for an unknown one, and where to look."""
    import difflib

    prefix = "unrecognized arguments: "
    if message.startswith(prefix):
        words = message[len(prefix):].split()
        flag = next((w for w in words if w.startswith("-")), words[0] if words else "")
        name = flag.split("=", 1)[0]
        near = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1, cutoff=0.6)
        return f"unknown flag {name}" + (f"; did you mean {near[0]}?" if near else " (--help lists the flags)")
    return f"{message} (--help lists the flags)"


def _float_or_inf(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _choices() -> dict[str, tuple[str, ...]]:
    """The values argparse accepts for each setting that has a fixed set of them."""
    from .kernels import KERNELS  # registry at parse time: user models registered before count

    return {"sync": SYNC_MODELS, **CHOICES, **{o.name: o.choices for o in SYNC_OPTIONS.values() if o.choices},
            "model": _ModelChoices(KERNELS), "lr_schedule": LR_SCHEDULES}


def _help(name: str) -> str:
    """A setting's --help line: config's own, or its sync model's declaration."""
    return _HELP[name] if name in _HELP else SYNC_OPTIONS[name].help


class _ModelChoices(tuple):
    """The registered model names, plus any ``py:FILE.py:FACTORY`` spec (argparse checks `in`)."""

    def __new__(cls, names) -> "_ModelChoices":
        return super().__new__(cls, tuple(names))

    def __contains__(self, value: object) -> bool:
        return (isinstance(value, str) and value.startswith("py:")) or tuple.__contains__(self, value)

    def __iter__(self):
        return iter((*tuple.__iter__(self), "py:FILE.py:FACTORY"))


def build_parser(prog: str = "python -m mpikanel.train", print_errors: bool = True,
                 description: str | None = None) -> argparse.ArgumentParser:
    """The CLI parser, flags grouped as GROUPS; every option defaults to 'not given' so TOML values can fill in."""
    launched = "mpiexec -n N " if prog.endswith("mpikanel.train") or ".baselines." in prog else ""
    p = _Parser(prog=prog, usage=launched + "%(prog)s [--config TOML] [options, grouped below]",
                description=description or "Distributed SGD on an MPI parameter server: ranks 0..K-1 serve, "
                                           "the others train.",
                argument_default=argparse.SUPPRESS)
    p.print_errors = print_errors
    p.add_argument("--config", metavar="TOML", help="TOML file whose keys mirror these flags "
                   "(flags given on the command line win)")
    defaults = TrainConfig()
    by_name = {f.name: f for f in setting_fields()}
    choices = _choices()
    for group, names in GROUPS.items():
        g = p.add_argument_group(_GROUP_TITLES[group])
        for name in names:
            f = by_name[name]
            flag = _flag(name)
            default = getattr(defaults, name)
            text = _help(name)
            helptext = text + ("" if "default" in text else f" (default: {default})")
            if f.type in ("bool", bool):
                g.add_argument(flag, action="store_true", help=text)
            elif name in choices:
                g.add_argument(flag, choices=choices[name], help=helptext)
            else:
                g.add_argument(flag, type=_field_kind(f), metavar=name.upper(), help=helptext)
    return p


def _field_kind(f: dataclasses.Field) -> Any:
    t = str(f.type)
    if "float" in t:
        return _float_or_inf
    if "int" in t:
        return int
    return str


def load_toml(path: str) -> dict[str, Any]:
    """Read a TOML config file; keys may use '-' or '_'; unknown keys are errors."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML: {exc}") from None
    known = {f.name: f for f in setting_fields()}
    out: dict[str, Any] = {}
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in known:
            raise InputError(f"{path}: unknown key '{key}'; valid keys: {', '.join(sorted(known))}")
        if isinstance(value, str) and _field_kind(known[name]) is _float_or_inf:
            value = _float_or_inf(value)
        out[name] = value
    return out


def config_from_args(argv: list[str] | None = None, print_errors: bool = True,
                     prog: str = "python -m mpikanel.train", description: str | None = None) -> TrainConfig:
    """Parse CLI flags (plus --config TOML) into a TrainConfig; InputError on bad values."""
    parser = build_parser(prog, print_errors=print_errors, description=description)
    return config_from_namespace(vars(parser.parse_args(argv)))


def config_from_namespace(ns: dict[str, Any]) -> TrainConfig:
    """A TrainConfig from parsed flags (only those given) over the --config TOML file's keys."""
    values: dict[str, Any] = {}
    ns = dict(ns)
    toml_path = ns.pop("config", None)
    if toml_path:
        values.update(load_toml(toml_path))
    values.update(ns)
    return make_config(values)


def make_config(values: "TrainConfig | dict[str, Any] | None" = None, **overrides: Any) -> TrainConfig:
    """A TrainConfig from a config, a dict (TOML-style keys allowed) and keyword overrides."""
    if isinstance(values, TrainConfig):
        base, given = values.to_dict(), set(values.given)
    else:
        base = {k.replace("-", "_"): v for k, v in (values or {}).items()}
        given = set(base)
    base.update(overrides)
    given |= set(overrides)
    known = {f.name for f in setting_fields()}
    unknown = sorted(set(base) - known)
    if unknown:
        raise InputError(f"unknown config key(s): {', '.join(unknown)}")
    if isinstance(base.get("staleness"), str):
        base["staleness"] = _float_or_inf(base["staleness"])
    try:
        return TrainConfig(**base, given=frozenset(given))
    except TypeError as exc:
        raise InputError(f"bad config value: {exc}") from None


def make_policy(sync: str, staleness: float = 3, esp_scale: str = "none", n_workers: int = 1,
                psp_k_max: int = 8, psp_aggregate: str = "sum") -> Any:
    """The server-side policy of a sync model with these options (defaults as the CLI's)."""
    from .sync.registry import get

    options = make_config(sync=get(sync).name, staleness=staleness, esp_scale=esp_scale, psp_k_max=psp_k_max,
                          psp_aggregate=psp_aggregate)
    return get(sync).make(options, n_workers)[0]
