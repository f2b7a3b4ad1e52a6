"""The protocol of a study, kept by code: seeds declared per role and disjoint, a ledger of
every stage in the results folder, and what every output records of how it was made.

Roles: `train` (the seeds a recipe is trained with), `selection` (choosing each baseline
family's variant and the agent's recipe) and `test` (the verdict).  A study declares them
once (`Seeds`); they are checked disjoint before anything runs.  Every stage appends an
entry to `<results>/ledger.json`: the stage, the seeds it used by role, what it tried (each
configuration with its score) and its provenance.  A seed is used only in its role, and a
seed the ledger shows was used for testing is refused for selection (even where the
declaration was edited since): what chose cannot have seen the verdict.

    seeds = Seeds(train=range(0, 100), selection=range(1000, 1004), test=range(2000, 2005))
    ledger = Ledger(results_dir, "queuepilot", seeds)
    ledger.use("select", "selection", [1000, 1001])      # refused if any was a test seed
    ledger.append("select", seeds={"selection": [...]}, tried=[...])
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

ROLES = ("train", "selection", "test")
LEDGER = "ledger.json"


def _as_seeds(x) -> tuple:
    """A role's seeds as a tuple, or a range kept as it is (a large training range)."""
    if isinstance(x, range):
        return x
    out = tuple(int(s) for s in x)
    if len(set(out)) != len(out):
        raise ValueError(f"seeds repeat: {sorted(s for s in set(out) if out.count(s) > 1)}")
    return out


@dataclasses.dataclass(frozen=True)
class Seeds:
    """The seeds of each role; a ValueError names any seed declared in two roles."""

    train: tuple | range
    selection: tuple | range
    test: tuple | range

    def __post_init__(self):
        for role in ROLES:
            object.__setattr__(self, role, _as_seeds(getattr(self, role)))
            if len(getattr(self, role)) == 0:
                raise ValueError(f"Seeds.{role}: no seeds declared")
        for i, a in enumerate(ROLES):
            for b in ROLES[i + 1:]:
                small, big = sorted((getattr(self, a), getattr(self, b)), key=len)
                both = sorted(s for s in small if s in big)
                if both:
                    raise ValueError(f"Seeds: {both[:8]}{' ...' if len(both) > 8 else ''} declared as both {a} "
                                     f"and {b} seeds; the roles must be disjoint")

    def of(self, role: str):
        if role not in ROLES:
            raise ValueError(f"seed role {role!r}: choose one of {', '.join(ROLES)}")
        return getattr(self, role)

    def check(self, role: str, seeds) -> list:
        """`seeds` as a list, each checked to be declared in `role` (a ValueError names the
        seeds that are not, and the role each belongs to)."""
        declared = self.of(role)
        out = [int(s) for s in seeds]
        bad = [s for s in out if s not in declared]
        if bad:
            where = {s: next((r for r in ROLES if s in self.of(r)), "no role") for s in bad}
            raise ValueError(f"{role} seeds {bad} are not declared {role} seeds (" +
                             ", ".join(f"{s}: {r}" for s, r in where.items()) + f"); the {role} seeds are "
                             f"{_describe(declared)}")
        return out

    def first(self, role: str, k: int) -> list:
        """The first `k` seeds of `role` (a ValueError for k outside 1..declared)."""
        declared = self.of(role)
        if not 1 <= k <= len(declared):
            raise ValueError(f"{k} {role} seeds asked for; the study declares {len(declared)} "
                             f"({_describe(declared)})")
        return [int(s) for s in list(declared[:k])]

    def record(self) -> dict:
        return {r: _describe(self.of(r)) if isinstance(self.of(r), range) else list(self.of(r)) for r in ROLES}


def _describe(seeds) -> str | list:
    if isinstance(seeds, range):
        return f"{seeds.start}..{seeds.stop - 1}"
    return list(seeds)


def provenance(config: dict | None = None) -> dict:
    """How an output was made: the package version, JAX's version, platform and device, and
    the simulator backend in force (`sim_backend`: as asked; with a configuration's
    make_params arguments, `sim_backend_ran`: the one that runs it)."""
    import jax

    from rlbm_jax import __version__
    from rlbm_jax.env import backends

    out = {"rlbm_jax": __version__, "jax": jax.__version__, "platform": jax.default_backend(),
           "device": jax.devices()[0].device_kind, "sim_backend": backends.default()}
    if config is not None:
        from rlbm_jax.env.params import make_params

        out["sim_backend_ran"] = backends.resolve(None, make_params(**config), ticks=True)
    return out


class Ledger:
    """`<results_dir>/ledger.json`: the study's declared seeds and one entry per stage run,
    appended, never rewritten.  `use` refuses a seed outside its role, and a selection seed
    that an earlier test used."""

    def __init__(self, results_dir, study: str, seeds: Seeds):
        self.path = Path(results_dir) / LEDGER
        self.study = study
        self.seeds = seeds
        if self.path.is_file():
            data = json.loads(self.path.read_text())
            if data.get("study") != study:
                raise ValueError(f"{self.path} is the ledger of study {data.get('study')!r}, not {study!r}: "
                                 "give each study its own results folder")
            self.entries = list(data.get("entries", []))
        else:
            if (self.path.parent / "RESULTS.md").exists():
                raise ValueError(f"{self.path.parent} holds results the study kit did not make (a RESULTS.md and no "
                                 f"{LEDGER}): give the study its own results folder, nothing is overwritten")
            self.entries = []

    def used(self, role: str) -> set:
        """Every seed an entry used in `role`."""
        return {int(s) for e in self.entries for s in e.get("seeds", {}).get(role, [])}

    def use(self, stage: str, role: str, seeds) -> list:
        """Check that `stage` may use `seeds` in `role`; returns them as a list."""
        out = self.seeds.check(role, seeds)
        if role in ("selection", "train"):
            seen = sorted(set(out) & self.used("test"))
            if seen:
                raise ValueError(f"{stage}: seeds {seen} were used for testing ({self.path}); a seed that "
                                 f"scored a verdict is never used for {role}")
        return out

    def times_tested(self) -> int:
        return sum(1 for e in self.entries if e.get("stage") == "test")

    def append(self, stage: str, config_for_backend: dict | None = None, **fields) -> dict:
        """Append the entry of a stage run (`config_for_backend`: a configuration it ran, whose
        backend the provenance names)."""
        from rlbm_jax import jsonio

        entry = {"stage": stage, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **fields,
                 "provenance": provenance(config_for_backend)}
        self.entries.append(entry)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        jsonio.write(self.path, {"study": self.study, "seeds": self.seeds.record(), "entries": self.entries})
        return entry

    def last(self, stage: str) -> dict | None:
        return next((e for e in reversed(self.entries) if e.get("stage") == stage), None)


def chosen_variants(results_dir) -> dict | None:
    """{family: variant} of the last selection in `<results_dir>/ledger.json`, None where
    there is no ledger or no selection in it (read without the study's declaration: a
    study's own script reads the variants its kit stages chose)."""
    path = Path(results_dir) / LEDGER
    if not path.is_file():
        return None
    entries = json.loads(path.read_text()).get("entries", [])
    return next((dict(e["chosen"]) for e in reversed(entries) if e.get("stage") == "select"), None)


def stale_fields(recorded: dict, now: dict) -> dict:
    """{parameter: (recorded, now)} for every simulator parameter whose recorded value
    (a `params.config_record`) differs from what the declaration resolves to now: a result
    made under another model than the one the study runs today.  A parameter the record
    does not name did not exist when it was made: it counts as recorded at its declared
    default, which by the project's rule is the model before it (`flow_groups` 1, say)."""
    from rlbm_jax.env import model

    def was(k):
        if k in recorded:
            return recorded[k]
        return model.json_value(model.DEFAULTS[k]) if k in model.DEFAULTS else None

    return {k: (recorded.get(k), v) for k, v in now.items() if was(k) != v}


def check_run_length(seconds: float, warmup_s: float) -> None:
    """A ValueError unless a run of `seconds` leaves something after its `warmup_s`."""
    if not seconds > warmup_s >= 0:
        raise ValueError(f"--seconds ({seconds}) must exceed --warmup-s ({warmup_s}) >= 0")
