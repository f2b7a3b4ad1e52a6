"""Strict JSON for what the scripts write: a number that is not finite (NaN, an
infinity) is written as null, since JSON has no such numbers and strict parsers refuse
Python's `NaN` and `Infinity`.  NumPy and JAX scalars and arrays are written as the
numbers and lists they hold.

    jsonio.write("-", result)              # stdout
    jsonio.write("runs/x/result.json", result)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


def plain(obj):
    """`obj` as plain Python for JSON: dicts, lists and tuples (as lists) recursively;
    NumPy and JAX scalars and arrays as Python numbers, bools and lists; every non-finite
    float as None.  Anything else is returned as it is (`json` raises on what it cannot
    write)."""
    if isinstance(obj, dict):
        return {_key(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (str, bytes)) or obj is None:
        return obj
    if isinstance(obj, np.generic):
        obj = obj.item()
    elif not isinstance(obj, (bool, int, float)) and hasattr(obj, "__array__"):
        arr = np.asarray(obj)
        return plain(arr.item() if arr.ndim == 0 else arr.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _key(k):
    return k.item() if isinstance(k, np.generic) else k


def dumps(obj, **kw) -> str:
    """`json.dumps` of `plain(obj)`, refusing any NaN or infinity that got through."""
    return json.dumps(plain(obj), allow_nan=False, **kw)


def write(path, obj, indent: int | None = 2) -> str:
    """`obj` as strict JSON to `path` (its folder made), or to stdout when `path` is "-";
    returns the text."""
    text = dumps(obj, indent=indent)
    if str(path) == "-":
        print(text)
    else:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return text
