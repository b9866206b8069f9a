"""Matrix specs: the factors of a sweep as YAML, expanded into RunSpecs (docs/experiments.md).

A matrix is the cartesian product of its ``factors``, plus the products added by ``include``
entries, minus the runs matching an ``exclude`` entry. ``presets`` are named variants (their factors
replace the base levels; their include/exclude entries are added). The study matrix of docs/study.md
§1 is built in (``study.yaml`` next to this module)::

    name: my-sweep
    factors:                       # factor: level or [levels]
      model: [deepseek-v4-flash]
      topology: [1, 6, my_cluster.yaml]
      strategy: [TP2EP16, TP16EP2]
      tokens: [2048, 4096]         # any parameter override is a factor too
    include:                       # each entry: extra runs; unnamed factors take the base levels
      - {topology: 4, strategy: TP8EP4}
    exclude:                       # drop runs matching every key of an entry
      - {topology: 6, tokens: 2048}
    presets:
      quick: {factors: {strategy: TP2EP16}}
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from moesim.errors import MoesimError, input_error
from moesim.experiments.factors import SPEC_FACTORS, Level, canonical_level, check_factor_name
from moesim.fileio import load_yaml_strict, refuse_special_file
from moesim.system.spec import RunSpec

Levels = tuple[tuple[str, tuple[Level, ...]], ...]
"""Factor → levels, in the order written (the order of the product)."""

TOP_KEYS = ("name", "description", "factors", "include", "exclude", "presets", "diagnostics")
PRESET_KEYS = ("description", "factors", "include", "exclude")
STUDY_SOURCE = "moesim/experiments/study.yaml"
MODERN_SOURCE = "moesim/experiments/modern.yaml"


@dataclass(frozen=True)
class Preset:
    """A named variant of a matrix: factor levels replacing the base ones, extra include/exclude entries."""

    name: str
    description: str = ""
    factors: Levels = ()
    include: tuple[Levels, ...] = ()
    exclude: tuple[Levels, ...] = ()


@dataclass(frozen=True)
class Matrix:
    """A validated matrix spec. ``runs()`` expands it; ``with_preset``/``with_levels`` derive variants."""

    name: str
    source: str
    factors: Levels
    include: tuple[Levels, ...] = ()
    exclude: tuple[Levels, ...] = ()
    presets: tuple[Preset, ...] = ()
    description: str = ""
    diagnostics: bool = False

    def levels(self, factor: str) -> tuple[Level, ...]:
        return dict(self.factors).get(factor, ())

    def preset_names(self) -> list[str]:
        return [p.name for p in self.presets]

    def with_preset(self, name: str) -> Matrix:
        """Apply preset ``name``: its factors replace the base levels, its entries are appended."""
        presets = {p.name: p for p in self.presets}
        if name not in presets:
            raise input_error(self.source, "presets", f"unknown preset '{name}'", list(presets) or ["(none defined)"])
        p = presets[name]
        out = self
        for factor, levels in p.factors:
            out = out.with_levels(factor, levels)
        return dataclasses.replace(out, name=f"{self.name}:{name}", include=out.include + p.include,
                                   exclude=out.exclude + p.exclude)

    def with_levels(self, factor: str, levels: Iterable[Level]) -> Matrix:
        """Set the levels of ``factor`` (replacing or adding it). Include entries that name the factor
        keep only the given levels; an entry left with none is dropped. Levels are validated (relative
        paths are relative to the current directory)."""
        factor = check_factor_name(factor, self.source)
        levels = tuple(dict.fromkeys(canonical_level(factor, v, self.source) for v in levels))
        if not levels:
            raise input_error(self.source, factor, "needs at least one level")
        base = dict(self.factors)
        base[factor] = levels
        include = []
        for entry in self.include:
            e = dict(entry)
            if factor in e:
                kept = tuple(v for v in e[factor] if v in levels)
                if not kept:
                    continue
                e[factor] = kept
            include.append(tuple(e.items()))
        return dataclasses.replace(self, factors=tuple(base.items()), include=tuple(include))

    def runs(self) -> list[RunSpec]:
        """The runs, in product order (base product, then each include entry), without duplicates."""
        base = dict(self.factors)
        blocks = [base] + [{**base, **dict(entry)} for entry in self.include]
        specs: dict[str, RunSpec] = {}
        for block in blocks:
            names = list(block)
            for combo in itertools.product(*(block[n] for n in names)):
                spec = _run_spec(dict(zip(names, combo, strict=True)))
                if not any(_matches(spec, dict(entry)) for entry in self.exclude):
                    specs.setdefault(spec.key(), spec)
        if not specs:
            raise MoesimError(f"{self.source}: matrix '{self.name}' has no runs (every combination is excluded)")
        return list(specs.values())

    def count_runs(self, extra_exclude: Iterable[Mapping[str, Iterable[Level]]] = ()) -> int:
        """The number of runs ``runs()`` gives (without ``extra_exclude``'s), counted from the levels
        without building one RunSpec: in time independent of the product's size (see ``_count``).
        Raises the same errors as ``runs()`` (a block without model/topology/strategy, no runs)."""
        boxes = []
        for block in [dict(self.factors)] + [{**dict(self.factors), **dict(e)} for e in self.include]:
            missing = [f for f in ("model", "topology", "strategy") if f not in block]
            if missing:
                raise MoesimError(f"matrix: factor(s) {', '.join(missing)} missing: every run needs a model, a "
                                  "topology and a strategy")
            boxes.append({f: frozenset(v) for f, v in block.items()})
        excludes = [{f: frozenset(v) for f, v in dict(e).items()} for e in self.exclude]
        excludes += [{f: frozenset(v) for f, v in e.items()} for e in extra_exclude]
        names = {f for box in boxes for f in box} | {f for e in excludes for f in e}
        # axes with few levels first: the long ones are then walked only for the few distinct groups left
        axes = sorted(names, key=lambda f: (len(frozenset().union(*(b.get(f, frozenset()) for b in boxes))), f))
        # an axis a block does not name takes RunSpec's default (spec factors) or no override (_MISSING)
        absent = {f: frozenset([_SPEC_DEFAULTS.get(f, _MISSING)]) for f in axes}
        full = [tuple(box.get(f, absent[f]) for f in axes) for box in boxes]
        cuts = [tuple(e.get(f) for f in axes) for e in excludes]  # None: any value
        total = _count(full, cuts, 0)
        if total == 0 and not extra_exclude:
            raise MoesimError(f"{self.source}: matrix '{self.name}' has no runs (every combination is excluded)")
        return total

    def level_pairs(self, a: str, b: str) -> list[tuple[Level, Level]]:
        """The (level of ``a``, level of ``b``) pairs that occur in at least one run, in level order."""
        blocks = [dict(self.factors)] + [{**dict(self.factors), **dict(e)} for e in self.include]
        candidates = dict.fromkeys((x, y) for block in blocks for x in block.get(a, ()) for y in block.get(b, ()))
        total = self.count_runs()
        return [(x, y) for x, y in candidates if self.count_runs([{a: [x], b: [y]}]) < total]


_SPEC_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(RunSpec)
                                  if f.default is not dataclasses.MISSING and f.name != "overrides"}


def _count(boxes: list[tuple[frozenset[Any], ...]], cuts: list[tuple[frozenset[Any] | None, ...]], axis: int) -> int:
    """Points in the union of ``boxes`` outside every ``cut`` (boxes and cuts: one value set per axis,
    a cut's None matching any value), over axes ``axis..``.

    The values of an axis are grouped by the boxes and cuts that hold them; each group is counted once,
    times its size, over the remaining axes with only those boxes and cuts. Sub-counts are memoised by
    (axis, boxes, cuts), so the work grows with the number of distinct groups and with the number of
    levels, never with the number of points (the product)."""
    memo: dict[tuple[int, tuple[int, ...], tuple[int, ...]], int] = {}
    num_axes = len(boxes[0]) if boxes else 0

    def count(axis: int, bi: tuple[int, ...], ci: tuple[int, ...]) -> int:
        if not bi:
            return 0
        if not ci and len(bi) == 1:
            return math.prod(len(values) for values in boxes[bi[0]][axis:])
        if axis == num_axes:
            return 0 if ci else 1
        key = (axis, bi, ci)
        if key not in memo:
            # split the axis's values into regions by set intersection and difference (no per-value work)
            regions: list[tuple[frozenset[Any], tuple[int, ...], tuple[int, ...]]] = [
                (frozenset().union(*(boxes[i][axis] for i in bi)), (), tuple(i for i in ci if cuts[i][axis] is None))]
            splits = [(i, boxes[i][axis], True) for i in bi] + [(i, c, False) for i in ci
                                                                 if (c := cuts[i][axis]) is not None]
            for i, values, is_box in splits:
                refined = []
                for region, rb, rc in regions:
                    inside, outside = region & values, region - values
                    if inside:
                        refined.append((inside, rb + (i,), rc) if is_box else (inside, rb, tuple(sorted(rc + (i,)))))
                    if outside:
                        refined.append((outside, rb, rc))
                regions = refined
            memo[key] = sum(len(region) * count(axis + 1, rb, rc) for region, rb, rc in regions)
        return memo[key]

    return count(axis, tuple(range(len(boxes))), tuple(range(len(cuts))))


def _run_spec(assignment: dict[str, Level]) -> RunSpec:
    fields = {k: v for k, v in assignment.items() if k in SPEC_FACTORS}
    overrides = tuple(sorted((k, v) for k, v in assignment.items() if k not in SPEC_FACTORS))
    try:
        return RunSpec(overrides=overrides, **fields)  # type: ignore[arg-type]
    except TypeError:
        missing = [f for f in ("model", "topology", "strategy") if f not in fields]
        raise MoesimError(f"matrix: factor(s) {', '.join(missing)} missing: every run needs a model, a topology "
                          "and a strategy") from None


def _value(spec: RunSpec, factor: str) -> Any:
    if factor in SPEC_FACTORS:
        return getattr(spec, factor)
    return spec.override_dict().get(factor, _MISSING)


_MISSING = object()


def _matches(spec: RunSpec, entry: dict[str, tuple[Level, ...]]) -> bool:
    return all(_value(spec, f) in levels for f, levels in entry.items())


# ---------------------------------------------------------------------------------------------- parsing


def _check_keys(data: Any, allowed: tuple[str, ...], source: str, what: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise MoesimError(f"{source}: {what} must be a mapping, got {type(data).__name__}")
    for key in data:
        if key not in allowed:
            raise input_error(source, str(key), f"unknown key in {what}", allowed)
    return dict(data)


def parse_levels(data: Any, source: str, field: str, base_dir: Path | None) -> Levels:
    """A mapping factor → level or list of levels, validated and canonical."""
    if not isinstance(data, Mapping) or not data:
        raise input_error(source, field, "must be a non-empty mapping of factor: level or [levels]")
    out = []
    for name, raw in data.items():
        factor = check_factor_name(name, source)
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise input_error(source, f"{field}.{factor}", "needs at least one level")
        levels = tuple(canonical_level(factor, v, source, base_dir) for v in values)
        out.append((factor, tuple(dict.fromkeys(levels))))
    return tuple(out)


def _entries(data: Any, source: str, field: str, base_dir: Path | None) -> tuple[Levels, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise input_error(source, field, "must be a list of mappings (factor: level or [levels])")
    return tuple(parse_levels(e, source, f"{field}[{i}]", base_dir) for i, e in enumerate(data))


def _preset(name: Any, data: Any, source: str, base_dir: Path | None) -> Preset:
    where = f"presets.{name}"
    d = _check_keys(data if data is not None else {}, PRESET_KEYS, source, f"preset '{name}'")
    return Preset(
        name=str(name),
        description=str(d.get("description", "")),
        factors=parse_levels(d["factors"], source, f"{where}.factors", base_dir) if "factors" in d else (),
        include=_entries(d.get("include"), source, f"{where}.include", base_dir),
        exclude=_entries(d.get("exclude"), source, f"{where}.exclude", base_dir),
    )


def parse_matrix(data: Any, source: str, base_dir: Path | None = None, default_name: str = "matrix") -> Matrix:
    """Validate a parsed matrix mapping; every error is one line naming ``source`` and the field."""
    d = _check_keys(data, TOP_KEYS, source, "a matrix file")
    if "factors" not in d:
        raise input_error(source, "factors", "missing (a mapping of factor: level or [levels])")
    presets = d.get("presets") or {}
    if not isinstance(presets, Mapping):
        raise input_error(source, "presets", "must be a mapping of name: {factors, include, exclude}")
    diagnostics = d.get("diagnostics", False)
    if not isinstance(diagnostics, bool):
        raise input_error(source, "diagnostics", f"expected true or false, got {diagnostics!r}")
    factors = parse_levels(d["factors"], source, "factors", base_dir)
    names = dict(factors)
    missing = [f for f in ("model", "topology", "strategy") if f not in names]
    if missing:
        raise input_error(source, "factors", f"missing factor(s) {', '.join(missing)} (every run needs them)")
    return Matrix(
        name=str(d.get("name", default_name)),
        source=source,
        factors=factors,
        include=_entries(d.get("include"), source, "include", base_dir),
        exclude=_entries(d.get("exclude"), source, "exclude", base_dir),
        presets=tuple(_preset(k, v, source, base_dir) for k, v in presets.items()),
        description=str(d.get("description", "")),
        diagnostics=diagnostics,
    )


def load_matrix(path: str | Path) -> Matrix:
    """Read and validate a matrix YAML; relative model/topology paths are relative to its folder."""
    p = Path(path)
    refuse_special_file(p, "matrix")
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MoesimError(f"{p}: matrix file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MoesimError(f"{p}: cannot read matrix file: {exc}") from None
    return parse_matrix(load_yaml_strict(text, str(p)), str(p), base_dir=p.resolve().parent, default_name=p.stem)


def _builtin(source: str) -> Matrix:
    name = Path(source).stem
    text = (resources.files("moesim.experiments") / f"{name}.yaml").read_text(encoding="utf-8")
    return parse_matrix(load_yaml_strict(text, source), source, default_name=name)


def study_matrix() -> Matrix:
    """The built-in study matrix (docs/study.md §1): 4 models × 6 topologies × 4 strategies × 2 × 4."""
    return _builtin(STUDY_SOURCE)


def modern_matrix() -> Matrix:
    """The modern study (docs/modern-study.md): the study models on current servers and fabrics,
    prefill and decode (216 runs)."""
    return _builtin(MODERN_SOURCE)
